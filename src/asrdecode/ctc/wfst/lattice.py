"""Lattice recording for :class:`~asrdecode.ctc.wfst.WFSTDecoder` and n-best lists through OpenFst.

A lattice node is a token that survived a frame: (utterance, frame, graph state). While the
decoder runs (only when a lattice is asked for) every expanded arc whose source and destination
tokens both survive the frame, and whose score is within ``lattice_beam`` of the destination's
best, is recorded with its graph part (arc score + boost) and acoustic part (scaled log-prob).
When the lattice is read, a forward-backward pass over the frames prunes it globally: an arc
stays when the best complete path through it is within ``lattice_beam`` of the best path.

N-best lists of distinct word sequences come from one pass over the lattice in topological order
that keeps the ``n`` best distinct word sequences at every node (OpenFst's epsilon removal and
determinisation of the word acceptor, the former way, stays as the fallback for lattices with a
cycle); each word sequence's best alignment (tokens, frames) is then the shortest path (OpenFst,
``kaldifst``) of the lattice composed with that sequence.

The work is bounded (a lattice of noise can hold a million arcs, whose epsilon removal and
determinisation ran for minutes into gigabytes): an utterance's lattice keeps at most
:data:`MAX_LATTICE_ARCS` arcs, by narrowing its beam (the arcs on the best paths stay, so every
word sequence scoring above the narrowed beam keeps its exact best score); the n-best
determinisation is pruned (sequences within 1, 2, 4, ... of the best, up to the lattice beam,
until ``n`` are found) and stops at :data:`MAX_NBEST_STATES` states. When a bound is hit the result is
*truncated*, never wrong: the n-best list may have fewer than ``n`` entries (the 1-best, from the
search itself, is always there), :attr:`UtteranceLattice.truncated` is set and a
:class:`LatticeTruncatedWarning` is issued.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["LatticeRecorder", "UtteranceLattice", "LatticeTruncatedWarning", "MAX_LATTICE_ARCS",
           "MAX_NBEST_STATES"]

#: most arcs an utterance's lattice keeps (its beam narrows until it fits)
MAX_LATTICE_ARCS = 100_000
#: most states of the word-sequence determinisation behind an n-best list
MAX_NBEST_STATES = 10_000
_UNPRUNED = 1e4  # a threshold this wide (or an infinite lattice beam): determinise without pruning


class LatticeTruncatedWarning(UserWarning):
    """A lattice or n-best list hit a work bound: fewer arcs / word sequences than the beam allowed."""


def take1d(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[idx]`` for 1-D ``x`` (``index_select`` is much faster than advanced indexing on CPU)."""
    return torch.index_select(x, 0, idx)


_ARC_FIELDS = ("src", "dst", "b", "word", "token", "start", "frame", "graph", "am", "step", "eps")


