"""The app layer's contracts: ModelBundle loading, DecodeOptions, make_pipeline, and no import circle.

A test double (``tests/bundle_double.py``, no bundled-model code) goes through ``transcribe`` and
``eval`` here; ``serve`` (``loadtest --spawn``) and ``transcribe-dataset`` (Ray) are in
test_server.py / test_distributed.py.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
import torch

import bundle_double
from asrdecode import ctc, transducer
from asrdecode.errors import DecodingInputError
from asrdecode.models import ModelBundle, check_bundle, load_bundle
from asrdecode.pipeline import DECODER_NAMES, DecodeOptions, make_pipeline, parse_boost

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "asrdecode"
CLIPS = [ROOT / "data/real/cards-001.wav", ROOT / "data/real/cards-003.wav"]


def _waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    return [read_audio(c) for c in CLIPS]


# ------------------------------------------------------------------------------------- load_bundle
def test_load_bundle_specs() -> None:
    demo = load_bundle("demo-ctc")
    assert isinstance(demo, ModelBundle) and demo.kind == "ctc" and demo.encoder_dim > 0
    double = load_bundle("bundle_double:ctc_bundle")
    assert isinstance(double, bundle_double.DoubleBundle) and double.kind == "ctc"
    assert load_bundle("bundle_double:rnnt_bundle").kind == "rnnt"


@pytest.mark.parametrize("spec, match", [
    ("demo-xyz", "expected a bundled model name"),
    ("", "non-empty string"),
    ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
    ("bundle_double:no_such_factory", "has no attribute 'no_such_factory'"),
    ("bundle_double:SYMBOLS", "is not a ModelBundle"),
    ("missing-model.nemo", "no such NeMo checkpoint"),
])
def test_load_bundle_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(DecodingInputError, match=match):
        load_bundle(spec)


def test_check_bundle_names_what_is_wrong() -> None:
    b = bundle_double.ctc_bundle()
    b.kind = "hmm"
    with pytest.raises(DecodingInputError, match="kind must be one of"):
        check_bundle(b)
    b = bundle_double.ctc_bundle()
    b.frame_seconds = 0.0
    with pytest.raises(DecodingInputError, match="frame_seconds"):
        check_bundle(b)
    b = bundle_double.ctc_bundle()
    b.tokenizer = type("T", (), {"vocab_size": 3})()
    with pytest.raises(DecodingInputError, match="tokenizer has 3 ids"):
        check_bundle(b)
    b = bundle_double.rnnt_bundle()
    b.model = bundle_double._Head(8, 10)
    with pytest.raises(DecodingInputError, match="TransducerModel"):
        check_bundle(b)


# ------------------------------------------------------------------------------------ DecodeOptions
@pytest.mark.parametrize("kw, match", [
    ({"decoder": "viterbi"}, "decoder must be one of"),
    ({"beam": 0}, "--beam must be an int >= 1"),
    ({"window": True}, "--window must be an int >= 1"),
    ({"max_symbols": 0}, "--max-symbols must be an int >= 1"),
    ({"nbest": 1.5}, "--nbest must be an int >= 1"),
    ({"engine": "gpu"}, "--engine must be one of"),
    ({"expansion_gamma": -0.5}, "--expansion-gamma must be a finite number >= 0"),
    ({"expansion_gamma": math.nan}, "--expansion-gamma must be a finite number >= 0"),
    ({"method": "mbr"}, "--method must be one of"),
    ({"lm_weight": math.nan}, "--lm-weight must be a finite number"),
    ({"beta": math.inf}, "--beta must be a finite number"),
    ({"acoustic_scale": 0.0}, "--acoustic-scale must be a finite number > 0"),
    ({"boost": [3]}, "boost must be a list"),
    ({"lm": 3}, "--lm must be a path"),
])
def test_decode_options_reject_bad_values(kw: dict, match: str) -> None:
    with pytest.raises(DecodingInputError, match=match):
        DecodeOptions(**kw)


def test_decode_options_from_mapping() -> None:
    opts = DecodeOptions.from_mapping("beam", {"beam": 4, "lm": Path("x.arpa"), "boost": ["a b:2"]})
    assert opts.beam == 4 and opts.lm == "x.arpa" and opts.boost == ("a b:2",)
    assert opts.changed() == {"beam": 4, "lm": "x.arpa", "boost": ["a b:2"]}
    with pytest.raises(DecodingInputError, match="unknown key 'beam_size'"):
        DecodeOptions.from_mapping("beam", {"beam_size": 4})
    with pytest.raises(DecodingInputError, match=r"decoder_options\['beam'\] \(the CLI's --beam\) must be int"):
        DecodeOptions.from_mapping("beam", {"beam": 4.0})
    with pytest.raises(DecodingInputError, match="finite"):
        parse_boost("word:nan")
    assert parse_boost("two words") == ("two words", 1.0)


# ----------------------------------------------------------------------------------- make_pipeline
@torch.no_grad()
def test_pipeline_of_a_foreign_ctc_bundle_equals_the_decoders() -> None:
    b = bundle_double.ctc_bundle()
    waves = _waves()
    feats, flen = b.features(waves)
    enc, elen = b.encode_features(feats, flen)
    logp = b.model.log_probs_from_encoder(enc)
    encode, decode = make_pipeline(b, DecodeOptions())
    x, n = encode(waves)
    torch.testing.assert_close(x, logp)
    assert [h.tokens for h in decode(x, n)] == [h.tokens for h in ctc.greedy(logp, elen, 0)]
    _, decode = make_pipeline(b, DecodeOptions(decoder="beam", beam=4))
    ref = ctc.beam_search(logp, elen, 0, beam=4)
    assert [h.tokens for h in decode(x, n)] == [r[0].tokens for r in ref]


@torch.no_grad()
def test_pipeline_of_a_foreign_transducer_bundle() -> None:
    b = bundle_double.rnnt_bundle()
    waves = _waves()
    encode, decode = make_pipeline(b, DecodeOptions(decoder="beam", beam=3, method="aes"))
    enc, n = encode(waves)
    want = transducer.beam_search(b.model, enc, n, beam=3, method="aes")
    want = [w[0] if isinstance(w, list) else w for w in want]
    assert [h.tokens for h in decode(enc, n)] == [w.tokens for w in want]


@pytest.mark.parametrize("kind, opts, match", [
    ("rnnt", DecodeOptions(decoder="wfst"), "does not apply to a rnnt model"),
    ("ctc", DecodeOptions(window=4), "--window does not apply to --decoder greedy of a ctc model"),
    ("ctc", DecodeOptions(decoder="beam", method="aes"), "--method does not apply to --decoder beam of a ctc"),
    ("rnnt", DecodeOptions(decoder="beam", window=4), "needs --method wind"),
    ("rnnt", DecodeOptions(decoder="beam", expansion_gamma=1.0), "--expansion-gamma needs --method wind"),
    ("ctc", DecodeOptions(decoder="beam", expansion_gamma=1.0), "--expansion-gamma does not apply"),
    ("ctc", DecodeOptions(decoder="wfst"), "needs --graph"),
    ("ctc", DecodeOptions(decoder="beam", lm="x.arpa"), "no such LM file"),
    ("ctc", DecodeOptions(lm="x.arpa"), "--lm does not apply to --decoder greedy"),
    ("rnnt", DecodeOptions(decoder="beam", beta=1.0), "--beta needs --lm or --word-lm"),
    ("ctc", DecodeOptions(decoder="beam", lm_weight=0.2), "--lm-weight needs --lm"),
    ("rnnt", DecodeOptions(max_symbols=3, decoder="beam", nbest=2, engine="torch"), None),
])
def test_pipeline_rejects_what_does_not_fit_the_model(kind: str, opts: DecodeOptions, match: str) -> None:
    if match is None:  # fits: builds
        make_pipeline(bundle_double.DoubleBundle(kind), opts)
        return
    with pytest.raises(ValueError, match=match):
        make_pipeline(bundle_double.DoubleBundle(kind), opts)


def test_decoder_table_covers_every_kind() -> None:
    assert set(DECODER_NAMES) == {"ctc", "rnnt", "tdt"}
    from asrdecode import registry
    from asrdecode.streaming.families import FAMILIES

    assert {d.decoder for d in registry.DECODERS} == set(FAMILIES)  # every search streams, found by its class


# ------------------------------------------------------------------------------------- CLI, foreign
def test_cli_transcribe_and_eval_a_foreign_bundle(capsys, tmp_path) -> None:
    from asrdecode import cli

    assert cli.main(["transcribe", *map(str, CLIPS), "--model", "bundle_double:ctc_bundle", "--decoder", "beam",
                     "--beam", "4", "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    b = bundle_double.ctc_bundle()
    encode, decode = make_pipeline(b, DecodeOptions(decoder="beam", beam=4))
    want = decode(*encode(_waves()))
    assert [r["text"] for r in recs] == [h.text for h in want]
    assert [[t["id"] for t in r["tokens"]] for r in recs] == [h.tokens for h in want]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(c), "duration": 1.0, "text": "ten of clubs"}) + "\n"
                                for c in CLIPS))
    out = tmp_path / "pred.jsonl"
    assert cli.main(["eval", str(manifest), "--model", "bundle_double:rnnt_bundle", "--no-progress",
                     "-o", str(out)]) == 0
    assert "WER" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 2
    assert cli.main(["transcribe", str(CLIPS[0]), "--model", "bundle_double:nothing"]) == 2
    assert "has no attribute 'nothing'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- structure
def _imports(path: Path, package: str) -> set[str]:
    """Modules of the package that ``path`` imports at run time (relative and absolute imports; the
    annotations-only imports under ``if TYPE_CHECKING:`` are not imports at run time)."""
    out = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _module_graph() -> dict[str, set[str]]:
    mods = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    graph = {}
    for name, p in mods.items():
        if p.name == "__init__.py":
            continue
        package = name.rsplit(".", 1)[0]
        graph[name] = {m for m in _imports(p, package) if m in mods and m != name and mods[m].name != "__init__.py"}
    return graph


def test_no_import_circle_and_nothing_imports_the_cli() -> None:
    graph = _module_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert [m for m in graph if m in reach(m)] == []
    assert [m for m, deps in graph.items() if "asrdecode.cli" in deps] == []
    # the layers: nothing below the pipeline imports the app layer
    app = {"asrdecode.pipeline", "asrdecode.distributed", "asrdecode.cli", "asrdecode.demo", "asrdecode.bench"}
    core = [m for m in graph if m.split(".")[1] in ("ctc", "transducer", "lm", "fusion", "models", "records")]
    assert [m for m in core if graph[m] & app] == []
    assert not any(m.startswith("asrdecode.serving") for m in reach("asrdecode.pipeline"))


def test_bundle_decode_defaults_sit_between_the_library_defaults_and_the_user() -> None:
    from asrdecode import cli

    rnnt = load_bundle("demo-rnnt")
    # the tuned LM weight applies with an LM only (decode_defaults never apply where they do not fit)
    assert DecodeOptions.for_bundle(rnnt).lm_weight == pytest.approx(DecodeOptions().lm_weight)
    assert DecodeOptions.for_bundle(rnnt, decoder="beam", lm="x.arpa").lm_weight == pytest.approx(0.5)
    assert DecodeOptions.for_bundle(rnnt, decoder="beam", lm="x", lm_weight=0.9, beta=None).lm_weight == \
        pytest.approx(0.9)
    assert DecodeOptions.for_bundle(None).lm_weight == pytest.approx(DecodeOptions().lm_weight)
    args = cli.build_parser().parse_args(["transcribe", "x.wav", "--model", "demo-tdt", "--decoder", "beam",
                                          "--lm", "x.arpa", "--beta", "0.25"])
    opts = cli.decode_options(args, load_bundle("demo-tdt"))
    assert (opts.lm_weight, opts.beta, opts.decoder, opts.beam) == (pytest.approx(0.3), 0.25, "beam", 8)
    b = bundle_double.ctc_bundle()
    b.decode_defaults = {"decoder": "beam", "beam": 3}
    assert DecodeOptions.for_bundle(b).beam == 3 and DecodeOptions.for_bundle(b, decoder="greedy").decoder == "greedy"
    b.decode_defaults = {"beam_size": 3}
    with pytest.raises(DecodingInputError, match="unknown option"):
        DecodeOptions.for_bundle(b)
