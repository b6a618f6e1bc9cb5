"""One config per search: every default written once.

Walks every config (each field a checked setting with help) and every entry point's signature: the
one-shot functions, decoder classes and oracles (their setting parameters are the config's fields,
with the config's defaults), the CLI's decoding and serve flags, the server's and Ray's resolved
options, and the Python DecodeOptions; plus the streaming Protocols at run time."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

import asrdecode  # noqa: E402
from asrdecode import configs, ctc, registry, transducer  # noqa: E402
from asrdecode.configs import (CTCBeamConfig, SearchConfig, TransducerBeamConfig, TransducerGreedyConfig,  # noqa: E402
                               UnknownSettingError, WFSTConfig)
from asrdecode.ctc.wfst import WFSTDecoder  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.models import sherpa_nemo_search, sherpa_search  # noqa: E402
from asrdecode.registry import OPTION, DecodeOptions  # noqa: E402

#: every search entry point and the config whose fields it takes
ENTRY_POINTS = [
    (ctc.CTCGreedyDecoder, configs.CTCGreedyConfig),
    (ctc.CTCBeamDecoder, CTCBeamConfig), (ctc.beam_search, CTCBeamConfig), (ctc.initial_beam_state, CTCBeamConfig),
    (ctc.reference_beam_search, CTCBeamConfig),
    (transducer.GreedyDecoder, TransducerGreedyConfig), (transducer.greedy, TransducerGreedyConfig),
    (transducer.BeamSearchDecoder, TransducerBeamConfig), (transducer.beam_search, TransducerBeamConfig),
    (transducer.initial_beam_state, TransducerBeamConfig), (transducer.reference_beam_search, TransducerBeamConfig),
    (transducer.reference_wind_beam_search, TransducerBeamConfig),
    (WFSTDecoder, WFSTConfig),
    (sherpa_search.modified_beam_search, configs.SherpaModifiedBeamConfig),
    (sherpa_nemo_search.nemo_beam_search, configs.SherpaNemoBeamConfig),
]
ALL_CONFIGS = sorted({c for c in vars(configs).values() if isinstance(c, type) and issubclass(c, SearchConfig)
                      and c is not SearchConfig}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cfg", ALL_CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_is_one_checked_setting(cfg) -> None:
    made = cfg()  # the defaults pass their own checks
    assert dataclasses.is_dataclass(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.__setattr__("x", 1)
    for name, setting, default in cfg.settings():
        assert setting.help and setting.kind in ("int", "float", "str", "bool", "path", "phrases", "any"), name
        assert setting.validate(name, default) == default, name
        if setting.choices:
            assert default is None or default in setting.choices, name
            with pytest.raises(DecodingInputError, match=name):
                cfg(**{name: "no-such-choice"})
    with pytest.raises(UnknownSettingError, match="no_such_setting"):
        cfg.build(None, {"no_such_setting": 1})


@pytest.mark.parametrize("entry, cfg", ENTRY_POINTS, ids=lambda e: getattr(e, "__qualname__", ""))
def test_every_entry_point_takes_the_config_fields_with_their_defaults(entry, cfg) -> None:
    params = inspect.signature(entry).parameters
    assert "config" in params and params["config"].default is None
    for name, _, default in cfg.settings():
        assert name in params, (entry, name)
        assert params[name].default == default or (params[name].default is None is default), (entry, name)
        assert params[name].kind == inspect.Parameter.KEYWORD_ONLY, (entry, name)


def test_the_signature_is_what_the_call_does() -> None:
    """A setting left out is the config's default; config= and keywords combine; unknown keywords are named."""
    x = torch.randn(2, 6, 5).log_softmax(-1)
    dec = ctc.CTCBeamDecoder(0)
    assert dec.config == CTCBeamConfig() and dec.config.beam == 8
    assert ctc.CTCBeamDecoder(0, config=CTCBeamConfig(beam=3), nbest=2).config == CTCBeamConfig(beam=3, nbest=2)
    a = ctc.beam_search(x, None, 0, config=CTCBeamConfig(beam=3, nbest=2))
    b = ctc.beam_search(x, None, 0, beam=3, nbest=2)
    assert [[h.tokens for h in r] for r in a] == [[h.tokens for h in r] for r in b]
    with pytest.raises(UnknownSettingError, match="beam_size"):
        ctc.beam_search(x, None, 0, beam_size=4)
    with pytest.raises(TypeError):  # an unknown keyword is a TypeError too, as Python's own
        ctc.CTCBeamDecoder(0, beam_size=4)
    with pytest.raises(DecodingInputError, match="config must be a CTCBeamConfig"):
        ctc.CTCBeamDecoder(0, config=WFSTConfig())
    oracle = inspect.signature(transducer.reference_greedy).parameters  # the greedy oracle: its one setting
    assert oracle["config"].default is None and oracle["max_symbols"].default == TransducerGreedyConfig().max_symbols


