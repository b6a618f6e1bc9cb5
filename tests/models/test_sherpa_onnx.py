"""asrdecode against sherpa-onnx on sherpa-onnx's own file layouts (icefall stateless, NeMo RNN-T / TDT).

Small random models of each layout are built here (tests/sherpa_models.py: torch -> ONNX with the
metadata sherpa-onnx reads); both decode the 60 clips of data/real + data/synth_test. In the compatible
mode (asrdecode.models.sherpa_compat) greedy returns the same tokens, frames and durations as
sherpa-onnx's greedy_search, and beam 4 the same best hypothesis as its modified_beam_search (icefall).
sherpa-onnx is the dev extra's ``sherpa-onnx==2.0.1``; the set-up installs it when it is missing.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("kaldi_native_fbank")

from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.models.nemo_onnx import NemoOnnxBundle, per_feature_normalise  # noqa: E402
from asrdecode.models.onnx_transducer import OnnxTransducerBundle, load_onnx_transducer  # noqa: E402
from asrdecode.models.sherpa_compat import SHERPA_COMPAT, length_normalised, sherpa_options  # noqa: E402
from asrdecode.models.sherpa_search import modified_beam_search  # noqa: E402
from asrdecode.results import Hypothesis  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402
from sherpa_models import build_icefall, build_nemo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIPS = sorted(ROOT.glob("data/real/*.wav")) + sorted(ROOT.glob("data/synth_test/*.wav"))
SHERPA_VERSION = "2.0.1"


@pytest.fixture(scope="module")
def sherpa():
    try:
        return importlib.import_module("sherpa_onnx")
    except ImportError:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"sherpa-onnx=={SHERPA_VERSION}"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"sherpa-onnx=={SHERPA_VERSION} is not installable here: {proc.stderr[-300:]}")
        importlib.invalidate_caches()
        return importlib.import_module("sherpa_onnx")


@pytest.fixture(scope="module")
def waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    assert len(CLIPS) == 60
    return [read_audio(c) for c in CLIPS]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sherpa-layouts")
    # NeMo models without feature normalisation decode identically; with per_feature see
    # test_nemo_per_feature_agreement
    return {"icefall": build_icefall(root / "icefall"), "nemo-rnnt": build_nemo(root / "nemo-rnnt", normalize_type="NA", blank_bias=10.0),
            "nemo-tdt": build_nemo(root / "nemo-tdt", tdt=True, normalize_type="NA"),
            "nemo-rnnt-pf": build_nemo(root / "nemo-rnnt-pf")}


def _sherpa_decode(sherpa, d: Path, layout: str, waves, method: str = "greedy_search") -> list:
    rec = sherpa.OfflineRecognizer.from_transducer(
        str(d / "encoder.onnx"), str(d / "decoder.onnx"), str(d / "joiner.onnx"), str(d / "tokens.txt"),
        num_threads=1, decoding_method=method, max_active_paths=4,
        model_type="transducer" if layout == "icefall" else "nemo_transducer")
    streams = []
    for w in waves:
        s = rec.create_stream()
        s.accept_waveform(16000, w.numpy())
        streams.append(s)
    rec.decode_streams(streams)
    return [s.result for s in streams]


def _as_sherpa(bundle, h: Hypothesis) -> tuple[list[str], list[int], list[int] | None]:
    """Our hypothesis in sherpa-onnx's terms: token strings (▁ -> space), frames, durations in frames."""
    pieces = bundle.tokenizer.pieces
    return ([pieces[i].replace("▁", " ") for i in h.tokens], list(h.timestamps),
            list(h.durations) if h.durations is not None else None)


def _frames(bundle, seconds) -> list[int]:
    step = bundle.frame_seconds
    return [round(float(s) / step) for s in seconds]


