"""Lattice recording for :class:`~asrdecode.ctc.wfst.WFSTDecoder` and n-best lists through OpenFst.

A lattice node is a token that survived a frame: (utterance, frame, graph state). While the
decoder runs (only when a lattice is asked for) every expanded arc whose source and destination
tokens both survive the frame, and whose score is within ``lattice_beam`` of the destination's
best, is recorded with its graph part (arc score + boost) and acoustic part (scaled log-prob).
When the lattice is read, a forward-backward pass over the frames prunes it globally: an arc
stays when the best complete path through it is within ``lattice_beam`` of the best path.

N-best lists of distinct word sequences come from OpenFst (``kaldifst``): the lattice projected to
its words is epsilon-removed and determinised (one path per word sequence, carrying its best
score), and ``ShortestPath(n)`` gives the best ``n``; each word sequence's best alignment
(tokens, frames) is then the shortest path of the lattice composed with that sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["LatticeRecorder", "UtteranceLattice"]


def _g(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
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
        """The ``n`` best distinct word sequences (word ids) with their best path score, best first."""
        import kaldifst

        if not self.final:
            return []
        acc = self.word_fst()
        kaldifst.rmepsilon(acc)
        det = kaldifst.determinize(acc)
        out = []
        for p in kaldifst.convert_nbest_to_vector(kaldifst.shortest_path(det, n=n)):
            ok, _, words, weight = kaldifst.get_linear_symbol_sequence(p)
            if ok and np.isfinite(weight.value):
                out.append((list(words), -float(weight.value)))
        out.sort(key=lambda x: -x[1])
        return out

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


class LatticeRecorder:
    """Arcs between surviving tokens, recorded frame by frame (a decoding state's lattice)."""

    def __init__(self, lattice_beam: float, eps_depth: int) -> None:
        self.beam = float(lattice_beam)
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
            return _g(skey, pos) == q, _g(perm, pos)

        groups = []
        if self._emit is not None:
            src_nid, eb, dst, word, token, start, frame, graph, am, sc = self._emit
            ok, j = find(eb * S + dst)
            ok &= sc >= _g(score, j) - self.beam
            groups.append((src_nid, _g(nid, j), eb, word, token, start, frame, graph, am, sc, ok, False))
        for eb, src, dst, word, frame, graph, sc in self._eps:
            ok_s, i = find(eb * S + src)
            ok_d, j = find(eb * S + dst)
            ok = ok_s & ok_d & (sc >= _g(score, j) - self.beam)
            none = torch.full_like(word, -1)
            groups.append((_g(nid, i), _g(nid, j), eb, word, none, torch.zeros_like(ok), frame, graph,
                           torch.zeros_like(graph), sc, ok, True))
        for src_nid, dst_nid, eb, word, token, start, frame, graph, am, _, ok, eps in groups:
            keep = torch.nonzero(ok).squeeze(1)
            vals = (src_nid, dst_nid, eb, word, token, start, frame, graph, am)
            for k, v in zip(_ARC_FIELDS, vals):
                self.arcs[k].append(_g(v, keep))
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
        for b in range(B):
            if not np.isfinite(best[b]) or start[b] < 0:
                out.append(None)
                continue
            mine = sel[kb == b]
            fins = {int(n): float(v) for n, v in zip(fin_nid, fin_sc)
                    if node_b[n] == b and alpha[n] + v >= best[b] - self.beam - 1e-4}
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
            ))
        return out
