"""torch.compile'd device-loop rounds equal the eager ones: the CTC prefix beam round (plain and with the
bundled token 4-gram LM) and the WFST fixed-shape round, compared round by round (tests/lockstep.py: every
round also run eagerly from the same state) and by their results. Each round traces as one graph (a
graph break would leave host code that a CUDA graph capture runs once).

The compiled checks are slow (Inductor compiles each round for tens of seconds cold): run by ``make bench``. With a GPU the same
checks run on CUDA in "compile" mode and as compiled CUDA graphs (``accel.compiled_graphs``)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from asrdecode import ctc
from asrdecode.accel import compiled_graphs
from asrdecode.ctc import beam_loop
from asrdecode.lm import NGramLM
from asrdecode.models.demo import ASSETS
from ctc_device_cases import assert_same
from lockstep import Lockstep
from test_ctc_helpers import peaky_log_probs, random_lengths

SLOW = pytest.mark.slow

V, BLANK = 257, 256  # the bundled token LM's vocabulary (demo-ctc's)

DEVICES = [("cpu", "compile")] + ([("cuda", "compile"), ("cuda", "compiled_graphs")]
                                  if torch.cuda.is_available() else [])


@pytest.fixture(scope="module")
def token_lm() -> NGramLM:
    return NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=BLANK)


def _mode_context(kind: str) -> tuple[str, contextlib.AbstractContextManager]:
    """The loop mode a module's ``resolve_mode`` should return, and the context to run it in."""
    if kind == "compiled_graphs":
        return "cuda_graphs", compiled_graphs()
    return kind, contextlib.nullcontext()


def _no_graph_breaks() -> None:
    breaks = dict(counters["graph_break"])
    assert not breaks, f"the round does not trace as one graph: {breaks}"


@SLOW
@pytest.mark.parametrize("device, kind", DEVICES)
@pytest.mark.parametrize("lm_kind", ["plain", "token_lm", "dense_lm"])
def test_ctc_beam_round_compiled_equals_eager(monkeypatch, token_lm, device, kind, lm_kind):
    B, T = 16, 40
    lp = peaky_log_probs(5, B, T, V, BLANK, peak=6.0, dtype=torch.float32)
    lens = random_lengths(5, B, T)
    with_lm = lm_kind != "plain"
    lm = token_lm.with_dense_rows() if lm_kind == "dense_lm" else token_lm  # (dense: the LM step without a chain)
    kw = dict(beam=16, nbest=2, beta=2.0 if with_lm else 0.0)
    beam_loop.LOOPS.clear()
    monkeypatch.setattr(beam_loop, "resolve_mode", lambda mode, dev: "eager")
    want = ctc.beam_search(lp, lens, BLANK, engine="torch", fusion=[(lm, 0.7)] if with_lm else [],
                           **kw)  # the Python frame loop on the CPU
    kw["fusion"] = [(lm.to(device), 0.7)] if with_lm else []

    mode, context = _mode_context(kind)
    lock = Lockstep(beam_loop.STATE_NAMES)
    monkeypatch.setattr(beam_loop, "resolve_mode", lambda m, dev: mode)
    monkeypatch.setattr(beam_loop, "run_until_done", lock)
    torch._dynamo.reset()
    counters.clear()
    with context, torch.inference_mode():
        got = ctc.beam_search(lp.to(device), lens.to(device), BLANK, engine="torch", **kw)
    beam_loop.LOOPS.clear()
    assert lock.rounds == T // beam_loop.UNROLL
    assert lock.first is None, f"compiled round differs from the eager round: {lock.first}"
    _no_graph_breaks()
    assert_same(got, want)


def _tlg_case(B: int, T: int, seed: int):
    from asrdecode.ctc.wfst import build_tlg
    from test_ctc_wfst import BLANK as W_BLANK
    from test_ctc_wfst import LEXICON, _lm
    from test_ctc_wfst import V as W_V

    g = build_tlg(W_V, LEXICON, _lm(), topology="compact", blank_id=W_BLANK)
    gen = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(2 * torch.randn(B, T, W_V, generator=gen), -1)
    lens = torch.randint(0, T + 1, (B,), generator=gen)
    lens[0] = T
    return g, lp, lens


@SLOW
@pytest.mark.parametrize("device, kind", DEVICES)
@pytest.mark.parametrize("kw, eps_budget", [(dict(min_active=2, beam=3.0, max_active=6), False),  # every arc
                                             (dict(beam=3.0, max_active=6, dense_min_degree=1), False),  # pre-pruned
                                             (dict(beam=3.0, max_active=6, dense_min_degree=1), True)],
                         ids=["all_arcs", "pre_pruned", "pre_pruned_epsilon_budget"])
