"""Hostile inputs (issue 30): every case gives a result or a named error, never a crash, a hang,
foreign code run, or a silent wrong answer. Each test has a timeout: a hang fails it."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)  # generous: the machine is shared; a hang still fails


# -- Hugging Face model folders: foreign code and vocabularies ---------------------------------------

_EVIL = '''
from pathlib import Path
Path({marker!r}).write_text("ran")
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC
class EvilConfig(Wav2Vec2Config):
    model_type = "evil"
class EvilForCTC(Wav2Vec2ForCTC):
    config_class = EvilConfig
'''


@pytest.fixture()
def hf_copy(tmp_path):
    pytest.importorskip("transformers")
    from onramp_models import cached_hf_ctc

    out = tmp_path / "model"
    shutil.copytree(cached_hf_ctc(), out)
    return out


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def _plant_remote_code(folder: Path, marker: Path) -> None:
    (folder / "evil.py").write_text(_EVIL.format(marker=str(marker)), encoding="utf-8")
    _edit_json(folder / "config.json", model_type="evil",
               auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCTC": "evil.EvilForCTC"})


def test_auto_map_folder_is_refused_and_its_code_never_runs(hf_copy, tmp_path) -> None:
    from asrdecode.models import load_bundle
    from asrdecode.models.hf_ctc import RemoteCodeError

    marker = tmp_path / "marker"
    _plant_remote_code(hf_copy, marker)
    with pytest.raises(RemoteCodeError, match="auto_map"):
        load_bundle(str(hf_copy))
    assert not marker.exists()


def test_transformers_is_told_not_to_trust_remote_code(hf_copy, tmp_path, monkeypatch) -> None:
    """Even past the folder check, transformers gets trust_remote_code=False: an error, no prompt, no code."""
    from asrdecode.errors import FileFormatError
    from asrdecode.models import hf_ctc

    marker = tmp_path / "marker"
    _plant_remote_code(hf_copy, marker)
    monkeypatch.setattr(hf_ctc, "_refuse_remote_code", lambda path: None)
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers prompted"))
    with pytest.raises(FileFormatError):
        hf_ctc.load_hf_ctc(str(hf_copy))
    assert not marker.exists()


@pytest.mark.parametrize("vocab, match", [
    ({}, "empty"),
    ({"<pad>": 0, "A": 1, "B": 1}, "share the id"),
    ({"<pad>": "0", "A": "1"}, "expected an integer"),
    ({"<pad>": 0, "A": 1.5}, "expected an integer"),
])
def test_bad_hf_vocabularies_are_named_errors(hf_copy, vocab, match) -> None:
    from asrdecode.errors import FileFormatError
    from asrdecode.models import load_bundle

    (hf_copy / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(FileFormatError, match=match):
        load_bundle(str(hf_copy))


def test_a_vocabulary_of_specials_only_is_refused(hf_copy) -> None:
    from asrdecode.errors import FileFormatError
    from asrdecode.models import load_bundle

    (hf_copy / "vocab.json").write_text(json.dumps({"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}),
                                        encoding="utf-8")
    with pytest.raises(FileFormatError, match="spells text"):
        load_bundle(str(hf_copy))


# -- weights, bonuses, scales: finite and within MAX_ABS_WEIGHT -------------------------------------

HUGE = [1e308, -1e308, 1e5, float("nan"), float("inf")]


@pytest.mark.parametrize("value", HUGE)
def test_check_weight_refuses_huge_and_non_finite(value) -> None:
    from asrdecode.errors import MAX_ABS_WEIGHT, DecodingInputError, check_weight

    with pytest.raises(DecodingInputError, match="w must be a finite number"):
        check_weight("w", value)
    assert check_weight("w", MAX_ABS_WEIGHT) == pytest.approx(MAX_ABS_WEIGHT)
    assert check_weight("w", -2.5) == pytest.approx(-2.5)


@pytest.mark.parametrize("value", [1e308, -1e308])
def test_ctc_beam_huge_weight_and_beta(value) -> None:
    from asrdecode import ctc
    from asrdecode.errors import DecodingInputError
    from test_ctc_helpers import TableBigram, random_log_probs
    from transducer_models import FUSION_BLANK, FUSION_V

    x = random_log_probs(0, 2, 6, FUSION_V)
    lm = TableBigram(FUSION_V, FUSION_BLANK)
    with pytest.raises(DecodingInputError, match=r"fusion\[0\] weight"):
        ctc.beam_search(x, None, FUSION_BLANK, beam=4, fusion=[(lm, value)])
    with pytest.raises(DecodingInputError, match="beta"):
        ctc.beam_search(x, None, FUSION_BLANK, beam=4, beta=value)


@pytest.mark.parametrize("value", [1e308, -1e308])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_transducer_beam_huge_weight_and_beta(value, method) -> None:
    from asrdecode.errors import DecodingInputError
    from asrdecode.transducer import beam_search
    from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model, tiny_boosting_tree

    model = random_model(0, FUSION_V, FUSION_BLANK, None)
    enc = random_encoder(1, 2, 5)
    with pytest.raises(DecodingInputError, match=r"fusion\[0\] weight"):
        beam_search(model, enc, beam=3, method=method, fusion=[(tiny_boosting_tree(), value)])
    with pytest.raises(DecodingInputError, match="beta"):
        beam_search(model, enc, beam=3, method=method, beta=value)


# -- transducers: NaN / +inf logits from the joint, max_symbols ceiling ------------------------------


def _bad_joint_model(value: float, durations):
    from transducer_models import random_model

    model = random_model(0, 6, 0, durations)
    joint = model.joint

    def bad(enc, dec):
        out = joint(enc, dec).clone()
        out[..., 2] = value
        return out

    model.joint = bad
    return model


def _searches(durations):
    from asrdecode.native import _lib
    from asrdecode.transducer import beam_search, greedy

    out = [("labels", lambda m, e: greedy(m, e)), ("frames", lambda m, e: greedy(m, e, loop="frames"))]
    engines = ["torch"] + (["native"] if _lib.available() else [])
    for method in ["alsd", "aes"] + (["wind"] if durations is None else []):
        for engine in engines:
            out.append((f"{method}-{engine}", lambda m, e, method=method, engine=engine:
                        beam_search(m, e, beam=3, method=method, engine=engine)))
    return out


@pytest.mark.parametrize("durations", [None, [0, 1, 2]], ids=["rnnt", "tdt"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_joint_logits_are_a_named_error(value, durations) -> None:
    from asrdecode.transducer._checks import NonFiniteJointError
    from transducer_models import random_encoder

    model = _bad_joint_model(value, durations)
    enc = random_encoder(1, 2, 5)
    for _name, search in _searches(durations):
        with pytest.raises(NonFiniteJointError):
            search(model, enc)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]], ids=["rnnt", "tdt"])
def test_minus_inf_logits_are_a_mask_not_an_error(durations) -> None:
    """-inf in a label column is a legitimate mask: every search still returns hypotheses."""
    from transducer_models import random_encoder

    model = _bad_joint_model(-float("inf"), durations)
    enc = random_encoder(1, 2, 5)
    for name, search in _searches(durations):
        out = search(model, enc)
        assert len(out) == 2, name
        for row in out:
            hyps = row if isinstance(row, list) else [row]
            assert hyps and all(2 not in h.tokens for h in hyps), name


@pytest.mark.parametrize("value", [10**9, 1001])
def test_max_symbols_ceiling(value) -> None:
    from asrdecode.errors import DecodingInputError
    from asrdecode.transducer import beam_search, greedy
    from asrdecode.transducer._checks import MAX_SYMBOLS_CEILING
    from transducer_models import random_encoder, random_model

    model = random_model(0, 6, 0, None)
    enc = random_encoder(1, 2, 5)
    with pytest.raises(DecodingInputError, match=f"max_symbols must be <= {MAX_SYMBOLS_CEILING}"):
        greedy(model, enc, max_symbols=value)
    with pytest.raises(DecodingInputError, match="max_symbols"):
        beam_search(model, enc, beam=2, max_symbols=value)
    assert len(greedy(model, enc, max_symbols=MAX_SYMBOLS_CEILING)) == 2


# -- output paths: probed before any decoding -----------------------------------------------------

UNWRITABLE = Path("/proc/asrdecode-out.json")
needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")


def test_check_output_path_probes_and_leaves_nothing(tmp_path) -> None:
    from asrdecode.paths import check_output_dir, check_output_path

    check_output_path(tmp_path / "out.json", "-o")
    assert list(tmp_path.iterdir()) == []
    assert check_output_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list((tmp_path / "a" / "b").iterdir()) == []


@needs_proc
def test_output_folder_that_only_looks_writable(tmp_path) -> None:
    from asrdecode.paths import OutputPathError, check_output_dir, check_output_path

    with pytest.raises(OutputPathError, match=r"-o /proc/asrdecode-out\.json: cannot write in the output folder /proc"):
        check_output_path(UNWRITABLE, "-o")
    with pytest.raises(OutputPathError, match="output_dir /proc/asrdecode-dir: cannot create"):
        check_output_dir("/proc/asrdecode-dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="is a file"):
        check_output_dir(tmp_path / "file")


@needs_proc
@pytest.mark.parametrize("command", ["transcribe", "eval"])
def test_cli_output_into_proc_fails_before_decoding(tmp_path, capsys, monkeypatch, command) -> None:
    from asrdecode import cli

    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the output path was checked")

    monkeypatch.setattr(cli, "_load_model", no_decoding)
    monkeypatch.setattr(cli, "make_pipeline", no_decoding)
    wav = Path(__file__).resolve().parents[2] / "data" / "real" / "cards-001.wav"
    if command == "transcribe":
        argv = ["transcribe", str(wav), "--model", "demo-ctc", "-o", str(UNWRITABLE)]
    else:
        m = tmp_path / "m.jsonl"
        m.write_text(json.dumps({"audio_filepath": str(wav), "duration": 1.0, "text": "x"}) + "\n")
        argv = ["eval", str(m), "--model", "demo-ctc", "-o", str(UNWRITABLE)]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot write in the output folder /proc" in captured.err


@needs_proc
def test_transcribe_dataset_output_dir_is_probed_before_decoding(tmp_path, monkeypatch) -> None:
    pytest.importorskip("ray")
    from asrdecode import distributed as dist
    from asrdecode.paths import OutputPathError

    wav = Path(__file__).resolve().parents[2] / "data" / "real" / "cards-001.wav"
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps({"audio_filepath": str(wav), "duration": 1.0, "text": "x"}) + "\n")
    monkeypatch.setattr(dist, "build_pipeline", lambda *a, **k: None)
    with pytest.raises(OutputPathError, match="output_dir /proc/asrdecode-run"):
        dist.transcribe_dataset(m, "/proc/asrdecode-run", model="demo-ctc")


# -- server: the connection cap per client address ----------------------------------------------------


def _connect_from(source: str, st) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((source, 0))
    s.connect((st.host, st.port))
    return s


def _refused(s, wait: float) -> bool:
    """Whether the server answered 503 (or closed) within ``wait`` seconds; a held socket stays silent."""
    s.settimeout(wait)
    try:
        data = s.recv(4096)
    except socket.timeout:
        return False
    return data == b"" or data.startswith(b"HTTP/1.1 503")


def test_one_client_cannot_take_every_connection_slot() -> None:
    """A client (127.0.0.2) opening many silent sockets holds at most max_connections_per_client of them;
    other clients still get the remaining slots and decode a stream."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("websockets")
    import asyncio

    import numpy as np

    from asrdecode.serving.protocol import encode_chunk
    from asrdecode.serving.server import ServerThread
    from test_server import cfg, make_service, raw_session

    svc = make_service(max_streams=4, max_connections=10, max_connections_per_client=3, handshake_timeout_s=30)
    with ServerThread(svc) as st:
        hostile = [_connect_from("127.0.0.2", st) for _ in range(12)]
        time.sleep(0.3)
        hostile_refused = sum(_refused(s, 0.5) for s in hostile)
        normal = [_connect_from(a, st) for a in ("127.0.0.1", "127.0.0.1", "127.0.0.3", "127.0.0.3", "127.0.0.3")]
        normal_refused = sum(_refused(s, 0.5) for s in normal)
        audio = (0.1 * np.sin(np.arange(8000) / 5.0)).astype(np.float32)
        msgs, code = asyncio.run(raw_session(st.url, [cfg(), encode_chunk(audio), json.dumps({"type": "end"})]))
        health = svc.health()
        for s in hostile + normal:
            s.close()
    assert hostile_refused == 9  # 12 tried, 3 held
    assert normal_refused == 0
    assert code == 1000 and msgs[-1]["type"] == "final"
    assert health["refused_connections"] == 9 and svc.connections.refused_per_client == 9


