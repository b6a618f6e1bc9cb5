"""Hugging Face CTC models as ModelBundles (asrdecode.models.hf_ctc) and the vocabulary tokenizer.

A tiny random Wav2Vec2ForCTC is built from a config and saved with ``save_pretrained``
(tests/onramp_models.py); the real loading code reads it back, and the bundle's log-probs are
compared with the model's own ``logits``, its transcripts with HF's own greedy decoding, through
``load_bundle``, ``transcribe``, ``eval`` and ``serve``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

pytest.importorskip("transformers")

from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.models import ModelBundle, load_bundle  # noqa: E402
from asrdecode.models.hf_ctc import HFCTCBundle, HFMissingError, load_hf_ctc  # noqa: E402
from asrdecode.models.vocabulary import PieceTokenizer  # noqa: E402
from asrdecode.pipeline import DecodeOptions, make_pipeline  # noqa: E402
from onramp_models import HF_VOCAB, cached_hf_ctc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIPS = [ROOT / "data/real/cards-001.wav", ROOT / "data/real/cards-003.wav"]


@pytest.fixture(scope="module")
def hf_dir() -> Path:
    return cached_hf_ctc()


@pytest.fixture(scope="module")
def bundle(hf_dir) -> HFCTCBundle:
    return load_bundle(str(hf_dir))


def _waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    return [read_audio(c) for c in CLIPS]


def _reference(hf_dir: Path, waves: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[str]]:
    """The model's own log-probs ``[T, V]`` per utterance (each alone, as HF's pipelines run) and HF's
    greedy transcripts (its processor's ``decode`` of the argmax)."""
    from transformers import AutoModelForCTC, AutoProcessor

    model = AutoModelForCTC.from_pretrained(str(hf_dir)).eval()
    proc = AutoProcessor.from_pretrained(str(hf_dir))
    log_probs, texts = [], []
    for w in waves:
        inp = proc(w.numpy(), sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            logits = model(**inp).logits[0]
        log_probs.append(torch.log_softmax(logits, -1))
        # HF prints <s> / </s> / <unk> where the (random) model emits them; asrdecode spells them as nothing
        texts.append(" ".join(re.sub(r"</?s>|<unk>", "", proc.decode(logits.argmax(-1))).split()))
    return log_probs, texts


def test_loads_as_a_ctc_bundle(bundle, hf_dir) -> None:
    assert isinstance(bundle, HFCTCBundle) and isinstance(bundle, ModelBundle)
    assert bundle.kind == "ctc" and bundle.blank_id == 0 and bundle.model.vocab_size == len(HF_VOCAB)
    assert bundle.frame_seconds == pytest.approx(0.02) and bundle.feature_frames_per_frame == 320
    assert bundle.tokenizer.vocab_size == len(HF_VOCAB) and bundle.encoder_dim == 16
    assert bundle.name == str(hf_dir)


def test_log_probs_equal_the_models_own(bundle, hf_dir) -> None:
    waves = _waves()
    want, _ = _reference(hf_dir, waves)
    feats, flen = bundle.features(waves)
    enc, elen = bundle.encode_features(feats, flen)
    got = bundle.model.log_probs_from_encoder(enc)
    assert elen.tolist() == [(len(w) - 400) // 320 + 1 for w in waves]
    for i, n in enumerate(elen.tolist()):
        assert want[i].shape[0] == n
        torch.testing.assert_close(got[i, :n], want[i], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_batched_equals_one_at_a_time(norm) -> None:
    # "layer": attention mask; "group" (wav2vec2-base): no mask, so the bundle encodes each utterance alone
    bundle = load_bundle(str(cached_hf_ctc(norm)))
    assert bundle._mask == (norm == "layer")
    waves = _waves()
    want, _ = _reference(cached_hf_ctc(norm), waves)
    enc, elen = bundle.encode_features(*bundle.features(waves))
    lp = bundle.model.log_probs_from_encoder(enc)
    for i in range(len(waves)):
        torch.testing.assert_close(lp[i, : want[i].shape[0]], want[i], atol=1e-4, rtol=1e-4)
    for i, w in enumerate(waves):
        one, n = bundle.encode_features(*bundle.features([w]))
        assert int(n[0]) == int(elen[i])
        torch.testing.assert_close(one[0, : int(n[0])], enc[i, : int(n[0])], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_empty_and_short_audio_decode_to_empty_hypotheses(norm) -> None:
    bundle = load_bundle(str(cached_hf_ctc(norm)))
    enc, elen = bundle.encode_features(*bundle.features([torch.zeros(100), torch.zeros(1000), torch.zeros(0)]))
    assert elen.tolist() == [0, 2, 0] and enc.shape[0] == 3 and bool(torch.isfinite(enc).all())
    for opts in (DecodeOptions(decoder="greedy"), DecodeOptions(decoder="beam", beam=3)):
        encode, decode = make_pipeline(bundle, opts)
        for waves in ([torch.zeros(0)], [torch.zeros(0), _waves()[0]]):
            hyps = decode(*encode(waves))
            assert hyps[0].tokens == [] and hyps[0].text == "" and len(hyps) == len(waves)


def test_greedy_transcripts_equal_hf_greedy_decoding(bundle, hf_dir) -> None:
    waves = _waves()
    _, want = _reference(hf_dir, waves)
    encode, decode = make_pipeline(bundle, DecodeOptions(decoder="greedy"))
    got = [h.text for h in decode(*encode(waves))]
    assert got == want and any(got)


def test_cli_transcribe_eval_and_beam(bundle, hf_dir, tmp_path, capsys) -> None:
    from asrdecode import cli

    assert cli.main(["transcribe", *map(str, CLIPS), "--model", str(hf_dir), "--decoder", "beam", "--beam", "4",
                     "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    encode, decode = make_pipeline(bundle, DecodeOptions(decoder="beam", beam=4))
    want = decode(*encode(_waves()))
    assert [r["text"] for r in recs] == [h.text for h in want]
    assert [[t["id"] for t in r["tokens"]] for r in recs] == [h.tokens for h in want]
    assert all(t["start"] == pytest.approx(t["frame"] * 0.02) for r in recs for t in r["tokens"])
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(c), "duration": 1.0, "text": "ace of clubs"}) + "\n"
                                for c in CLIPS))
    assert cli.main(["eval", str(manifest), "--model", str(hf_dir), "--no-progress"]) == 0
    assert "WER" in capsys.readouterr().out


def test_transcribe_dataset_local_path(bundle, hf_dir, tmp_path) -> None:
    # what every Ray actor of `transcribe-dataset` runs (the Ray run itself: test_distributed.py, slow)
    from asrdecode.distributed import transcribe_local

    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(c), "duration": 1.0, "text": "ace"}) + "\n"
                                for c in CLIPS))
    encode, decode = make_pipeline(bundle, DecodeOptions(decoder="greedy"))
    want = [h.text for h in decode(*encode(_waves()))]
    assert [r["pred_text"] for r in transcribe_local(manifest, model=str(hf_dir), batch_size=2)] == want


