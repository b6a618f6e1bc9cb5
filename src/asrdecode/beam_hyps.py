"""Building blocks for batched beam searches: incremental prefix hashes and a backpointer tree.

A batched beam search keeps ``[B, K]`` hypotheses in fixed-size tensors. Two hypotheses with the
same token sequence must be recognised in constant time (to merge them), and the token sequence of
each hypothesis must be recoverable at the end without copying transcripts at every step. This
module provides both, following section 2.1 of the ALSD++/AES++ paper:

- :func:`extend_hash`: ``H' = (H * P + token + 1) mod M``, computed for two independent primes
  ``M1, M2 < 2**31`` and packed into one int64 (62 useful bits), so collisions are negligible;
- :class:`BeamTree`: per step, the token each hypothesis appended (or ``-1``), the slot of its
  parent at the previous step, and one integer stored with the token (a time, or anything the
  search needs); :meth:`BeamTree.backtrack` walks the pointers back from chosen final slots and
  returns the tokens and their stored integers.

Both are used by the CTC prefix beam search and are independent of the model family.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .native import _lib as _native_lib

__all__ = ["EMPTY_HASH", "extend_hash", "is_prefix_hash", "BeamTree"]

HASH_M1 = 2147483647  # 2**31 - 1, prime
HASH_M2 = 2147483629  # prime
HASH_P1 = 1000003  # prime base
HASH_P2 = 999983  # prime base
HASH_LOW = (1 << 32) - 1

#: Hash of the empty prefix.
EMPTY_HASH = 0


def extend_hash(h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Hash of each prefix ``h`` (int64, any shape) extended by ``tokens`` (same shape, ids >= 0).

    Elementwise and sync-free. The result is ``(h1' << 32) | h2'`` with
    ``hi' = (hi * Pi + token + 1) mod Mi`` for two prime moduli, where ``h = (h1 << 32) | h2``.
    """
    h1 = h >> 32
    h2 = h & HASH_LOW
    t = (tokens if tokens.dtype == torch.int64 else tokens.to(torch.int64)) + 1
    h1 = torch.remainder(torch.add(t, h1, alpha=HASH_P1), HASH_M1)  # t + h1 * P1 in one kernel (exact: < 2**52)
    h2 = torch.remainder(torch.add(t, h2, alpha=HASH_P2), HASH_M2)
    return (h1 << 32) | h2


def is_prefix_hash(h: torch.Tensor) -> torch.Tensor:
    """Whether each ``h`` (int64) is a hash :func:`extend_hash` makes: both residues in range (what a carried
    state's hashes must be; the native engine's ``valid_hash``)."""
    return (h >= 0) & ((h >> 32) < HASH_M1) & ((h & HASH_LOW) < HASH_M2)


def hash_sequence(tokens: list[int]) -> int:
    """Python reference of :func:`extend_hash` applied token by token from :data:`EMPTY_HASH`."""
    h1 = h2 = 0
    for tok in tokens:
        h1 = (h1 * HASH_P1 + tok + 1) % HASH_M1
        h2 = (h2 * HASH_P2 + tok + 1) % HASH_M2
    return (h1 << 32) | h2


