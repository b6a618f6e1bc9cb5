"""A backoff (failure-link) automaton as tensors, scored for the whole vocabulary at once.

Both the n-gram LM and the phrase boosting tree are this structure:

* states ``0..S-1``; each has sparse outgoing arcs (label, weight, destination) stored sorted by
  (state, label) with per-state ranges ``arc_offsets[s] : arc_offsets[s + 1]``;
* each state has a backoff (failure) link ``backoff_state[s]`` with weight ``backoff_weight[s]``;
  following it is how an n-gram LM backs off to a shorter history and how an Aho-Corasick trie
  falls back to a shorter partial match;
* *terminal* states (the LM's empty history, a boosting tree's root) end every backoff chain;
  a label without an arc at a terminal scores ``root_fill`` and stays there;
* ``final_weight[s]``: end-of-sentence score of ``s`` (already resolved along the chain).

The score of label ``v`` from state ``s`` is ``sum of backoff weights along the chain until
the first state with an arc labelled v`` + that arc's weight, and the next state is that arc's
destination (the classic backoff semantics).

Speed: some states (every terminal, plus the states with the most arcs, within a memory
budget) get a *dense resolved row*: the score and next state of every label, with the chain
already applied. ``advance`` walks each state's chain to its nearest dense state (at most
``max_chain`` tensor steps, the same for the whole batch), gathers that row ``[N, V]``, adds the
accumulated backoff and overwrites the labels that the light states on the way have arcs for
(scatter of at most ``light_degree`` arcs per level). All of it is masked tensor ops without
host synchronisation; the cost is one row gather plus ``max_chain`` small scatters.

``advance`` and ``score_tokens`` do not walk at call time: :mod:`asrdecode.lm._fused` resolves the walk
per state at load (the chain's light arcs, their accumulated weights and which of them a nearer level
shadows), so a call is about 18 kernels whatever the order, with the walk's exact values. The walk
(``_advance`` / ``_score_tokens_walk``) builds the dense rows and serves automata whose light states
have too many arcs for the fused tables (``fused is None``).
"""

from __future__ import annotations

import math

import torch

from .._validation import Checker, ValidationMark
from ..errors import DecodingInputError
from ._fused import FusedTables, PreparedAdvance, advance_fused, build_fused, score_tokens_fused

#: attributes that cache data derived from the arrays (:func:`~asrdecode.lm._fused.entry_tables`): not moved
#: or pickled with the automaton, rebuilt where it is used
_DERIVED_CACHES = frozenset({"_entry_cache"})

__all__ = ["BackoffAutomaton"]

_FIELDS = (
    "arc_offsets",
    "arc_label",
    "arc_weight",
    "arc_dest",
    "backoff_state",
    "backoff_weight",
    "final_weight",
    "terminal",
)


