"""The decoder registry: one options schema that every entry point (transcribe, eval, serve,
transcribe-dataset, the Python pipeline) resolves the same way, and its errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("kaldifst")
pytest.importorskip("starlette")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

import bundle_double  # noqa: E402
from test_serve_defaults import _graph  # noqa: E402

from asrdecode import cli, distributed, registry  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.models.phone import ACOUSTIC_SCALE, MAX_ACTIVE, WFST_BEAM  # noqa: E402
from asrdecode.pipeline import DECODER_NAMES, DecodeOptions, make_pipeline, resolve_options, stream_options  # noqa: E402
from asrdecode.registry import OPTION, OPTIONS  # noqa: E402
from asrdecode.serving import server  # noqa: E402

CLIP = "data/real/cards-001.wav"
TOKEN_LM = "src/asrdecode/models/assets/token-4gram.arpa.gz"


class PhoneDouble(bundle_double.DoubleBundle):
    """A CTC bundle with phone-ctc's decode_defaults (WFST, its tuned scale and beams) over a small graph."""

    name = "phone-double"

    def __init__(self, graph: Path) -> None:
        super().__init__("ctc")
        self.decode_defaults = {"decoder": "wfst", "graph": str(graph), "acoustic_scale": ACOUSTIC_SCALE,
                                "wfst_beam": WFST_BEAM, "max_active": MAX_ACTIVE}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registry")
    graph = _graph(tmp)
    return {name: load_bundle(name) for name in ("demo-ctc", "demo-rnnt", "demo-tdt")} | \
        {"phone-double": PhoneDouble(graph)}, graph


def _cases(kind: str, graph: Path) -> list[dict]:
    """Given options per decoder of ``kind``: nothing named, the defaults, a few flags, an LM."""
    cases: list[dict] = [{}]
    for d in DECODER_NAMES[kind]:
        cases.append({"decoder": d})
        if d == "beam":
            cases += [{"decoder": d, "beam": 4}, {"decoder": d, "lm": TOKEN_LM},
                      {"decoder": d, "lm": TOKEN_LM, "beta": 0.5, "engine": "torch", "nbest": 2}]
            if kind != "ctc":
                cases += [{"decoder": d, "method": "wind"}, {"decoder": d, "method": "wind", "window": 3,
                                                             "max_symbols": 4}]
        if d == "greedy" and kind != "ctc":
            cases.append({"decoder": d, "window": 8, "max_symbols": 2})
        if kind != "ctc":  # resolved alike everywhere (building it needs a sherpa-onnx layout: test_sherpa_onnx)
            cases.append({"decoder": d, "compat": "sherpa"})
        if d == "wfst":
            cases += [{"decoder": d, "graph": str(graph)}, {"decoder": d, "graph": str(graph), "wfst_beam": 7.0}]
    return cases


def _flags(given: dict) -> list[str]:
    out = []
    for k, v in given.items():
        out += [registry.DecodeOptions.FLAGS[k], str(v)]
    return out


def _every_door(bundle, model: str, given: dict) -> dict[str, object]:
    """The options each entry point resolves for ``given`` (the CLI's flags, the Python values)."""
    parse = cli.build_parser().parse_args
    flags = ["--model", model, *_flags(given)]
    serve_args = parse(["serve", *flags])
    cfg = cli._server_config(serve_args, server)
    dataset_args = parse(["transcribe-dataset", "m.jsonl", "out", *flags])
    decoder = dataset_args.decoder
    checked = distributed._check_options(model, decoder, cli.dataset_options(dataset_args))
    python = {k: v for k, v in given.items() if k != "decoder"}
    return {
        "transcribe": cli.decode_options(parse(["transcribe", "x.wav", *flags]), bundle),
        "eval": cli.decode_options(parse(["eval", "m.jsonl", *flags]), bundle),
        "serve": server.resolve_decoding(bundle, cfg.decoder, cfg.decoder_options)[0],
        "transcribe-dataset": distributed.resolved_options(bundle, decoder, checked),
        "pipeline": DecodeOptions.for_bundle(bundle, decoder=given.get("decoder"), **python),
    }


