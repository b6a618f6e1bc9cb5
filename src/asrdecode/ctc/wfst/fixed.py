"""The WFST tensor engine's device loop (DESIGN rule 3; CUDA graphs on a GPU): the frame step of
:mod:`.fixed_step` run in rounds of :data:`UNROLL` frames, its buffers kept between calls, its capacities
grown when a call overflows.

:func:`run_fixed` runs a call's frames: rounds through :func:`~asrdecode.accel.run_until_done` (one CUDA
graph replay per round on a GPU, no host read inside), buffers in a :class:`~asrdecode.accel.LoopCache`
keyed by the graph's arrays, the settings and the bucketed sizes; a call that overflowed a capacity
(:class:`Capacities`: slots, rows, arc / item / epsilon budgets) runs again with larger ones, and the
history record is compacted into the state's :class:`~.stream_state.History` after it.
:func:`closure_fixed` runs the epsilon passes of the start tokens. Lattices are not recorded here: a state
recording one runs the dynamic engine (:meth:`WFSTDecoder._frame`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple

import torch

from ...accel import LoopCache, StepRunner, bucket, compiles, mark_lengths_dynamic, resolve_mode, run_until_done
from .fixed_step import GraphArrays, Search
from .stream_state import History, Tokens

__all__ = ["GraphArrays", "FixedLoop", "Capacities", "run_fixed", "closure_fixed", "LOOPS", "UNROLL",
           "DENSE_EPSILON_DEGREE", "dense_epsilon", "epsilon_layout"]

#: frames per round (one graph replay)
UNROLL = 4
#: loops (static buffers, captured graphs) kept between calls, and the start closures' buffers
LOOPS = LoopCache(4)
CLOSURES = LoopCache(4)
_CACHE_LOCK = threading.Lock()
STATE_NAMES = ("x", "lens", "t", "tok_s", "tok_sc", "tok_h", "over", "need", "rec_prev", "rec_word", "rec_lab2",
               "scratch", "front")


class FixedLoop(Search):
    """A :class:`Search` over ``Tb`` frames (a multiple of :data:`UNROLL`) with its emissions buffer
    ``x [Tb, Bb, V]``, lengths, the frame counter ``t [1]`` and the runner (captured graphs)."""

    def __init__(self, ga: GraphArrays, *, Tb: int, V: int, mode: str, **kw: Any) -> None:
        per = 1 + ga.eps_depth
        super().__init__(ga, stages=Tb * per, **kw)
        dev = self.tok_s.device
        self.Tb, self.stages_per_frame = Tb, per
        self.x = torch.zeros((Tb, self.Bb, V), device=dev)
        self.lens = torch.zeros(self.Bb, dtype=torch.int64, device=dev)
        self.t = torch.zeros(1, dtype=torch.int64, device=dev)
        self.runner = StepRunner(mode, STATE_NAMES)
        if compiles(mode):  # one compiled round for every length bucket: the frames stay symbolic
            mark_lengths_dynamic((self.x, 0), (self.rec_prev, 0), (self.rec_word, 0), (self.rec_lab2, 0))
        self.loaded = torch.zeros(0, dtype=torch.int64, device=dev)  # the call's loaded history ids
        # a frame's capacity checks, in the order the stages make them (_settle checks the order)
        emit = ([(2, self.M1)] if self.pre else []) + [(0, self.M), (1, self.C), (1, self.K)]
        eps = ([(1, self.K)] if self.eps_dense else [(3, self.Me), (4, self.Ce), (1, self.K)]) * ga.eps_depth
        self.set_schedule((emit + eps) * UNROLL)
        self.flags: list[int] = []  # the call's [overflow, then the needs (Search.need)]

    def frame(self) -> None:
        """One frame at the device counter ``t`` (utterances with ``t < lens``; the others unchanged)."""
        am = self.x.index_select(0, self.t)[0]
        live = self.lens > self.t
        r = self.t * self.stages_per_frame
        self.emitting(am, live, r)
        for p in range(self.ga.eps_depth):
            self.epsilon(r + 1 + p)
        self.t.add_(1)


#: the largest epsilon degree ``P`` for which the epsilon passes use dense rows (``K * (1 + P)`` columns per
#: utterance); above it, a budget of candidates (fewer elements, more ops)
DENSE_EPSILON_DEGREE = 4


def dense_epsilon(ga: GraphArrays) -> bool:
    """Whether the epsilon passes over ``ga`` use dense rows (:data:`DENSE_EPSILON_DEGREE`)."""
    return ga.P <= DENSE_EPSILON_DEGREE


@contextmanager
def epsilon_layout(dense: bool) -> Iterator[None]:
    """Inside this block, the fixed loops made run their epsilon passes in dense rows (``dense``) or over a budget
    of candidates, whatever the graph's epsilon degree (tests and benchmarks compare the two layouts)."""
    global DENSE_EPSILON_DEGREE
    saved = DENSE_EPSILON_DEGREE
    DENSE_EPSILON_DEGREE = 10**9 if dense else -1
    try:
        yield
    finally:
        DENSE_EPSILON_DEGREE = saved


