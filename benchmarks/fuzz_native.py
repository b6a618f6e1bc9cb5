"""Fuzz every entry point of the native engine (run it under ``make test-asan``: AddressSanitizer + UBSan).

``make test-asan ASAN_CASES=100000``, i.e. ``ASRDECODE_NATIVE_SANITIZE=1 LD_PRELOAD="$(c++ -print-file-name=libasan.so)
$(c++ -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 PYTHONPATH=src:tests python
benchmarks/fuzz_native.py --cases 100000`` (libstdc++ preloaded too: ASan's C++ exception interceptor needs it).

Each case draws an entry point (CTC prefix beam search with and without blank collapse, streamed or whole;
WFST token passing; transducer ALSD++ / AES++ / WIND steps, the whole ALSD++ / AES++ / WIND search
with the networks in C++ and its streaming chunks (carried states mutated too), WIND's lazy and full
window; the C++ modified beam search over LSTM and stateless weights; the backpointer and
emission-check helpers; the ARPA reader on random, damaged files)
and random or mutated inputs: fusion set-ups of n-gram LMs, boosting trees, word LMs and user models
(rows), each valid or with one array mutated in place (an element set to an extreme value, a
reversal, a truncation), random graphs and mutated graphs with their search index, tensors of random
shapes, dtypes, lengths and values (NaN, inf), joints that narrow after their first call. Every outcome
must be a result or a named error (an ``AsrDecodeError``); a sanitizer report aborts the process.
Prints (and with ``--out`` appends as markdown) the counts per entry point.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import suite_paths  # noqa: E402  (tests/ and its subfolders: the test modules imported below)

suite_paths.add_to_sys_path()

from asrdecode import ctc  # noqa: E402
from asrdecode.ctc.wfst import WFSTDecoder  # noqa: E402
from asrdecode.errors import AsrDecodeError  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402
from asrdecode.lm.boosting import BoostingTree  # noqa: E402
from asrdecode.native import _lib  # noqa: E402
from asrdecode.transducer.beam import beam_search as transducer_beam  # noqa: E402

INTS = (-(10**12), -(2**31), -1, 0, 1, 2, 3, 7, 2**31 - 1, 2**40)
FLOATS = (float("nan"), float("inf"), float("-inf"), -1e30, 1e30, 0.0, -1.0, 3.0)


# ------------------------------------------------------------------------------------------ mutation
def mutate_tensor(rng: random.Random, t: torch.Tensor) -> torch.Tensor:
    """A changed copy of ``t``: an element set to an extreme, a reversal, a truncation or a scaling."""
    t = t.clone()
    kind = rng.randrange(5)
    if t.numel() == 0 or kind == 0:
        return t[: max(0, t.shape[0] - rng.randint(1, 3))] if t.dim() and t.shape[0] else t
    if kind == 1:
        return t.flip(0)
    flat = t.view(-1)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(flat.numel())
        if t.dtype == torch.bool:
            flat[i] = not bool(flat[i])
        elif t.is_floating_point():
            flat[i] = rng.choice(FLOATS)
        else:
            info = torch.iinfo(t.dtype)
            flat[i] = max(info.min, min(info.max, rng.choice(INTS) + (rng.randrange(3) if kind == 3 else 0)))
    if kind == 4 and not t.is_floating_point() and t.dtype != torch.bool:
        t = t * rng.choice((-1, 1000))
    return t


def clone_with(obj, rng: random.Random, names: tuple[str, ...]):
    """A shallow copy of ``obj`` with one of its tensor attributes ``names`` mutated (the original untouched)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    name = rng.choice(names)
    new.__dict__[name] = mutate_tensor(rng, getattr(obj, name))
    return new


AUTOMATON_FIELDS = ("arc_offsets", "arc_label", "arc_weight", "arc_dest", "backoff_state", "backoff_weight",
                    "final_weight", "terminal", "dense_index", "dense_scores", "dense_next")


def mutated_lm(rng, lm):
    new = object.__new__(type(lm))
    new.__dict__.update(lm.__dict__)
    new.automaton = clone_with(lm.automaton, rng, AUTOMATON_FIELDS)
    return new