def _load(d: Path, layout: str, decoder: str):
    if layout == "icefall":
        opts = sherpa_options(None, decoder)
        b = load_onnx_transducer(str(d), start_context=opts["start_context"], unk_as_blank=opts["unk_as_blank"])
    else:
        b = load_onnx_transducer(str(d))
        b.model.unk_as_blank = sherpa_options(b.model, decoder)["unk_as_blank"]
    return b, sherpa_options(b.model, decoder)


def _greedy_agreement(sherpa, d: Path, layout: str, waves) -> tuple[int, int]:
    """(clips whose greedy tokens, frames and TDT durations equal sherpa-onnx's, tokens we emitted)."""
    b, opts = _load(d, layout, "greedy")
    assert isinstance(b, OnnxTransducerBundle if layout == "icefall" else NemoOnnxBundle)
    want = _sherpa_decode(sherpa, d, layout, waves)
    same, emitted = 0, 0
    for w, r in zip(waves, want):
        enc, elen = b.encode_features(*b.features([w]))
        h = greedy(b.model, enc, elen, max_symbols=opts["max_symbols"])[0]
        tokens, frames, durations = _as_sherpa(b, h)
        emitted += len(tokens)
        ok = tokens == list(r.tokens) and frames == _frames(b, r.timestamps)
        if layout == "nemo-tdt":
            ok = ok and durations == _frames(b, r.durations)
        same += ok
    return same, emitted


@pytest.mark.parametrize("layout", ["icefall", "nemo-rnnt", "nemo-tdt"])
def test_greedy_identical_to_sherpa_onnx_on_60_clips(sherpa, models, waves, layout) -> None:
    same, emitted = _greedy_agreement(sherpa, models[layout], layout, waves)
    assert emitted > 500  # the random models emit
    assert same == len(waves)


def test_nemo_per_feature_agreement(sherpa, models, waves) -> None:
    # With NeMo's per_feature normalisation 56/60 clips agree (measured 2026-11-25, sherpa-onnx 2.0.1):
    # the raw features are identical (the NA models above agree on 60/60), the normalised ones differ
    # on 3 librivox clips and 1 synthetic one for a reason we did not isolate (not float32 vs float64
    # statistics, not biased vs unbiased variance, not batch padding: each was tried)
    same, emitted = _greedy_agreement(sherpa, models["nemo-rnnt-pf"], "nemo-rnnt", waves)
    assert emitted > 300 and same >= 56


def test_beam_4_best_equals_sherpa_onnx_modified_beam_search(sherpa, models, waves) -> None:
    d = models["icefall"]
    b, opts = _load(d, "icefall", "beam")
    assert opts["search"] == "modified" and b.model.unk_as_blank is None
    want = _sherpa_decode(sherpa, d, "icefall", waves, "modified_beam_search")
    same, emitted = 0, 0
    for w, r in zip(waves, want):
        enc, elen = b.encode_features(*b.features([w]))
        nbest = modified_beam_search(b.model, enc, elen, beam=4, unk_id=b.model.unk_id, context_size=b.model.context_size)
        tokens, frames, _ = _as_sherpa(b, nbest[0][0])
        emitted += len(tokens)
        same += tokens == list(r.tokens) and frames == _frames(b, r.timestamps)
    assert emitted > 500 and same == len(waves)


