"""The front-end adapter ``export-onnx`` folds into encoder.onnx (asrdecode.models.fbank_adapter).

It maps sherpa-onnx's NeMo fbank (NemoFbankFrontEnd: what sherpa-onnx computes) to an approximation of
the log-mel the demo models were trained on. Checked here: frame counts line up for every length, the
least-squares start is the map it claims, the bundled adapter brings sherpa-onnx's features much closer
to ours, and the exported graph is the torch adapter + encoder (and asrdecode's cut of it the encoder alone).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("kaldi_native_fbank")

from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.models.fbank_adapter import (ADAPTER_CONTEXT, FbankAdapter, load_fbank_adapter,  # noqa: E402
                                            save_fbank_adapter)
from asrdecode.models.frontend import LogMelFrontEnd, MelEncoder  # noqa: E402
from asrdecode.models.nemo_onnx import NemoFbankFrontEnd  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIPS = [ROOT / "data/real/cards-001.wav", ROOT / "data/synth_test/000003.wav",
         ROOT / "data/real/librivox-sense_and_sensibility_01_austen_64kb-0870.wav"]


@pytest.fixture(scope="module")
def waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    return [read_audio(c) for c in CLIPS]


@pytest.mark.parametrize("n", [80, 239, 240, 399, 400, 559, 560, 16000, 16123])
def test_frames_line_up(n) -> None:
    w = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 0.1
    theirs, ours = NemoFbankFrontEnd(80, "").fbank(w), LogMelFrontEnd().log_mel(w)
    assert theirs.shape[0] == (n + 80) // 160 and ours.shape[0] == max(0, theirs.shape[0] - 2)
    y, m = FbankAdapter(8)(theirs.unsqueeze(0), torch.tensor([theirs.shape[0]]))
    assert y.shape == (1, theirs.shape[0], 80) and m.tolist() == [ours.shape[0]]


def test_set_linear_is_the_context_map() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(ADAPTER_CONTEXT * 80 + 1, 80, generator=g) * 0.05
    a = FbankAdapter(16)
    a.set_linear(w)
    x = torch.randn(2, 20, 80, generator=g)
    y, n = a(x, torch.tensor([20, 13]))
    want = torch.cat([x[:, k:k + 18] for k in range(ADAPTER_CONTEXT)] + [torch.ones(2, 18, 1)], 2) @ w
    torch.testing.assert_close(y[:, :18], want, atol=1e-4, rtol=1e-4)
    assert n.tolist() == [18, 11]
    with pytest.raises(DecodingInputError, match="weight must be"):
        a.set_linear(w[:-1])
    with pytest.raises(DecodingInputError, match="feats must be"):
        a(x[..., :40], torch.tensor([20, 13]))


def test_bundled_adapter_brings_sherpa_features_close(waves) -> None:
    """Per-utterance normalised (what the encoder sees): the adapted features are much nearer ours than
    sherpa-onnx's own (taken at the nearest frame, t + 1)."""
    adapter = load_fbank_adapter()
    raw, adapted = [], []
    for w in waves:
        theirs, ours = NemoFbankFrontEnd(80, "").fbank(w), LogMelFrontEnd().log_mel(w)
        n = torch.tensor([ours.shape[0]])
        with torch.no_grad():
            y, m = adapter(theirs.unsqueeze(0), torch.tensor([theirs.shape[0]]))
        assert m.tolist() == n.tolist()
        want = MelEncoder.normalise(ours.unsqueeze(0), n)
        raw.append(float(((MelEncoder.normalise(theirs[1:-1].unsqueeze(0), n) - want) ** 2).mean()))
        adapted.append(float(((MelEncoder.normalise(y[:, : n[0]], n) - want) ** 2).mean()))
    # measured with the bundled adapter: 0.090 / 0.271 / 0.182 -> 0.039 / 0.051 / 0.054
    assert all(a < 0.5 * r for a, r in zip(adapted, raw)), (raw, adapted)