@dataclass
class BeamTree:
    """Backpointer tree of a batched beam search over ``[B, K]`` slots.

    Each recorded step stores ``tokens [B, K]`` (token appended by the hypothesis now in that slot,
    ``-1`` if none), ``parents [B, K]`` (its slot at the previous step) and ``data [B, K]`` or ``[B]``
    (an integer stored with each appended token, e.g. a frame index). Recording only appends the
    tensors to lists: no copy, no sync.

    A tree made by :meth:`preallocated` keeps its steps in ``[capacity, B, K]`` tensors instead
    (its ``tokens`` / ``parents`` / ``data`` lists stay empty; :meth:`steps` gives the recorded
    steps): :meth:`write` records one step in place at a step counter held on the device, so a
    step function captured in a CUDA graph records on every replay; the host counts the steps it
    ran (:meth:`advance`) and grows the storage between steps (:meth:`reserve`, capacity doubling
    decided on the host, no sync). ``record``, ``len``, ``take_rows``, ``extend`` and ``backtrack``
    work on both kinds; :meth:`materialize` turns the storage into the list form (views).
    """

    tokens: list[torch.Tensor] = field(default_factory=list)
    parents: list[torch.Tensor] = field(default_factory=list)
    data: list[torch.Tensor] = field(default_factory=list)
    _buf: tuple[torch.Tensor, ...] | None = field(default=None, init=False, repr=False,
                                                                          compare=False)
    _count: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _base: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _step: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)  # [3, 1, B, K]
    _step_rows: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)  # its [3, B, K]
    _n: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def preallocated(cls, batch: int, slots: int, device: torch.device | str | None = None,
                     capacity: int = 64) -> "BeamTree":
        """An empty tree whose steps live in preallocated ``[capacity, batch, slots]`` int64 tensors."""
        tree = cls()
        cap = max(int(capacity), 1)
        tree._set_storage(torch.zeros((3, cap, batch, slots), dtype=torch.long, device=device))
        tree._count = torch.zeros(1, dtype=torch.long, device=device)
        # the step buffer :meth:`write` stacks a step into, made here (not at the first write: a compiled
        # step would trace it as a new attribute and compile again once it exists)
        tree._step = torch.empty((3, 1, batch, slots), dtype=torch.long, device=device)
        tree._step_rows = tree._step[:, 0]
        return tree

    def _set_storage(self, base: torch.Tensor) -> None:
        """Keep ``base [3, capacity, B, K]`` (tokens, parents, data) as the storage: one tensor, so a step is
        written by one ``index_copy_``."""
        self._base = base
        self._buf = tuple(base.unbind(0))

    @property
    def is_preallocated(self) -> bool:
        return self._buf is not None

    @property
    def capacity(self) -> int:
        """Steps the preallocated storage holds (list trees: the recorded steps)."""
        return self._buf[0].shape[0] if self._buf is not None else len(self.tokens)

    def tensors(self) -> list[torch.Tensor]:
        """The preallocated storage and step counter (what a captured step writes), else ``[]``."""
        return [*self._buf, self._count] if self._buf is not None and self._count is not None else []

    def reserve(self, steps: int = 1) -> None:
        """Make room for ``steps`` more steps (preallocated trees; doubles the capacity, host-side)."""
        if self._buf is None or self._n + steps <= self._buf[0].shape[0]:
            return
        cap = self._buf[0].shape[0]
        while cap < self._n + steps:
            cap *= 2
        assert self._base is not None
        grown = self._base.new_zeros((3, cap, *self._base.shape[2:]))
        grown[:, : self._n] = self._base[:, : self._n]
        self._set_storage(grown)

    def write(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        """Preallocated trees: store one step at the device step counter and advance it (in place,
        static shapes, no sync). The host must have reserved room and counts it with :meth:`advance`."""
        assert self._base is not None, "write() needs a preallocated tree; use record()"
        assert self._count is not None
        data = data if data.dim() == 2 else data[:, None].expand_as(tokens)
        step = self._step
        if step is None or step.shape[2:] != tokens.shape or step.device != tokens.device:
            step = self._step = self._base.new_empty((3, 1, *tokens.shape))
            self._step_rows = step[:, 0]
        if tokens.dtype == parents.dtype == data.dtype == step.dtype:  # one stack into the step buffer
            torch.stack([tokens, parents, data], out=self._step_rows)
        else:
            step.copy_(torch.stack([tokens.long(), parents.long(), data.long()])[:, None])
        self._base.index_copy_(1, self._count, step)
        self._count.add_(1)

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` steps written by :meth:`write` (host side)."""
        self._n += steps

    def clear(self) -> None:
        """Forget every recorded step (a preallocated tree keeps its storage: a cached loop reuses it)."""
        self.tokens, self.parents, self.data = [], [], []
        self._n = 0
        if self._count is not None:
            self._count.zero_()

    def record(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        """Append one step (tokens ``[B, K]``, parents ``[B, K]``, data ``[B, K]`` or ``[B]``)."""
        if self._buf is not None:
            self.reserve(1)
            self.write(tokens, parents, data)
            self.advance(1)
            return
        self.tokens.append(tokens)
        self.parents.append(parents)
        self.data.append(data if data.dim() == 2 else data[:, None].expand_as(tokens))

    def open_steps(self, steps: int, batch: int, slots: int,
                   device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Room for ``steps`` steps that the caller writes in place: ``(tokens, parents, data)`` views
        ``[steps, batch, slots]`` of the storage; count them with :meth:`close_steps`. An empty list
        tree becomes a preallocated one; a list tree that already has steps gives ``None`` (use
        :meth:`record_steps`)."""
        if self._buf is None:
            if self.tokens:
                return None
            self._set_storage(torch.empty((3, max(64, 2 * steps), batch, slots), dtype=torch.long, device=device))
            self._count = torch.zeros(1, dtype=torch.long, device=device)
            self._n = 0
        self.reserve(steps)
        n = self._n
        assert self._buf is not None
        return tuple(b[n : n + steps] for b in self._buf)  # type: ignore[return-value]

    def open_steps_native(self, steps: int, batch: int, slots: int,
                          device: torch.device | str | None = None) -> tuple[int, int, int] | None:
        """:meth:`open_steps`, giving the addresses of the room (:meth:`step_pointers`) instead of views."""
        if self._buf is None and self.tokens:
            return None
        if self._buf is None:
            self.open_steps(steps, batch, slots, device)
        else:
            self.reserve(steps)
        return self.step_pointers(self._n)

    def step_pointers(self, step: int) -> tuple[int, int, int]:
        """Addresses of step ``step`` in the (contiguous ``[capacity, B, K]``) storages of a preallocated
        tree: what native code reads, or writes after :meth:`open_steps`, without making views."""
        assert self._buf is not None
        return tuple(b.data_ptr() + step * b.stride(0) * b.element_size() for b in self._buf)  # type: ignore[return-value]

    def close_steps(self, steps: int) -> None:
        """Count ``steps`` steps written into the views of :meth:`open_steps`."""
        assert self._count is not None
        self._count.add_(steps)
        self._n += steps

    def record_steps(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        """Append ``S`` steps at once: tokens, parents ``[S, B, K]``, data ``[S, B, K]`` or ``[S, B]``."""
        S = tokens.shape[0]
        if data.dim() == 2:
            data = data[:, :, None].expand_as(tokens)
        views = self.open_steps(S, tokens.shape[1], tokens.shape[2], tokens.device)
        if views is not None:
            for view, x in zip(views, (tokens, parents, data)):
                view.copy_(x)
            self.close_steps(S)
            return
        self.tokens.extend(tokens.unbind(0))
        self.parents.extend(parents.unbind(0))
        self.data.extend(data.unbind(0))

    def steps(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """The recorded steps: (tokens, parents, data), each a list of ``[B, K]`` tensors."""
        if self._buf is None:
            return self.tokens, self.parents, self.data
        return tuple(list(b[: self._n].unbind(0)) for b in self._buf)  # type: ignore[return-value]

    def materialize(self) -> "BeamTree":
        """A list-form tree of the recorded steps (views of a preallocated storage; self if a list tree)."""
        return self if self._buf is None else BeamTree(*self.steps())

    def __len__(self) -> int:
        return self._n if self._buf is not None else len(self.tokens)

    def take_rows(self, rows: torch.Tensor) -> "BeamTree":
        """The tree of the utterances ``rows [N]`` only (every step restricted to those rows)."""
        if self._buf is not None:
            tok, par, dat = (b[: self._n, rows] for b in self._buf)
            return BeamTree(list(tok.unbind(0)), list(par.unbind(0)), list(dat.unbind(0)))
        return BeamTree([t[rows] for t in self.tokens], [p[rows] for p in self.parents], [d[rows] for d in self.data])

    def extend(self, later: "BeamTree") -> None:
        """Append the steps of ``later`` (same batch rows, recorded after this tree's last step)."""
        tok, par, dat = later.steps()
        if self._buf is not None:
            for t, p, d in zip(tok, par, dat):
                self.record(t, p, d)
            return
        self.tokens.extend(tok)
        self.parents.extend(par)
        self.data.extend(dat)

    def backtrack(self, slots: torch.Tensor) -> list[list[tuple[list[int], list[int]]]]:
        """Token sequences and stored data of the hypotheses in ``slots [B, N]`` after the last step.

        Returns ``out[b][n] = (tokens, data)``. Entries of ``slots`` that are negative give empty
        sequences (callers use them for padding).
        """
        batch, n = slots.shape
        if len(self) == 0:
            return [[([], []) for _ in range(n)] for _ in range(batch)]
        if self._buf is not None:
            steps_t = [b[: self._n] for b in self._buf]  # [S, B, K]
        else:
            steps_t = [torch.stack(x) for x in (self.tokens, self.parents, self.data)]
        native = _native_backtrack()
        if native is not None:  # the same walk on the native engine (CPU tensors)
            return native(*(t.detach().to("cpu", torch.int64) for t in (*steps_t, slots)))
        slots_np = slots.detach().cpu().numpy().astype(np.int64)
        tok, par, dat = (t.cpu().numpy() for t in steps_t)
        steps = tok.shape[0]
        rows = np.arange(batch)[:, None].repeat(n, 1)
        cur = np.where(slots_np >= 0, slots_np, 0)
        out_tok = np.full((steps, batch, n), -1, dtype=np.int64)
        out_dat = np.zeros((steps, batch, n), dtype=np.int64)
        for s in range(steps - 1, -1, -1):
            out_tok[s] = tok[s][rows, cur]
            out_dat[s] = dat[s][rows, cur]
            cur = par[s][rows, cur]
        out_tok_t = out_tok.transpose(1, 2, 0)  # [B, N, S]
        out_dat_t = out_dat.transpose(1, 2, 0)
        result: list[list[tuple[list[int], list[int]]]] = []
        for b in range(batch):
            row: list[tuple[list[int], list[int]]] = []
            for j in range(n):
                if slots_np[b, j] < 0:
                    row.append(([], []))
                    continue
                seq = out_tok_t[b, j]
                where = np.nonzero(seq >= 0)[0]
                row.append((seq[where].tolist(), out_dat_t[b, j, where].tolist()))
            result.append(row)
        return result


def _native_backtrack():
    """The native engine's backtrack when its library is already loaded (never builds it), else ``None``."""
    return _native_lib.backtrack if _native_lib.loaded() else None
