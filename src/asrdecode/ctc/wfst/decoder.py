"""Batched, vectorised token-passing (Viterbi beam) decoder over a :class:`DecodingGraph`.

All utterances of a batch advance together, frame by frame. Active tokens are flat tensors
(utterance, state, score, history id). Each frame: expand every active token over its
emitting arcs (score += arc score + ``acoustic_scale * log_prob[token]`` + word boost),
prune by beam, recombine tokens reaching the same (utterance, state) keeping the best,
keep at most ``max_active`` per utterance, then run ``graph.eps_depth`` vectorised epsilon
passes (the epsilon closure). Backpointers are a history of (predecessor id, word, frame,
token) entries appended per frame; the 1-best is traced back after the last frame.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import torch

from ...configs import WFSTConfig, takes_config
from ...errors import DecodingInputError, check_emissions, check_lengths, check_weight
from ...results import Hypothesis
from ...native import wfst as native_wfst
from .._checks import check_emission_values, check_float
from ...native.choice import use_native
from . import fixed as _fixed
from .graph import DecodingGraph
from .lattice import LatticeRecorder, UtteranceLattice, take1d
from .stream_state import History, Tokens, WFSTStreamState

__all__ = ["WFSTDecoder", "WFSTStreamState", "attach_search_index"]

_NEG = float("-inf")
_LOWEST = torch.finfo(torch.float32).min  # the lowest cut-off: -inf scores are never inside
_BIG = torch.iinfo(torch.int64).max


def _check_nbest(nbest) -> None:
    if nbest is not None and (isinstance(nbest, bool) or not isinstance(nbest, int) or nbest < 1):
        raise DecodingInputError(f"nbest must be a positive int or None, got {nbest!r}")


def _any_per_utterance(flag: torch.Tensor, b: torch.Tensor, batch: int) -> torch.Tensor:
    """``[batch]`` bool: whether any token of each utterance has ``flag [N]`` (tokens' utterances ``b [N]``).
    The reduction runs on int32 (CUDA has no scatter on bool tensors)."""
    hits = torch.zeros(batch, dtype=torch.int32, device=flag.device)
    return hits.scatter_reduce_(0, b, flag.to(torch.int32), "amax") > 0


def _expand_ranges(lo: torch.Tensor, cnt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ranges ``lo[i] : lo[i] + cnt[i]``: (range index, position) of every element, each ``[M]``."""
    tok = torch.repeat_interleave(torch.arange(lo.shape[0], device=lo.device), cnt)
    first = torch.cumsum(cnt, 0) - cnt
    return tok, take1d(lo - first, tok) + torch.arange(tok.shape[0], device=lo.device)


def _expand(ptr: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For tokens in ``states [N]``: (token index, arc index) of every outgoing arc, each ``[M]``."""
    lo = take1d(ptr, states)
    return _expand_ranges(lo, take1d(ptr, states + 1) - lo)


@takes_config(WFSTConfig)
class WFSTDecoder:
    """Viterbi beam search of CTC log-probs over a TLG graph.

    Args:
        graph: the decoding graph (moved to the emissions' device on first use).
        config: the search's settings (:class:`~asrdecode.configs.WFSTConfig`: ``beam``, ``max_active``,
            ``min_active``, ``acoustic_scale``, ``lattice_beam``, ``dense_min_degree``, ``dense_memory_mb``,
            ``loop``, ``acceleration``, ``engine``; their help, bounds and defaults are written there); any of them may be
            given as a keyword instead or on top, and read as an attribute (``dec.beam``).
        blank_id: the model's blank id (must match the graph's; default: the graph's).

    Settings: tokens within ``beam`` of the utterance's best survive a frame (natural log; ``inf``: no
    beam pruning), at most ``max_active`` per utterance; ``acoustic_scale`` weighs the log-probs against
    the graph's (LM) scores. A lattice or n-best list (recorded only when asked for) keeps the arcs on
    paths within ``lattice_beam`` of the best. States with at least ``dense_min_degree`` emitting arcs get
    a dense ``[token] -> arc`` row (``dense_memory_mb`` caps their memory), so that each frame only looks
    at the arcs of tokens that can reach the beam (acoustic pre-pruning: the same results without it).
    ``min_active`` is kaldi's rule (its FasterDecoder default is 20): when fewer tokens of an utterance
    pass the beam, the best ``min_active`` (after recombination) are kept anyway (0: the beam alone; it
    turns the pre-pruning off). ``engine``: where :meth:`advance` runs the frame loop, as in
    :func:`asrdecode.ctc.beam_search` (both engines give the same hypotheses, n-best lists and lattices
    and share the state). ``loop``: the tensor engine's 1-best frame loop, ``"fixed"`` (static shapes, no
    host reads in the loop, CUDA graphs kept between calls), ``"dynamic"`` (tokens compacted every frame,
    host reads per frame) or ``"auto"`` (fixed on accelerators, dynamic on the CPU, where it is 4-9x faster
    and the native engine is the default anyway); lattice and n-best recording always run the dynamic
    loop, and every loop gives the same results. ``acceleration``: how the fixed loop runs (None / "auto":
    CUDA graphs on a GPU, eagerly elsewhere; "compile": its round under torch.compile; "eager";
    "cuda_graphs"); asking for "compile" or "cuda_graphs" picks the fixed loop under ``loop="auto"`` on any
    device and the tensor engine under ``engine="auto"``.

    Streaming: ``state = dec.init_state(B)``, ``dec.advance(state, chunk, lengths)`` per chunk (in place),
    ``dec.finalize(state)`` (``dec.partial(state)`` so far); ``dec(log_probs, lengths)`` is one call.
    Threads: a decoder may be shared by threads (a search's data lives in its state, scratch arrays are
    per thread); a state must not be advanced by two threads at once.
    """

    def __init__(self, graph: DecodingGraph, *, config: WFSTConfig | None = None, blank_id: int | None = None,
                 **settings: Any) -> None:
        self.config = WFSTConfig.build(config, settings, caller="WFSTDecoder")
        if blank_id is not None and int(blank_id) != graph.blank_id:
            raise DecodingInputError(f"blank_id {blank_id} differs from the graph's blank id {graph.blank_id}")
        self.graph = graph
        self.blank_id = graph.blank_id
        self._dense: tuple | None = None
        self._packed: tuple | None = None
        self._state_max: tuple | None = None
        self._fixed_arrays: tuple | None = None
        self._local = threading.local()  # per-thread scratch arrays (a decoder may serve several threads)
        self._move_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        """The config's settings read as attributes (``dec.beam``: ``dec.config.beam``)."""
        config = self.__dict__.get("config")
        if config is not None and name in WFSTConfig.names():
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_local", None)
        state.pop("_move_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self._move_lock = threading.Lock()

    # -- helpers ---------------------------------------------------------------------------
    def _buffers(self, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense per-(utterance, state) scratch arrays for recombination (-inf / int64 max when idle); one pair
        per thread, so that threads sharing the decoder never write into each other's."""
        buf = getattr(self._local, "scratch", None)
        if buf is None or buf[0].shape[0] < size or buf[0].device != device:
            buf = (torch.full((size,), _NEG, device=device), torch.full((size,), _BIG, dtype=torch.int64, device=device))
            self._local.scratch = buf
        return buf

    def _graph_on(self, device: torch.device) -> DecodingGraph:
        if self.graph.device != device:
            with self._move_lock:
                if self.graph.device != device:
                    self.graph = self.graph.to(device)
                    self._dense = None
                    self._packed = None
                    self._state_max = None
                    self._fixed_arrays = None
        self.graph.ensure_valid()  # both engines read only a validated graph
        return self.graph

    def _saved_index(self, g: DecodingGraph) -> dict | None:
        """The graph's attached search index when it was made with this decoder's dense settings."""
        index = g._search_index
        if index is None or index.get("dense_min_degree") != self.config.dense_min_degree \
                or index.get("dense_memory_mb") != self.config.dense_memory_mb:
            return None
        return index

    def _emit_max(self, g: DecodingGraph) -> torch.Tensor:
        """``[S]`` float32: each state's best emitting arc score (``-inf`` without emitting arcs)."""
        if self._state_max is None or self._state_max[0] is not g:
            m = torch.full((g.num_states,), _NEG, device=g.device).scatter_reduce(0, g.e_src, g.e_score.float(), "amax")
            self._state_max = (g, m.contiguous())
        return self._state_max[1]

    def _arc_rows(self, g: DecodingGraph) -> torch.Tensor:
        """Emitting arcs packed as ``[A, 4]`` int32 rows ``(2 * token + starts, dst, word, score bits)``:
        one memory access per arc instead of one per field (the per-frame gathers are memory bound)."""
        if self._packed is not None and self._packed[0] is g:
            return self._packed[1]
        index = self._saved_index(g)
        if index is not None and "arc_rows" in index:
            rows = index["arc_rows"]
        elif g.num_states >= 2**31 or len(g.words) >= 2**31 or 2 * g.vocab_size >= 2**31:  # pragma: no cover
            rows = None
        else:
            rows = torch.stack([
                (g.e_ilabel * 2 + g.e_start.long()).int(), g.e_dst.int(), g.e_olabel.int(),
                g.e_score.float().view(torch.int32)], 1).contiguous()
        self._packed = (g, rows)
        return rows

    def _mode(self, device: torch.device) -> str:
        """The ``acceleration`` setting resolved on ``device`` (:func:`~asrdecode.accel.resolve_mode`)."""
        asked = self.config.acceleration
        mode = _fixed.resolve_mode(asked, device)
        if asked in ("compile", "cuda_graphs") and self.config.loop == "dynamic":
            raise DecodingInputError(f"acceleration={asked!r} runs the fixed loop: use loop='fixed' or 'auto'")
        return mode

    def _graph_arrays(self, g: DecodingGraph, device: torch.device) -> "_fixed.GraphArrays | None":
        """The arrays of the fixed-shape search (:mod:`.fixed`), or None when the tensor engine runs the
        per-frame loop on ``device`` (``loop``; ``"auto"``: the fixed loop off the CPU or when an acceleration
        mode asks for it) or the fixed one cannot run on ``g`` (no emitting arcs, or a graph beyond int32 arc
        rows)."""
        fixed_on_cpu = self.config.acceleration in ("compile", "cuda_graphs")
        if self.config.loop == "dynamic" or (self.config.loop == "auto" and device.type == "cpu" and not fixed_on_cpu):
            return None
        if self._fixed_arrays is not None and self._fixed_arrays[0] is g:
            return self._fixed_arrays[1]
        rows = self._arc_rows(g)
        ga = None
        if rows is not None and rows.shape[0] > 0:  # pre-pruning as in the dynamic loop (not with min_active)
            dense = None if self.config.min_active else self._dense_rows(g)
            ga = _fixed.GraphArrays(g, rows, dense, self._emit_max(g))
        self._fixed_arrays = (g, ga)
        return ga

    def _dense_rows(self, g: DecodingGraph) -> tuple | None:
        """Arcs of the states with the most emitting arcs (at least ``dense_min_degree``, within
        ``dense_memory_mb``) indexed by (state, token): ``(row [S] int64, -1 = none; ptr [R * V + 1];
        arcs [.] emitting arc ids sorted by (row, token); e_max)``: the arcs of state ``s`` reading
        token ``k`` are ``arcs[ptr[row[s] * V + k] : ptr[row[s] * V + k + 1]]``."""
        if self._dense is not None and self._dense[0] is g:
            return self._dense[1]
        index = self._saved_index(g)
        if index is not None and "dense" in index:
            self._dense = (g, index["dense"])
            return index["dense"]
        out = None
        deg = g.e_ptr[1:] - g.e_ptr[:-1]
        V = g.vocab_size
        cap = int(self.config.dense_memory_mb * 2**20 // (8 * V))
        if g.e_src.numel() and cap > 0 and int(deg.max()) >= self.config.dense_min_degree:
            cand = torch.nonzero(deg >= self.config.dense_min_degree).squeeze(1)
            if cand.numel() > cap:
                cand = cand[torch.sort(torch.topk(deg[cand], cap).indices).values]
            row = torch.full((g.num_states,), -1, dtype=torch.int64, device=g.device)
            row[cand] = torch.arange(cand.numel(), device=g.device)
            arc_row = take1d(row, g.e_src)
            on = torch.nonzero(arc_row >= 0).squeeze(1)
            key = take1d(arc_row, on) * V + take1d(g.e_ilabel, on)
            if key.numel() > 1 and not bool((key[1:] >= key[:-1]).all()):  # arcs not sorted by token
                order = torch.argsort(key, stable=True)
                on, key = take1d(on, order), take1d(key, order)
            small = torch.int32 if g.e_src.shape[0] < 2**31 else torch.int64
            ptr = torch.zeros(cand.numel() * V + 1, dtype=small, device=g.device)
            ptr[1:] = torch.cumsum(torch.bincount(key, minlength=cand.numel() * V), 0)
            out = (row, ptr, on, float(g.e_score.max()))
        self._dense = (g, out)
        return out

    def search_index(self) -> dict:
        """The derived arrays this decoder computes from its graph on first use (packed arc rows,
        dense token rows) with the settings they depend on, for :func:`attach_search_index`."""
        g = self.graph
        return {"dense_min_degree": self.config.dense_min_degree, "dense_memory_mb": self.config.dense_memory_mb,
                "arc_rows": self._arc_rows(g), "dense": self._dense_rows(g)}

    def _boost_table(self, boosts: Sequence[Mapping[str, float] | None] | None, B: int, device) -> torch.Tensor | None:
        if boosts is None:
            return None
        if len(boosts) != B:
            raise DecodingInputError(f"boosts must have one entry per utterance ({B}), got {len(boosts)}")
        index = self.graph.word_index()
        table = torch.zeros(B, len(self.graph.words), dtype=torch.float32)
        for b, d in enumerate(boosts):
            for w, v in (d or {}).items():
                if w not in index or index[w] == 0:
                    raise DecodingInputError(f"boosts[{b}]: word {w!r} is not in the graph's vocabulary")
                table[b, index[w]] = check_weight(f"boosts[{b}][{w!r}]", check_float(f"boosts[{b}][{w!r}]", v))
        return table.to(device)

    def _prune(self, t: Tokens, B: int) -> Tokens:
        """Recombine same (utterance, state) keeping the best (earliest on ties), beam (with
        ``min_active``: or among the best ``min_active``), max_active."""
        if t.b.numel() == 0:
            return t
        S = self.graph.num_states
        top = torch.full((B,), _NEG, device=t.b.device).scatter_reduce(0, t.b, t.score, "amax")
        inside = t.score >= take1d(top, t.b) - self.config.beam
        # the beam first when it alone decides (the best score is the same before and after
        # recombination): fewer to sort
        if self.config.min_active == 0 and not bool(inside.all()):  # (often all are: no gathers)
            t = t.take(torch.nonzero(inside).squeeze(1))
        key = t.b * S + t.s
        n = key.shape[0]
        best, first = self._buffers(B * S, key.device)
        best.scatter_reduce_(0, key, t.score, "amax")
        idx = torch.arange(n, device=key.device)
        first.scatter_reduce_(0, key, torch.where(t.score == take1d(best, key), idx, _BIG), "amin")
        win = torch.nonzero(take1d(first, key) == idx).squeeze(1)
        best.index_fill_(0, key, _NEG)  # reset only what was touched
        first.index_fill_(0, key, _BIG)
        if win.shape[0] < n:
            t = t.take(win)
        if self.config.min_active:
            inside = t.score >= take1d(top, t.b) - self.config.beam
            if not bool(inside.all()):
                counts = torch.bincount(t.b, minlength=B)
                order = torch.argsort(t.score, descending=True, stable=True)
                order = order[torch.argsort(t.b[order], stable=True)]
                start = torch.cumsum(counts, 0) - counts
                rank = torch.empty_like(order)
                rank[order] = torch.arange(order.shape[0], device=order.device) - start[t.b[order]]
                t = t.take(torch.nonzero(inside | (rank < self.config.min_active)).squeeze(1))
        counts = torch.bincount(t.b, minlength=B)
        if int(counts.max()) > self.config.max_active:
            order = torch.argsort(t.score, descending=True, stable=True)
            order = order[torch.argsort(t.b[order], stable=True)]
            bs = t.b[order]
            start = torch.cumsum(counts, 0) - counts
            rank = torch.arange(bs.shape[0], device=bs.device) - start[bs]
            keep = order[rank < self.config.max_active]
            t = t.take(torch.sort(keep).values)
        return t

    def _candidates(self, g: DecodingGraph, dense: tuple, cur: Tokens, am_t: torch.Tensor, boost, B: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(token index, arc index) of the emitting arcs worth scoring this frame.

        Tokens in states without a dense row expand every arc. For the others, only the tokens
        ``k`` with ``am[b, k] + the token's score + max arc score + max boost >= cutoff`` are looked
        up, where ``cutoff = (best score of the best token's own expansion) - beam`` is a lower bound
        of the beam's final cutoff: every arc skipped would fail the beam anyway."""
        row, ptr, arcs, e_max = dense
        dev = cur.b.device
        V = am_t.shape[1]
        r = take1d(row, cur.s)
        high = r >= 0
        low_i = torch.nonzero(~high).squeeze(1)
        high_i = torch.nonzero(high).squeeze(1)
        tok_l, arc_l = _expand(g.e_ptr, take1d(cur.s, low_i))
        tok_l = take1d(low_i, tok_l)
        if high_i.numel() == 0:
            return tok_l, arc_l
        # a lower bound of the frame's best score: expand each utterance's best token
        n = cur.b.shape[0]
        best_src = torch.full((B,), _NEG, device=dev).scatter_reduce(0, cur.b, cur.score, "amax")
        idx = torch.arange(n, device=dev)
        first = torch.full((B,), n, device=dev).scatter_reduce(
            0, cur.b, torch.where(cur.score == take1d(best_src, cur.b), idx, n), "amin")
        first = take1d(first, torch.nonzero(first < n).squeeze(1))
        bt, ba = _expand(g.e_ptr, take1d(cur.s, first))
        bt = take1d(first, bt)
        bb = take1d(cur.b, bt)
        est = take1d(cur.score, bt) + take1d(g.e_score, ba) + take1d(am_t.reshape(-1), bb * V + take1d(g.e_ilabel, ba))
        bmax = torch.zeros(B, device=dev)
        if boost is not None:
            est = est + take1d(boost.reshape(-1), bb * boost.shape[1] + take1d(g.e_olabel, ba))
            bmax = boost.max(1).values.clamp(min=0)
        cutoff = torch.full((B,), _NEG, device=dev).scatter_reduce(0, bb, est, "amax") - self.config.beam
        # per token i of utterance b: the tokens k with am[b, k] >= cutoff[b] - score[i] - e_max - bmax[b]
        Vg = g.vocab_size
        hb = take1d(cur.b, high_i)
        thr = take1d(cutoff - e_max - bmax, hb) - take1d(cur.score, high_i)
        rows_am = torch.index_select(am_t[:, :Vg], 0, hb)
        pt, k = torch.nonzero(rows_am >= thr.unsqueeze(1), as_tuple=True)
        key = take1d(take1d(r, high_i), pt) * g.vocab_size + k
        lo = take1d(ptr, key).long()
        n_arcs = take1d(ptr, key + 1) - lo
        pair, pos = _expand_ranges(lo, n_arcs)
        return torch.cat([tok_l, take1d(take1d(high_i, pt), pair)]), torch.cat([arc_l, take1d(arcs, pos)])

    def _closure(
        self, t: Tokens, frontier: torch.Tensor, B: int, hist: History, offset: torch.Tensor, frame: int, boost,
        rec: LatticeRecorder | None = None,
    ) -> Tokens:
        """Epsilon passes from the tokens ``frontier`` (indices into ``t``); returns the closed set."""
        g = self.graph
        for _ in range(g.eps_depth):
            if frontier.numel() == 0:
                break
            f = t if frontier.shape[0] == t.b.shape[0] else t.take(frontier)  # (all of them: no gathers)
            tok, arc = _expand(g.p_ptr, f.s)
            if tok.numel() == 0:
                break
            b = take1d(f.b, tok)
            arc_score = take1d(g.p_score, arc)
            score = take1d(f.score, tok) + arc_score
            word = take1d(g.p_olabel, arc)
            if boost is not None:
                bw = take1d(boost.reshape(-1), b * boost.shape[1] + word)
                score = score + bw
                arc_score = arc_score + bw
            no_token = torch.full_like(word, -1)
            frames = take1d(offset, b) + frame
            hid = hist.add(take1d(f.hid, tok), word, frames, no_token, torch.zeros_like(word, dtype=torch.bool))
            if rec is not None:
                rec.epsilon(b, take1d(f.s, tok), take1d(g.p_dst, arc), word, frames, arc_score, score)
            new = Tokens(b, take1d(g.p_dst, arc), score, hid)
            n_old = t.b.shape[0]
            merged = Tokens.cat(t, new)
            # the new tokens that survive recombination and pruning form the next frontier
            is_new = torch.cat([torch.zeros(n_old, dtype=torch.bool, device=b.device), torch.ones_like(b, dtype=torch.bool)])
            kept = self._prune_idx(merged, B)
            t = merged.take(kept)
            frontier = torch.nonzero(is_new[kept]).squeeze(1)
        return t

    def _prune_idx(self, t: Tokens, B: int) -> torch.Tensor:
        """Indices (ascending) of the tokens :meth:`_prune` keeps (it keeps the input order)."""
        marker = Tokens(t.b, t.s, t.score, torch.arange(t.b.shape[0], device=t.b.device))
        return self._prune(marker, B).hid

    # -- decoding --------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(
        self,
        log_probs: torch.Tensor,
        lengths: torch.Tensor | None = None,
        boosts: Sequence[Mapping[str, float] | None] | None = None,
        frame_index: torch.Tensor | None = None,
        nbest: int | None = None,
        return_lattice: bool = False,
    ):
        """Decode ``log_probs [B, T, V]`` (``lengths [B]``) to one :class:`Hypothesis` per utterance.

        ``frame_index [B, T]``: the original frame of each input frame, as returned by
        :func:`asrdecode.ctc.blank_collapse`; timestamps and word frames are then mapped back to
        the frames before the collapse.

        ``boosts``: optional per-utterance ``{word: boost}`` added to the score each time an arc
        outputting that word is taken (the graph is not copied). ``Hypothesis.words`` holds
        ``(word, start_frame, end_frame)``: the first and last frame of the tokens spelling the word;
        ``tokens`` / ``timestamps`` are the output tokens of the best path and the frame each starts
        at; ``score`` is ``acoustic_scale * sum log_probs + graph score (+ boosts)``.

        ``nbest=N``: return ``list[list[Hypothesis]]`` instead, up to ``N`` distinct word sequences
        per utterance, best first, from a lattice recorded during the search (pruned with
        ``lattice_beam``); entry 0 is the 1-best, each other entry is its word sequence's best path
        in the lattice (tokens, timestamps, word frames, total score as for the 1-best).
        ``return_lattice=True``: also return one ``kaldifst.Lattice`` per utterance (``None`` if
        nothing survived): ``(hyps, lattices)``. Input label ``token + 1`` (0: epsilon arc), output
        label the word id (``graph.words``), weight (graph cost incl. boosts, acoustic cost incl.
        ``acoustic_scale``), costs = -scores.
        """
        x = check_emissions("log_probs", log_probs)
        if frame_index is not None and (
            not isinstance(frame_index, torch.Tensor) or frame_index.shape != x.shape[:2]
            or frame_index.is_floating_point() or frame_index.dtype == torch.bool
        ):
            raise DecodingInputError(f"frame_index must be an integer tensor of shape {tuple(x.shape[:2])}")
        _check_nbest(nbest)
        state = self.init_state(x.shape[0], x.device, boosts, lattice=nbest is not None or return_lattice)
        self.advance(state, x, lengths)
        out = self.hypotheses(state, nbest=nbest, return_lattice=return_lattice)
        hyps = out[0] if return_lattice else out
        if frame_index is not None:
            fi = frame_index.tolist()
            for b, hs in enumerate(hyps):
                for h in (hs if nbest is not None else [hs]):
                    h.timestamps = [fi[b][t] for t in h.timestamps]
                    if h.words is not None:
                        h.words = [(w, fi[b][s], fi[b][e]) for w, s, e in h.words]
        return out

    decode = __call__  # the one-shot name every decoder object has

    def init_state(
        self, batch: int, device: torch.device | str = "cpu", boosts: Sequence[Mapping[str, float] | None] | None = None,
        lattice: bool = False,
    ) -> "WFSTStreamState":
        """A fresh decoding state for ``batch`` utterances (streaming: feed chunks to :meth:`advance`).

        ``lattice=True`` records a lattice (for ``hypotheses(state, nbest=N)`` and lattices).
        """
        dev = torch.device(device)
        g = self._graph_on(dev)
        B = int(batch)
        hist = History()
        zero = torch.zeros(B, dtype=torch.int64, device=dev)
        hid0 = hist.add(torch.full((B,), -1, device=dev), zero, zero - 1, zero - 1, torch.zeros(B, dtype=torch.bool, device=dev))
        toks = Tokens(torch.arange(B, device=dev), torch.full((B,), g.start, device=dev), torch.zeros(B, device=dev), hid0)
        boost = self._boost_table(boosts, B, dev)
        rec = LatticeRecorder(self.config.lattice_beam, g.eps_depth) if lattice else None
        ga = None if lattice else self._graph_arrays(g, dev)
        if ga is not None:  # the fixed-shape passes: no host reads
            toks = _fixed.closure_fixed(self, ga, toks, B, hist, boost)
        else:
            toks = self._closure(toks, torch.arange(B, device=dev), B, hist, zero, -1, boost, rec)
        if rec is not None:
            rec.nid = rec.close_step(toks.b, toks.s, toks.score, g.num_states)
            at_start = torch.nonzero(toks.s == g.start).squeeze(1)
            rec.start_node = torch.full((B,), -1, dtype=torch.int64, device=dev).index_copy_(
                0, take1d(toks.b, at_start), take1d(rec.nid, at_start))
        return WFSTStreamState(toks, hist, zero.clone(), boost, B, rec)

    @torch.no_grad()
    def advance(
        self, state: "WFSTStreamState", log_probs: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> "WFSTStreamState":
        """Consume one chunk ``log_probs [B, T, V]`` (``lengths [B]`` valid frames of it); updates ``state``.

        Chunk by chunk decoding gives the same result as one call on the whole utterances.
        """
        x = check_emissions("log_probs", log_probs)
        B, T, V = x.shape
        if B != state.batch:
            raise DecodingInputError(f"log_probs has batch {B}, the state was made for {state.batch}")
        lens = check_lengths(lengths, B, T, device=x.device)
        if x.numel():
            check_emission_values("log_probs", x, None if lengths is None else lens)
        if V < self.graph.vocab_size:
            raise DecodingInputError(
                f"log_probs has {V} classes but the graph reads tokens up to {self.graph.vocab_size - 1}"
            )
        g = self._graph_on(x.device)
        am = x.float() * self.config.acoustic_scale
        mode = self._mode(x.device)
        if use_native(self.config.engine, x.device, "log_probs", eager=mode == "eager"):
            rows = self._arc_rows(g)
            if rows is not None:
                native_wfst.run_frames(self, state, am, lens, rows, self._emit_max(g))
                state.offset = state.offset + lens
                return state
            if self.config.engine == "native":  # pragma: no cover - graphs beyond int32 arc rows
                raise DecodingInputError("engine='native' needs a graph with fewer than 2**31 states, words and arcs")
        ga = self._graph_arrays(g, x.device) if state.lattice is None else None
        if ga is not None:  # 1-best: the fixed-shape device loop (:mod:`.fixed`)
            _fixed.run_fixed(self, ga, state, am, lens, mode)
            state.offset = state.offset + lens
            return state
        toks = state.toks
        dense = self._dense_rows(g) if not self.config.min_active else None
        rows = self._arc_rows(g)
        # the frames every utterance has, and the last one any has: two host reads per call instead of
        # two per frame (an utterance without tokens past its end changes nothing either way)
        n_all, n_any = (torch.stack([lens.min(), lens.max()]).tolist() if B else (0, 0))
        for t in range(min(T, n_any)):
            live = None if t < n_all else lens[toks.b] > t
            toks = self._frame(state, toks, live, am[:, t], t, dense, rows)
        state.toks = toks
        state.offset = state.offset + lens
        return state

    def _frame(self, state: "WFSTStreamState", toks: Tokens, live: torch.Tensor | None, am_t: torch.Tensor, t: int,
               dense: tuple | None, rows: torch.Tensor | None) -> Tokens:
        """One frame of the tensor engine: the tokens ``toks`` (``live [N]``: their utterance has frame ``t``;
        ``None``: all have)
        expanded over their emitting arcs scored with ``am_t [B, V]`` (scaled log-probs), pruned, recorded in
        the state's history (and lattice), epsilon-closed. Returns the new tokens."""
        g, B, V, dev = self.graph, state.batch, am_t.shape[1], am_t.device
        hist, boost, offset, rec, S = state.hist, state.boost, state.offset, state.lattice, g.num_states
        all_live = live is None
        if live is None:  # (the usual case: no gathers)
            cur, kept = toks, None
            live_idx = dead_idx = None
        else:
            live_idx, dead_idx = torch.nonzero(live).squeeze(1), torch.nonzero(~live).squeeze(1)
            cur = toks.take(live_idx)
            kept = toks.take(dead_idx)
        if dense is None:
            tok, arc = _expand(g.e_ptr, cur.s)
        else:
            tok, arc = self._candidates(g, dense, cur, am_t, boost, B)
        b = take1d(cur.b, tok)
        if rows is None:  # pragma: no cover - graphs too large for int32 rows
            lab2 = take1d(g.e_ilabel, arc) * 2 + take1d(g.e_start, arc).long()
            dst_a, word_a, arc_sc = take1d(g.e_dst, arc), take1d(g.e_olabel, arc), take1d(g.e_score, arc)
        else:
            r = torch.index_select(rows, 0, arc)
            lab2, dst_a, word_a = r[:, 0].long(), r[:, 1].long(), r[:, 2].long()
            arc_sc = r[:, 3].contiguous().view(torch.float32)
        lab = lab2 >> 1
        score = take1d(cur.score, tok) + arc_sc + take1d(am_t.reshape(-1), take1d(cur.b * V, tok) + lab)
        if boost is not None:
            score = score + take1d(boost.reshape(-1), b * boost.shape[1] + word_a)
        # beam before gathering the rest (the same cutoff _prune applies; min_active may keep more); a -inf
        # score (a class of probability 0) is no path, never a token
        if self.config.min_active:
            sel = torch.nonzero(score > _NEG).squeeze(1)
        else:
            top = torch.full((B,), _NEG, device=dev).scatter_reduce(0, b, score, "amax")
            sel = torch.nonzero(score >= (take1d(top, b) - self.config.beam).clamp_min(_LOWEST)).squeeze(1)
        if dense is not None:  # the order of the plain expansion (ties in recombination go to the first)
            sel = take1d(sel, torch.argsort(take1d(tok, sel) * g.e_src.shape[0] + take1d(arc, sel)))
        tok, arc, b, lab, score = take1d(tok, sel), take1d(arc, sel), take1d(b, sel), take1d(lab, sel), take1d(score, sel)
        word, dst, starts = take1d(word_a, sel), take1d(dst_a, sel), take1d(lab2, sel) & 1 == 1
        if rec is not None:
            graph_part = take1d(g.e_score, arc)
            if boost is not None:
                graph_part = graph_part + take1d(boost.reshape(-1), b * boost.shape[1] + word)
            assert rec.nid is not None  # set by init_state / every step
            cur_nid = rec.nid if all_live else take1d(rec.nid, live_idx)  # type: ignore[arg-type]  # set: not all_live
            rec.emitting(take1d(cur_nid, tok), b, dst, word, lab, starts,
                         take1d(offset, b) + t, graph_part, take1d(am_t.reshape(-1), b * V + lab), score)
        new = Tokens(b, dst, score, torch.arange(b.shape[0], device=dev))  # hid: local index for now
        new = self._prune(new, B)
        sel = new.hid
        new.hid = hist.add(take1d(cur.hid, take1d(tok, sel)), take1d(word, sel), take1d(offset, new.b) + t, take1d(lab, sel),
                           take1d(starts, sel))
        new = self._closure(new, torch.arange(new.b.shape[0], device=dev), B, hist, offset, t, boost, rec)
        if rec is not None:
            nid = rec.close_step(new.b, new.s, new.score, S)
            rec.nid = nid if all_live else torch.cat([take1d(rec.nid, dead_idx), nid])  # type: ignore[arg-type]  # set: not all_live
        return new if all_live else Tokens.cat(kept, new)  # type: ignore[arg-type]  # kept: set when not all_live

    def hypotheses(self, state: "WFSTStreamState", nbest: int | None = None, return_lattice: bool = False):
        """The 1-best of each utterance so far (final weights applied; the state is not changed).

        ``nbest`` / ``return_lattice`` as in :meth:`__call__`; they need a state made with
        ``init_state(..., lattice=True)``. The n-best list at the end of a stream equals the one of
        a single call on the whole utterances.
        """
        _check_nbest(nbest)
        self._graph_on(state.toks.b.device)
        best = self._best(state.toks, state.batch, state.hist)
        if nbest is None and not return_lattice:
            return best
        if state.lattice is None:
            raise DecodingInputError("nbest / return_lattice need a state recording a lattice: init_state(..., lattice=True)")
        lats = self._lattices(state)
        hyps = best if nbest is None else [self._nbest(lat, h, nbest) for lat, h in zip(lats, best)]
        if return_lattice:
            return hyps, [None if lat is None else lat.to_kaldi() for lat in lats]
        return hyps

    def partial(self, state: "WFSTStreamState") -> list[Hypothesis]:
        """The 1-best of each utterance so far (the same as :meth:`hypotheses` without options)."""
        return self.hypotheses(state)

    def finalize(self, state: "WFSTStreamState", nbest: int | None = None, return_lattice: bool = False):
        """The results at the end of the streams: :meth:`hypotheses` (token passing needs no end step; the
        graph's final weights are applied to every read-out). ``nbest`` / ``return_lattice`` as there."""
        return self.hypotheses(state, nbest=nbest, return_lattice=return_lattice)

    def _lattices(self, state: "WFSTStreamState") -> list[UtteranceLattice | None]:
        toks, g = state.toks, self.graph
        fin = take1d(g.final_score, toks.s)
        any_final = _any_per_utterance(torch.isfinite(fin), toks.b, state.batch)
        fin = torch.where(take1d(any_final, toks.b), fin, torch.zeros_like(fin))
        assert state.lattice is not None and state.lattice.nid is not None  # checked by hypotheses()
        return state.lattice.utterances(state.lattice.nid, toks.b, fin, state.batch)

    def _nbest(self, lat: UtteranceLattice | None, best: Hypothesis, n: int) -> list[Hypothesis]:
        """``best`` (the Viterbi 1-best) followed by the lattice's next best distinct word sequences."""
        out = [best]
        if lat is None or n == 1:
            return out
        index = self.graph.word_index()
        assert best.words is not None  # WFST hypotheses carry their words
        best_ids = [index[w] for w, _, _ in best.words]
        for words, _ in lat.nbest_words(n + 1):
            if len(out) == n:
                break
            if words == best_ids:
                continue
            found = lat.best_path(words)
            if found is None:  # pragma: no cover - a word sequence of the lattice always has a path
                continue
            arcs, final = found
            entries = [(int(lat.token[a]), bool(lat.start[a]), int(lat.frame[a]), int(lat.word[a])) for a in arcs]
            score = float(lat.graph[arcs].sum() + lat.am[arcs].sum()) + final
            out.append(self._hypothesis(entries, score))
        out[1:] = sorted(out[1:], key=lambda h: -h.score)
        return out

    def _word_times(self, arc_words: list[tuple[int, int]], toks: list[list[int]]) -> list[tuple[str, int, int]]:
        """Word (start, end) frames: the first frame of its first token and the last frame of its last.

        The tokens are split into the words' pronunciations (the graph's lexicon): the output label of
        a word can sit anywhere from its first token to a later word's (determinisation delays it while
        the spelling is ambiguous), so the arcs' frames do not say where a word is. Without recorded
        pronunciations, the lexicon's word lengths when every word has one; else (older graph files)
        the frames of the arcs that output the words.
        """
        g = self.graph
        bounds = self._word_spans([w for w, _ in arc_words], [t[0] for t in toks])
        if bounds is not None:
            return [(g.words[w], toks[a][1], toks[b - 1][2]) if b > a else (g.words[w], f, f)
                    for (w, f), (a, b) in zip(arc_words, bounds)]
        nxt = [f for _, f in arc_words[1:]] + [None]
        return [(g.words[w], f, f if e is None else max(f, e - 1)) for (w, f), e in zip(arc_words, nxt)]

    def _word_spans(self, words: list[int], tokens: list[int]) -> list[tuple[int, int]] | None:
        """``[(first token, end token)]`` per word: ``tokens`` split into one pronunciation of each word in
        order (the first split found, words left to right, a word's pronunciations in lexicon order);
        ``None`` when the graph records no pronunciations and no single length per word, or no split fits."""
        g = self.graph
        if g.pron_ptr is None:
            lens = g.word_lengths
            if lens is None or not all(lens[w] for w in words) or sum(lens[w] for w in words) != len(tokens):
                return None
            out, k = [], 0
            for w in words:
                out.append((k, k + lens[w]))
                k += lens[w]
            return out
        # reachable token positions after each word, with the position each came from
        back: list[dict[int, int]] = []
        reach = {0: -1}
        for w in words:
            nxt: dict[int, int] = {}
            for pos in reach:
                for p in g.pronunciations(w):
                    end = pos + len(p)
                    if end not in nxt and tuple(tokens[pos:end]) == p:
                        nxt[end] = pos
            if not nxt:
                return None
            back.append(nxt)
            reach = nxt
        if len(tokens) not in reach:
            return None
        spans, end = [], len(tokens)
        for nxt in reversed(back):
            start = nxt[end]
            spans.append((start, end))
            end = start
        return spans[::-1]

    def _best(self, toks: Tokens, B: int, hist: History) -> list[Hypothesis]:
        g = self.graph
        fin = toks.score + g.final_score[toks.s]
        any_final = _any_per_utterance(torch.isfinite(fin), toks.b, B)
        total = torch.where(any_final[toks.b], fin, toks.score)
        best = torch.full((B,), _NEG, device=fin.device).scatter_reduce(0, toks.b, total, "amax")
        cand = torch.where(total == best[toks.b], torch.arange(toks.b.shape[0], device=fin.device), toks.b.shape[0])
        win = torch.full((B,), toks.b.shape[0], device=fin.device).scatter_reduce(0, toks.b, cand, "amin")
        # walk the backpointers in numpy (converting the whole history to lists costs more than the search)
        prev = torch.cat(hist.prev).cpu().numpy()
        cols = [torch.cat(c).cpu().numpy() for c in (hist.token, hist.start, hist.frame, hist.word)]
        win_l = win.cpu().tolist()
        hid_l = toks.hid.cpu().tolist()
        best_l = best.cpu().tolist()
        out = []
        for b in range(B):
            if win_l[b] >= len(hid_l):  # no surviving token (cannot happen with a connected graph)
                out.append(Hypothesis([], [], float("-inf"), words=[]))
                continue
            path = []
            h = hid_l[win_l[b]]
            while h >= 0:
                path.append(h)
                h = int(prev[h])
            path.reverse()
            token, start, frame, word = (c[path].tolist() for c in cols)
            out.append(self._hypothesis(list(zip(token, start, frame, word)), float(best_l[b])))
        return out

    def _hypothesis(self, path: list[tuple[int, bool, int, int]], score: float) -> Hypothesis:
        """A hypothesis from a path's arcs in order: (token read or -1, token starts, frame, word id)."""
        toks: list[list[int]] = []  # [token, first frame, last frame]
        arc_words: list[tuple[int, int]] = []  # (word id, frame of the arc that output it)
        for lab, start, frame, word in path:
            if lab >= 0:
                if start:
                    toks.append([lab, frame, frame])
                elif toks and lab == toks[-1][0]:
                    toks[-1][2] = frame
            if word > 0:
                arc_words.append((word, max(frame, 0)))
        out_words = self._word_times(arc_words, toks)
        return Hypothesis([x[0] for x in toks], [x[1] for x in toks], score, words=out_words)


def attach_search_index(graph: DecodingGraph, dense_min_degree: int = 64, dense_memory_mb: float = 512.0) -> DecodingGraph:
    """Compute the decoder's derived arrays of ``graph`` once and attach them (saved with the graph, so
    a decoder with the same ``dense_*`` settings starts without recomputing them). Returns ``graph``."""
    graph._search_index = WFSTDecoder(graph, dense_min_degree=dense_min_degree,
                                      dense_memory_mb=dense_memory_mb).search_index()
    return graph