def test_every_entry_point_resolves_the_same_options(bundles) -> None:
    found, graph = bundles
    seen = 0
    for model, bundle in found.items():
        for case in _cases(bundle.kind, graph):
            if case.get("nbest", 1) > 1:  # a served stream has one hypothesis: serve refuses nbest
                case = {k: v for k, v in case.items() if k != "nbest"}
            doors = _every_door(bundle, model, case)
            want = doors["pipeline"]
            assert want == resolve_options(bundle, case)
            for door, got in doors.items():
                assert got == want, (model, case, door)
            seen += 1
    assert seen >= 30


def test_serve_builds_the_same_search_as_transcribe(bundles) -> None:
    found, graph = bundles
    for model, bundle in found.items():
        for case in _cases(bundle.kind, graph):
            if "lm" in case or "nbest" in case:  # (the LM cases: the first test; not rebuilt per case here)
                continue
            if "compat" in case:  # demo models are not sherpa-onnx layouts: serve and stream_options refuse alike
                for call in (lambda b=bundle, c=case: server.bundle_decoding(b, c["decoder"], {"compat": "sherpa"}),
                             lambda b=bundle, c=case: stream_options(b, resolve_options(b, c))):
                    with pytest.raises(DecodingInputError, match="--compat sherpa needs a sherpa-onnx ONNX transducer"):
                        call()
                continue
            opts = resolve_options(bundle, case)
            if opts.decoder == "wfst" and not opts.graph:  # both refuse it (needs --graph)
                continue
            name, served = server.bundle_decoding(bundle, case.get("decoder"),
                                                  {k: v for k, v in case.items() if k != "decoder"})
            offline, _ = stream_options(bundle, opts)
            assert name == offline.pop("decoder") == opts.decoder
            assert served.keys() == offline.keys()
            for key in served:
                if key == "graph":
                    assert served[key].num_states == offline[key].num_states
                elif key != "fusion":
                    assert served[key] == offline[key], (model, case, key)


def test_one_default_per_option_everywhere(bundles) -> None:
    found, graph = bundles
    ctc, rnnt = found["demo-ctc"], found["demo-rnnt"]
    # serve used StreamDecoder's own defaults (CTC beam 16, transducer beam 4, WFST scale 1.0, the CLI's 8, 8,
    # 2.0); now each is its config's, the library's too
    assert server.bundle_decoding(ctc, "beam", {})[1]["beam"] == OPTION["beam"].default == 8
    assert server.bundle_decoding(rnnt, "beam", {})[1]["beam"] == 8
    plain = bundle_double.ctc_bundle()
    assert server.bundle_decoding(plain, "wfst", {"graph": str(graph)})[1]["acoustic_scale"] == 1.0
    assert resolve_options(ctc, {"decoder": "wfst", "graph": str(graph)}).acoustic_scale == 2.0  # demo-ctc's tuning
    # --method wind without --window: the WIND window 8 (the CLI used 1), the same in every door
    assert server.bundle_decoding(rnnt, "beam", {"method": "wind"})[1]["window"] == 8
    assert stream_options(rnnt, resolve_options(rnnt, {"decoder": "beam", "method": "wind"}))[0]["window"] == 8
    assert stream_options(rnnt, resolve_options(rnnt, {}))[0] == {"decoder": "greedy", "window": 1, "max_symbols": 10,
                                                           "engine": "auto"}


def test_tuned_beta_needs_an_lm(bundles) -> None:
    ctc = bundles[0]["demo-ctc"]
    assert ctc.decode_defaults["beta"] == pytest.approx(2.0)
    for case in ({"decoder": "beam"}, {"decoder": "beam", "boost": ("ill disposed:2",)}):
        opts = resolve_options(ctc, case)
        assert opts.beta == 0.0 and opts.lm_weight == OPTION["lm_weight"].default  # not applied: no LM
    opts = resolve_options(ctc, {"decoder": "beam", "lm": TOKEN_LM})
    assert (opts.lm_weight, opts.beta) == (pytest.approx(0.7), pytest.approx(2.0))
    args = cli.build_parser().parse_args(["eval", "m.jsonl", "--model", "demo-ctc", "--decoder", "beam"])
    assert cli.decode_options(args, ctc).beta == 0.0
    # the phone double's WFST options do not follow it to another decoder
    phone = bundles[0]["phone-double"]
    assert resolve_options(phone, {"decoder": "beam"}) == DecodeOptions(decoder="beam")
    assert resolve_options(phone, {}).acoustic_scale == pytest.approx(ACOUSTIC_SCALE)