@dataclass
class UtteranceLattice:
    """One utterance's pruned lattice as arrays (arcs in topological order of their frames).

    ``src, dst`` are local node ids (``0`` is the start node), ``word`` the graph's word id
    (0: none), ``token`` the model token read (-1: epsilon arc), ``start`` whether a new output
    token starts there, ``frame`` the frame of the arc (-1 before the first frame), ``graph`` and
    ``am`` the score parts (natural log; ``am`` already multiplied by the acoustic scale);
    ``final`` maps final nodes to their final score.
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    word: np.ndarray
    token: np.ndarray
    start: np.ndarray
    frame: np.ndarray
    graph: np.ndarray
    am: np.ndarray
    final: dict[int, float] = field(default_factory=dict)
    truncated: bool = False
    beam: float = float("inf")
    score_floor: float = float("-inf")  # a truncated lattice holds every path scoring at least this, whole
    _index_fst: object = field(default=None, repr=False, compare=False)

    def _text(self, ilabel: np.ndarray, olabel: np.ndarray) -> str:
        cost = -(self.graph.astype(np.float64) + self.am)
        lines = [f"{s} {d} {i} {o} {c!r}" for s, d, i, o, c in
                 zip(self.src.tolist(), self.dst.tolist(), ilabel.tolist(), olabel.tolist(), cost.tolist())]
        finals = [f"{n} {-v!r}" for n, v in sorted(self.final.items())]
        # fstcompile takes the first listed state as the start: node 0 (arcs in topological order
        # start there; without arcs node 0 is the only final node)
        lines.sort(key=lambda ln: not ln.startswith("0 "))
        return "\n".join(lines + finals) + "\n"

    def word_fst(self):
        """The lattice as a word acceptor (``kaldifst.StdVectorFst``, costs = -scores)."""
        import kaldifst

        return kaldifst.compile(self._text(self.word, self.word))

    def to_kaldi(self):
        """A ``kaldifst.Lattice``: input label ``token + 1`` (0 on epsilon arcs), output label the
        word id, weights (graph cost, acoustic cost) with cost = -score."""
        import kaldifst

        lat = kaldifst.Lattice()
        for _ in range(self.num_nodes):
            lat.add_state()
        lat.start = 0
        for s, d, t, w, g, a in zip(self.src.tolist(), self.dst.tolist(), self.token.tolist(), self.word.tolist(),
                                    self.graph.tolist(), self.am.tolist()):
            lat.add_arc(s, kaldifst.LatticeArc(t + 1, w, kaldifst.LatticeWeight(-g, -a), d))
        for n, v in self.final.items():
            lat.set_final(n, kaldifst.LatticeWeight(-v, 0.0))
        return lat

    def nbest_words(self, n: int) -> list[tuple[list[int], float]]:
        """The ``n`` best distinct word sequences (word ids) with their best path score, best first.

        One pass over the lattice in topological order keeps, at every node, the ``n`` best distinct
        word sequences reaching it (exact: a sequence that is not among a node's ``n`` best prefixes
        loses to ``n`` distinct sequences sharing its suffix): ``O(arcs * n)`` work, where epsilon
        removal and determinisation of a lattice of noise ran for minutes. A lattice with a cycle
        (not made by the decoder) goes through :meth:`_nbest_openfst`."""
        if not self.final:
            return []
        rank = _topological_rank(self.num_nodes, self.src, self.dst)
        if rank is None:
            return self._nbest_openfst(n)
        seq_of: dict[tuple[int, int], int] = {}  # (prefix id, word) -> sequence id; 0 = no words
        parent: list[tuple[int, int]] = [(-1, 0)]
        cand: list[dict[int, float] | None] = [None] * self.num_nodes
        cand[0] = {0: 0.0}
        best: list[list[tuple[float, int]] | None] = [None] * self.num_nodes
        score = self.graph.astype(np.float64) + self.am
        src, dst, word = self.src.tolist(), self.dst.tolist(), self.word.tolist()
        for a in np.argsort(rank[self.src], kind="stable").tolist():
            s = src[a]
            top = best[s]
            if top is None:
                top = best[s] = _top(cand[s], n)
                cand[s] = None
            if not top:
                continue
            here = cand[dst[a]]
            if here is None:
                here = cand[dst[a]] = {}
            w, sc_a = word[a], score[a]
            for sc, q in top:
                if w > 0:
                    key = (q, w)
                    q = seq_of.get(key, -1)
                    if q < 0:
                        q = seq_of[key] = len(parent)
                        parent.append(key)
                if sc + sc_a > here.get(q, -np.inf):
                    here[q] = sc + sc_a
            if len(here) > 8 * n:
                cand[dst[a]] = dict((q, v) for v, q in _top(here, n))
        total: dict[int, float] = {}
        for f, v in self.final.items():
            kept = best[f]
            top = kept if kept is not None else _top(cand[f], n)
            for sc, q in top:
                if sc + v > total.get(q, -np.inf):
                    total[q] = sc + v
        out = []
        for sc, q in _top(total, n):
            if sc < self.score_floor - 1e-6 * max(1.0, abs(sc)):  # below the floor a truncated lattice may miss a better path of q
                break
            words = []
            while q > 0:
                q, w = parent[q]
                words.append(w)
            out.append((words[::-1], sc))
        return out

    def _nbest_openfst(self, n: int) -> list[tuple[list[int], float]]:
        """:meth:`nbest_words` through OpenFst, for any lattice: epsilon removal, then a pruned
        determinisation (sequences within 1, 2, 4, ... of the best, up to the lattice beam, until ``n``
        are found; each pass is exact within its threshold)."""
        import kaldifst

        acc = self.word_fst()
        kaldifst.rmepsilon(acc)
        limit = self.beam if np.isfinite(self.beam) else _UNPRUNED
        threshold = min(1.0, limit)
        while True:
            det = kaldifst.determinize(acc, nstate=MAX_NBEST_STATES,
                                       weight="" if threshold >= _UNPRUNED else repr(float(threshold)))
            out = []
            for p in kaldifst.convert_nbest_to_vector(kaldifst.shortest_path(det, n=n)):
                ok, _, words, weight = kaldifst.get_linear_symbol_sequence(p)
                if ok and np.isfinite(weight.value):
                    out.append((list(words), -float(weight.value)))
            if det.num_states >= MAX_NBEST_STATES:
                self._truncated(f"the n-best determinisation stopped at {MAX_NBEST_STATES} states")
                break
            if len(out) >= n or threshold >= limit:
                break
            threshold = min(2 * threshold, limit)
        out.sort(key=lambda x: -x[1])
        return [x for x in out if x[1] >= self.score_floor - 1e-3 * max(1.0, abs(x[1]))]

    def _truncated(self, why: str) -> None:
        self.truncated = True
        warnings.warn(f"WFST lattice truncated: {why}; the n-best list may be shorter than asked",
                      LatticeTruncatedWarning, stacklevel=4)

    def best_path(self, words: list[int]) -> tuple[list[int], float] | None:
        """Arc indices of the best path whose words are ``words``, and its final node's final score."""
        import kaldifst

        idx = self._index_fst
        if idx is None:  # input label: arc index + 1 (compiled once per lattice)
            idx = self._index_fst = kaldifst.compile(self._text(np.arange(1, self.src.shape[0] + 1), self.word))
            kaldifst.arcsort(idx, sort_type="olabel")
        lin = "".join(f"{i} {i + 1} {w} {w}\n" for i, w in enumerate(words)) + f"{len(words)}\n"
        both = kaldifst.compose(idx, kaldifst.compile(lin))
        ok, arcs, _, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(both, n=1))
        if not ok or not np.isfinite(weight.value):
            return None
        arcs = [a - 1 for a in arcs]
        last = int(self.dst[arcs[-1]]) if arcs else 0
        return arcs, self.final.get(last, float("-inf"))