def test_default_per_client_cap_leaves_slots_for_others() -> None:
    """--max-streams 8 (16 connections) with the default per-client cap (32, clamped to 8): a client holding
    idle sockets gets 8 of them; the others still connect (3 of 30 probes were served before)."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("websockets")
    from asrdecode.serving.server import ServerThread
    from test_server import make_service

    svc = make_service(max_streams=8, handshake_timeout_s=30)
    assert svc.config.max_connections_per_client == 8
    with ServerThread(svc) as st:
        hostile = [_connect_from("127.0.0.2", st) for _ in range(20)]
        time.sleep(0.3)
        hostile_refused = sum(_refused(s, 0.5) for s in hostile)
        probes = [_connect_from("127.0.0.3", st) for _ in range(6)]
        probes_refused = sum(_refused(s, 0.3) for s in probes)
        for s in hostile + probes:
            s.close()
    assert hostile_refused == 12 and probes_refused == 0


def test_per_client_cap_config_checks(capsys) -> None:
    pytest.importorskip("uvicorn")
    from asrdecode import cli
    from asrdecode.serving.connections import guarded_http_protocol
    from asrdecode.serving.server import ServerConfig

    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_connections_per_client"):
            ServerConfig(max_connections_per_client=bad)
        with pytest.raises(ValueError, match="max_connections_per_client"):
            guarded_http_protocol(8, 1.0, None, bad)
    assert ServerConfig().max_connections_per_client == 32
    # clamped to half of max_connections (16 with max_streams 8): one address cannot take every slot
    assert ServerConfig(max_streams=8).max_connections_per_client == 8
    assert ServerConfig(max_streams=1, max_connections=1).max_connections_per_client == 1
    assert ServerConfig(max_streams=8, max_connections_per_client=3).max_connections_per_client == 3
    for bad in ("evil.example:80", "http://x", "a b", "", 5):
        with pytest.raises(ValueError, match="allowed_hosts"):
            ServerConfig(allowed_hosts=(bad,))
    assert ServerConfig(allowed_hosts=("ASR.Example.org.",)).allowed_hosts == ("asr.example.org",)
    assert ServerConfig(max_connections_per_client=None).max_connections_per_client is None
    assert cli.main(["serve", "--max-connections-per-client", "-3"]) == 2
    assert "max_connections_per_client" in capsys.readouterr().err


# -- WFST n-best: bounded work, exact or visibly truncated ---------------------------------------------


def _random_lattice(seed: int, nodes: int = 12, arcs: int = 30, words: int = 4):
    import numpy as np

    from asrdecode.ctc.wfst.lattice import UtteranceLattice

    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes - 1, arcs)
    dst = np.minimum(src + rng.integers(1, 4, arcs), nodes - 1)
    src, dst = np.concatenate([np.arange(nodes - 1), src]), np.concatenate([np.arange(1, nodes), dst])  # connected
    m = src.shape[0]
    word = np.where(rng.random(m) < 0.4, rng.integers(1, words + 1, m), 0)
    finals = {int(f): float(rng.normal()) for f in rng.choice(np.arange(1, nodes), 3, replace=False)}
    return UtteranceLattice(num_nodes=nodes, src=src, dst=dst, word=word, token=np.zeros(m, np.int64),
                            start=np.zeros(m, bool), frame=np.zeros(m, np.int64), graph=rng.normal(size=m),
                            am=rng.normal(size=m), final=finals)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("n", [2, 3, 7])  # (OpenFst's 1-shortest path of an empty word sequence reads as no path)
def test_lattice_nbest_pass_equals_openfst(seed, n) -> None:
    pytest.importorskip("kaldifst")
    lat = _random_lattice(seed)
    got, want = lat.nbest_words(n), lat._nbest_openfst(n)
    assert [w for w, _ in got] == [w for w, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-4, abs=1e-3)  # OpenFst: float32


def _synthetic_graph(n_words: int, V: int = 8, blank: int = 7):
    import random

    from asrdecode.ctc.wfst import build_tlg
    from asrdecode.lm.arpa import ArpaModel

    rng = random.Random(0)
    lexicon: dict[str, list[int]] = {}
    while len(lexicon) < n_words:
        pron = [rng.randrange(V - 1) for _ in range(rng.randint(1, 3))]
        lexicon[f"w{len(lexicon)}"] = pron
    lm = {("<s>",): (-99.0, None), ("</s>",): (-1.0, None)}
    lm.update({(w,): (-rng.uniform(1, 3), None) for w in lexicon})
    return build_tlg(V, lexicon, ArpaModel.from_dict(lm), blank_id=blank)


@pytest.mark.timeout(30)
def test_wfst_nbest_on_uniform_noise_is_bounded() -> None:
    """63 frames of uniform emissions over a 300-word graph: the OpenFst determinisation took 40 s here."""
    pytest.importorskip("kaldifst")
    import torch

    from asrdecode.ctc.wfst import WFSTDecoder

    g = _synthetic_graph(300)
    lp = torch.zeros(1, 63, 8).log_softmax(-1)
    hyps = WFSTDecoder(g, blank_id=7)(lp, torch.tensor([63]), nbest=3)[0]
    assert len(hyps) == 3 and len({tuple(w for w, _, _ in h.words) for h in hyps}) == 3
    assert hyps[1].score >= hyps[2].score and all(h.score > -1e9 for h in hyps)


@pytest.mark.parametrize("cap", [20, 60, 150])
def test_wfst_lattice_arc_cap_truncates_without_wrong_scores(monkeypatch, cap) -> None:
    """A lattice over the arc cap keeps the paths above a narrowed beam whole: the n-best list is a
    prefix of the uncapped one (same words, tokens, scores), possibly shorter, with a warning."""
    pytest.importorskip("kaldifst")
    import torch

    from asrdecode.ctc.wfst import WFSTDecoder
    from asrdecode.ctc.wfst import lattice as lattice_mod

    g = _synthetic_graph(40)
    lp = (2 * torch.randn(1, 12, 8, generator=torch.Generator().manual_seed(3))).log_softmax(-1)
    dec = WFSTDecoder(g, blank_id=7)
    full = dec(lp, torch.tensor([12]), nbest=8)[0]
    monkeypatch.setattr(lattice_mod, "MAX_LATTICE_ARCS", cap)
    with pytest.warns(lattice_mod.LatticeTruncatedWarning, match=f"at most {cap}"):
        cut = dec(lp, torch.tensor([12]), nbest=8)[0]
    assert 1 <= len(cut) <= len(full)
    key = [(tuple(h.words), h.tokens) for h in full]
    assert [(tuple(h.words), h.tokens) for h in cut] == key[: len(cut)]  # the best ones, in order
    assert [h.score for h in cut] == pytest.approx([h.score for h in full[: len(cut)]], abs=1e-4)


# -- the public search APIs: bad inputs -> a named error (a table) -------------------------------------


def _api_cases():
    import numpy as np
    import torch

    from asrdecode import ctc
    from asrdecode.transducer import beam_search, greedy
    from transducer_models import random_encoder, random_model

    lp = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    m = random_model(0, 6, 0, None)
    enc = random_encoder(1, 2, 5)
    u64 = torch.tensor([7, 5], dtype=torch.uint64)  # 7 > the padded length 6 / 5
    return {
        "ctc.greedy uint64 lengths too long": lambda: ctc.greedy(lp, u64, 0),
        "ctc.beam uint64 lengths too long": lambda: ctc.beam_search(lp, u64, 0, beam=2),
        "ctc.beam numpy uint64 too long": lambda: ctc.beam_search(lp, np.array([7, 5], dtype=np.uint64), 0, beam=2),
        "ctc.beam lengths 2**70": lambda: ctc.beam_search(lp, [2**70, 1], 0, beam=2),
        "ctc.beam lengths strings": lambda: ctc.beam_search(lp, ["a", "b"], 0, beam=2),
        "ctc.beam meta tensor": lambda: ctc.beam_search(torch.empty(2, 6, 5, device="meta"), None, 0, beam=2),
        "ctc.beam sparse tensor": lambda: ctc.beam_search(lp.to_sparse(), None, 0, beam=2),
        "ctc.beam complex": lambda: ctc.beam_search(lp.to(torch.complex64), None, 0, beam=2),
        "ctc.beam blank out of range": lambda: ctc.beam_search(lp, None, 99, beam=2),
        "ctc.beam float beam": lambda: ctc.beam_search(lp, None, 0, beam=2.5),
        "ctc.beam fusion not a list": lambda: ctc.beam_search(lp, None, 0, beam=2, fusion=5),
        "ctc.beam fusion junk pair": lambda: ctc.beam_search(lp, None, 0, beam=2, fusion=[(1, 2)]),
        "ctc.beam beta 1e308": lambda: ctc.beam_search(lp, None, 0, beam=2, beta=1e308),
        "greedy uint64 lengths too long": lambda: greedy(m, enc, torch.tensor([9, 4], dtype=torch.uint64)),
        "greedy float lengths": lambda: greedy(m, enc, torch.tensor([5.0, 4.0])),
        "greedy 2-D encoder output": lambda: greedy(m, enc[0]),
        "greedy integer encoder output": lambda: greedy(m, enc.long()),
        "greedy not a model": lambda: greedy(5, enc),
        "greedy wrong width": lambda: greedy(m, enc[..., :3]),
        "greedy max_symbols 10**9": lambda: greedy(m, enc, max_symbols=10**9),
        "beam uint64 lengths too long": lambda: beam_search(m, enc, torch.tensor([9, 4], dtype=torch.uint64), beam=2),
        "beam beam 0": lambda: beam_search(m, enc, beam=0),
        "beam nbest > beam": lambda: beam_search(m, enc, beam=2, nbest=5),
        "beam NaN encoder output": lambda: beam_search(m, enc * float("nan"), beam=2),
        "beam method junk": lambda: beam_search(m, enc, beam=2, method="x"),
        "beam lengths negative": lambda: beam_search(m, enc, [-1, 2], beam=2),
        "beam beta -1e308": lambda: beam_search(m, enc, beam=2, beta=-1e308),
    }


def test_hostile_api_table() -> None:
    from asrdecode.errors import AsrDecodeError

    unnamed = {}
    for name, call in _api_cases().items():
        try:
            call()
        except AsrDecodeError as err:
            assert isinstance(err, ValueError), name
            continue
        except Exception as err:  # noqa: BLE001 - the point: no other exception type
            unnamed[name] = f"{type(err).__name__}: {err}"
            continue
        unnamed[name] = "returned a result"
    assert unnamed == {}


def test_unsigned_lengths_decode_as_int64() -> None:
    import torch

    from asrdecode import ctc

    lp = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    for dtype in (torch.uint16, torch.uint32, torch.uint64):
        got = ctc.beam_search(lp, torch.tensor([6, 4], dtype=dtype), 0, beam=2)
        want = ctc.beam_search(lp, torch.tensor([6, 4]), 0, beam=2)
        assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in want]


# -- NeMo archives and model metadata ---------------------------------------------------------------


def _nemo_archive(path: Path, config: str) -> Path:
    import io
    import tarfile

    data = config.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("./model_config.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_nemo_archive_naming_foreign_code_is_refused(tmp_path) -> None:
    pytest.importorskip("yaml")
    from asrdecode.errors import RemoteCodeError
    from asrdecode.models import load_bundle

    bad = _nemo_archive(tmp_path / "evil.nemo", "encoder:\n  _target_: os.system\n  command: touch marker\n")
    with pytest.raises(RemoteCodeError, match=r"model_config\.encoder\._target_ is 'os\.system'"):
        load_bundle(str(bad))
    with pytest.raises(RemoteCodeError, match="posix.system"):
        load_bundle(str(_nemo_archive(tmp_path / "e2.nemo", "decoder:\n  - _target_: posix.system\n")))


def test_nemo_archive_that_is_not_one(tmp_path) -> None:
    pytest.importorskip("yaml")
    from asrdecode.errors import FileFormatError
    from asrdecode.models.nemo import check_nemo_targets

    (tmp_path / "junk.nemo").write_bytes(b"not a tar at all")
    with pytest.raises(FileFormatError, match="not a readable NeMo archive"):
        check_nemo_targets(str(tmp_path / "junk.nemo"))
    with pytest.raises(FileFormatError, match="not valid YAML"):
        check_nemo_targets(str(_nemo_archive(tmp_path / "y.nemo", "a: [1, 2\n")))
    check_nemo_targets(str(_nemo_archive(tmp_path / "ok.nemo", "encoder:\n  _target_: nemo.collections.X\n")))


class _Cfg(dict):
    def __getattr__(self, k):
        return self[k]


@pytest.mark.parametrize("key, value", [("subsampling_factor", 10**12), ("features", 10**12),
                                        ("window_stride", float("inf")), ("sample_rate", 1000),
                                        ("window_stride", 0.0)])
def test_nemo_metadata_out_of_range_is_a_named_error(key, value) -> None:
    import torch

    from asrdecode.errors import FileFormatError
    from asrdecode.models.nemo import NeMoBundle

    pre = {"window_stride": 0.01, "features": 80}
    enc = {"subsampling_factor": 8, "d_model": 16}
    top = {"sample_rate": 16000}
    for d in (pre, enc, top):
        if key in d:
            d[key] = value
    asr = torch.nn.Module()
    asr.decoder = torch.nn.Module()
    asr.decoder.num_classes_with_blank = 5
    asr.encoder = torch.nn.Module()
    asr.cfg = _Cfg(top, preprocessor=_Cfg(pre), encoder=_Cfg(enc))
    with pytest.raises(FileFormatError, match=f"metadata {key} must be"):
        NeMoBundle(asr, name="fake.nemo")
    pre.update(window_stride=0.01, features=80)
    enc.update(subsampling_factor=8)
    top.update(sample_rate=16000)
    asr.cfg = _Cfg(top, preprocessor=_Cfg(pre), encoder=_Cfg(enc))
    assert NeMoBundle(asr, name="fake.nemo").frame_seconds == pytest.approx(0.08)


# -- the CLI: hostile options and files -> exit 2 with a named error ------------------------------------


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    import wave

    d = tmp_path_factory.mktemp("cli")
    for name, rate in (("ok.wav", 16000), ("k1.wav", 1000)):
        with wave.open(str(d / name), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(rate)
            f.writeframes(b"\x00\x01" * (rate // 2))
    (d / "w.arpa").write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n-0.5\thello\n"
                              "-0.7\tworld\n\n\\end\\\n", encoding="utf-8")
    return d


@pytest.mark.parametrize("argv, message", [
    (["transcribe", "{d}/k1.wav", "--model", "demo-ctc"], "sample rate 1000 Hz is outside 8000"),
    (["transcribe", "{d}/ok.wav", "--model", "demo-rnnt", "--window", "1000000000"], "window must be <= 1024"),
    (["transcribe", "{d}/ok.wav", "--model", "demo-rnnt", "--decoder", "beam", "--method", "wind", "--window",
      "1000000000"], "window must be <= 1024"),
    (["transcribe", "{d}/ok.wav", "--model", "demo-ctc", "--decoder", "beam", "--boost", "x:1e308"], "weight must be"),
    (["transcribe", "{d}/ok.wav", "--model", "demo-ctc", "--decoder", "wfst", "--graph", "{d}/g.pt",
      "--acoustic-scale", "1e308"], "acoustic_scale must be a finite number"),
    (["transcribe", "{d}/ok.wav", "--model", "demo-ctc", "--decoder", "wfst", "--graph", "{d}/g.pt",
      "--boost", "hello:-1e308"], r"boosts\[0\]\['hello'\] must be a finite number"),
])
def test_cli_hostile_options(cli_files, capsys, argv, message) -> None:
    import re

    pytest.importorskip("sentencepiece")
    from asrdecode import cli

    if "{d}/g.pt" in argv and not (cli_files / "g.pt").exists():
        pytest.importorskip("kaldifst")
        assert cli.main(["build-graph", "--lm", str(cli_files / "w.arpa"), "--out", str(cli_files / "g.pt"),
                         "--model", "demo-ctc"]) == 0
        capsys.readouterr()
    assert cli.main([a.replace("{d}", str(cli_files)) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and re.search(message, captured.err), captured.err


def test_window_ceiling_and_boosting_weight_api() -> None:
    from asrdecode.errors import DecodingInputError
    from asrdecode.lm import BoostingTree
    from asrdecode.transducer import beam_search, greedy
    from asrdecode.transducer._checks import MAX_WINDOW
    from transducer_models import random_encoder, random_model

    model = random_model(0, 6, 0, None)
    enc = random_encoder(1, 2, 5)
    with pytest.raises(DecodingInputError, match=f"window must be <= {MAX_WINDOW}"):
        greedy(model, enc, window=10**9)
    with pytest.raises(DecodingInputError, match=f"window must be <= {MAX_WINDOW}"):
        beam_search(model, enc, beam=2, method="wind", window=10**9)
    assert len(greedy(model, enc, window=MAX_WINDOW)) == 2
    with pytest.raises(DecodingInputError, match="weight must be a finite number"):
        BoostingTree.from_phrases([("a", 1e308)], lambda s: [1], vocab_size=6, blank_id=0)


@pytest.mark.parametrize("key, value", [("hidden_size", 10**12), ("conv_kernel", [10, 10**12]),
                                        ("conv_stride", [0, 2]), ("num_hidden_layers", 1.5),
                                        ("conv_dim", list(range(1, 100)))])
def test_huge_hf_config_sizes_are_refused_before_building(hf_copy, key, value) -> None:
    from asrdecode.errors import FileFormatError
    from asrdecode.models import load_bundle

    _edit_json(hf_copy / "config.json", **{key: value})
    with pytest.raises(FileFormatError, match=f"metadata {key} must"):
        load_bundle(str(hf_copy))