@pytest.mark.parametrize("kind, case, match", [
    ("ctc", {"beta": 1.0, "decoder": "beam"}, "--beta needs --lm or --word-lm"),
    ("rnnt", {"lm_weight": 0.3, "decoder": "beam"}, "--lm-weight needs --lm"),
    ("ctc", {"word_bonus": 1.0, "decoder": "beam"}, "--word-bonus needs --word-lm"),
    ("rnnt", {"expansion_gamma": 1.0, "decoder": "beam"}, "--expansion-gamma needs --method wind"),
    ("rnnt", {"window": 4, "decoder": "beam", "method": "aes"}, "--window needs --method wind"),
    ("rnnt", {"beam": 4}, "--beam does not apply to --decoder greedy of a rnnt model"),
    ("ctc", {"beam": 4, "decoder": "wfst"}, "--wfst-beam"),
    ("ctc", {"max_symbols": 3}, "--max-symbols does not apply.*no decoder of a ctc model takes it"),
    ("ctc", {"nbest": 2}, "--nbest does not apply to --decoder greedy"),
    ("tdt", {"decoder": "wfst"}, "--decoder wfst does not apply to a tdt model"),
    ("ctc", {"decoder": "viterbi"}, "decoder must be one of"),
    ("ctc", {"beam_size": 4}, "unknown option 'beam_size'"),
    ("rnnt", {"decoder": "beam", "engine": "gpu"}, "--engine must be one of"),
    ("rnnt", {"decoder": "beam", "max_symbols": 0}, "--max-symbols must be an int >= 1"),
    ("ctc", {"decoder": "beam", "nbest": 0}, "--nbest must be an int >= 1"),
])
def test_resolution_errors(kind: str, case: dict, match: str) -> None:
    bundle = bundle_double.DoubleBundle(kind)
    with pytest.raises(DecodingInputError, match=match):
        resolve_options(bundle, case)


def test_bad_bundle_defaults_and_server_config() -> None:
    b = bundle_double.ctc_bundle()
    b.decode_defaults = {"decoder": "beam", "bogus": 1}
    with pytest.raises(DecodingInputError, match=r"decode_defaults: unknown option\(s\) \['bogus'\]"):
        resolve_options(b, {})
    b.decode_defaults = {"decoder": "beam", "beam": 0}
    with pytest.raises(DecodingInputError, match="--beam must be an int >= 1"):
        resolve_options(b, {})
    with pytest.raises(ValueError, match="decoder must be one of"):
        server.ServerConfig(model="demo-ctc", decoder="viterbi")
    with pytest.raises(DecodingInputError, match=r"decoder_options\['beam'\] \(the CLI's --beam\) must be int"):
        server.ServerConfig(model="demo-ctc", decoder="beam", decoder_options={"beam": 2.5})
    b = bundle_double.ctc_bundle()
    with pytest.raises(DecodingInputError, match="a served stream's result is its best hypothesis"):
        server.resolve_decoding(b, "beam", {"nbest": 3})
    with pytest.raises(DecodingInputError, match="word boosts are its own"):
        server.resolve_decoding(b, "wfst", {"graph": "g.pt", "boost": ["ace:2"]})
    # the extras are StreamDecoder's own keyword arguments, passed through
    opts, extras = server.resolve_decoding(b, "beam", {"beam": 3, "boost_weight": 1.5, "block_frames": 8})
    assert opts.beam == 3 and extras == {"boost_weight": 1.5, "block_frames": 8}


def test_registry_tables_fit_together() -> None:
    import dataclasses

    from asrdecode.streaming import families

    assert [f.name for f in dataclasses.fields(DecodeOptions)] == ["decoder", *(o.name for o in OPTIONS)]
    for d in registry.DECODERS:
        assert set(d.options) <= set(OPTION), d.name
        assert families.FAMILIES[d.decoder].decoder_class is d.decoder
    assert {o.name for o in OPTIONS} == {n for d in registry.DECODERS for n in d.options}
    pairs = [(d.name, k) for d in registry.DECODERS for k in d.kinds]
    assert len(pairs) == len(set(pairs))  # each (decoder, kind) declared once
    assert registry.decoder_names(["rnnt"]) == ("greedy", "beam")