def test_modified_beam_search_checks_and_beam_1_is_greedy(models, waves) -> None:
    b = load_onnx_transducer(str(models["icefall"]), start_context="sherpa")
    enc, elen = b.encode_features(*b.features(waves[:3] + [torch.zeros(0)]))
    one = modified_beam_search(b.model, enc, elen, beam=1, unk_id=None, length_norm=False)
    want = greedy(b.model, enc, elen, max_symbols=1)
    for h, g in zip(one, want):
        assert h[0].tokens == g.tokens and h[0].timestamps == g.timestamps
    assert one[3][0].tokens == [] and len(one[3]) == 1
    four = modified_beam_search(b.model, enc[:1], elen[:1], beam=4, length_norm=False)[0]
    assert 1 <= len(four) <= 4 and [h.score for h in four] == sorted((h.score for h in four), reverse=True)
    with pytest.raises(DecodingInputError, match="beam must be an int in 1..1024"):
        modified_beam_search(b.model, enc, elen, beam=0)
    with pytest.raises(DecodingInputError, match=r"beam must be an int in 1..1024, got 1000000"):
        modified_beam_search(b.model, enc, elen, beam=10**6)
    with pytest.raises(DecodingInputError, match="lengths must be <= the padded length"):
        modified_beam_search(b.model, enc, elen + 1000)
    with pytest.raises(DecodingInputError, match="lengths must have an integer dtype"):  # 19.5 was read as 19
        modified_beam_search(b.model, enc, elen.float() - 0.5)
    with pytest.raises(DecodingInputError, match="lengths must be 1-D"):
        modified_beam_search(b.model, enc, elen[:, None])
    with pytest.raises(DecodingInputError, match=r"encoder_output must be a tensor \[B, T, D\]"):
        modified_beam_search(b.model, enc[0])
    tdt = load_onnx_transducer(str(models["nemo-tdt"]))
    with pytest.raises(DecodingInputError, match="TDT models are not supported"):
        modified_beam_search(tdt.model, torch.zeros(1, 2, 48))


# ------------------------------------------------------------------------------- reading the layouts
def test_nemo_layout_reads_metadata(models) -> None:
    rnnt, tdt = load_onnx_transducer(str(models["nemo-rnnt"])), load_onnx_transducer(str(models["nemo-tdt"]))
    for b in (rnnt, tdt):
        assert b.model.vocab_size == 129 and b.blank_id == 128 and b.feature_frames_per_frame == 4
        assert b.frame_seconds == pytest.approx(0.04) and b.feature_dim == 80 and b.encoder_dim == 48
    assert rnnt.kind == "rnnt" and rnnt.model.durations is None
    assert tdt.kind == "tdt" and tdt.model.durations == [0, 1, 2, 3, 4]
    from asrdecode.transducer import check_model

    check_model(tdt.model)
    assert rnnt.normalize_type == "" and load_onnx_transducer(str(models["nemo-rnnt-pf"])).normalize_type == "per_feature"
    rnnt = load_onnx_transducer(str(models["nemo-rnnt-pf"]))
    feats, flen = rnnt.features([torch.randn(16000) * 0.1, torch.zeros(0)])
    assert flen.tolist() == [100, 0] and feats.shape == (2, 100, 80)
    torch.testing.assert_close(feats[0].mean(0), torch.zeros(80), atol=1e-4, rtol=0)
    enc, elen = rnnt.encode_features(feats, flen)
    assert enc.shape == (2, 25, 48) and elen.tolist() == [25, 0]
    # joint broadcasts leading axes of [.., C] and [.., H] (widths differ in NeMo's joiner)
    dec, _ = rnnt.model.predict(torch.tensor([128, 5]), rnnt.model.initial_state(2))
    assert dec.shape == (2, 32)
    assert rnnt.model.joint(enc[:, :3].unsqueeze(2), dec.view(2, 1, 1, 32)).shape == (2, 3, 1, 129)


def test_per_feature_normalise() -> None:
    x = torch.randn(50, 4) * 3 + 7
    y = per_feature_normalise(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(4), atol=1e-4, rtol=0)
    assert per_feature_normalise(torch.zeros(0, 4)).shape == (0, 4)


def _set_metadata(path: Path, **changes: str | None) -> None:
    import onnx

    m = onnx.load(str(path))
    kept = {p.key: p.value for p in m.metadata_props}
    for k, v in changes.items():
        kept.pop(k, None)
        if v is not None:
            kept[k] = v
    del m.metadata_props[:]
    for k, v in kept.items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    onnx.save(m, str(path))