def test_streams_an_hf_model(bundle) -> None:
    # what `serve` runs per stream: StreamDecoder over the bundle's block front end
    from asrdecode.streaming import StreamDecoder

    dec = StreamDecoder(bundle, decoder="beam", beam=4)
    audio = _waves()[0]
    with torch.inference_mode():
        want = dec.offline(audio)
        dec.open("s")
        starts = list(range(0, audio.numel(), 8000))
        for k in starts:
            res = dec.step({"s": audio[k:k + 8000]}, final=["s"] if k == starts[-1] else ())
    got = res["s"]
    assert got.final and got.text == want.text and got.hypothesis.tokens == want.tokens


@pytest.mark.slow
def test_cli_serves_an_hf_model(hf_dir, tmp_path) -> None:
    pytest.importorskip("starlette")
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", "loadtest", "--spawn", "--streams", "2",
                           "--model", str(hf_dir), "--chunk-seconds", "0.5", "--audio", str(CLIPS[0]),
                           "--max-batch", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(out.read_text())
    assert rep["summary"]["finished"] == 2 and rep["summary"]["failed"] == 0


# ------------------------------------------------------------------------------------ vocabulary
def test_piece_tokenizer_hf_conventions() -> None:
    tok = PieceTokenizer(HF_VOCAB, 0, delimiter="|", specials=["<s>", "</s>", "<unk>", "<pad>", "|"])
    ids = tok.encode("ABBA HEAD")
    assert [HF_VOCAB[i] for i in ids] == [*"ABBA", "|", *"HEAD"]
    assert tok.decode(ids) == "ABBA HEAD"
    assert tok.decode([1, 5, 4, 4, 6, 2, 3]) == "A B"  # specials spell nothing, delimiters collapse
    assert tok.id_to_piece(4) == "\u2581" and tok.id_to_piece(5) == "A" and tok.id_to_piece(1) == ""
    with pytest.raises(DecodingInputError, match="'z' is not in the tokenizer"):
        tok.encode("za")
    with pytest.raises(DecodingInputError, match="not a non-blank id"):
        tok.decode([0])
    with pytest.raises(DecodingInputError, match="not a non-blank id"):
        tok.id_to_piece(len(HF_VOCAB))


def test_piece_tokenizer_sentencepiece_pieces() -> None:
    pieces = ["<blk>", "\u2581the", "\u2581ca", "t", "s", "\u2581", "<unk>"]
    tok = PieceTokenizer(pieces, 0, specials=["<unk>"])
    assert tok.decode([1, 2, 3, 4]) == "the cats"
    assert tok.decode(tok.encode("the cats")) == "the cats"
    assert tok.encode("ts") == [5, 3, 4]  # a lone ▁ piece starts the word
    with pytest.raises(DecodingInputError, match="blank_id"):
        PieceTokenizer(pieces, 7)
    with pytest.raises(DecodingInputError, match="delimiter"):
        PieceTokenizer(pieces, 0, delimiter="|")


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.text(alphabet="abcde", min_size=1, max_size=6), min_size=1, max_size=5),
       style=st.sampled_from(["delimiter", "prefix"]), extra=st.lists(st.text(alphabet="abcde", min_size=2, max_size=3),
                                                                    max_size=6))