def _top(cand: dict[int, float] | None, n: int) -> list[tuple[float, int]]:
    """The ``n`` best ``(score, sequence)`` of ``{sequence: score}`` (finite scores), best first."""
    if not cand:
        return []
    items = [(v, q) for q, v in cand.items() if v > -np.inf]
    items.sort(key=lambda x: (-x[0], x[1]))
    return items[:n]


def _topological_rank(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """Each node's position in a topological order of the arcs ``src -> dst`` (``None``: a cycle)."""
    indeg = np.bincount(dst, minlength=num_nodes)
    by_src = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[by_src], np.arange(num_nodes + 1))
    out_dst = dst[by_src].tolist()
    indeg_l = indeg.tolist()
    rank = np.full(num_nodes, -1, dtype=np.int64)
    queue = [v for v in range(num_nodes) if indeg_l[v] == 0]
    starts_l = starts.tolist()
    k = 0
    while queue:
        v = queue.pop()
        rank[v] = k
        k += 1
        for d in out_dst[starts_l[v]:starts_l[v + 1]]:
            indeg_l[d] -= 1
            if indeg_l[d] == 0:
                queue.append(d)
    return rank if k == num_nodes else None


class LatticeRecorder:
    """Arcs between surviving tokens, recorded frame by frame (a decoding state's lattice)."""

    def __init__(self, lattice_beam: float, eps_depth: int, max_arcs: int | None = None) -> None:
        self.beam = float(lattice_beam)
        self.max_arcs = MAX_LATTICE_ARCS if max_arcs is None else int(max_arcs)
        self.eps_depth = int(eps_depth)
        self.num_nodes = 0
        self.step = 0
        self.node_b: list[torch.Tensor] = []
        self.start_node: torch.Tensor | None = None  # [B] node id of each utterance's start token
        self.nid: torch.Tensor | None = None  # node id of each current token (aligned with the state's tokens)
        self.arcs: dict[str, list[torch.Tensor]] = {k: [] for k in _ARC_FIELDS}
        self._emit: tuple | None = None
        self._eps: list[tuple] = []

    # -- while decoding ----------------------------------------------------------------------
    def emitting(self, src_nid, b, dst_state, word, token, start, frame, graph, am, score) -> None:
        """Candidate emitting arcs of this frame (before recombination); ``score`` = path score at the destination."""
        self._emit = (src_nid, b, dst_state, word, token, start, frame, graph, am, score)

    def epsilon(self, b, src_state, dst_state, word, frame, graph, score) -> None:
        """Candidate epsilon arcs of one closure pass of this frame."""
        self._eps.append((b, src_state, dst_state, word, frame, graph, score))

    def close_step(self, b: torch.Tensor, s: torch.Tensor, score: torch.Tensor, S: int) -> torch.Tensor:
        """The frame's surviving tokens ``(b, s, score)``: give them node ids, keep the recorded arcs
        between survivors that are within the lattice beam of their destination; returns the node ids."""
        dev = b.device
        n = b.shape[0]
        nid = torch.arange(self.num_nodes, self.num_nodes + n, device=dev)
        self.num_nodes += n
        self.node_b.append(b)
        key = b * S + s
        skey, perm = torch.sort(key)

        def find(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if n == 0:
                return torch.zeros_like(q, dtype=torch.bool), torch.zeros_like(q)
            pos = torch.searchsorted(skey, q).clamp_(max=n - 1)
            return take1d(skey, pos) == q, take1d(perm, pos)

        groups = []
        if self._emit is not None:
            src_nid, eb, dst, word, token, start, frame, graph, am, sc = self._emit
            ok, j = find(eb * S + dst)
            ok &= sc >= take1d(score, j) - self.beam
            groups.append((src_nid, take1d(nid, j), eb, word, token, start, frame, graph, am, sc, ok, False))
        for eb, src, dst, word, frame, graph, sc in self._eps:
            ok_s, i = find(eb * S + src)
            ok_d, j = find(eb * S + dst)
            ok = ok_s & ok_d & (sc >= take1d(score, j) - self.beam)
            none = torch.full_like(word, -1)
            groups.append((take1d(nid, i), take1d(nid, j), eb, word, none, torch.zeros_like(ok), frame, graph,
                           torch.zeros_like(graph), sc, ok, True))
        for src_nid, dst_nid, eb, word, token, start, frame, graph, am, _, ok, eps in groups:
            keep = torch.nonzero(ok).squeeze(1)
            vals = (src_nid, dst_nid, eb, word, token, start, frame, graph, am)
            for k, v in zip(_ARC_FIELDS, vals):
                self.arcs[k].append(take1d(v, keep))
            m = keep.shape[0]
            self.arcs["step"].append(torch.full((m,), self.step, dtype=torch.int64, device=dev))
            self.arcs["eps"].append(torch.full((m,), eps, dtype=torch.bool, device=dev))
        self._emit, self._eps = None, []
        self.step += 1
        return nid

    # -- reading -----------------------------------------------------------------------------
    def utterances(self, final_nid: torch.Tensor, final_b: torch.Tensor, final_score: torch.Tensor, B: int
                   ) -> list[UtteranceLattice | None]:
        """Globally pruned lattice of every utterance, given its final tokens' nodes and final scores."""
        N = self.num_nodes
        cat = {k: (torch.cat(v).cpu().numpy() if v else np.zeros(0)) for k, v in self.arcs.items()}
        src, dst = cat["src"].astype(np.int64), cat["dst"].astype(np.int64)
        w = cat["graph"].astype(np.float64) + cat["am"].astype(np.float64)
        step, eps = cat["step"].astype(np.int64), cat["eps"].astype(bool)
        fin_nid = final_nid.cpu().numpy()
        fin_sc = final_score.cpu().numpy().astype(np.float64)
        good = np.isfinite(fin_sc)
        fin_nid, fin_sc = fin_nid[good], fin_sc[good]
        assert self.start_node is not None  # set by the decoder's init_state
        start = self.start_node.cpu().numpy()
        # arcs grouped by step; each step: emitting arcs then its epsilon arcs (relaxed eps_depth + 1 times)
        order = np.lexsort((eps, step))
        src, dst, w, step, eps = src[order], dst[order], w[order], step[order], eps[order]
        bounds = np.searchsorted(step, np.arange(self.step + 1))
        alpha = np.full(N, -np.inf)
        alpha[start[start >= 0]] = 0.0
        beta = np.full(N, -np.inf)
        beta[fin_nid] = fin_sc
        reps = self.eps_depth + 1

        def spans(k):
            lo, hi = bounds[k], bounds[k + 1]
            mid = lo + int(np.searchsorted(eps[lo:hi], True))
            return slice(lo, mid), slice(mid, hi)

        for k in range(self.step):
            em, ep = spans(k)
            np.maximum.at(alpha, dst[em], alpha[src[em]] + w[em])
            for _ in range(reps if ep.stop > ep.start else 0):
                np.maximum.at(alpha, dst[ep], alpha[src[ep]] + w[ep])
        for k in range(self.step - 1, -1, -1):
            em, ep = spans(k)
            for _ in range(reps if ep.stop > ep.start else 0):
                np.maximum.at(beta, src[ep], beta[dst[ep]] + w[ep])
            np.maximum.at(beta, src[em], beta[dst[em]] + w[em])
        node_b = torch.cat(self.node_b).cpu().numpy()
        best = np.full(B, -np.inf)
        np.maximum.at(best, node_b[fin_nid], alpha[fin_nid] + fin_sc)
        through = alpha[src] + w + beta[dst]
        arc_b = node_b[src]
        keep = np.isfinite(through) & (through >= best[arc_b] - self.beam - 1e-4)
        sel = order[keep]
        out: list[UtteranceLattice | None] = []
        kb = arc_b[keep]
        kt = through[keep]
        for b in range(B):
            if not np.isfinite(best[b]) or start[b] < 0:
                out.append(None)
                continue
            mine = sel[kb == b]
            floor = best[b] - self.beam - 1e-4
            truncated = mine.shape[0] > self.max_arcs
            if truncated:
                mine, floor = self._narrow(mine, kt[kb == b])
            fins = {int(n): float(v) for n, v in zip(fin_nid, fin_sc)
                    if node_b[n] == b and alpha[n] + v >= min(floor, best[b]) - 1e-4}
            nodes = np.unique(np.concatenate([[start[b]], cat["src"][mine], cat["dst"][mine],
                                              np.array(list(fins), dtype=np.int64)]).astype(np.int64))
            m = np.arange(len(nodes))
            p0 = int(np.searchsorted(nodes, start[b]))
            m[p0], m[0] = 0, p0  # the start node becomes local node 0

            def remap(x, m=m, nodes=nodes):
                return m[np.searchsorted(nodes, x.astype(np.int64))] if x.size else np.zeros(0, np.int64)

            out.append(UtteranceLattice(
                num_nodes=len(nodes),
                src=remap(cat["src"][mine]), dst=remap(cat["dst"][mine]),
                word=cat["word"][mine].astype(np.int64), token=cat["token"][mine].astype(np.int64),
                start=cat["start"][mine].astype(bool), frame=cat["frame"][mine].astype(np.int64),
                graph=cat["graph"][mine].astype(np.float64), am=cat["am"][mine].astype(np.float64),
                final={int(remap(np.array([n]))[0]): v for n, v in fins.items()},
                truncated=truncated, beam=self.beam, score_floor=floor if truncated else float("-inf"),
            ))
            if truncated:
                warnings.warn(f"WFST lattice truncated: utterance {b} kept {mine.shape[0]} of its arcs "
                              f"(at most {self.max_arcs}) by narrowing the lattice beam",
                              LatticeTruncatedWarning, stacklevel=4)
        return out

    def _narrow(self, arcs: np.ndarray, through: np.ndarray) -> tuple[np.ndarray, float]:
        """The best ``max_arcs`` of ``arcs`` by best-path score through them (``through``), and a score
        floor such that every path scoring at least the floor keeps all its arcs (its arcs' ``through``
        are at least its score): the n-best above the floor is exact."""
        k = self.max_arcs
        level = float(np.partition(through, -k)[-k])  # the k-th best
        above = through > level
        if above.any() and int((through >= level).sum()) > k:
            return arcs[above], float(through[above].min())  # the arcs tied at the k-th do not fit: dropped
        if int((through >= level).sum()) <= k:
            return arcs[through >= level], level
        picked = np.zeros(through.shape[0], dtype=bool)  # all tied: the first k, no path guaranteed
        picked[np.argsort(-through, kind="stable")[:k]] = True
        return arcs[picked], float("inf")