@pytest.mark.parametrize("changes, match", [
    ({"vocab_size": None}, "metadata 'vocab_size' is missing"),
    ({"vocab_size": "100"}, "129 tokens but metadata vocab_size \\+ 1 is 101"),
    ({"pred_hidden": "16"}, "'states.1' has size 32 on axis 2 .* but metadata 'pred_hidden' is 16"),
    ({"pred_rnn_layers": "2"}, "'states.1' has size 1 on axis 0 .* but metadata 'pred_rnn_layers' is 2"),
    ({"feat_dim": "64"}, "'audio_signal' has size 80 on axis 1 .* but metadata 'feat_dim' is 64"),
    ({"pred_rnn_layers": "1e9"}, "metadata 'pred_rnn_layers' must be an integer"),
    ({"subsampling_factor": "1000000000"}, "metadata 'subsampling_factor' must be in 1..64"),
    ({"frame_shift_ms": "inf"}, "metadata 'frame_shift_ms' must be finite"),
    ({"frame_shift_ms": "0"}, "metadata 'frame_shift_ms' must be in 1..1000"),
    ({"feat_dim": "-3"}, "metadata 'feat_dim' must be in 1..4096"),
    ({"normalize_type": "all_features"}, "metadata 'normalize_type' must be one of"),
    ({"url": "x/tdt"}, "a TDT model .* needs more than"),
])
def test_nemo_bad_metadata(models, tmp_path, changes, match) -> None:
    import shutil

    d = tmp_path / "m"
    shutil.copytree(models["nemo-rnnt"], d)
    _set_metadata(d / "encoder.onnx", **changes)
    with pytest.raises(FileFormatError, match=match):
        load_onnx_transducer(str(d))


def test_icefall_metadata_and_graphs_must_agree(models, tmp_path) -> None:
    """context_size / feature_dim metadata unlike the graphs' inputs, a decoder output unlike the joiner's
    input: named errors at load (onnxruntime's InvalidArgument at the first decode, torch's RuntimeError before)."""
    import shutil

    def copy(name: str) -> Path:
        d = tmp_path / name
        shutil.copytree(models["icefall"], d)
        return d

    d = copy("context")
    _set_metadata(d / "decoder.onnx", vocab_size="500", context_size="3")
    with pytest.raises(FileFormatError, match=r"decoder.onnx: 'y' has size 2 on axis 1 .* metadata 'context_size' is 3"):
        load_onnx_transducer(str(d))
    d = copy("context-enc")  # the encoder's metadata wins over the decoder's: checked the same
    _set_metadata(d / "encoder.onnx", context_size="1")
    with pytest.raises(FileFormatError, match="metadata 'context_size' is 1"):
        load_onnx_transducer(str(d))
    d = copy("feature")
    _set_metadata(d / "encoder.onnx", feature_dim="64")
    with pytest.raises(FileFormatError, match=r"encoder.onnx: 'x' has size 80 on axis -1 .* metadata 'feature_dim' is 64"):
        load_onnx_transducer(str(d))
    d = copy("width")
    build_icefall(tmp_path / "narrow", dim=48)
    shutil.copy(tmp_path / "narrow" / "decoder.onnx", d / "decoder.onnx")
    with pytest.raises(FileFormatError, match=r"decoder.onnx: 'decoder_out' has size 48 .* joiner.onnx's decoder_out"):
        load_onnx_transducer(str(d))
    shutil.copy(tmp_path / "narrow" / "encoder.onnx", d / "encoder.onnx")
    shutil.copy(models["icefall"] / "decoder.onnx", d / "decoder.onnx")
    with pytest.raises(FileFormatError, match=r"encoder.onnx: 'encoder_out' has size 48 .* joiner.onnx's encoder_out"):
        load_onnx_transducer(str(d))


def test_nemo_blank_must_be_last(models, tmp_path) -> None:
    import shutil

    d = tmp_path / "m"
    shutil.copytree(models["nemo-rnnt"], d)
    lines = (d / "tokens.txt").read_text(encoding="utf-8").splitlines()
    lines[-1], lines[0] = "<unk> 128", "<blk> 0"
    (d / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match="last token must be <blk>"):
        load_onnx_transducer(str(d))
    shutil.copy(d / "joiner.onnx", d / "decoder.onnx")
    with pytest.raises(FileFormatError, match="a NeMo decoder has inputs"):
        load_onnx_transducer(str(d))