def test_wfst_fixed_round_compiled_equals_eager(monkeypatch, device, kind, kw, eps_budget):
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import WFSTDecoder, fixed
    from test_wfst_native import _same

    if eps_budget:  # (the epsilon passes over a budget of candidates, not in dense rows)
        monkeypatch.setattr(fixed, "DENSE_EPSILON_DEGREE", -1)  # (as fixed.epsilon_layout(False))
    g, lp, lens = _tlg_case(16, 24, 2)
    fixed.LOOPS.clear()
    want = WFSTDecoder(g, engine="torch", loop="fixed", **kw)(lp, lens)

    mode, context = _mode_context(kind)
    lock = Lockstep(fixed.STATE_NAMES)
    monkeypatch.setattr(fixed, "resolve_mode", lambda m, dev: mode)
    monkeypatch.setattr(fixed, "run_until_done", lock)
    torch._dynamo.reset()
    counters.clear()
    with context:
        got = WFSTDecoder(g.to(device), engine="torch", loop="fixed", **kw)(lp.to(device), lens.to(device))
    fixed.LOOPS.clear()
    assert lock.rounds >= 24 // fixed.UNROLL
    assert lock.first is None, f"compiled round differs from the eager round: {lock.first}"
    _no_graph_breaks()
    _same(got, want)


class _State:
    def __init__(self) -> None:
        self.a = torch.zeros(3)
        self.t = torch.zeros(1, dtype=torch.long)


def _body(s: _State) -> None:
    s.a.add_(s.t.float())
    s.t.add_(1)


class _SkewedRunner:
    """Runs the round, and from round 2 on adds a small error to ``a[1]`` (what a miscompiled round does)."""

    def bound(self, fn, state):
        def run() -> None:
            fn(state)
            if int(state.t) > 2:
                state.a[1] += 1e-3
        return run


@pytest.mark.parametrize("skewed", [False, True])
def test_lockstep_finds_the_first_diverging_round(skewed):
    """(fast, eager: the tool the compiled checks rely on) a round that leaves the eager one is named."""
    from asrdecode.accel import StepRunner

    lock = Lockstep(("a", "t"))
    run = _SkewedRunner() if skewed else StepRunner("eager", ("a", "t"))
    rounds = lock(run, _body, _State(), lambda s: (s.t >= 5)[0], first_check=5, limit=5)
    assert rounds == 5 and lock.rounds == 5
    if skewed:
        assert lock.first is not None and (lock.first.round, lock.first.name, lock.first.count) == (2, "a", 1)
    else:
        assert lock.first is None


@SLOW
@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_transducer_rounds_compiled_equal_eager_float32(decoder):
    """The transducer greedy (label looping, TDT) and beam (ALSD) steps under torch.compile, float32 as on
    a GPU: tokens, timestamps and durations equal, scores within float32 rounding. (The LSTM prediction
    network's step is traced from the weights its eager priming cached: Dynamo does not trace nn.LSTM.)"""
    from asrdecode.transducer.beam import beam_search
    from asrdecode.transducer.greedy import greedy
    from transducer_models import random_model

    m = random_model(0, 12, 0, [0, 1, 2], blank_bias=1.0).float()
    enc = torch.randn(8, 30, 5, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([30, 20, 10, 0, 30, 5, 17, 29])
    torch._dynamo.reset()
    if decoder == "greedy":
        want = [[h] for h in greedy(m, enc, lengths, max_symbols=3)]
        got = [[h] for h in greedy(m, enc, lengths, max_symbols=3, acceleration="compile")]
    else:
        kw = dict(beam=4, nbest=2, method="alsd", max_symbols=3)
        want = beam_search(m, enc, lengths, **kw)
        got = beam_search(m, enc, lengths, acceleration="compile", **kw)
    for g, w in zip(got, want, strict=True):
        assert [(h.tokens, h.timestamps, h.durations) for h in g] == [(h.tokens, h.timestamps, h.durations) for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], rel=1e-5, abs=1e-4)


@SLOW
@pytest.mark.parametrize("device, kind", DEVICES)
@pytest.mark.parametrize("method, durations, pruning", [
    ("alsd", None, "late"), ("aes", None, "late"), ("wind", None, "late"), ("alsd", [0, 1, 2], "late"),
    ("aes", None, "early")], ids=["alsd", "aes", "wind", "alsd_tdt", "aes_early"])
