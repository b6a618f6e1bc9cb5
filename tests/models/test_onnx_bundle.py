"""ONNX transducers in sherpa-onnx's layout (asrdecode.models.onnx_transducer) and ``export-onnx``.

demo-rnnt and demo-tdt are exported once per session (tests/onramp_models.py; NeMo's layout, the
default) and loaded back through ``load_bundle``; the metadata checks use the stateful layout; greedy and beam outputs must equal the torch models' (same tokens and
timestamps, scores within float tolerance), through the pipeline, ``transcribe``, ``eval`` and
``serve``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.models import ModelBundle, load_bundle  # noqa: E402
from asrdecode.models.nemo_onnx import NemoOnnxBundle  # noqa: E402
from asrdecode.models.onnx_transducer import OnnxTransducer  # noqa: E402
from asrdecode.models.vocabulary import read_tokens_txt  # noqa: E402
from asrdecode.pipeline import DecodeOptions, make_pipeline  # noqa: E402
from asrdecode.transducer import check_model  # noqa: E402
from onramp_models import cached_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIPS = [ROOT / f"data/real/cards-00{i}.wav" for i in (1, 2, 3)]
OPTIONS = [DecodeOptions(decoder="greedy"), DecodeOptions(decoder="beam", beam=4),
           DecodeOptions(decoder="beam", beam=4, method="aes")]


@pytest.fixture(scope="module")
def waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    return [read_audio(c) for c in CLIPS]


@pytest.fixture(scope="module", params=["demo-rnnt", "demo-tdt"])
def pair(request) -> tuple[object, NemoOnnxBundle]:
    return load_bundle(request.param), load_bundle(str(cached_onnx(request.param)))


def test_loads_as_a_transducer_bundle(pair) -> None:
    torch_b, onnx_b = pair
    assert isinstance(onnx_b, NemoOnnxBundle) and isinstance(onnx_b, ModelBundle) and onnx_b.frontend == "logmel"
    assert onnx_b.kind == torch_b.kind and onnx_b.blank_id == torch_b.blank_id
    assert onnx_b.model.vocab_size == torch_b.model.vocab_size and onnx_b.model.durations == torch_b.model.durations
    assert onnx_b.frame_seconds == pytest.approx(torch_b.frame_seconds)
    assert onnx_b.feature_frames_per_frame == torch_b.feature_frames_per_frame
    check_model(onnx_b.model)
    tok = torch_b.tokenizer
    assert [onnx_b.tokenizer.id_to_piece(i) for i in range(5, 40)] == [tok.id_to_piece(i) for i in range(5, 40)]


@pytest.mark.parametrize("opts", OPTIONS, ids=["greedy", "beam-alsd", "beam-aes"])
def test_outputs_equal_the_torch_models(pair, waves, opts) -> None:
    results = []
    for b in pair:
        encode, decode = make_pipeline(b, opts)
        results.append(decode(*encode(waves)))
    for want, got in zip(*results):
        assert got.tokens == want.tokens and got.timestamps == want.timestamps and got.text == want.text
        assert got.durations == want.durations
        assert got.score == pytest.approx(want.score, abs=1e-3)
    assert any(h.tokens for h in results[0])


def test_the_networks_equal_the_torch_ones(pair, waves) -> None:
    torch_b, onnx_b = pair
    feats, flen = torch_b.features(waves)
    enc, elen = torch_b.encode_features(feats, flen)
    oenc, oelen = onnx_b.encode_features(*onnx_b.features(waves))
    assert oelen.tolist() == elen.tolist()
    t, o = torch_b.model, onnx_b.model
    with torch.no_grad():
        for i, n in enumerate(elen.tolist()):  # NeMo's layout: the joiner projects, the encoder does not
            torch.testing.assert_close(oenc[i, :n], enc[i, :n], atol=1e-4, rtol=1e-4)
        labels = torch.tensor([t.blank_id, 5, 17])
        out_t, st_t = t.predict(labels, t.initial_state(3))
        out_o, st_o = o.predict(labels, o.initial_state(3))
        torch.testing.assert_close(out_o, out_t, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(st_o[0], st_t[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(st_o[1], st_t[1], atol=1e-5, rtol=1e-5)
        # joint broadcasts like the torch one: [B, T, 1, D] x [B, 1, U, P]
        a, b = oenc[:2, :4].unsqueeze(2), out_o[:2].view(2, 1, 1, -1).expand(2, 1, 3, -1)
        torch.testing.assert_close(o.joint(a, b), t.joint(t.project_encoder(a), t.project_decoder(b)), atol=1e-4,
                                   rtol=1e-4)
        assert o.joint(a[:0], b[:0]).shape == (0, 4, 3, o._out_width)


def test_empty_and_short_audio_decode_to_empty_hypotheses(pair, waves) -> None:
    for opts in OPTIONS:
        for b in pair:
            encode, decode = make_pipeline(b, opts)
            hyps = decode(*encode([torch.zeros(0), torch.zeros(300), waves[0]]))
            assert [h.tokens for h in hyps[:2]] == [[], []] and hyps[0].text == ""


def test_state_helpers(pair) -> None:
    o = pair[1].model
    s0 = o.initial_state(3)
    out, s1 = o.predict(torch.tensor([4, 5, 6]), s0)
    picked = o.select_state(s1, torch.tensor([2, 0]))
    assert picked[0].shape[1] == 2
    torch.testing.assert_close(picked[1][:, 0], s1[1][:, 2])
    mixed = o.replace_state(s0, s1, torch.tensor([True, False, True]))
    torch.testing.assert_close(mixed[1][:, 1], s0[1][:, 1])
    torch.testing.assert_close(mixed[0][:, 0], s1[0][:, 0])
    empty, _ = o.predict(torch.zeros(0, dtype=torch.long), o.initial_state(0))
    assert empty.shape[0] == 0


def test_stateful_layout_decodes_the_same(waves, tmp_path) -> None:
    torch_b, onnx_b = load_bundle("demo-tdt"), load_bundle(str(_copy(tmp_path, "s", "demo-tdt")))
    assert type(onnx_b).__name__ == "OnnxTransducerBundle" and onnx_b.model.durations == [0, 1, 2, 3, 4]
    for b in (torch_b, onnx_b):
        encode, decode = make_pipeline(b, DecodeOptions(decoder="beam", beam=4))
        b.hyps = decode(*encode(waves))
    for want, got in zip(torch_b.hyps, onnx_b.hyps):
        assert got.tokens == want.tokens and got.timestamps == want.timestamps and got.durations == want.durations
    from asrdecode.models.onnx_export import export_onnx

    with pytest.raises(DecodingInputError, match="layout must be one of"):
        export_onnx(torch_b, tmp_path / "x", layout="icefall")


@pytest.mark.parametrize("name", ["tokens.txt", "encoder.onnx"])
def test_export_never_writes_through_a_symlink(tmp_path, capsys, name) -> None:
    """A link planted in the output folder (here to a file outside it) is refused before anything is
    written; the file it points to stays as it was and no staging folder is left behind."""
    from asrdecode import cli

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    assert cli.main(["export-onnx", "demo-rnnt", str(out)]) != 0
    assert f"{out / name} is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep me" and [p.name for p in out.iterdir()] == [name]


def test_cli_export_transcribe_and_eval(waves, tmp_path, capsys) -> None:
    from asrdecode import cli

    out = tmp_path / "exported"
    assert cli.main(["export-onnx", "demo-rnnt", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["decoder.onnx", "encoder.onnx", "joiner.onnx", "tokens.txt"]
    capsys.readouterr()
    assert cli.main(["transcribe", *map(str, CLIPS), "--model", str(out), "--decoder", "beam", "--beam", "4",
                     "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert cli.main(["transcribe", *map(str, CLIPS), "--model", "demo-rnnt", "--decoder", "beam", "--beam", "4",
                     "--format", "json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert [r["text"] for r in recs] == [r["text"] for r in want]
    assert [[t["id"] for t in r["tokens"]] for r in recs] == [[t["id"] for t in r["tokens"]] for r in want]
    assert [r.get("words") for r in recs] == [r.get("words") for r in want]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(c), "duration": 1.0, "text": "ten of clubs"}) + "\n"
                                for c in CLIPS))
    assert cli.main(["eval", str(manifest), "--model", str(out), "--no-progress"]) == 0
    assert "WER" in capsys.readouterr().out
    assert cli.main(["export-onnx", "demo-ctc", str(tmp_path / "x")]) == 2
    assert "demo-rnnt or demo-tdt" in capsys.readouterr().err


def test_transcribe_dataset_local_path(tmp_path) -> None:
    # what every Ray actor of `transcribe-dataset` runs (the Ray run itself: test_distributed.py, slow)
    from asrdecode.distributed import transcribe_local

    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(c), "duration": 1.0, "text": "ten of clubs"}) + "\n"
                                for c in CLIPS))
    model = str(cached_onnx("demo-rnnt"))
    got = transcribe_local(manifest, model=model, batch_size=2)
    want = transcribe_local(manifest, model="demo-rnnt", batch_size=2)
    assert [r["pred_text"] for r in got] == [r["pred_text"] for r in want] and len(got) == len(CLIPS)
    assert [r["tokens"] for r in got] == [r["tokens"] for r in want] and any(r["tokens"] for r in got)


def test_cli_serves_an_onnx_model(tmp_path) -> None:
    pytest.importorskip("starlette")
    from asrdecode.streaming import StreamDecoder

    model = cached_onnx("demo-rnnt")
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", "loadtest", "--spawn", "--streams", "2",
                           "--model", str(model), "--chunk-seconds", "0.5", "--audio", str(CLIPS[0]),
                           "--max-batch", "2", "--json", str(out)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(out.read_text())
    assert rep["summary"]["finished"] == 2 and rep["summary"]["failed"] == 0
    from asrdecode.serving.loadtest import load_clips
    from asrdecode.serving.protocol import Limits, decode_chunk, encode_chunk

    audio = load_clips([CLIPS[0]])[0].audio
    sent = decode_chunk(encode_chunk(audio, "s16le"), "s16le", Limits())  # what the server decodes
    with torch.inference_mode():
        want = StreamDecoder(load_bundle(str(model)), decoder="greedy").offline(torch.from_numpy(sent))
    assert [s["final_text"] for s in rep["streams"]] == [want.text, want.text]


# ------------------------------------------------------------------------------------ bad input
_STATEFUL: dict[str, Path] = {}


def _copy(tmp_path: Path, name: str = "m", model: str = "demo-rnnt") -> Path:
    """A copy of ``model`` exported in the stateful layout (x / x_lens, y + h / c; once per module)."""
    if model not in _STATEFUL:
        from asrdecode.models import load
        from asrdecode.models.onnx_export import export_onnx

        _STATEFUL[model] = tmp_path.parent / f"stateful-{model}"
        export_onnx(load(model), _STATEFUL[model], layout="stateful")
    out = tmp_path / name
    shutil.copytree(_STATEFUL[model], out)
    return out


def test_missing_files_are_named(tmp_path) -> None:
    d = _copy(tmp_path)
    (d / "joiner.onnx").unlink()
    (d / "tokens.txt").unlink()
    with pytest.raises(FileFormatError, match=r"missing \['joiner.onnx', 'tokens.txt'\]"):
        load_bundle(str(d))


def test_bad_tokens_txt(tmp_path) -> None:
    d = _copy(tmp_path)
    lines = (d / "tokens.txt").read_text(encoding="utf-8").splitlines()
    (d / "tokens.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match="tokens but metadata vocab_size is 257"):
        load_bundle(str(d))
    (d / "tokens.txt").write_text("a 0\nb x\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"tokens.txt:2: expected '<token> <id>'"):
        read_tokens_txt(d / "tokens.txt")
    (d / "tokens.txt").write_text("a 0\nb 0\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match="id 0 appears twice"):
        read_tokens_txt(d / "tokens.txt")
    (d / "tokens.txt").write_text("a 0\nb 2\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match="ids must be 0..1"):
        read_tokens_txt(d / "tokens.txt")


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
    ({"frontend": "mfcc"}, "metadata 'frontend' must be one of"),
    ({"context_size": "0"}, "metadata 'context_size' must be in 1..64, got 0"),
    ({"subsampling_factor": "0"}, "metadata 'subsampling_factor' must be in 1..64, got 0"),
    ({"subsampling_factor": "1000000000"}, "metadata 'subsampling_factor' must be in 1..64"),  # issue 30
    ({"frame_shift_ms": "inf"}, "metadata 'frame_shift_ms' must be finite"),  # issue 30
    ({"frame_shift_ms": "nan"}, "metadata 'frame_shift_ms' must be finite"),
    ({"frame_shift_ms": "-10"}, "metadata 'frame_shift_ms' must be in 1..1000"),
    ({"frame_shift_ms": "ten"}, "metadata 'frame_shift_ms' must be a number"),
    ({"vocab_size": "0"}, r"metadata 'vocab_size' must be in 1..1e\+06"),
    ({"feature_dim": "100000"}, "metadata 'feature_dim' must be in 1..4096"),
    ({"durations": "0,1,-2"}, "metadata 'durations' must be in 0..1000"),
    ({"durations": "0,1,1"}, "metadata 'durations' must be distinct"),
    ({"feature_dim": "40"}, "the logmel front end has 80 bins but feature_dim is 40"),
    ({"feature_dim": "40", "frontend": "kaldi-fbank", "subsampling_factor": None},
     "'x' has size 80 on axis -1 .* but metadata 'feature_dim' is 40"),  # at load, not at the first decode
    ({"blank_id": "x"}, "metadata 'blank_id' must be an integer"),
    ({"blank_id": "300"}, "blank_id 300 outside"),
    ({"durations": "1,a"}, "metadata 'durations' must be comma-separated ints"),
    ({"durations": "0,1"}, "logit has 257 outputs but vocab_size \\+ len\\(durations\\) is 259"),
])
def test_bad_metadata(tmp_path, changes, match) -> None:
    d = _copy(tmp_path)
    _set_metadata(d / "encoder.onnx", **changes)
    with pytest.raises(FileFormatError, match=match):
        load_bundle(str(d))


def test_sherpa_onnx_defaults_kaldi_fbank_and_measured_subsampling(tmp_path, waves) -> None:
    # an icefall / sherpa-onnx export names neither front end nor subsampling: Kaldi fbank (as
    # sherpa-onnx computes it) and the subsampling measured on the encoder
    knf = pytest.importorskip("kaldi_native_fbank")
    d = _copy(tmp_path)
    _set_metadata(d / "encoder.onnx", frontend=None, subsampling_factor=None, frame_shift_ms=None, feature_dim=None)
    b = load_bundle(str(d))
    assert b.frontend == "kaldi-fbank" and b.feature_frames_per_frame == 8 and b.feature_dim == 80
    assert b.frame_seconds == pytest.approx(0.08)
    feats, flen = b.features(waves[:2])
    assert flen.tolist() == [(w.numel() + 80) // 160 for w in waves[:2]]
    opts = knf.FbankOptions()
    opts.frame_opts.dither, opts.frame_opts.snip_edges, opts.mel_opts.num_bins, opts.mel_opts.high_freq = 0, False, 80, -400
    f = knf.OnlineFbank(opts)
    f.accept_waveform(16000, waves[0].numpy().tolist())
    f.input_finished()
    torch.testing.assert_close(feats[0, 7], torch.tensor(f.get_frame(7)))
    short = int(flen.argmin())
    assert bool((feats[short, int(flen[short]):] == -23.025850929940457).all())  # sherpa-onnx's batch padding
    assert b.features([torch.zeros(0)])[1].tolist() == [0]
    encode, decode = make_pipeline(b, DecodeOptions(decoder="beam", beam=2))
    assert len(decode(*encode(waves))) == len(waves)
    from asrdecode.models.onnx_transducer import OnnxMissingError

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "kaldi_native_fbank", None)
        with pytest.raises(OnnxMissingError, match="kaldi-native-fbank"):
            load_bundle(str(d))


def test_a_graph_with_other_inputs(tmp_path) -> None:
    d = _copy(tmp_path)
    shutil.copy(d / "joiner.onnx", d / "decoder.onnx")
    with pytest.raises(FileFormatError, match=r"decoder.onnx: expected inputs \['y'\]"):
        load_bundle(str(d))
    (d / "encoder.onnx").write_bytes(b"not onnx")
    with pytest.raises(FileFormatError, match="not a loadable ONNX model"):
        load_bundle(str(d))


def test_cpu_only_and_bad_features(tmp_path) -> None:
    from asrdecode.models.onnx_transducer import load_onnx_transducer

    with pytest.raises(DecodingInputError, match="run on the CPU"):
        load_onnx_transducer(str(cached_onnx("demo-rnnt")), device="meta")
    b = load_bundle(str(cached_onnx("demo-rnnt")))
    with pytest.raises(DecodingInputError, match=r"feats must be a float tensor \[B, Tf, 80\]"):
        b.encode_features(torch.zeros(1, 10, 3), torch.tensor([10]))


def test_export_refuses_what_it_cannot_export(tmp_path) -> None:
    from asrdecode.models import load
    from asrdecode.models.onnx_export import export_onnx

    with pytest.raises(DecodingInputError, match="exports the bundled transducers"):
        export_onnx(load("demo-ctc"), tmp_path)


# ------------------------------------------------------------------ stateless (icefall-style) decoders
def _export_stateless(t, out: Path) -> OnnxTransducer:
    """decoder.onnx (``y [N, context]`` -> ``decoder_out``, no states) + joiner.onnx of a StatelessTransducer."""
    from asrdecode.models.onnx_export import _export, _Joiner
    from asrdecode.models.onnx_common import ort_session as _session

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t = t

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return self.t.dec_proj(torch.relu(self.t.mix(self.t.embedding(y).flatten(1))))

    h = t.enc_proj.out_features
    _export(Decoder(), (torch.zeros(2, t.context, dtype=torch.long),), out / "decoder.onnx", ["y"], ["decoder_out"],
            {"y": {0: "N"}, "decoder_out": {0: "N"}})
    _export(_Joiner(t), (torch.randn(3, h), torch.randn(3, h)), out / "joiner.onnx", ["encoder_out", "decoder_out"],
            ["logit"], {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}})
    return OnnxTransducer(_session(out / "decoder.onnx"), _session(out / "joiner.onnx"), t.blank_id, t.vocab_size,
                          t.context, t.durations)


@pytest.mark.parametrize("context, blank, durations", [(2, 0, None), (3, 11, [0, 1, 2])])
def test_stateless_decoders_equal_the_torch_model(tmp_path, context, blank, durations) -> None:
    from asrdecode.transducer import StatelessTransducer, beam_search, greedy

    torch.manual_seed(context)
    t = StatelessTransducer(12, 6, 8, 8, blank, durations=durations, context=context).eval()
    with torch.no_grad():
        t.joint_out.bias[blank] -= 1.0  # some labels
    o = _export_stateless(t, tmp_path)
    assert o.initial_state(2)[0].shape == (2, context) and len(o.initial_state(2)) == 1
    enc, lengths = torch.randn(3, 20, 6), torch.tensor([20, 13, 0])
    with torch.no_grad():
        proj = t.project_encoder(enc)
    from asrdecode.pipeline import best_of

    for run in (lambda m, x: greedy(m, x, lengths), lambda m, x: best_of(beam_search(m, x, lengths, beam=3)),
                lambda m, x: best_of(beam_search(m, x, lengths, beam=3, method="aes"))):
        want, got = run(t, enc), run(o, proj)
        for w, g in zip(want, got):
            assert g.tokens == w.tokens and g.timestamps == w.timestamps and g.durations == w.durations
            assert g.score == pytest.approx(w.score, abs=1e-4)
        assert any(w.tokens for w in want) and not want[2].tokens


def test_names_the_extra_when_onnx_packages_are_missing(tmp_path, monkeypatch) -> None:
    from asrdecode.models import load
    from asrdecode.models.onnx_export import export_onnx
    from asrdecode.models.onnx_transducer import OnnxMissingError

    model = str(cached_onnx("demo-rnnt"))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(OnnxMissingError, match=r"-e '\.\[onnx\]'"):
        load_bundle(model)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(OnnxMissingError, match=r"-e '\.\[onnx\]'"):
        export_onnx(load("demo-rnnt"), tmp_path)
