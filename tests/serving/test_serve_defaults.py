"""`serve` decodes a model the way the offline commands do: the CLI's default model, and the bundle's
decode_defaults (decoder, graph, acoustic scale, beams) unless told otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("kaldifst")
pytest.importorskip("starlette")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers

import bundle_double  # noqa: E402

from asrdecode import cli  # noqa: E402
from asrdecode.ctc.wfst import DecodingGraph, build_tlg  # noqa: E402
from asrdecode.lm import ArpaModel  # noqa: E402
from asrdecode.models import default_model  # noqa: E402
from asrdecode.serving import server  # noqa: E402
from asrdecode.serving.server import ServerConfig, bundle_decoding  # noqa: E402

WORDS = {"bad": [2, 1, 4], "cab": [3, 1, 2], "ace": [1, 3, 5], "had": [8, 1, 4]}  # ids of bundle_double's letters


def _graph(tmp_path, name="g.pt") -> Path:
    d = {("<s>",): (-99.0, -0.3), ("</s>",): (-1.0, None)}
    for i, w in enumerate(WORDS):
        d[(w,)] = (-0.6 - 0.1 * i, -0.2)
    g = build_tlg(len(bundle_double.SYMBOLS), WORDS, ArpaModel.from_dict(d), topology="compact", blank_id=0)
    g.save(tmp_path / name)
    return tmp_path / name


class TunedDouble(bundle_double.DoubleBundle):
    """The CTC double with phone-ctc-like decode_defaults: WFST over a graph, tuned scale and beams."""

    def __init__(self, graph: Path) -> None:
        super().__init__("ctc")
        self.decode_defaults = {"decoder": "wfst", "graph": str(graph), "acoustic_scale": 1.3, "wfst_beam": 9.0,
                                "max_active": 77}


def test_no_decoder_means_the_bundle_defaults(tmp_path):
    bundle = TunedDouble(_graph(tmp_path))
    decoder, opts = bundle_decoding(bundle, None, {})
    assert decoder == "wfst" and isinstance(opts["graph"], DecodingGraph)
    assert opts["acoustic_scale"] == pytest.approx(1.3) and opts["beam"] == pytest.approx(9.0)
    assert opts["max_active"] == 77
    # naming the default decoder is the same; given options (registry names, as transcribe's) win
    decoder, opts = bundle_decoding(bundle, "wfst", {"wfst_beam": 5.0, "max_active": 9})
    assert decoder == "wfst" and opts["beam"] == 5.0 and opts["max_active"] == 9 and opts["acoustic_scale"] == 1.3
    # another graph file replaces the bundle's
    other = _graph(tmp_path, "other.pt")
    _, opts = bundle_decoding(bundle, None, {"graph": str(other)})
    assert isinstance(opts["graph"], DecodingGraph) and opts["graph"].num_states > 0
    # another decoder: none of the tuned WFST options; the registry's defaults (as transcribe's)
    assert bundle_decoding(bundle, "greedy", {}) == ("greedy", {})
    assert bundle_decoding(bundle, "beam", {"beam": 4}) == ("beam", {"beam": 4, "beta": 0.0, "engine": "auto",
                                                                     "fusion": []})
    # `beam` is the beam search's hypothesis count; the WFST score beam is wfst_beam
    with pytest.raises(ValueError, match="--wfst-beam"):
        bundle_decoding(bundle, "wfst", {"beam": 5.0})


def test_bundles_without_defaults_keep_greedy(tmp_path):
    plain = bundle_double.ctc_bundle()
    assert bundle_decoding(plain, None, {}) == ("greedy", {})
    decoder, opts = bundle_decoding(plain, "wfst", {"graph": str(_graph(tmp_path))})
    assert decoder == "wfst" and isinstance(opts["graph"], DecodingGraph)


def test_service_uses_the_defaults_and_reports_the_decoder(tmp_path, monkeypatch):
    graph = _graph(tmp_path)
    monkeypatch.setattr("asrdecode.models.load_bundle", lambda spec: TunedDouble(graph))
    svc = server.build_service(ServerConfig(model="tuned-double", warmup_seconds=0))
    assert svc.config.decoder == "wfst" and svc.health()["decoder"] == "wfst"
    dec = svc.decoder.family.decoder
    assert dec.acoustic_scale == pytest.approx(1.3) and dec.beam == pytest.approx(9.0) and dec.max_active == 77
    # the same words as the offline pipeline with the same options (the CLI's transcribe)
    from asrdecode.pipeline import DecodeOptions, make_pipeline

    wave = torch.sin(torch.arange(16000) * 0.3) * torch.linspace(0, 0.5, 16000)
    encode, decode = make_pipeline(TunedDouble(graph), DecodeOptions.for_bundle(TunedDouble(graph)))
    with torch.inference_mode():
        want = decode(*encode([wave]))[0]
        got = svc.decoder.offline(wave)
    assert [w for w, _, _ in got.words or []] == [w for w, _, _ in want.words or []]


def test_server_default_model_is_the_cli_default():
    assert ServerConfig().model == default_model()
    parser = cli.build_parser()
    args = parser.parse_args(["serve"])
    assert args.model == default_model() and args.decoder is None


def test_cli_serve_wfst_without_a_graph(monkeypatch, capsys):
    # a model with no graph of its own still needs --graph for --decoder wfst
    monkeypatch.setattr("asrdecode.models.load_bundle", lambda spec, **kw: bundle_double.ctc_bundle())
    monkeypatch.setattr(server, "bind_socket", lambda *a: pytest.fail("must fail before binding"))
    assert cli.main(["serve", "--model", "x", "--decoder", "wfst"]) == 2
    assert "needs --graph" in capsys.readouterr().err
    # --beam with no --decoder is read for the model's default decoder (greedy here: refused)
    assert cli.main(["serve", "--model", "x", "--beam", "4"]) == 2
    assert "--beam does not apply to --decoder greedy" in capsys.readouterr().err