@pytest.mark.parametrize("with_lm", [False, True], ids=["plain", "token_lm"])
def test_transducer_beam_round_compiled_equals_eager(monkeypatch, token_lm, device, kind, method, durations, pruning,
                                                     with_lm):
    """The ALSD++ / AES++ / WIND (window 4) round (step, prediction network, done flag) of the cached static
    loop (RNN-T; ALSD++ also TDT), float32, beam 4, plain and with the bundled token 4-gram (late pruning, AES++
    also early; LM-weighted blank): one graph (the LSTM prediction network included), every round equal to the
    eager round from the same state, and the results equal to the eager search's. The compiled side's LM is a
    fresh device copy (its lazy tables not built yet: the static loop builds them before the first trace)."""
    from asrdecode.transducer import beam as beam_mod
    from asrdecode.transducer.beam import BeamSearchDecoder
    from asrdecode.transducer.beam_loop import BeamLoop
    from transducer_models import random_model

    m = random_model(4, V, BLANK, durations, blank_bias=1.0).float()
    B, T = 6, 24
    enc = 2 * torch.randn(B, T, 5, generator=torch.Generator().manual_seed(4))
    lengths = torch.tensor([24, 17, 9, 0, 24, 3])
    kw: dict = dict(beam=4, nbest=2, method=method, max_symbols=3, pruning=pruning, engine="torch")
    if method == "wind":
        kw.update(window=4)
    if with_lm:
        kw.update(beta=0.5, blank_scoring="lm_weighted")
    fusion = [(token_lm, 0.6)] if with_lm else []
    with torch.inference_mode():
        want = BeamSearchDecoder(m, fusion=fusion, **kw).decode(enc, lengths)  # eager, the Python loop

    mode, context = _mode_context(kind)
    lock = Lockstep(BeamLoop.STATE)
    monkeypatch.setattr(beam_mod, "resolve_mode", lambda m_, dev: mode)
    monkeypatch.setattr(beam_mod, "run_until_done", lock)
    dev_model = m.to(device)
    dec = BeamSearchDecoder(dev_model, fusion=[(token_lm.to(device), 0.6)] if with_lm else [], **kw)
    torch._dynamo.reset()
    counters.clear()
    with context, torch.inference_mode():
        got = dec.decode(enc.to(device), lengths.to(device))
    assert lock.rounds > T
    assert lock.first is None, f"compiled round differs from the eager round: {lock.first}"
    _no_graph_breaks()
    for g, w in zip(got, want, strict=True):
        assert [(h.tokens, h.timestamps, h.durations) for h in g] == [(h.tokens, h.timestamps, h.durations) for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], rel=1e-5, abs=1e-4)


@SLOW
@pytest.mark.parametrize("search", ["ctc", "alsd", "aes", "wind", "alsd_tdt"])
@pytest.mark.parametrize("with_lm", [False, True], ids=["plain", "token_lm"])
def test_compiled_rounds_write_no_input(monkeypatch, token_lm, search, with_lm):
    """What torch.compile traces of each device loop's round (its ``PureStep``) is one graph that writes
    none of its inputs: no kernel Inductor makes of it writes a buffer it gathers from, and no aliased
    input needs a synthetic base (the in-place CTC round left eager's on CUDA in its first round, run 8).
    Dynamo only, no Inductor (tests/fx_writes.py)."""
    import functools

    from asrdecode.transducer import beam as beam_mod
    from asrdecode.transducer.beam import BeamSearchDecoder
    from fx_writes import RecordingBackend, input_writes
    from transducer_models import random_model

    backend = RecordingBackend()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    torch._dynamo.reset()
    counters.clear()
    if search == "ctc":
        B, T = 8, 6
        lp = peaky_log_probs(5, B, T, V, BLANK, peak=6.0, dtype=torch.float32)
        monkeypatch.setattr(beam_loop, "resolve_mode", lambda m, dev: "compile")
        beam_loop.LOOPS.clear()
        with torch.inference_mode():
            ctc.beam_search(lp, random_lengths(5, B, T), BLANK, engine="torch", beam=8,
                            fusion=[(token_lm, 0.7)] if with_lm else [])
        beam_loop.LOOPS.clear()
    else:
        method, durations = search.split("_")[0], [0, 1, 2] if search.endswith("tdt") else None
        m = random_model(4, V, BLANK, durations, blank_bias=1.0).float()
        kw: dict = dict(beam=3, method=method, max_symbols=2, engine="torch", window=3 if method == "wind" else 1)
        if with_lm:
            kw.update(beta=0.5, blank_scoring="lm_weighted", fusion=[(token_lm, 0.6)])
        monkeypatch.setattr(beam_mod, "resolve_mode", lambda m_, dev: "compile")
        enc = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(4))
        with torch.inference_mode():
            BeamSearchDecoder(m, **kw).decode(enc, torch.tensor([5, 3]))
    _no_graph_breaks()
    assert len(backend.graphs) == 1
    assert input_writes(backend.graphs[0]) == []