# ------------------------------------------------------------------------------------------ the pools
class Pools:
    def __init__(self, rng: random.Random) -> None:
        from test_lm_ngram import _write_tmp, random_arpa
        from test_lm_word import STYLES, build
        from test_wfst_native import random_graph

        self.V = 8
        self.lms = [NGramLM.from_arpa(_write_tmp(random_arpa(random.Random(s), 6, 3, max_per_order=30)),
                                      vocab_size=8, blank_id=7, dense_memory_mb=0.001 * (s % 2),
                                      min_dense_degree=1) for s in range(4)]
        self.trees = [BoostingTree.from_token_sequences(
            [[rng.randrange(7) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 5))],
            vocab_size=8, blank_id=7, weight=rng.uniform(-2, 3)) for _ in range(4)]
        import tempfile

        tmp = Path(tempfile.mkdtemp())
        self.word_lms = [build(tmp, s, STYLES[s % 3])[0] for s in range(3)]
        self.graphs = [random_graph(s) for s in range(12)]


class RowsModel:
    """A user fusion model (its rows go through the driver): scores from a fixed random table."""

    def __init__(self, V: int, seed: int, bad: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.table = -torch.rand(4, V, generator=g) * 3
        self.nxt = torch.randint(0, 4, (4, V), generator=g)
        if bad:  # states out of the table / NaN scores
            self.nxt.view(-1)[0] = 10**6
            self.table.view(-1)[1] = float("nan")
        self.vocab_size = V
        self.blank_id = V - 1

    def initial_states(self, n, device=None):
        return torch.zeros(n, dtype=torch.long)

    def advance(self, states):
        s = states.clamp(0, 3)
        return self.table[s], self.nxt[s]

    def final(self, states):
        return torch.zeros(states.shape[0])


def fusion_setup(rng: random.Random, P: Pools, V: int) -> list:
    out = []
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        kind = rng.randrange(4)
        bad = rng.random() < 0.2
        weight = rng.choice((-0.3, 1e5, 1e308, float("nan"))) if rng.random() < 0.1 else rng.uniform(0, 2)
        if kind == 0:
            m = rng.choice(P.lms)
            m = mutated_lm(rng, m) if bad else m
        elif kind == 1:
            m = rng.choice(P.trees)
            if bad:
                m = BoostingTree.__new__(BoostingTree)
                m.__dict__.update(rng.choice(P.trees).__dict__)
                m.automaton = clone_with(m.automaton, rng, AUTOMATON_FIELDS)
        elif kind == 2:
            m = rng.choice(P.word_lms)
            if bad:
                m = clone_with(m, rng, ("end_label", "end_const", "is_start", "start_node", "start_score"))
        else:
            m = RowsModel(V, rng.randrange(1000), bad)
        out.append((m, weight))
    return out


def log_probs(rng: random.Random, B: int, T: int, V: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    dtype = rng.choice((torch.float32, torch.float64))
    x = (torch.randn(B, T, V, dtype=dtype) * rng.choice((0.5, 3.0, 30.0))).log_softmax(-1)
    if rng.random() < 0.05 and x.numel():
        x.view(-1)[rng.randrange(x.numel())] = rng.choice(FLOATS)
    lengths = None
    if rng.random() < 0.8:
        lengths = torch.tensor([rng.randint(0, T) for _ in range(B)])
        if rng.random() < 0.05 and B:
            lengths[0] = rng.choice((-1, T + 1, 2**40))
    return x, lengths


# ------------------------------------------------------------------------------------------ entry points
def case_ctc(rng, P, collapse: bool, streamed: bool):
    fusion = fusion_setup(rng, P, P.V)
    V = P.V if fusion or rng.random() < 0.7 else rng.randint(2, 12)
    B, T = rng.randint(1, 3), rng.randint(0, 8)
    x, lengths = log_probs(rng, B, T, V)
    beam = rng.randint(1, 6)
    kw = dict(beam=beam, fusion=fusion, beta=rng.choice((0.0, 0.5, -1.0)), engine="native",
              token_beam=rng.choice((None, None, 1, 2, 5, 100)), nbest=rng.randint(1, beam),
              blank_collapse=rng.choice((0.9, "weak", 0.5)) if collapse else None)
    blank = V - 1 if fusion or rng.random() < 0.7 else rng.choice((0, V // 2, V + 3))
    if not streamed:
        return ctc.beam_search(x, lengths, blank, **kw)
    cut = rng.randint(0, T)
    lens = lengths if lengths is not None else torch.full((B,), T)
    l1, l2 = lens.clamp(max=cut), (lens - cut).clamp(min=0)
    st = ctc.beam_search(x[:, :cut], l1, blank, final=False, **kw)
    return ctc.beam_search(x[:, cut:], l2, blank, state=st, **kw)


GRAPH_FIELDS = ("final_score", "e_src", "e_dst", "e_ilabel", "e_olabel", "e_score", "e_ptr", "e_start", "p_src",
                "p_dst", "p_olabel", "p_score", "p_ptr")


def case_wfst(rng, P):
    from asrdecode.ctc.wfst import attach_search_index

    g = rng.choice(P.graphs)
    g = g.to("cpu")  # a fresh object (shares the tensors; mutations below copy)
    if rng.random() < 0.5:
        attach_search_index(g, dense_min_degree=rng.choice((1, 64)))
    r = rng.random()
    if r < 0.4:
        name = rng.choice(GRAPH_FIELDS)
        setattr(g, name, mutate_tensor(rng, getattr(g, name)))
    elif r < 0.5:
        g.eps_depth = rng.choice((-5, 0, 1, 10**9))
    elif r < 0.6 and g._search_index is not None:
        idx = dict(g._search_index)
        idx["arc_rows"] = mutate_tensor(rng, idx["arc_rows"])
        g._search_index = idx
    V = g.vocab_size
    x, lengths = log_probs(rng, rng.randint(1, 3), rng.randint(0, 8), V + rng.choice((0, 0, 1)))
    dec = WFSTDecoder(g, beam=rng.uniform(1, 12), max_active=rng.randint(1, 40), engine="native",
                      min_active=rng.choice((0, 0, 2)), dense_min_degree=1)
    return dec(x, lengths, nbest=rng.choice((1, 1, 2)))


_MODELS: dict = {}


def case_transducer(rng, P, method: str):
    from transducer_models import random_model

    V = rng.choice((6, 8))
    tdt = method != "wind" and rng.random() < 0.3
    key = (V, tdt, rng.randrange(3))
    if key not in _MODELS:
        _MODELS[key] = random_model(key[2], V, V - 1, [0, 1, 2] if tdt else None).float()
    m = _MODELS[key]
    B, T = rng.randint(1, 3), rng.randint(0, 7)
    enc = torch.randn(B, T, 5)
    lengths = torch.tensor([rng.randint(0, T) for _ in range(B)])
    fusion = [(f, w) for f, w in fusion_setup(rng, P, V) if getattr(f, "vocab_size", V) == V]
    joint = m.joint
    narrow = rng.random() < 0.1
    if narrow:
        calls = [0]

        def joint_narrowing(e, d):
            calls[0] += 1
            out = joint(e, d)
            return out if calls[0] == 1 else out[..., : -rng.randint(1, 2)]

        m.joint = joint_narrowing
    try:
        kw = dict(beam=rng.randint(1, min(V, 5)), method=method, engine="native", fusion=fusion,
                  max_symbols=rng.randint(1, 3))  # None: a fusion bonus may keep a label loop going 1e5 steps
        if method == "wind":
            kw["window"] = _wind_window(rng)
        with _full_window(rng.random() < 0.5):
            return transducer_beam(m, enc, lengths, **kw)
    finally:
        if narrow:
            del m.joint


def case_transducer_search(rng, P):
    """The whole ALSD++ / AES++ / WIND search with the networks in C++ (one engine call): a float32
    LSTMTransducer (RNN-T or TDT), encoder values ordinary or huge, the fusion set-ups (mutated ones included;
    user models send the search to the per-step path), caps 1-3 or none with a strong blank (not WIND)."""
    from transducer_models import random_model

    from asrdecode.transducer import _checks

    V = rng.choice((6, 8))
    method = rng.choice(("alsd", "aes", "wind"))
    tdt = method != "wind" and rng.random() < 0.3
    cap = rng.choice((None, 1, 2, 3)) if method != "wind" else rng.choice((1, 2, 3))
    key = ("search", V, tdt, rng.randrange(3), cap is None)
    if key not in _MODELS:
        _MODELS[key] = random_model(key[3], V, V - 1, [0, 1, 2] if tdt else None,
                                    blank_bias=4.0 if cap is None else 1.0).float()
    B, T = rng.randint(1, 3), rng.randint(0, 7)
    enc = torch.randn(B, T, 5) * rng.choice((1.0, 10.0, 1e30))
    lengths = torch.tensor([rng.randint(0, T) for _ in range(B)])
    fusion = [(f, w) for f, w in fusion_setup(rng, P, V) if getattr(f, "vocab_size", V) == V]
    guard = _checks.MAX_SYMBOLS_GUARD
    _checks.MAX_SYMBOLS_GUARD = 64  # no cap: a runaway search stops early
    try:
        extra = dict(window=_wind_window(rng), expansion_gamma=rng.choice((None, 1.0))) if method == "wind" else {}
        with _full_window(rng.random() < 0.5):
            return transducer_beam(_MODELS[key], enc, lengths, beam=rng.randint(1, min(V, 5)), method=method,
                                   pruning=rng.choice(("late", "early")), engine="native", fusion=fusion,
                                   max_symbols=cap, beta=rng.choice((0.0, 0.5)), **extra)
    finally:
        _checks.MAX_SYMBOLS_GUARD = guard


def _wind_window(rng) -> int:
    """A WIND window: 1 a quarter of the time, else 2-5 (the lazy window reads frames beyond the first)."""
    return 1 if rng.random() < 0.25 else rng.randint(2, 5)


@contextlib.contextmanager
def _full_window(on: bool):
    """WIND reads every window frame (``ASRDECODE_WIND_FULL_WINDOW=1``) inside, or its lazy window."""
    from asrdecode.native.transducer_search import FULL_WINDOW_ENV

    old = os.environ.get(FULL_WINDOW_ENV)
    os.environ[FULL_WINDOW_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[FULL_WINDOW_ENV]
        else:
            os.environ[FULL_WINDOW_ENV] = old


def _icefall(P):
    """A small icefall-layout stateless transducer (onnxruntime; vocab 12, context 2; built once), or None
    without onnxruntime."""
    if "icefall" not in _MODELS:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            _MODELS["icefall"] = None
            return None
        import tempfile

        from sherpa_models import build_icefall

        from asrdecode.models.onnx_transducer import load_onnx_transducer

        path = build_icefall(Path(tempfile.mkdtemp()) / "icefall", seed=2, vocab=12, context=2, dim=8, emb=4)
        _MODELS["icefall"] = load_onnx_transducer(str(path)).model
    return _MODELS["icefall"]


STATE_FIELDS = ("score", "time", "symbols", "hash", "nlabels", "last", "lm_states", "pred_state")


def mutate_state(rng, state) -> None:
    """Carried hypotheses changed in place (shapes kept): one field's elements set to extremes, a frame set
    negative or (stateless) a context out of range, the cases the chunk entry checks."""
    hyps = state.hyps
    name = rng.choice(STATE_FIELDS + ("time", "pred_state"))
    value = hyps[name]
    if name == "pred_state":
        value = tuple(x.clone() for x in value)
        t = rng.choice(value)
    else:
        value = t = value.clone()
    hyps[name] = value
    flat = t.view(-1)
    if flat.numel() == 0:
        return
    for _ in range(rng.randint(1, 2)):
        i = rng.randrange(flat.numel())
        if t.is_floating_point():
            flat[i] = rng.choice(FLOATS)
        elif name == "time" and rng.random() < 0.7:
            flat[i] = rng.choice((-1, -(2**31), 10**6))
        else:
            info = torch.iinfo(t.dtype)
            flat[i] = max(info.min, min(info.max, rng.choice(INTS + (-2, 12, 13))))


def case_transducer_chunk(rng, P):
    """Streaming ALSD++ / AES++ / WIND, one engine call per chunk (``asrd_transducer_beam_chunk`` through
    ``BeamSearchDecoder.advance`` / ``finalize``): random float32 LSTM RNN-T / TDT models or an icefall
    stateless one, random chunkings, lengths and final flags, fusion on or off, WIND windows 1-5 with the lazy
    or the full window, and (sometimes) a carried state mutated between chunks."""
    from transducer_models import random_model

    from asrdecode.transducer import _checks
    from asrdecode.transducer.beam import BeamSearchDecoder

    method = rng.choice(("alsd", "aes", "wind"))
    stateless = rng.random() < 0.3 and _icefall(P) is not None
    tdt = method != "wind" and not stateless and rng.random() < 0.3
    cap = rng.choice((None, 1, 2, 3)) if method != "wind" else rng.choice((1, 2, 3))
    if stateless:
        m, V, D = _icefall(P), 12, 8
        fusion = []
        if rng.random() < 0.2:  # a user model (the per-step path); its blank is the model's (0)
            fusion.append((RowsModel(V, rng.randrange(1000), rng.random() < 0.2), 0.5))
            fusion[0][0].blank_id = 0
    else:
        V = rng.choice((6, 8))
        key = ("chunk", V, tdt, rng.randrange(3), rng.choice((1, 2)), cap is None)
        if key not in _MODELS:
            _MODELS[key] = random_model(key[3], V, V - 1, [0, 1, 2] if tdt else None, pred_layers=key[4],
                                        blank_bias=4.0 if cap is None else 1.0).float()
        m, D = _MODELS[key], 5
        fusion = [(f, w) for f, w in fusion_setup(rng, P, V) if getattr(f, "vocab_size", V) == V]
    B, T = rng.randint(1, 3), rng.randint(0, 9)
    enc = torch.randn(B, T, D) * rng.choice((1.0, 1.0, 10.0, 1e30))
    lengths = torch.tensor([rng.randint(0, T) for _ in range(B)])
    mark = torch.ones(B, dtype=torch.bool) if tdt else torch.tensor([rng.random() < 0.7 for _ in range(B)])
    bounds = sorted({rng.randint(1, T - 1) for _ in range(rng.randint(0, 4))}) if T > 1 else []
    beam = rng.randint(1, 4)
    kw = dict(beam=beam, nbest=rng.randint(1, beam), method=method, pruning=rng.choice(("late", "early")),
              max_symbols=cap, fusion=fusion, beta=rng.choice((0.0, 0.5)))
    if method == "wind":
        kw["window"] = _wind_window(rng)
    mutate_at = rng.randrange(len(bounds) + 2) if rng.random() < 0.3 else -1
    guard = _checks.MAX_SYMBOLS_GUARD
    _checks.MAX_SYMBOLS_GUARD = 64  # no cap: a runaway search stops early
    try:
        with _full_window(rng.random() < 0.5):
            dec = BeamSearchDecoder(m, engine="native", **kw)
            state = dec.init_state(B, D)
            edges = [0, *bounds, T]
            for i, (a, b) in enumerate(zip(edges, edges[1:])):
                if i == mutate_at:
                    mutate_state(rng, state)
                clen = (lengths - a).clamp(min=0, max=b - a)
                state = dec.advance(state, enc[:, a:b], clen, final=(lengths <= b) & mark)
            if mutate_at == len(edges) - 1:
                mutate_state(rng, state)
            return dec.finalize(state)
    finally:
        _checks.MAX_SYMBOLS_GUARD = guard


def case_modified_beam(rng, P, stateless: bool):
    """The C++ modified beam search: random LSTM / stateless weights (vocab 1-9, sometimes a blank or
    <unk> id out of range), random beams (0 included), lengths (out of range too) and encoder values."""
    import numpy as np

    from asrdecode.native.modified_beam import modified_beam_lstm, modified_beam_stateless
    from asrdecode.native.transducer_greedy_lstm import StatelessJointWeights

    V = rng.randint(1, 9)
    B, T = rng.randint(1, 3), rng.randint(0, 7)
    lengths = [rng.randint(-1 if rng.random() < 0.05 else 0, T + (1 if rng.random() < 0.05 else 0)) for _ in range(B)]
    beam = rng.choice((0, 1, 2, 3, 5, 9))
    unk = rng.choice((None, None, 0, V - 1, V, -3))
    if stateless:
        C, E, H = rng.randint(1, 3), 4 * rng.randint(1, 2), rng.randint(1, 9)
        g = np.random.default_rng(rng.randrange(1 << 30))
        w = StatelessJointWeights(g.standard_normal((V, E)), g.standard_normal((E, E // 2, C)),
                                  g.standard_normal(E) if rng.random() < 0.5 else None, 2, g.standard_normal((H, E)),
                                  g.standard_normal(H), g.standard_normal((V, H)) * 3, g.standard_normal(V), 0, V)
        enc = torch.randn(B, T, H) * rng.choice((1.0, 10.0, 1e30))
        return modified_beam_stateless(w, enc, lengths, beam=beam, unk_id=unk,
                                       start_context=rng.choice(("blank", "sherpa")))
    w, enc = _lstm_case(rng, V, B, T, tdt=False)
    return modified_beam_lstm(w, enc, lengths, beam=beam, unk_id=unk, fold_unk_id=rng.choice((None, 1)))


def _lstm_case(rng, V, B, T, tdt: bool):
    """Random LSTM transducer weights (cached per shape; TDT durations 0..2 with ``tdt``) and an encoder
    output [B, T, 5] of ordinary, huge or (sometimes) non-finite values."""
    from transducer_models import random_model

    from asrdecode.native.transducer_greedy_lstm import weights_from_lstm_transducer

    key = ("lstm", max(V, 2), rng.randrange(3), tdt)
    if key not in _MODELS:
        _MODELS[key] = weights_from_lstm_transducer(random_model(key[2], key[1], 0, [0, 1, 2] if tdt else None).float())
    enc = torch.randn(B, T, 5) * rng.choice((1.0, 10.0, 1e30))
    if rng.random() < 0.05:
        enc[..., 0] = rng.choice(FLOATS)
    return _MODELS[key], enc


def case_nemo_beam(rng, P):
    """The C++ NeMo beam search: random LSTM RNN-T / TDT weights, beams (0 included), <unk> ids and
    symbol caps (0 and out of range included), lengths (out of range too) and encoder values."""
    from asrdecode.native.nemo_beam import nemo_beam_lstm

    V = rng.randint(1, 9)
    B, T = rng.randint(1, 3), rng.randint(0, 7)
    lengths = [rng.randint(-1 if rng.random() < 0.05 else 0, T + (1 if rng.random() < 0.05 else 0)) for _ in range(B)]
    w, enc = _lstm_case(rng, V, B, T, tdt=rng.random() < 0.4)
    return nemo_beam_lstm(w, enc, lengths, beam=rng.choice((0, 1, 2, 3, 5, 9)),
                          unk_id=rng.choice((None, None, 0, V - 1, V, -3)), max_symbols=rng.choice((0, 1, 3, 10)))


def case_backtrack(rng, P):
    S, B, K = rng.randint(0, 6), rng.randint(1, 3), rng.randint(1, 4)
    tok = torch.randint(-1, 5, (S, B, K))
    par = torch.randint(-2, K + 2, (S, B, K)) if rng.random() < 0.3 else torch.randint(0, K, (S, B, K))
    slots = torch.randint(-1, K + (2 if rng.random() < 0.3 else 0), (B, rng.randint(1, 3)))
    return _lib.backtrack(tok, par, torch.zeros_like(tok), slots)


def case_check(rng, P):
    x, lengths = log_probs(rng, rng.randint(1, 3), rng.randint(0, 9), rng.randint(1, 40))
    if lengths is not None:
        lengths = lengths.clamp(-3, x.shape[1] + 3)
    return _lib.log_prob_extremes(x, lengths)


def _arpa_text(rng) -> bytes:
    """A small well-formed ARPA text (orders 1-4, every n-gram's context present), as bytes."""
    words = ["<s>", "</s>", "<unk>"] + sorted({"".join(rng.choice("abé") for _ in range(rng.randint(1, 3)))
                                                for _ in range(rng.randint(1, 6))})
    order = rng.randint(1, 4)
    grams = [[(w,) for w in words]]
    for _ in range(2, order + 1):
        grams.append(sorted({g + (rng.choice(words),) for g in rng.sample(grams[-1], min(4, len(grams[-1])))}))
    num = lambda: rng.choice(("-1.5", "-0.25", "-99", "0", "-2e-3", "-1E+1") if rng.random() < 0.98  # noqa: E731
                             else ("+0.5", "-inf", "x", "1e999", "-0x1"))
    lines = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, start=1)]
    for k, g in enumerate(grams, start=1):
        lines += ["", f"\\{k}-grams:"] + [f"{num()}\t{' '.join(x)}" + (f"\t{num()}" if k < order and rng.random() < 0.5
                                                                       else "") for x in g]
    return ("\n".join(lines + ["", "\\end\\", ""])).encode()


def case_arpa(rng, P):
    """The native ARPA reader: small random files, damaged in a few random bytes or not, plain or gzip,
    read in random block sizes (a model, None: the Python reader's turn, or a named error)."""
    import gzip
    import tempfile

    from asrdecode.lm.arpa import _read_native
    from asrdecode.native import arpa as native_arpa

    data = bytearray(_arpa_text(rng))
    for _ in range(rng.choice((0, 0, 1, 3))):
        i = rng.randrange(len(data))
        data[i:i + rng.randint(0, 2)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 2)))
    gz = rng.random() < 0.2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("f.arpa.gz" if gz else "f.arpa")
        path.write_bytes(gzip.compress(bytes(data)) if gz else bytes(data))
        old = native_arpa.CHUNK
        native_arpa.CHUNK = rng.choice((1, 3, 17, 1 << 16))
        try:
            return _read_native(path, rng.choice((None, 1 << 20, 64)))
        finally:
            native_arpa.CHUNK = old


ENTRIES = {
    "ctc_beam (whole)": lambda rng, P: case_ctc(rng, P, False, False),
    "ctc_beam (streamed)": lambda rng, P: case_ctc(rng, P, False, True),
    "ctc_beam + blank collapse": lambda rng, P: case_ctc(rng, P, True, rng.random() < 0.5),
    "wfst": case_wfst,
    "transducer alsd": lambda rng, P: case_transducer(rng, P, "alsd"),
    "transducer aes": lambda rng, P: case_transducer(rng, P, "aes"),
    "transducer wind": lambda rng, P: case_transducer(rng, P, "wind"),
    "transducer search (networks in C++)": case_transducer_search,
    "transducer chunk (streaming, networks in C++)": case_transducer_chunk,
    "modified beam (LSTM)": lambda rng, P: case_modified_beam(rng, P, False),
    "modified beam (stateless)": lambda rng, P: case_modified_beam(rng, P, True),
    "nemo beam (LSTM, RNN-T / TDT)": case_nemo_beam,
    "backtrack": case_backtrack,
    "check_log_probs": case_check,
    "arpa reader": case_arpa,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", default="", help="only the entry points whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(1)
    _lib.load()
    print(f"library: {_lib.library_path()}", flush=True)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    P = Pools(rng)
    names = [k for k in ENTRIES if args.only in k]
    counts: dict = {k: collections.Counter() for k in names}
    other = []
    t0 = time.time()
    for i in range(args.cases):
        name = names[i % len(names)]
        try:
            ENTRIES[name](rng, P)
            counts[name]["result"] += 1
        except AsrDecodeError as e:
            counts[name][type(e).__name__] += 1
        except Exception as e:  # noqa: BLE001 - anything else is a finding
            counts[name]["OTHER " + type(e).__name__] += 1
            if len(other) < 20:
                other.append(f"{name}: {traceback.format_exc()}")
        if (i + 1) % 5000 == 0:
            print(f"{i + 1} cases, {time.time() - t0:.0f} s", flush=True)
    wall = time.time() - t0
    rows = ["| entry point | cases | results | named errors | other |", "|---|---|---|---|---|"]
    for name, c in counts.items():
        named = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "result" and not k.startswith("OTHER"))
        oth = ", ".join(f"{k[6:]} {v}" for k, v in sorted(c.items()) if k.startswith("OTHER")) or "0"
        rows.append(f"| {name} | {sum(c.values())} | {c['result']} | {named or '-'} | {oth} |")
    text = "\n".join(rows) + f"\n\n{args.cases} cases in {wall:.0f} s (seed {args.seed}).\n"
    print(text)
    for o in other:
        print(o)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
    sys.exit(1 if other else 0)


if __name__ == "__main__":
    main()