# --------------------------------------------------------------------------------- compatibility options
def test_icefall_start_context_and_unk(models) -> None:
    d = models["icefall"]
    ours = load_onnx_transducer(str(d))
    theirs = load_onnx_transducer(str(d), start_context="sherpa", unk_as_blank="max")
    assert ours.blank_id == 0 and ours.model.unk_id == 2 and ours.model.context_size == 2
    assert ours.model.initial_state(2)[0].tolist() == [[0, 0], [0, 0]]
    assert theirs.model.initial_state(2)[0].tolist() == [[-1, 0], [-1, 0]]
    out, st = theirs.model.predict(torch.tensor([0, 7]), theirs.model.initial_state(2))
    assert st[0].tolist() == [[-1, 0], [0, 7]]
    with pytest.raises(DecodingInputError, match="start_context must be one of"):
        load_onnx_transducer(str(d), start_context="zeros")
    with pytest.raises(DecodingInputError, match="unk_as_blank must be one of"):
        load_onnx_transducer(str(d), unk_as_blank="drop")


def test_fold_unk() -> None:
    from asrdecode.models.onnx_transducer import fold_unk

    x = torch.tensor([[0.0, 1.0, 3.0, 2.0], [5.0, 1.0, 3.0, 2.0]])
    m = fold_unk(x, 0, 2, "max", 4)
    assert m.argmax(-1).tolist() == [0, 0] and m[0, 2] == float("-inf")
    s = fold_unk(x, 0, 2, "sum", 4)
    torch.testing.assert_close(s.log_softmax(-1)[:, 0].exp(), x.softmax(-1)[:, [0, 2]].sum(-1))
    assert fold_unk(x, 0, None, "sum", 4) is x and fold_unk(x, 0, 2, None, 4) is x


def test_length_normalised_rerank() -> None:
    a, b = Hypothesis([1], [0], -2.0), Hypothesis([1, 2, 3], [0, 1, 2], -3.0)
    assert length_normalised([[a, b]])[0] == [b, a]  # -1.0 per token beats -2.0
    assert length_normalised([[a, b]], context_size=2)[0] == [b, a]  # -3/5 vs -2/3
    assert length_normalised([[a, Hypothesis([1, 2], [0, 1], -5.0)]], 2)[0][0] is a
    assert length_normalised([[]]) == [[]]
    empty = Hypothesis([], [], -1.0)
    assert length_normalised([[empty, a]])[0][0] is empty
    with pytest.raises(DecodingInputError, match="context_size must be >= 0"):
        length_normalised([[a]], -1)


def test_sherpa_options() -> None:
    assert SHERPA_COMPAT["max_symbols"] == 1 and SHERPA_COMPAT["start_context"] == "sherpa"
    assert sherpa_options(None, "greedy") == {"start_context": "sherpa", "max_symbols": 1, "unk_as_blank": "max"}
    assert sherpa_options(None, "beam") == {"start_context": "sherpa", "max_symbols": 1, "unk_as_blank": None,
                                            "final_choice": "length-norm", "search": "modified"}
    with pytest.raises(DecodingInputError, match="decoder must be"):
        sherpa_options(None, "wfst")


# ------------------------------------------------------------------------- writing: export-onnx -> sherpa-onnx
# sherpa-onnx feeds the export its own NeMo fbank, which no metadata makes our log-mel (its frames sit 120
# samples before ours): export-onnx's fitted front-end adapter (asrdecode.models.fbank_adapter) maps it to an
# approximation. Measured 2026-11-25 on the 60 clips (sherpa-onnx 2.0.1 greedy vs `asrdecode transcribe`):
# without the adapter 0.563 / 0.573 WER, 4 / 3 identical; with it 0.240 / 0.208 WER, 22 / 24 identical
# (benchmarks/sherpa_export.py). The bounds below fail on the export without it.
EXPORT_AGREEMENT = {"demo-rnnt": (0.240, 22), "demo-tdt": (0.208, 24)}


