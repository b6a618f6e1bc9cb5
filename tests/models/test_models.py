"""The bundled demo models: loading, batched encoding, a real decode, and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("sentencepiece")

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.models import available, load  # noqa: E402
from asrdecode.transducer.model import check_model  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"


def _clips(n: int = 3) -> tuple[list[torch.Tensor], list[str]]:
    rows = [json.loads(x) for x in (DATA / "synth_test" / "manifest.jsonl").read_text().splitlines()][:n]
    return [read_audio(DATA / "synth_test" / r["audio_filepath"]) for r in rows], [r["text"] for r in rows]


@pytest.fixture(scope="module")
def models() -> dict:
    return {name: load(name) for name in available()}


def test_names_and_kinds(models: dict) -> None:
    assert sorted(models) == ["demo-ctc", "demo-rnnt", "demo-tdt"]
    for name, m in models.items():
        assert m.kind == name.split("-")[1]
        assert m.tokenizer.vocab_size == m.model.vocab_size
        assert m.blank_id == m.tokenizer.blank_id
    check_model(models["demo-rnnt"].model)
    check_model(models["demo-tdt"].model)
    assert models["demo-rnnt"].model.durations is None
    assert models["demo-tdt"].model.durations == [0, 1, 2, 3, 4]


def test_encode_batched_equals_single(models: dict) -> None:
    m = models["demo-rnnt"]
    audio, _ = _clips(3)
    enc, n = m.encode(audio)
    assert enc.dim() == 3 and enc.shape[0] == 3 and n.dtype == torch.int64
    assert int(n.max()) == enc.shape[1]
    for i, a in enumerate(audio):
        e1, n1 = m.encode([a])
        assert int(n1[0]) == int(n[i])
        torch.testing.assert_close(e1[0, : n1[0]], enc[i, : n[i]], atol=1e-4, rtol=1e-4)
    # 80 ms frames: about 12.5 frames per second of audio
    secs = sum(a.numel() for a in audio) / 16000
    assert abs(int(n.sum()) / secs - 12.5) < 0.5
    # padded [B, N] + lengths gives the same as the list form
    from asrdecode.audio import pad_batch

    x, lens = pad_batch(audio)
    enc2, n2 = m.encode(x, lens)
    torch.testing.assert_close(enc2, enc)


def test_ctc_log_probs_and_greedy_transcribe(models: dict) -> None:
    m = models["demo-ctc"]
    audio, texts = _clips(5)
    lp, n = m.model.log_probs(audio)
    assert lp.shape[2] == m.tokenizer.vocab_size
    torch.testing.assert_close(lp.exp().sum(-1)[0, : n[0]], torch.ones(int(n[0])), atol=1e-4, rtol=0)
    best = lp.argmax(-1)
    words = errors = 0
    for b, ref in enumerate(texts):
        ids, prev = [], -1
        for s in best[b, : n[b]].tolist():
            if s != prev and s != m.blank_id:
                ids.append(s)
            prev = s
        hyp = m.tokenizer.decode(ids).split()
        words += len(ref.split())
        errors += sum(1 for w in ref.split() if w not in hyp)
    # measured 0.57 of the reference words missing (the demo models are weak, see
    # recipes/README.md); an untrained or broken model misses about all of them
    assert errors / words < 0.75


def test_bad_inputs(models: dict) -> None:
    m = models["demo-ctc"]
    with pytest.raises(DecodingInputError, match="name"):
        load("demo-nope")
    with pytest.raises(DecodingInputError, match="audio"):
        m.encode(torch.zeros(1, 2, 3))
    with pytest.raises(DecodingInputError, match="audio"):
        m.encode(torch.zeros(2, 100, dtype=torch.int16))
    with pytest.raises(DecodingInputError, match="lengths"):
        m.encode([torch.zeros(100)], torch.tensor([100]))
    with pytest.raises(DecodingInputError, match="lengths"):
        m.encode(torch.zeros(2, 100), torch.tensor([100, 200]))
    with pytest.raises(DecodingInputError, match=r"audio\[1\]"):
        m.encode([torch.zeros(100), torch.zeros(2, 2)])
    with pytest.raises(DecodingInputError, match="audio"):
        m.encode([])
    with pytest.raises(DecodingInputError, match="feats"):
        m.encode_features(torch.zeros(1, 10, 5), torch.tensor([10]))


def test_short_audio_gives_zero_or_few_frames(models: dict) -> None:
    enc, n = models["demo-tdt"].encode([torch.zeros(100), torch.zeros(16000)])
    assert int(n[0]) == 0 and int(n[1]) > 0


@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_predict_step_equals_nn_lstm(layers: int) -> None:
    """The inference step (precomputed first-layer input table, fused upper layers) computes what
    nn.LSTM computes on the embeddings, and follows in-place weight changes (its cache is keyed on them)."""
    from asrdecode.transducer.model import LSTMTransducer

    torch.manual_seed(layers)
    m = LSTMTransducer(vocab_size=7, enc_dim=3, pred_dim=5, joint_dim=4, blank_id=6, pred_layers=layers).double()
    labels = torch.tensor([6, 0, 3, 5, 6])
    state = (torch.randn(layers, 5, 5, dtype=torch.float64), torch.randn(layers, 5, 5, dtype=torch.float64))

    def nn_lstm():
        out, (h, c) = m.lstm(m.embedding(labels).unsqueeze(1), state)
        return out.squeeze(1), h, c

    for change in range(2):
        with torch.no_grad():
            want_out, want_h, want_c = nn_lstm()
        with torch.inference_mode():
            out, (h, c) = m.predict(labels, state)
        for got, want in ((out, want_out), (h, want_h), (c, want_c)):
            assert torch.allclose(got, want, atol=1e-10), (layers, change)
        with torch.no_grad():  # the next round must see these weights, not the cached ones
            m.embedding.weight.mul_(1.5)
            m.lstm.weight_ih_l0.add_(0.1)
            getattr(m.lstm, f"bias_hh_l{layers - 1}").sub_(0.2)