def test_decode_help_lists_only_ctc_options(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["decode", "--help"])
    text = capsys.readouterr().out
    for flag in ("--beam", "--lm", "--graph", "--wfst-beam", "--engine", "--nbest", "--boost"):
        assert flag in text
    for flag in ("--window", "--method", "--expansion-gamma", "--max-symbols"):
        assert flag not in text
    with pytest.raises(SystemExit):
        cli.main(["transcribe", "--help"])
    text = capsys.readouterr().out
    assert all(o.flag in text for o in OPTIONS)


# ------------------------------------------------------------------------------ the new options
def test_transcribe_nbest_json(capsys) -> None:
    code = cli.main(["transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam", "--beam", "4", "--nbest", "3",
                     "--format", "json"])
    rec = json.loads(capsys.readouterr().out)
    assert code == 0 and 1 <= len(rec["nbest"]) <= 3
    scores = [h["score"] for h in rec["nbest"]]
    assert scores == sorted(scores, reverse=True)
    assert rec["nbest"][0]["text"] == rec["text"] and rec["nbest"][0]["score"] == pytest.approx(rec["score"])
    assert cli.main(["transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam", "--nbest", "3"]) == 2
    assert "--nbest 3 needs --format json" in capsys.readouterr().err
    # a long file is decoded in windows joined into one hypothesis: refused, not truncated
    assert cli.main(["transcribe", CLIP, "--model", "demo-ctc", "--decoder", "beam", "--nbest", "2",
                     "--format", "json", "--long-audio-seconds", "0.5"]) == 2
    assert "--long-audio-seconds" in capsys.readouterr().err