@pytest.mark.parametrize("name", ["demo-rnnt", "demo-tdt"])
def test_sherpa_onnx_decodes_the_export(sherpa, waves, tmp_path, capsys, name) -> None:
    import json

    from asrdecode import cli
    from asrdecode.evaluate import wer

    out = tmp_path / name
    assert cli.main(["export-onnx", name, str(out)]) == 0
    capsys.readouterr()
    got = _sherpa_decode(sherpa, out, "nemo", waves)  # model_type nemo_transducer, as parakeet exports
    texts = {}
    for model in (str(out), name):
        assert cli.main(["transcribe", *map(str, CLIPS), "--model", model, "--format", "json"]) == 0
        texts[model] = [r["text"] for r in json.loads(capsys.readouterr().out)]
    ours, theirs = texts[name], [r.text.strip() for r in got]
    assert texts[str(out)] == ours  # asrdecode runs the export from its log-mel input: the bundled model's words
    max_wer, min_same = EXPORT_AGREEMENT[name]
    same = sum(a == b for a, b in zip(ours, theirs))
    assert wer(ours, theirs) <= max_wer + 0.02 and same >= min_same - 2, (wer(ours, theirs), same)


# ------------------------------------------------------------------------------------------------ NeMo CTC
@pytest.mark.parametrize("norm", ["NA", "per_feature"])
def test_nemo_ctc_greedy_equals_sherpa_onnx(sherpa, waves, tmp_path, norm) -> None:
    from sherpa_models import build_nemo_ctc

    from asrdecode.ctc import greedy as ctc_greedy
    from asrdecode.models.nemo_ctc_onnx import NemoCtcOnnxBundle, is_nemo_ctc_dir, load_nemo_ctc

    d = build_nemo_ctc(tmp_path / "ctc", normalize_type=norm)
    assert is_nemo_ctc_dir(str(d)) and not is_nemo_ctc_dir(str(tmp_path))
    b = load_nemo_ctc(str(d))
    assert isinstance(b, NemoCtcOnnxBundle) and b.blank_id == 64 and b.kind == "ctc"
    rec = sherpa.OfflineRecognizer.from_nemo_ctc(str(d / "model.onnx"), str(d / "tokens.txt"), num_threads=1)
    streams = []
    for w in waves:
        s = rec.create_stream()
        s.accept_waveform(16000, w.numpy())
        streams.append(s)
    rec.decode_streams(streams)
    same, emitted = 0, 0
    for w, s in zip(waves, streams):
        lp, n = b.encode_features(*b.features([w]))
        h = ctc_greedy(b.model.log_probs_from_encoder(lp), n, blank_id=b.blank_id)[0]
        tokens = [b.tokenizer.pieces[i].replace("▁", " ") for i in h.tokens]
        emitted += len(tokens)
        same += tokens == list(s.result.tokens) and h.timestamps == _frames(b, s.result.timestamps)
    assert emitted > 300
    # raw features: identical on 60/60. With per_feature normalisation only 16/60 agree (measured
    # 2026-11-25): sherpa-onnx 2.0.1 normalises differently from NeMo's per_feature (mean / population
    # std per bin and utterance, what we compute); no formula variant we tried (biased / unbiased
    # variance, eps inside / outside the root, float32 / float64, batch padding) reproduced it
    assert same >= (60 if norm == "NA" else 14), same