@SLOW
@pytest.mark.parametrize("search", ["ctc", "alsd", "wind", "greedy", "greedy_tdt", "greedy_frames", "wfst"])
def test_one_compiled_round_serves_every_length(monkeypatch, search):
    """Calls whose lengths fall in different buckets (each its own cached loop) share one traced round: the
    CTC round reads only its frames, the transducer rounds keep the encoder's length (and the greedy
    hypotheses' storage) symbolic. (Each length traced anew cost a compile, and past Dynamo's recompile limit
    a loop's round ran eagerly.) Dynamo only."""
    import functools

    from asrdecode.transducer import beam as beam_mod
    from asrdecode.transducer.beam import BeamSearchDecoder
    from fx_writes import RecordingBackend
    from transducer_models import random_model

    backend = RecordingBackend()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    torch._dynamo.reset()
    for T in (9, 40, 70):  # buckets 16, 40, 80
        if search == "ctc":
            lp = peaky_log_probs(T, 4, T, 30, 29, peak=6.0, dtype=torch.float32)
            lens = torch.tensor([T, T - 3, 1, T // 2])
            with torch.inference_mode():
                got = ctc.beam_search(lp, lens, 29, beam=4, nbest=2, acceleration="compile")
            assert_same(got, ctc.beam_search(lp, lens, 29, engine="torch", beam=4, nbest=2))
        elif search == "wfst":
            pytest.importorskip("kaldifst")
            from asrdecode.ctc.wfst import WFSTDecoder, fixed
            from test_wfst_native import _same

            g, lp, lens = _tlg_case(4, T, T)
            kw = dict(beam=3.0, max_active=6, dense_min_degree=1)  # pre-pruned (the lockstep test has both)
            got = WFSTDecoder(g, acceleration="compile", **kw)(lp, lens)
            _same(got, WFSTDecoder(g, engine="torch", loop="fixed", **kw)(lp, lens))
            fixed.LOOPS.clear()
        elif search.startswith("greedy"):
            from asrdecode.transducer.greedy import greedy

            m = random_model(5, 12, 0, [0, 1, 2] if search == "greedy_tdt" else None, blank_bias=1.0).float()
            enc = torch.randn(3, T, 5, generator=torch.Generator().manual_seed(T))
            lens = torch.tensor([T, T // 2, 1])
            kw = dict(max_symbols=3, loop="frames" if search == "greedy_frames" else "labels")
            with torch.inference_mode():
                got = greedy(m, enc, lens, acceleration="compile", **kw)
            want = greedy(m, enc, lens, acceleration="eager", **kw)
            assert [(h.tokens, h.timestamps, h.durations) for h in got] == [(h.tokens, h.timestamps, h.durations)
                                                                            for h in want]
        else:
            m = random_model(4, 12, 0, None, blank_bias=1.0).float()
            kw: dict = dict(beam=3, nbest=2, method=search, window=3 if search == "wind" else 1, max_symbols=2,
                            engine="torch")
            enc = torch.randn(3, T, 5, generator=torch.Generator().manual_seed(T))
            lens = torch.tensor([T, T // 2, 1])
            monkeypatch.setattr(beam_mod, "resolve_mode", lambda m_, dev: "compile")
            with torch.inference_mode():
                got = BeamSearchDecoder(m, **kw).decode(enc, lens)
            monkeypatch.setattr(beam_mod, "resolve_mode", lambda m_, dev: "eager")
            want = BeamSearchDecoder(m, **kw).decode(enc, lens)
            assert [[(h.tokens, h.timestamps) for h in r] for r in got] == [[(h.tokens, h.timestamps) for h in r]
                                                                           for r in want]
    beam_loop.LOOPS.clear()
    assert len(backend.graphs) == 1


@pytest.fixture
def round_checks(monkeypatch):
    """The compiled rounds' first-call checks (accel.run_until_done) made in the test: at least one, all passed."""
    from asrdecode import accel

    checks: dict = {}
    monkeypatch.setattr(accel, "ROUND_CHECKS", checks)
    yield checks
    assert checks and all(checks.values()), checks


@SLOW
@pytest.mark.filterwarnings("error::asrdecode.round_check.CompiledRoundMismatch")
@pytest.mark.parametrize("search", ["ctc_lm", "alsd_lm", "wind", "greedy", "wfst"])
def test_compiled_graph_path_equals_eager_on_the_cpu(monkeypatch, token_lm, round_checks, search):
    """What ``compiled_graphs()`` runs on a GPU, on the CPU: the cuda_graphs path (EmulatedGraphRunner: the same
    in-place wrapper and capture bookkeeping) with the torch.compile'd step "captured" (the pure twin and
    its write-back for the CTC and beam rounds); results equal the eager search's, and the library's own
    first-call check of the compiled round against eager passes."""
    import importlib

    from asrdecode.accel import EmulatedGraphRunner
    from asrdecode.transducer import beam as beam_mod
    from asrdecode.transducer.beam import BeamSearchDecoder
    from graph_emulation import emulate_graphs
    from transducer_models import random_model

    greedy_mod = importlib.import_module("asrdecode.transducer.greedy")
    m = random_model(6, V, BLANK, None, blank_bias=1.0).float()  # (made outside inference mode: its weights' versions)
    torch._dynamo.reset()
    with torch.inference_mode():
        if search == "ctc_lm":
            B, T = 6, 20
            lp = peaky_log_probs(7, B, T, V, BLANK, peak=6.0, dtype=torch.float32)
            lens = random_lengths(7, B, T)
            kw = dict(beam=8, nbest=2, beta=1.0, fusion=[(token_lm, 0.6)])
            want = ctc.beam_search(lp, lens, BLANK, engine="torch", **kw)
            emulate_graphs(monkeypatch, beam_loop)
            with compiled_graphs():
                got = ctc.beam_search(lp, lens, BLANK, engine="torch", **kw)
            beam_loop.LOOPS.clear()
            assert_same(got, want)
        elif search == "wfst":
            pytest.importorskip("kaldifst")
            from asrdecode.ctc.wfst import WFSTDecoder, fixed
            from test_wfst_native import _same

            g, lp, lens = _tlg_case(6, 16, 3)
            kw = dict(beam=3.0, max_active=6, dense_min_degree=1, engine="torch", loop="fixed")  # pre-pruned
            want = WFSTDecoder(g, **kw)(lp, lens)
            emulate_graphs(monkeypatch, fixed)
            with compiled_graphs():
                got = WFSTDecoder(g, **kw)(lp, lens)
            fixed.LOOPS.clear()
            _same(got, want)
        else:
            enc = 2 * torch.randn(4, 14, 5, generator=torch.Generator().manual_seed(6))
            lens = torch.tensor([14, 9, 1, 0])
            mod = greedy_mod if search == "greedy" else beam_mod
            real = mod.resolve_mode
            monkeypatch.setattr(mod, "resolve_mode", lambda m_, dev: real(m_, dev) if m_ == "eager" else "cuda_graphs")
            monkeypatch.setattr(mod, "StepRunner", EmulatedGraphRunner)
            if search == "greedy":
                want = greedy_mod.greedy(m, enc, lens, max_symbols=3, acceleration="eager")
                with compiled_graphs():
                    got = greedy_mod.greedy(m, enc, lens, max_symbols=3)
                assert [(h.tokens, h.timestamps) for h in got] == [(h.tokens, h.timestamps) for h in want]
                return
            kw: dict = dict(beam=4, nbest=2, method=search.split("_")[0], max_symbols=3, engine="torch",
                            window=3 if search == "wind" else 1)
            if search.endswith("_lm"):
                kw.update(fusion=[(token_lm, 0.6)], beta=0.5)
            want = BeamSearchDecoder(m, acceleration="eager", **kw).decode(enc, lens)
            with compiled_graphs():
                got = BeamSearchDecoder(m, **kw).decode(enc, lens)
            for g_, w_ in zip(got, want, strict=True):
                assert [(h.tokens, h.timestamps) for h in g_] == [(h.tokens, h.timestamps) for h in w_]
                assert [h.score for h in g_] == pytest.approx([h.score for h in w_], rel=1e-5, abs=1e-4)