def test_eval_and_decode_nbest(capsys, tmp_path) -> None:
    out = tmp_path / "pred.jsonl"
    assert cli.main(["eval", "data/real/manifest.jsonl", "--model", "demo-ctc", "--decoder", "beam", "--beam", "4",
                     "--nbest", "2", "--no-progress", "--batch-size", "4", "-o", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs and all(1 <= len(r["nbest"]) <= 2 and r["nbest"][0]["pred_text"] == r["pred_text"] for r in recs)
    capsys.readouterr()
    assert cli.main(["eval", "data/real/manifest.jsonl", "--model", "demo-ctc", "--decoder", "beam", "--nbest", "2",
                     "--no-progress"]) == 2
    assert "needs -o" in capsys.readouterr().err
    em = tmp_path / "x.pt"
    torch.save(torch.randn(2, 12, 6).log_softmax(-1), em)
    assert cli.main(["decode", str(em), "--blank-id", "0", "--decoder", "beam", "--nbest", "3", "--format",
                     "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert len(recs) == 2 and all(r["nbest"][0]["tokens"] == r["tokens"] for r in recs)
    assert cli.main(["decode", str(em), "--blank-id", "0", "--decoder", "beam", "--nbest", "3"]) == 2
    assert "--nbest 3 needs --format json" in capsys.readouterr().err
    vocab = load_bundle("demo-rnnt").tokenizer.vocab_size
    torch.save(torch.randn(1, 5, vocab).log_softmax(-1), em)
    assert cli.main(["decode", str(em), "--blank-id", "0", "--model", "demo-rnnt"]) == 2
    assert "reads CTC emissions" in capsys.readouterr().err


def test_engine_and_max_symbols_reach_the_search(capsys) -> None:
    from asrdecode import transducer
    from asrdecode.audio import read_audio

    texts = []
    for engine in ("torch", "auto"):
        assert cli.main(["transcribe", CLIP, "--model", "demo-rnnt", "--decoder", "beam", "--beam", "2",
                         "--engine", engine, "--format", "json"]) == 0
        texts.append(json.loads(capsys.readouterr().out)["text"])
    assert texts[0] == texts[1]
    rnnt = load_bundle("demo-rnnt")
    with torch.inference_mode():
        enc, n = rnnt.encode([read_audio(CLIP)])
        want = transducer.greedy(rnnt.model, enc, n, max_symbols=1, tokenizer=rnnt.tokenizer)[0]
    assert cli.main(["transcribe", CLIP, "--model", "demo-rnnt", "--max-symbols", "1", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in rec["tokens"]] == want.tokens
    pipe = make_pipeline(rnnt, resolve_options(rnnt, {"decoder": "beam", "max_symbols": 1, "beam": 2}))
    with torch.inference_mode():
        got = pipe.decode(enc, n)[0]
        ref = transducer.beam_search(rnnt.model, enc, n, beam=2, max_symbols=1)[0][0]
    assert got.tokens == ref.tokens


# ----------------------------------------------------------------------------- resolution, property
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALUES = {"beam": st.integers(1, 16), "method": st.sampled_from(registry.METHODS), "window": st.integers(1, 9),
           "expansion_gamma": st.floats(0, 5), "max_symbols": st.integers(1, 12), "lm": st.just("lm.arpa"),
           "lm_weight": st.floats(-2, 2), "beta": st.floats(-2, 4), "word_lm": st.just("words.arpa"),
           "word_lm_weight": st.floats(0, 2), "word_bonus": st.floats(-1, 3), "boost": st.just(("a b:2",)),
           "graph": st.just("g.pt"), "acoustic_scale": st.floats(0.1, 4), "wfst_beam": st.floats(0.5, 30),
           "max_active": st.integers(1, 5000), "min_active": st.integers(0, 50),
           "engine": st.sampled_from(registry.ENGINES), "nbest": st.integers(1, 5),
           "compat": st.sampled_from(registry.COMPATS)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(registry.KINDS), tuned=st.dictionaries(st.sampled_from(sorted(_VALUES)), st.none(),
                                                                    max_size=6),
       chosen=st.data())
def test_resolution_never_applies_what_does_not_fit(kind, tuned, chosen) -> None:
    """Whatever the user and the bundle give: the result keeps every given value, drops or refuses
    what does not fit, and passes the registry's own check (every set option applies, with what it needs)."""
    decoder = chosen.draw(st.sampled_from([*registry.decoder_names([kind]), None, "wfst"]))
    taken = registry.decoder_for(decoder or "greedy", kind).options if decoder in DECODER_NAMES[kind] else ()
    pool = st.sampled_from(sorted(taken)) if taken else st.sampled_from(sorted(_VALUES))
    given_keys = chosen.draw(st.lists(st.one_of(pool, pool, pool, st.sampled_from(sorted(_VALUES))), min_size=1, max_size=4,
                                      unique=True))
    given = {k: chosen.draw(_VALUES[k]) for k in given_keys}
    bundle = bundle_double.DoubleBundle(kind)
    bundle.decode_defaults = {k: chosen.draw(_VALUES[k]) for k in tuned} | (
        {"decoder": chosen.draw(st.sampled_from(registry.decoder_names([kind])))} if tuned else {})
    try:
        opts = resolve_options(bundle, {"decoder": decoder, **given})
    except DecodingInputError as err:
        assert "--" in str(err) or "decoder" in str(err)  # named
        return
    dec = registry.check_options(kind, opts)  # every non-default value applies and has its requirement
    assert all(getattr(opts, k) == (tuple(v) if isinstance(v, list) else v) for k, v in given.items())
    assert set(given) <= set(dec.options)
    for key, value in bundle.decode_defaults.items():  # a tuned value is either applied or not set
        if key != "decoder" and key not in given:
            assert getattr(opts, key) in (value, OPTION[key].default)


def test_docs_table_lists_every_option() -> None:
    text = (Path(__file__).parents[2] / "docs" / "decoders.md").read_text()
    assert all(f"| `{o.flag}` |" in text for o in OPTIONS)


def test_make_pipeline_takes_decode_options_only() -> None:
    with pytest.raises(DecodingInputError, match="options must be DecodeOptions, got dict"):
        make_pipeline(bundle_double.ctc_bundle(), {"decoder": "beam"})


def test_compat_sherpa_beam_defaults_to_sherpa_onnx_beam() -> None:
    """--compat sherpa --decoder beam without --beam keeps sherpa-onnx's 4 paths (its default), a given
    --beam wins, and without the preset the beam is ours (8)."""
    def beam(given: dict) -> int:
        return resolve_options(None, given, kind="rnnt").beam

    assert registry.COMPAT_DEFAULTS["sherpa"] == {"beam": 4}
    assert beam({"decoder": "beam", "compat": "sherpa"}) == 4
    assert beam({"decoder": "beam", "compat": "sherpa", "beam": 6}) == 6
    assert beam({"decoder": "beam"}) == beam({"decoder": "beam", "compat": "none"}) == OPTION["beam"].default == 8