def test_piece_tokenizer_round_trip(words, style, extra) -> None:
    # any spelling encode() picks decodes back to the text, with multi-character pieces in the vocabulary
    chars = list("abcde")
    if style == "delimiter":
        pieces = ["<pad>", "|", *chars, *extra]
        tok = PieceTokenizer(pieces, 0, delimiter="|")
    else:
        pieces = ["<blk>", "\u2581", *chars, *("\u2581" + e for e in extra), *extra]
        tok = PieceTokenizer(pieces, 0, specials=["<blk>"])
    text = " ".join(words)
    ids = tok.encode(text)
    assert 0 not in ids and tok.decode(ids) == text
    if style == "prefix":  # every word starts with a ▁ piece: word boundaries for word times and word LMs
        assert sum(tok.id_to_piece(i).startswith("\u2581") for i in ids) == len(words)
    else:
        assert [tok.id_to_piece(i) for i in ids].count("\u2581") == len(words) - 1


# ------------------------------------------------------------------------------------ bad input
def test_a_directory_that_is_not_a_ctc_model(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(FileFormatError, match="expected a Hugging Face CTC model"):
        load_bundle(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="not a readable JSON model config"):
        load_bundle(str(tmp_path))
    (tmp_path / "config.json").unlink()
    with pytest.raises(DecodingInputError, match="a directory, but not a model directory"):
        load_bundle(str(tmp_path))


def test_deeply_nested_json_is_a_named_error(hf_dir, tmp_path) -> None:
    """A vocab.json (or config.json) of 100k nested brackets: FileFormatError naming the file, not RecursionError."""
    import shutil

    deep = "[" * 100_000 + "]" * 100_000
    for name in ("vocab.json", "config.json"):
        d = tmp_path / name
        shutil.copytree(hf_dir, d)
        (d / name).write_text('{"a": ' + deep + "}" if name == "vocab.json" else deep)
        with pytest.raises(FileFormatError, match=rf"{name}: not a readable JSON .* \(nested too deeply\)"):
            load_bundle(str(d))


def test_missing_weights_or_vocabulary(hf_dir, tmp_path) -> None:
    import shutil

    broken = tmp_path / "no-weights"
    shutil.copytree(hf_dir, broken)
    for f in broken.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileFormatError, match="cannot load the model"):
        load_bundle(str(broken))
    no_vocab = tmp_path / "no-vocab"
    shutil.copytree(hf_dir, no_vocab)
    for name in ("vocab.json", "tokenizer_config.json"):
        (no_vocab / name).unlink()
    with pytest.raises(FileFormatError, match="cannot load the CTC tokenizer"):
        load_bundle(str(no_vocab))


def test_a_transformers_4_layout_with_an_lm_processor(bundle, hf_dir, tmp_path) -> None:
    # hub models saved by transformers 4 keep the feature extractor in preprocessor_config.json; many
    # ship a Wav2Vec2ProcessorWithLM (pyctcdecode, language_model/): the bundle uses neither
    import shutil

    old = tmp_path / "v4-with-lm"
    shutil.copytree(hf_dir, old)
    proc = json.loads((old / "processor_config.json").read_text())
    (old / "processor_config.json").unlink()
    (old / "preprocessor_config.json").write_text(json.dumps({**proc["feature_extractor"],
                                                              "processor_class": "Wav2Vec2ProcessorWithLM"}))
    cfg = json.loads((old / "tokenizer_config.json").read_text())
    (old / "tokenizer_config.json").write_text(json.dumps({**cfg, "processor_class": "Wav2Vec2ProcessorWithLM"}))
    (old / "language_model").mkdir()
    (old / "language_model" / "attrs.json").write_text("{}")
    b = load_bundle(str(old))
    waves = _waves()
    enc, n = b.encode_features(*b.features(waves))
    want, wn = bundle.encode_features(*bundle.features(waves))
    assert n.tolist() == wn.tolist()
    torch.testing.assert_close(enc, want)
    assert b.tokenizer.pieces == bundle.tokenizer.pieces and b.blank_id == 0


def test_names_the_extra_when_transformers_is_missing(hf_dir, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(HFMissingError, match=r"-e '\.\[hf\]'"):
        load_hf_ctc(str(hf_dir))


def test_features_reject_bad_audio(bundle) -> None:
    with pytest.raises(DecodingInputError):
        bundle.features([np.zeros((2, 3), dtype=np.float32)])
    with pytest.raises(DecodingInputError, match=r"\[B, N, 1\]"):
        bundle.encode_features(torch.zeros(1, 10, 2), torch.tensor([10]))