def _round(loop: FixedLoop) -> None:
    # eager (a replayed graph's kernels): the round's capacity checks queued and settled at its end; compiled,
    # each check at once (Inductor fuses it into the kernel that computes its value; a settled batch would
    # concatenate values from separate kernels, 15 more kernels a round)
    loop.pending = None if torch.compiler.is_compiling() else []
    for _ in range(UNROLL):
        loop.frame()
    checks, loop.pending = loop.pending, None
    if checks is not None:
        loop._settle(checks)


class Capacities(NamedTuple):
    """A fixed loop's sizes: token slots ``K`` per utterance, winner rows ``C``, the arc budget ``M``, the item
    budget ``M1`` (acoustic pre-pruning; 0 without), the epsilon candidates' budget ``Me`` and their winner
    rows ``Ce``."""
    K: int
    C: int
    M: int
    M1: int
    Me: int
    Ce: int


def capacities(decoder: Any, ga: GraphArrays, Bb: int) -> Capacities:
    """The loop's sizes from the decoder's remembered capacities (they grow when a frame overflows)."""
    caps = decoder.__dict__.setdefault("_fixed_caps", {})
    C = caps.get(("C", ga.S), min(ga.S, 256))
    K = min(decoder.max_active, C)
    P = max(ga.P, 1)
    Me = bucket(Bb * min(caps.get(("Me", ga.S), 64), K * P), 64)
    Ce = min(caps.get(("Ce", ga.S), 64), K * P)
    if ga.pre and not decoder.min_active:  # pre-pruned frames need far fewer arcs (and items) than all
        per, per1 = caps.get(("M", ga.S), 512), caps.get(("M1", ga.S), 512)
        return Capacities(K, C, bucket(Bb * per, 64), bucket(Bb * per1, 64), Me, Ce)
    per = caps.get(("M", ga.S), min(K * max(ga.D, 1), 2048))
    return Capacities(K, C, bucket(Bb * per, 64), 0, Me, Ce)