def test_shared_settings_are_declared_once() -> None:
    """beam, nbest, beta, max_symbols, engine: one field object each, inherited by the searches that take them."""
    owners: dict[str, set[type]] = {}
    for cfg in ALL_CONFIGS:
        for f in dataclasses.fields(cfg):
            declared = next(c for c in cfg.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
            owners.setdefault(f.name, set()).add(declared)
    for name in ("beam", "nbest", "beta", "max_symbols", "engine", "acceleration", "boost"):
        # WFST's beam is the score beam (--wfst-beam); sherpa-onnx's searches keep sherpa-onnx's own values
        # (beam 4, its NeMo search's fixed cap of 10 labels a frame)
        mine = {c for c in owners[name] if c is not WFSTConfig and not c.__name__.startswith("Sherpa")}
        assert len(mine) == 1, (name, mine)


def test_decode_options_defaults_are_the_configs() -> None:
    """DecodeOptions' field for each registry option has the configs' default (None where they differ)."""
    fields = {f.name: f.default for f in dataclasses.fields(DecodeOptions)}
    assert list(fields) == ["decoder", *(o.name for o in registry.OPTIONS)]
    for o in registry.OPTIONS:
        assert fields[o.name] == o.default, o.name
    for d in registry.DECODERS:  # what each search gets from default options: its config's defaults
        settings = DecodeOptions(decoder=d.name).settings(d.config)
        want = {n: dflt for n, s, dflt in d.config.settings() if s.cli}
        assert settings == want, d.name
    assert OPTION["window"].default is None  # each search's own, both named in --help
    assert "greedy: 1" in OPTION["window"].help and "beam: 8" in OPTION["window"].help


def test_cli_flags_come_from_the_configs(capsys) -> None:
    from asrdecode import cli

    parse = cli.build_parser().parse_args
    for argv in (["transcribe", "x.wav"], ["eval", "m.jsonl"], ["serve"], ["transcribe-dataset", "m.jsonl", "out"]):
        args = parse(argv)
        for o in registry.OPTIONS:  # unset: the model's tuned value or the config's default applies
            assert getattr(args, o.name, None) in (None, []), (argv, o.name)
        assert cli.decode_options(parse([*argv, "--model", "demo-ctc"]), None) == DecodeOptions()
    with pytest.raises(SystemExit):
        cli.main(["transcribe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 8)" in text and "(default: the model's tuned value, else 1.0)" in text


def test_serve_flags_come_from_the_settings() -> None:
    pytest.importorskip("starlette")
    from asrdecode import cli
    from asrdecode.serving import server
    from asrdecode.serving.protocol import Limits
    from asrdecode.serving.settings import ServerConfig, TranscriptionConfig

    args = cli.build_parser().parse_args(["serve", "--model", "demo-ctc"])
    cfg = cli._server_config(args, server)
    plain = ServerConfig(model="demo-ctc")
    for f in dataclasses.fields(ServerConfig):
        if f.name not in ("decoder_options", "limits"):
            assert getattr(cfg, f.name) == getattr(plain, f.name), f.name
    assert cfg.limits == Limits()
    assert cli._settings_of(args, TranscriptionConfig) == {"max_upload_mb": 25.0, "max_audio_seconds": 3600.0,
                                                           "long_audio_seconds": 60.0}
    assert args.max_queue == ServerConfig().max_pending and args.drain_timeout == ServerConfig().drain_timeout_s


def test_library_and_cli_defaults_agree() -> None:
    """The changelog's changes: one beam (8), one acoustic scale (1.0; demo-ctc tunes 2.0), one cap (10)."""
    assert CTCBeamConfig().beam == TransducerBeamConfig().beam == OPTION["beam"].default == 8
    assert WFSTConfig().acoustic_scale == OPTION["acoustic_scale"].default == 1.0
    assert TransducerGreedyConfig().max_symbols == TransducerBeamConfig().max_symbols == 10
    assert registry.COMPAT_DEFAULTS["sherpa"]["beam"] == configs.SherpaModifiedBeamConfig().beam == 4  # sherpa-onnx's
    assert inspect.signature(WFSTDecoder).parameters["acoustic_scale"].default == 1.0


def test_streaming_protocols_at_run_time() -> None:
    """Every registry decoder class has the StreamingDecoder methods; streams joined into one batch per chunk
    and split back end where whole-utterance decoding ends (CTC greedy and beam)."""
    from asrdecode.protocols import StreamingDecoder, StreamState

    protocol = {m for m in vars(StreamingDecoder) if not m.startswith("_")}
    assert protocol == {"init_state", "advance", "partial", "finalize", "decode"}
    for d in registry.DECODERS:
        for method in protocol:
            assert callable(getattr(d.decoder, method, None)), (d.decoder, method)
    for state in (ctc.CTCGreedyState, ctc.CTCBeamState, transducer.BeamState, __import__(
            "asrdecode.ctc.wfst", fromlist=["WFSTStreamState"]).WFSTStreamState):
        for method in {m for m in vars(StreamState) if not m.startswith("_")}:
            assert callable(getattr(state, method, None)), (state, method)
    x = torch.randn(3, 7, 5).log_softmax(-1)
    for dec in (ctc.CTCGreedyDecoder(0), ctc.CTCBeamDecoder(0, vocab_size=5, nbest=2)):
        whole = dec.decode(x)
        streams = [dec.init_state(1) for _ in range(3)]
        for a, z in ((0, 3), (3, 3), (3, 7)):
            parts = {"template": dec.init_state(3)} if isinstance(dec, ctc.CTCBeamDecoder) else {}
            batch = type(streams[0]).join(streams, **parts)
            dec.advance(batch, x[:, a:z]).split_into(streams)
        for stream, want in zip(streams, whole):
            got = dec.finalize(stream)[0]
            for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
                assert g.tokens == w.tokens and g.timestamps == w.timestamps
                assert g.score == pytest.approx(w.score, abs=1e-4)


def test_every_module_imports_and_no_literal_cap() -> None:
    """Every module imports; no signature in the package spells max_symbols' default as a literal other than
    the config's (sherpa-onnx's own NeMo cap excepted)."""
    want = TransducerGreedyConfig().max_symbols
    for info in pkgutil.walk_packages(asrdecode.__path__, "asrdecode."):
        if info.name.startswith(("asrdecode.serving", "asrdecode.distributed", "asrdecode.models.hf_ctc",
                                 "asrdecode.models.nemo")) or info.name.endswith("__main__"):
            continue  # optional extras
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra not installed here
            continue
        for obj in vars(mod).values():
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or getattr(obj, "__module__", "") != info.name:
                continue
            if "nemo" in info.name:
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            p = params.get("max_symbols")
            if p is not None and p.default is not inspect.Parameter.empty:
                assert p.default == want, (info.name, obj)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]], ids=["rnnt", "tdt"])