class BackoffAutomaton:
    """Tensor backoff automaton over ``vocab_size`` labels (see the module docstring).

    Args:
        vocab_size: number of labels (the model's vocabulary, blank included).
        blank_id: label whose score is always 0 and next state the current state (or ``None``).
        arc_offsets: int64 ``[S + 1]``, arcs of state ``s`` are ``arc_offsets[s]:arc_offsets[s+1]``.
        arc_label, arc_weight, arc_dest: ``[A]`` int64 / float32 / int64, sorted by (state, label).
        backoff_state, backoff_weight: ``[S]``; a terminal's backoff is itself with weight 0.
        final_weight: ``[S]`` resolved end-of-sentence scores.
        terminal: bool ``[S]``.
        root_fill: score of a label with no arc anywhere on the chain (next state: the terminal).
        dense_memory_mb: memory budget of the dense rows of non-terminal states.
        min_dense_degree: only states with more arcs than this get a dense row (-1: any state, as
            :meth:`with_dense_rows` asks).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        blank_id: int | None,
        arc_offsets: torch.Tensor,
        arc_label: torch.Tensor,
        arc_weight: torch.Tensor,
        arc_dest: torch.Tensor,
        backoff_state: torch.Tensor,
        backoff_weight: torch.Tensor,
        final_weight: torch.Tensor,
        terminal: torch.Tensor,
        root_fill: float,
        dense_memory_mb: float = 64.0,
        min_dense_degree: int = 8,
    ) -> None:
        self.vocab_size = int(vocab_size)
        self.blank_id = None if blank_id is None else int(blank_id)
        self.root_fill = float(root_fill)
        self.dense_memory_mb = float(dense_memory_mb)
        self.min_dense_degree = int(min_dense_degree)
        self.arc_offsets = arc_offsets.to(torch.int64).contiguous()
        self.arc_label = arc_label.to(torch.int64).contiguous()
        self.arc_weight = arc_weight.to(torch.float32).contiguous()
        self.arc_dest = arc_dest.to(torch.int64).contiguous()
        self.backoff_state = backoff_state.to(torch.int64).contiguous()
        self.backoff_weight = backoff_weight.to(torch.float32).contiguous()
        self.final_weight = final_weight.to(torch.float32).contiguous()
        self.terminal = terminal.to(torch.bool).contiguous()
        self._n_arcs = int(self.arc_label.shape[0])
        self._check_arrays()
        self._prepare()
        self._mark = ValidationMark(self._validation_parts())

    # ------------------------------------------------------------------ construction
    @property
    def num_states(self) -> int:
        return int(self.backoff_state.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.arc_label.shape[0])

    # ------------------------------------------------------------------ validation
    def _validation_parts(self) -> tuple:
        """Everything the engines read (the mark compares these)."""
        return (self.vocab_size, self.blank_id, self.root_fill, self._n_arcs, *(getattr(self, f) for f in _FIELDS),
                self.dense_index, self.dense_scores, self.dense_next, self.arc_key, self.degree,
                self.fused_int, self.fused_float, self.fused_keep, self.fused_arange)

    def _check_arrays(self) -> None:
        """Check the structure's own arrays (not the derived dense rows); raise :class:`DecodingInputError`."""
        c = Checker("automaton")
        V = c.integer("vocab_size", self.vocab_size, 1)
        if self.blank_id is not None:
            c.integer("blank_id", self.blank_id, 0, V)
        S = int(c.tensor("backoff_state", self.backoff_state, ndim=1, kind="int").shape[0])
        if S < 1:
            c.fail("needs at least one state")
        n = self._n_arcs
        c.tensor("arc_offsets", self.arc_offsets, ndim=1, length=S + 1, kind="int")
        for name in ("arc_label", "arc_weight", "arc_dest"):
            t = c.tensor(name, getattr(self, name), ndim=1, kind="float" if name == "arc_weight" else "int")
            if t.shape[0] < n or (n == 0 and t.shape[0] > 1) or (n > 0 and t.shape[0] != n):
                c.fail(f"{name} has {t.shape[0]} entries, the arc count is {n}")
        c.offsets("arc_offsets", self.arc_offsets, n)
        label, dest = self.arc_label[:n], self.arc_dest[:n]
        c.in_range("arc_label", label, 0, V)
        c.in_range("arc_dest", dest, 0, S)
        if n > 1:
            state = torch.repeat_interleave(torch.arange(S, device=label.device), self.arc_offsets[1:] - self.arc_offsets[:-1])
            key = state * V + label
            if not bool((key[1:] > key[:-1]).all()):
                c.fail("arc labels must be strictly increasing within each state")
        c.no_nan("arc_weight", self.arc_weight[:n])
        c.in_range("backoff_state", self.backoff_state, 0, S)
        for name in ("backoff_weight", "final_weight"):
            c.no_nan(name, c.tensor(name, getattr(self, name), ndim=1, length=S, kind="float"))
        c.tensor("terminal", self.terminal, ndim=1, length=S, kind="bool")
        if not bool(self.terminal.any()):
            c.fail("needs at least one terminal state")
        if math.isnan(self.root_fill) or self.root_fill == math.inf:
            c.fail(f"root_fill must not be NaN or +inf, got {self.root_fill}")

    def _check_derived(self) -> None:
        """Check the dense rows built by :meth:`_prepare` against the structure."""
        c = Checker("automaton")
        S, V = self.num_states, self.vocab_size
        H = int(c.tensor("dense_scores", self.dense_scores, ndim=2, kind="float").shape[0])
        if tuple(self.dense_scores.shape) != (H, V) or tuple(self.dense_next.shape) != (H, V):
            c.fail(f"dense rows must be [{H}, {V}]")
        c.in_range("dense_index", c.tensor("dense_index", self.dense_index, ndim=1, length=S, kind="int"), -1, H)
        c.in_range("dense_next", self.dense_next, 0, S)
        if bool((self.dense_index[self.terminal] < 0).any()):
            c.fail("every terminal state needs a dense row")
        fused = self.fused
        if fused is not None:
            self._check_fused(c, fused, S, H)

    def _check_fused(self, c: Checker, t: FusedTables, S: int, H: int) -> None:
        """Shapes and ranges of the fused tables (:mod:`asrdecode.lm._fused`)."""
        L, E = t.levels, t.levels * t.degree
        if tuple(t.int_table.shape) != (S, 1 + L) or tuple(t.float_table.shape) != (S, 1 + L):
            c.fail(f"fused tables must be [{S}, {1 + L}]")
        if tuple(t.keep.shape) != (S, E) or t.keep.dtype != torch.uint8 or t.arange_d.numel() != t.degree:
            c.fail(f"fused keep mask must be uint8 [{S}, {E}]")
        c.in_range("fused dense rows", t.int_table[:, 0], 0, H)
        c.in_range("fused arc starts", t.int_table[:, 1:], 0, self._n_arcs + 1)

    def validate(self) -> None:
        """Check every array the engines read (see :mod:`asrdecode._validation`) and mark the automaton
        validated; raises :class:`DecodingInputError`."""
        self._check_arrays()
        self._check_derived()
        self._mark = ValidationMark(self._validation_parts())

    def ensure_valid(self) -> None:
        """Cheap when nothing changed since the last validation; else check the arrays again and
        rebuild the dense rows from them (raises :class:`DecodingInputError` when they no longer pass).
        Skipped while torch.compile traces (the check is host-side bookkeeping)."""
        if torch.compiler.is_compiling():
            return
        mark = self.__dict__.get("_mark")
        if mark is not None and mark.matches(self._validation_parts()):
            return
        self._check_arrays()
        self._prepare()
        self.validate()

    def _prepare(self) -> None:
        S, V = self.num_states, self.vocab_size
        dev = self.arc_offsets.device
        self.degree = self.arc_offsets[1:] - self.arc_offsets[:-1]
        self._n_arcs = int(self.arc_offsets[-1])
        if self._n_arcs == 0:  # keep gathers in range
            self.arc_label = torch.zeros(1, dtype=torch.int64, device=dev)
            self.arc_weight = torch.zeros(1, dtype=torch.float32, device=dev)
            self.arc_dest = torch.zeros(1, dtype=torch.int64, device=dev)
        # each arc's source state, then in place its key (one int64 array an arc, not two)
        self.arc_key = torch.repeat_interleave(torch.arange(S, device=dev), self.degree)
        self.arc_key.mul_(V).add_(self.arc_label[: self._n_arcs])
        if self._n_arcs == 0:
            self.arc_key = torch.full((1,), -1, dtype=torch.int64, device=dev)
        depth = self._chain_depth()
        self.depth = depth
        self.max_depth = int(depth.max()) if S else 0
        cand_idx, is_dense = self._choose_dense()
        self._count_chain_steps(is_dense)
        self._build_dense_rows(cand_idx, depth)
        t = build_fused(self)
        # plain attributes (moved by ``to``, saved by the word LM cache); ``fused`` puts them together
        self.fused_int: torch.Tensor | None = None if t is None else t.int_table
        self.fused_float: torch.Tensor | None = None if t is None else t.float_table
        self.fused_keep: torch.Tensor | None = None if t is None else t.keep
        self.fused_arange: torch.Tensor | None = None if t is None else t.arange_d
        self.fused_levels = 0 if t is None else t.levels
        self.fused_degree = 0 if t is None else t.degree

    @property
    def fused(self) -> FusedTables | None:
        """The fused per-state tables (:mod:`asrdecode.lm._fused`), or ``None`` where the walk serves."""
        if self.fused_int is None or self.fused_float is None or self.fused_keep is None or self.fused_arange is None:
            return None
        return FusedTables(self.fused_int, self.fused_float, self.fused_keep, self.fused_arange,
                           self.fused_levels, self.fused_degree)

    def _chain_depth(self) -> torch.Tensor:
        """Steps from each state to a terminal along its backoff chain ``[S]`` (raises on a cycle).

        Pointer doubling: every state holds its 2^k-th successor on the chain (a terminal its own) and
        the non-terminal steps up to it; ``ceil(log2 S) + 1`` rounds of two gathers cover every chain
        of at most S steps, so a state whose successor is then no terminal lies on, or leads into, a
        cycle. O(S log S) work in log S tensor rounds (a 147k-state LM with a 2-state cycle took the
        old one-step-per-round walk 632 s: one round per state); it stops as soon as every pointer is
        a terminal (log2 of the longest chain: an n-gram LM's chains are at most its order long)."""
        S = self.num_states
        ptr = torch.where(self.terminal, torch.arange(S, device=self.backoff_state.device), self.backoff_state)
        depth = (~self.terminal).to(torch.int64)
        for _ in range(max(1, S).bit_length() + 1):
            depth = depth + depth[ptr]
            ptr = ptr[ptr]
            if bool(self.terminal[ptr].all()):  # every chain has ended: more rounds change nothing
                break
        if S and not bool(self.terminal[ptr].all()):
            raise DecodingInputError("automaton: backoff links form a cycle that reaches no terminal state "
                                     f"(state {int(torch.nonzero(~self.terminal[ptr])[0])} is on or leads into it)")
        return depth

    def _choose_dense(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The non-terminal states that get dense rows, and the mask of all dense states."""
        V = self.vocab_size
        # choose the dense states: terminals, then the highest-degree states within the budget
        row_bytes = V * 12
        budget_rows = int(self.dense_memory_mb * 2**20 // max(row_bytes, 1))
        cand = (~self.terminal) & (self.degree > self.min_dense_degree)
        cand_idx = torch.nonzero(cand).flatten()
        if cand_idx.numel() > budget_rows:
            top = torch.argsort(self.degree[cand_idx], descending=True, stable=True)[:budget_rows]
            cand_idx = cand_idx[top]
        is_dense = self.terminal.clone()
        is_dense[cand_idx] = True
        light_deg = self.degree[~is_dense]
        self.light_degree = int(light_deg.max()) if light_deg.numel() else 0
        return cand_idx, is_dense

    def _count_chain_steps(self, is_dense: torch.Tensor) -> None:
        """Set ``max_chain``: the most steps from a state to the nearest dense state on its chain."""
        S = self.num_states
        dev = self.arc_offsets.device
        # steps to the nearest dense state along the chain
        steps = torch.zeros(S, dtype=torch.int64, device=dev)
        for _ in range(self.max_depth + 1):
            new = torch.where(is_dense, torch.zeros_like(steps), steps[self.backoff_state] + 1)
            if torch.equal(new, steps):
                break
            steps = new
        self.max_chain = int(steps.max()) if S else 0

    def _build_dense_rows(self, cand_idx: torch.Tensor, depth: torch.Tensor) -> None:
        """Fill ``dense_index`` / ``dense_scores`` / ``dense_next`` / ``dense_states``."""
        S, V = self.num_states, self.vocab_size
        dev = self.arc_offsets.device
        # dense rows: terminals first, then the others by increasing depth (chunked)
        term_idx = torch.nonzero(self.terminal).flatten()
        order = torch.cat([term_idx, cand_idx[torch.argsort(depth[cand_idx], stable=True)]])
        H = order.numel()
        self.dense_index = torch.full((S,), -1, dtype=torch.int64, device=dev)
        self.dense_scores = torch.empty((H, V), dtype=torch.float32, device=dev)
        self.dense_next = torch.empty((H, V), dtype=torch.int64, device=dev)
        nt = term_idx.numel()
        if nt:
            self.dense_scores[:nt] = self.root_fill
            self.dense_next[:nt] = term_idx[:, None]
            self._scatter_own_arcs(term_idx, torch.arange(nt, device=dev))
            self.dense_index[term_idx] = torch.arange(nt, device=dev)
        # a state's row = its backoff state's row (already dense, or light with few arcs) plus the
        # backoff weight, overwritten by its own arcs; built depth by depth so that every dense
        # state on a chain is built before it is used
        chunk = max(1, (1 << 22) // max(V, 1))
        start = nt
        rest = order[nt:]
        for d in sorted(set(depth[rest].tolist())):
            level = rest[depth[rest] == d]
            for c0 in range(0, level.numel(), chunk):
                idx = level[c0 : c0 + chunk]
                sc, nx = self._advance(self.backoff_state[idx], self.max_depth, self.light_degree)
                sc += self.backoff_weight[idx][:, None]
                deg = self.degree[idx]
                total = int(deg.sum())
                if total:
                    local = torch.repeat_interleave(torch.arange(idx.numel(), device=dev), deg)
                    first = torch.cumsum(deg, 0) - deg
                    arc = torch.arange(total, device=dev) - first[local] + self.arc_offsets[idx][local]
                    sc[local, self.arc_label[arc]] = self.arc_weight[arc]
                    nx[local, self.arc_label[arc]] = self.arc_dest[arc]
                rows = torch.arange(start, start + idx.numel(), device=dev)
                self.dense_scores[rows] = sc
                self.dense_next[rows] = nx
                self.dense_index[idx] = rows
                start += idx.numel()
        self.dense_states = order

    def _scatter_own_arcs(self, states: torch.Tensor, rows: torch.Tensor) -> None:
        """Write the arcs of ``states`` into their dense ``rows`` (build time)."""
        for s, r in zip(states.tolist(), rows.tolist()):
            a, b = int(self.arc_offsets[s]), int(self.arc_offsets[s + 1])
            if b > a:
                lab = self.arc_label[a:b]
                self.dense_scores[r, lab] = self.arc_weight[a:b]
                self.dense_next[r, lab] = self.arc_dest[a:b]

    # ------------------------------------------------------------------ scoring
    def _advance(self, states: torch.Tensor, n_steps: int, degree: int) -> tuple[torch.Tensor, torch.Tensor]:
        N, V = states.shape[0], self.vocab_size
        cur = states
        didx = self.dense_index[cur]
        done = didx >= 0
        acc = torch.zeros(N, dtype=torch.float32, device=states.device)
        levels: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for _ in range(n_steps):
            active = ~done
            levels.append((cur, acc, active))
            acc = acc + torch.where(active, self.backoff_weight[cur], 0.0)
            cur = torch.where(active, self.backoff_state[cur], cur)
            d = self.dense_index[cur]
            newly = active & (d >= 0)
            didx = torch.where(newly, d, didx)
            done = done | newly
        didx = didx.clamp_min(0)  # every chain ends at a dense terminal
        flat_s = torch.empty(N * V + 1, dtype=torch.float32, device=states.device)
        flat_n = torch.empty(N * V + 1, dtype=torch.int64, device=states.device)
        scores = flat_s[: N * V].view(N, V)
        nxt = flat_n[: N * V].view(N, V)
        torch.index_select(self.dense_scores, 0, didx, out=scores)
        scores += acc[:, None]
        torch.index_select(self.dense_next, 0, didx, out=nxt)
        if degree > 0 and levels:
            ar = torch.arange(degree, device=states.device)
            base = torch.arange(N, device=states.device) * V
            dummy = N * V
            last = max(self._n_arcs - 1, 0)
            for cur_j, acc_j, active_j in reversed(levels):
                start = self.arc_offsets[cur_j]
                end = self.arc_offsets[cur_j + 1]
                idx = start[:, None] + ar
                valid = (idx < end[:, None]) & active_j[:, None]
                idx = idx.clamp_max(last)
                pos = torch.where(valid, base[:, None] + self.arc_label[idx], dummy).flatten()
                flat_s.scatter_(0, pos, (self.arc_weight[idx] + acc_j[:, None]).flatten())
                flat_n.scatter_(0, pos, self.arc_dest[idx].flatten())
        if self.blank_id is not None:
            scores[:, self.blank_id] = 0.0
            nxt[:, self.blank_id] = states
        return scores, nxt

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (float32) and next states ``[N, V]`` (int64) of every label from ``states [N]``."""
        self.ensure_valid()
        fused = self.fused
        if fused is not None:
            return advance_fused(self, fused, states)
        return self._advance(states, self.max_chain, self.light_degree)

    def prepare_advance(self, states: torch.Tensor) -> PreparedAdvance | None:
        """:meth:`advance` of the states tensor ``states [N]`` (updated in place by the caller) with its
        buffers made once (:class:`~asrdecode.lm._fused.PreparedAdvance`: the blank column's score 0);
        ``None`` where the fused tables do not serve (the walk)."""
        self.ensure_valid()
        fused = self.fused
        return None if fused is None else PreparedAdvance(self, fused, states)

    def score_tokens(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and next states ``[N, K]`` of ``tokens [N, K]`` from ``states [N]`` (only those columns)."""
        self.ensure_valid()
        fused = self.fused
        if fused is not None:
            return score_tokens_fused(self, fused, states, tokens)
        return self._score_tokens_walk(states, tokens)

    def _score_tokens_walk(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``score_tokens`` by walking the chain (a binary search per level)."""
        V = self.vocab_size
        cur = states[:, None].expand_as(tokens).contiguous()
        acc = torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
        out_s = torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
        out_n = cur.clone()
        done = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
        last = self.arc_key.numel() - 1
        for _ in range(self.max_chain + 1):
            d = self.dense_index[cur]
            is_dense = d >= 0
            dc = d.clamp_min(0)
            d_s = self.dense_scores[dc, tokens]
            d_n = self.dense_next[dc, tokens]
            key = cur * V + tokens
            pos = torch.searchsorted(self.arc_key, key).clamp_max(last)
            hit = self.arc_key[pos] == key
            take_d = ~done & is_dense
            take_a = ~done & ~is_dense & hit
            out_s = torch.where(take_d, acc + d_s, torch.where(take_a, acc + self.arc_weight[pos], out_s))
            out_n = torch.where(take_d, d_n, torch.where(take_a, self.arc_dest[pos], out_n))
            done = done | take_d | take_a
            acc = torch.where(done, acc, acc + self.backoff_weight[cur])
            cur = torch.where(done, cur, self.backoff_state[cur])
        if self.blank_id is not None:
            is_blank = tokens == self.blank_id
            out_s = out_s.masked_fill(is_blank, 0.0)
            out_n = torch.where(is_blank, states[:, None].expand_as(tokens), out_n)
        return out_s, out_n

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """End-of-sentence scores ``[N]``."""
        self.ensure_valid()
        return self.final_weight[states]

    # ------------------------------------------------------------------ storage
    def state_dict(self) -> dict:
        d = {name: getattr(self, name)[: self._n_arcs] if name.startswith("arc_") and name != "arc_offsets"
             else getattr(self, name) for name in _FIELDS}
        d = {k: v.detach().cpu() for k, v in d.items()}
        d["meta"] = {
            "vocab_size": self.vocab_size,
            "blank_id": -1 if self.blank_id is None else self.blank_id,
            "root_fill": self.root_fill if math.isfinite(self.root_fill) else str(self.root_fill),
            "dense_memory_mb": self.dense_memory_mb,
            "min_dense_degree": self.min_dense_degree,
        }
        return d

    @classmethod
    def from_state_dict(cls, d: dict, device: torch.device | str | None = None, **overrides) -> "BackoffAutomaton":
        meta = dict(d["meta"])
        meta.update(overrides)
        blank = int(meta["blank_id"])
        tensors = {k: d[k].to(device) if device is not None else d[k] for k in _FIELDS}
        return cls(
            vocab_size=int(meta["vocab_size"]),
            blank_id=None if blank < 0 else blank,
            root_fill=float(meta["root_fill"]),
            dense_memory_mb=float(meta["dense_memory_mb"]),
            min_dense_degree=int(meta["min_dense_degree"]),
            **tensors,
        )

    def with_dense_rows(self, memory_mb: float | None = None) -> "BackoffAutomaton":
        """A copy (same device) in which every state may have a dense row: all of them when they fit in
        ``memory_mb`` (``None``: the ``num_states * vocab_size * 12`` bytes they take), else the states with the
        most arcs. With every state dense no chain is walked (:attr:`max_chain` 0): an advance is a few row
        gathers (~5 kernels instead of ~15). Raises :class:`DecodingInputError` for a budget that is not a
        positive number."""
        if memory_mb is None:
            memory_mb = self.num_states * self.vocab_size * 12 / 2**20 + 1.0
        if isinstance(memory_mb, bool) or not (isinstance(memory_mb, (int, float)) and math.isfinite(memory_mb)
                                                and memory_mb > 0):
            raise DecodingInputError(f"memory_mb must be a positive number of megabytes, got {memory_mb!r}")
        self.ensure_valid()
        return type(self).from_state_dict(self.state_dict(), device=self.arc_offsets.device,
                                          dense_memory_mb=float(memory_mb), min_dense_degree=-1)

    def to(self, device: torch.device | str) -> "BackoffAutomaton":
        """A copy with every tensor on ``device`` (dense rows moved, not rebuilt)."""
        self.ensure_valid()
        new = object.__new__(type(self))
        for k, v in self.__dict__.items():
            if k in _DERIVED_CACHES:  # rebuilt on the device at first use
                continue
            new.__dict__[k] = v.to(device) if isinstance(v, torch.Tensor) else v
        new._mark = ValidationMark(new._validation_parts())  # an exact copy of a validated automaton
        return new

    def __getstate__(self) -> dict:
        """Pickled without the derived caches (rebuilt at first use)."""
        return {k: v for k, v in self.__dict__.items() if k not in _DERIVED_CACHES}

    def memory_bytes(self) -> int:
        """Bytes held by all tensors (structure, dense rows and fused tables)."""
        return sum(v.numel() * v.element_size() for v in self.__dict__.values() if isinstance(v, torch.Tensor))

    def fused_bytes(self) -> int:
        """Bytes held by the fused tables (0 without them)."""
        t = self.fused
        return 0 if t is None else sum(x.numel() * x.element_size() for x in t[:4])