def _grow(decoder: Any, ga: GraphArrays, Bb: int, need: list[int], cap: Capacities) -> None:
    """Remember larger capacities for what overflowed (``need``: most candidates, winners of a row, items,
    epsilon candidates, epsilon winners of a row)."""
    caps = decoder.__dict__.setdefault("_fixed_caps", {})
    if need[1] > cap.K and (need[1] > cap.C or cap.K < decoder.max_active):
        # (a quarter over the need: every slot costs in each stage; not doubled, the steady state is what counts)
        caps[("C", ga.S)] = min(ga.S, max(bucket(need[1] * 5 // 4, 16), cap.C + 16))
    for i, name, size, per in ((0, "M", cap.M, Bb), (2, "M1", cap.M1, Bb), (3, "Me", cap.Me, Bb), (4, "Ce", cap.Ce, 1)):
        if size and need[i] > size:  # budgets per utterance (Ce: per row)
            caps[(name, ga.S)] = max(-(-need[i] * 5 // 4 // per), 2 * size // per)


def run_fixed(decoder: Any, ga: GraphArrays, state: Any, am: torch.Tensor, lens: torch.Tensor,
              mode: str | None = None) -> None:
    """The frames of ``am [B, T, V]`` (scaled log-probs; ``lens [B]``) into ``state`` (tokens, history; not the
    offset) by the fixed-shape device loop (``mode``: eager, compile or cuda_graphs; None: the device's
    default); reruns with larger capacities when a frame overflowed."""
    B, T, V = am.shape
    if T == 0:
        return
    Bb = bucket(B, 8)
    Tb = -(-bucket(T, 16) // UNROLL) * UNROLL
    mode = resolve_mode(mode, am.device)
    boost = state.boost
    W = 0 if boost is None else boost.shape[1]
    dense = dense_epsilon(ga)
    while True:
        cap = capacities(decoder, ga, Bb)
        key = (mode, ga.key(), Bb, Tb, V, *cap, W, decoder.beam, decoder.max_active, decoder.min_active,
               dense, am.device)

        def make(cap: Capacities = cap) -> FixedLoop:
            return FixedLoop(ga, Tb=Tb, V=V, mode=mode, Bb=Bb, **cap._asdict(), beam=decoder.beam,
                             max_active=decoder.max_active, min_active=decoder.min_active, boost_width=W,
                             device=am.device, eps_dense=dense)

        with _CACHE_LOCK:
            loop: FixedLoop = LOOPS.get(key, make)
        with loop.lock:
            if _run_once(loop, state, am, lens, B, T, boost):
                state.toks = loop.unload(B, T * loop.stages_per_frame, loop.loaded, state.hist, state.offset)
                return
        _grow(decoder, ga, Bb, loop.flags[1:], cap)


def _run_once(loop: FixedLoop, state: Any, am: torch.Tensor, lens: torch.Tensor, B: int, T: int,
              boost: torch.Tensor | None) -> bool:
    """Load a call into ``loop`` and run its frames; False when a frame overflowed (``loop.flags``)."""
    loop.over.zero_()
    loop.need.zero_()
    loop.loaded = loop.load_tokens(state.toks, B)
    loop.x[:T, :B].copy_(am.transpose(0, 1))
    loop.lens.zero_()
    loop.lens[:B].copy_(lens)
    loop.t.zero_()
    if loop.boost is not None and boost is not None:
        loop.boost[:B].copy_(boost)
    rounds = -(-T // UNROLL)
    end = rounds * UNROLL
    run_until_done(loop.runner, _round, loop, lambda lp: (lp.t >= end)[0], first_check=rounds, limit=rounds)
    loop.flags = torch.cat([loop.over.long(), loop.need]).tolist()
    return not loop.flags[0]


def closure_fixed(decoder: Any, ga: GraphArrays, toks: Tokens, B: int, hist: History, boost: torch.Tensor | None
                  ) -> Tokens:
    """The epsilon closure of the start tokens ``toks`` (one per utterance, frame -1) with the fixed-shape
    passes run once (slots bound the closure exactly: no overflow)."""
    if ga.eps_depth == 0:
        return toks
    reach, width = 1, 1
    for _ in range(ga.eps_depth):
        width = min(width * ga.P, ga.S)
        reach = min(reach + width, ga.S)
    K = min(decoder.max_active, reach)
    Bb, dev = bucket(B, 8), toks.b.device
    W = 0 if boost is None else boost.shape[1]

    dense = dense_epsilon(ga)

    def make() -> Search:
        s = Search(ga, Bb=Bb, K=K, C=K, M=1, stages=ga.eps_depth, beam=decoder.beam, max_active=decoder.max_active,
                   min_active=decoder.min_active, boost_width=W, device=dev, eps_dense=dense)
        s.frame0, s.stages_per_frame = -1, ga.eps_depth
        return s

    with _CACHE_LOCK:
        s: Search = CLOSURES.get((ga.key(), Bb, K, W, decoder.beam, decoder.max_active, decoder.min_active, dense,
                                  dev), make)
    with s.lock:
        if boost is not None and s.boost is not None:
            s.boost[:B].copy_(boost)
        loaded = s.load_tokens(toks, B)
        s.front.copy_(s.tok_s < ga.S)
        for p in range(ga.eps_depth):
            s.epsilon(torch.full((1,), p, dtype=torch.int64, device=dev))
        return s.unload(B, ga.eps_depth, loaded, hist, torch.zeros(B, dtype=torch.int64, device=dev))