def test_transducer_greedy_states_join_and_split(durations) -> None:
    """GreedyState follows StreamState too: streams joined per chunk (their prediction states pooled outside,
    as the streaming family keeps them) end where whole-utterance greedy decoding ends."""
    from transducer_models import random_model

    from asrdecode.streaming.state_batching import StatePool

    model = random_model(3, 7, 0, durations)
    enc = torch.randn(3, 11, 5, dtype=torch.float64)
    dec = transducer.GreedyDecoder(model, engine="torch")
    whole = dec.decode(enc)
    pool = StatePool(model, 1)
    streams, slots = [], []
    for _ in range(3):
        st = dec.init_state(1, dtype=torch.float64)
        slots.append(pool.add(st.pred_state))
        streams.append(st)
    for a, z in ((0, 4), (4, 4), (4, 11)):
        batch = transducer.GreedyState.join(streams, pred_state=pool.gather(slots))
        pool.scatter(slots, dec.advance(batch, enc[:, a:z]).split_into(streams))
    assert all(st.pred_state is None for st in streams)  # the pool holds them
    for st, want in zip(streams, whole):
        got = dec.partial(st)[0]
        assert got.tokens == want.tokens and got.timestamps == want.timestamps
        assert got.durations == want.durations and got.score == pytest.approx(want.score, abs=1e-9)
    with pytest.raises(DecodingInputError, match="pred_state"):
        transducer.GreedyState.join(streams)