def test_nemo_ctc_bad_files(tmp_path) -> None:
    import shutil

    from sherpa_models import build_nemo_ctc

    from asrdecode.models.nemo_ctc_onnx import load_nemo_ctc

    d = build_nemo_ctc(tmp_path / "ctc")
    with pytest.raises(DecodingInputError, match="run on the CPU"):
        load_nemo_ctc(str(d), device="meta")
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    _set_metadata(bad / "model.onnx", subsampling_factor="inf")
    with pytest.raises(FileFormatError, match="metadata 'subsampling_factor' must be an integer"):
        load_nemo_ctc(str(bad))
    _set_metadata(bad / "model.onnx", subsampling_factor="4", vocab_size="10")
    with pytest.raises(FileFormatError, match="65 tokens but metadata vocab_size \\+ 1 is 11"):
        load_nemo_ctc(str(bad))
    _set_metadata(bad / "model.onnx", vocab_size="64", feat_dim="128")
    with pytest.raises(FileFormatError, match="'audio_signal' has size 80 on axis 1 .* metadata 'feat_dim' is 128"):
        load_nemo_ctc(str(bad))
    b = load_nemo_ctc(str(d))
    with pytest.raises(DecodingInputError, match=r"feats must be a float tensor \[B, Tf, 80\]"):
        b.encode_features(torch.zeros(1, 5, 3), torch.tensor([5]))


def test_nemo_ctc_through_load_bundle_and_the_pipeline(tmp_path, waves) -> None:
    from sherpa_models import build_nemo_ctc

    from asrdecode.models import load_bundle
    from asrdecode.pipeline import DecodeOptions, make_pipeline

    d = build_nemo_ctc(tmp_path / "ctc")
    b = load_bundle(str(d))
    assert type(b).__name__ == "NemoCtcOnnxBundle"
    for opts in (DecodeOptions(decoder="greedy"), DecodeOptions(decoder="beam", beam=4)):
        encode, decode = make_pipeline(b, opts)
        hyps = decode(*encode(waves[:3] + [torch.zeros(0)]))
        assert len(hyps) == 4 and hyps[3].tokens == [] and any(h.tokens for h in hyps[:3])


# ------------------------------------------------------------------------- the registry's --compat sherpa
@pytest.mark.parametrize("decoder, method", [("greedy", "greedy_search"), ("beam", "modified_beam_search")])
def test_registry_compat_sherpa_equals_sherpa_onnx(sherpa, models, waves, decoder, method) -> None:
    from asrdecode.pipeline import make_pipeline, resolve_options

    d = models["icefall"]
    b = load_onnx_transducer(str(d))  # loaded with our defaults: the option alone makes it sherpa-onnx's
    given = {"decoder": decoder, "compat": "sherpa"} | ({"beam": 4} if decoder == "beam" else {})
    pipe = make_pipeline(b, resolve_options(b, given))
    assert b.model.start_context == "blank" and b.model.unk_as_blank is None  # the bundle's model is untouched
    want = _sherpa_decode(sherpa, d, "icefall", waves, method)
    same, emitted = 0, 0
    for w, r in zip(waves, want):
        h = pipe.decode(*pipe.encode([w]))[0]
        tokens, frames, _ = _as_sherpa(b, h)
        emitted += len(tokens)
        same += tokens == list(r.tokens) and frames == _frames(b, r.timestamps)
    assert emitted > 500 and same == len(waves)
    # without the option our own defaults decode differently on these flat random models
    ours = make_pipeline(b, resolve_options(b, {k: v for k, v in given.items() if k != "compat"}))
    assert any(_as_sherpa(b, ours.decode(*ours.encode([w]))[0])[0] != list(r.tokens) for w, r in zip(waves, want))