def test_adapter_file(tmp_path) -> None:
    a = FbankAdapter(4)
    save_fbank_adapter(a, tmp_path / "a.pt", {"note": "test"})
    b = load_fbank_adapter(tmp_path / "a.pt")
    x = torch.randn(1, 9, 80)
    torch.testing.assert_close(b(x, torch.tensor([9]))[0], a(x, torch.tensor([9]))[0], atol=2e-2, rtol=2e-2)
    torch.save({"kind": "encoder"}, tmp_path / "b.pt")
    with pytest.raises(FileFormatError, match="not an fbank adapter"):
        load_fbank_adapter(tmp_path / "b.pt")
    (tmp_path / "c.pt").write_bytes(b"junk")
    with pytest.raises(FileFormatError, match="not a readable adapter"):
        load_fbank_adapter(tmp_path / "c.pt")


def test_exported_graph_is_adapter_then_encoder(waves, tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import onnxruntime as ort

    from asrdecode.models import load, load_bundle
    from onramp_models import cached_onnx

    d = cached_onnx("demo-rnnt")
    demo, adapter = load("demo-rnnt"), load_fbank_adapter()
    full = ort.InferenceSession(str(d / "encoder.onnx"), providers=["CPUExecutionProvider"])
    back = load_bundle(str(d))  # asrdecode runs the graph from logmel_input: our log-mel, the encoder alone
    assert [i.name for i in back.encoder.get_inputs()] == ["logmel", "logmel_length"]
    for w in waves[:2]:
        theirs = NemoFbankFrontEnd(80, "").fbank(w)
        with torch.no_grad():
            y, n = adapter(theirs.unsqueeze(0), torch.tensor([theirs.shape[0]]))
            want, want_n = demo.encoder(y, n)
        out, out_n = full.run(None, {"audio_signal": theirs.T.unsqueeze(0).numpy(),
                                     "length": np.array([theirs.shape[0]], dtype=np.int64)})
        assert out_n.tolist() == want_n.tolist()
        np.testing.assert_allclose(out[0, :, : int(out_n[0])].T, want[0, : int(want_n[0])].numpy(), atol=2e-4)
        enc, enc_n = back.encode_features(*back.features([w]))
        ref, ref_n = demo.encode_features(*demo.features([w]))
        assert enc_n.tolist() == ref_n.tolist()
        torch.testing.assert_close(enc, ref, atol=2e-4, rtol=0)


def test_logmel_input_must_name_two_tensors(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    import shutil

    import onnx

    from asrdecode.models import load_bundle
    from onramp_models import cached_onnx

    for value, match in (("logmel", "must name two tensors"), ("nope,logmel_length", "no such sub-graph")):
        d = tmp_path / value.replace(",", "_")
        shutil.copytree(cached_onnx("demo-rnnt"), d)
        m = onnx.load(str(d / "encoder.onnx"))
        for p in m.metadata_props:
            if p.key == "logmel_input":
                p.value = value
        onnx.save(m, str(d / "encoder.onnx"))
        with pytest.raises(FileFormatError, match=match):
            load_bundle(str(d))


def test_export_without_the_adapter(waves, tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    import onnx

    from asrdecode import cli
    from asrdecode.models import load, load_bundle

    out = tmp_path / "plain"
    assert cli.main(["export-onnx", "demo-tdt", str(out), "--no-adapter"]) == 0
    capsys.readouterr()
    meta = {p.key: p.value for p in onnx.load(str(out / "encoder.onnx")).metadata_props}
    assert meta["frontend"] == "logmel" and "logmel_input" not in meta
    back, demo = load_bundle(str(out)), load("demo-tdt")
    assert [i.name for i in back.encoder.get_inputs()] == ["audio_signal", "length"]
    enc, n = back.encode_features(*back.features([waves[0]]))
    ref, ref_n = demo.encode_features(*demo.features([waves[0]]))
    assert n.tolist() == ref_n.tolist()
    torch.testing.assert_close(enc, ref, atol=2e-4, rtol=0)