def test_registry_compat_sherpa_errors(models) -> None:
    from asrdecode.models import load_bundle
    from asrdecode.pipeline import make_pipeline, resolve_options, stream_options

    demo = load_bundle("demo-rnnt")
    with pytest.raises(DecodingInputError, match="needs a sherpa-onnx ONNX transducer, got LSTMTransducer"):
        make_pipeline(demo, resolve_options(demo, {"compat": "sherpa"}))
    b = load_onnx_transducer(str(models["icefall"]))
    with pytest.raises(DecodingInputError, match="--max-symbols does not combine with --compat sherpa"):
        make_pipeline(b, resolve_options(b, {"compat": "sherpa", "max_symbols": 3}))
    with pytest.raises(DecodingInputError, match="modified beam search, which has no --method"):
        make_pipeline(b, resolve_options(b, {"decoder": "beam", "compat": "sherpa", "method": "aes"}))
    with pytest.raises(DecodingInputError, match="modified beam search\\) decodes whole utterances only"):
        stream_options(b, resolve_options(b, {"decoder": "beam", "compat": "sherpa"}))
    with pytest.raises(DecodingInputError, match="--compat must be one of"):
        resolve_options(b, {"compat": "kaldi"})
    from asrdecode.streaming import StreamDecoder  # the streaming family's own checks (direct callers)

    for bundle, decoder, compat, match in ((demo, "greedy", "sherpa", "needs a sherpa-onnx ONNX transducer, got "
                                            "LSTMTransducer"), (b, "beam", "sherpa", "decodes whole utterances only"),
                                           (b, "greedy", "kaldi", "compat must be 'none' or 'sherpa'")):
        with pytest.raises(DecodingInputError, match=match):
            StreamDecoder(bundle, decoder=decoder, compat=compat)
    nemo = load_onnx_transducer(str(models["nemo-rnnt"]))  # NeMo layout: our searches with its preset
    pipe = make_pipeline(nemo, resolve_options(nemo, {"decoder": "beam", "beam": 2, "compat": "sherpa"}))
    assert len(pipe.decode(torch.randn(1, 5, 48), torch.tensor([5]))) == 1
    for bundle in (nemo, b):  # --beam 1000000 aborted the process (std::bad_alloc through the C ABI)
        pipe = make_pipeline(bundle, resolve_options(bundle, {"decoder": "beam", "beam": 10**6, "compat": "sherpa"}))
        enc = torch.randn(1, 5, 48 if bundle is nemo else 64)
        with pytest.raises(DecodingInputError, match="beam must be an int in 1..1024, got 1000000"):
            pipe.decode(enc, torch.tensor([5]))


@pytest.mark.parametrize("layout", ["icefall", "nemo-rnnt", "nemo-tdt"])
def test_streaming_compat_sherpa_is_the_sherpa_loaded_model(models, waves, layout) -> None:
    """Serve / StreamDecoder with the registry's --compat sherpa greedy decode as a model loaded with
    sherpa-onnx's settings does, and streamed chunks equal the whole utterance (compat beam is a
    whole-utterance search on both layouts: refused, tests/models/test_sherpa_nemo_beam.py)."""
    from asrdecode.pipeline import resolve_options, stream_options
    from asrdecode.serving import server
    from asrdecode.streaming import StreamDecoder

    d = models[layout]
    plain = load_onnx_transducer(str(d))
    decoders = ["greedy"]
    differs = 0
    for decoder in decoders:
        kw, _ = stream_options(plain, resolve_options(plain, {"decoder": decoder, "compat": "sherpa"}))
        served = server.bundle_decoding(plain, decoder, {"compat": "sherpa"})
        assert kw["compat"] == "sherpa" and served == (decoder, {k: v for k, v in kw.items() if k != "decoder"})
        ref, opts = _load(d, layout, decoder)  # loaded with sherpa-onnx's settings, no compat option
        stream = StreamDecoder(plain, **kw)
        want = StreamDecoder(ref, decoder=decoder, max_symbols=opts["max_symbols"])
        ours = StreamDecoder(plain, decoder=decoder)
        for w in waves[:6]:
            got = stream.offline(w)
            assert got.tokens == want.offline(w).tokens and got.timestamps == want.offline(w).timestamps
            differs += got.tokens != ours.offline(w).tokens
            stream.open(0)
            half = w.numel() // 2
            stream.step({0: w[:half]})
            assert stream.step({0: w[half:]}, final={0})[0].hypothesis.tokens == got.tokens
    if layout == "icefall":
        assert differs > 0  # the preset changed the decoding
