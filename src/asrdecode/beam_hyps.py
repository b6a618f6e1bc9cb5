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

__all__ = ["EMPTY_HASH", "extend_hash", "BeamTree"]

_M1 = 2147483647  # 2**31 - 1, prime
_M2 = 2147483629  # prime
_P1 = 1000003  # prime base
_P2 = 999983  # prime base
_LOW = (1 << 32) - 1

#: Hash of the empty prefix.
EMPTY_HASH = 0


def extend_hash(h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Hash of each prefix ``h`` (int64, any shape) extended by ``tokens`` (same shape, ids >= 0).

    Elementwise and sync-free. The result is ``(h1' << 32) | h2'`` with
    ``hi' = (hi * Pi + token + 1) mod Mi`` for two prime moduli, where ``h = (h1 << 32) | h2``.
    """
    h1 = h >> 32
    h2 = h & _LOW
    t = tokens.to(torch.int64) + 1
    h1 = torch.remainder(h1 * _P1 + t, _M1)
    h2 = torch.remainder(h2 * _P2 + t, _M2)
    return (h1 << 32) | h2


def hash_sequence(tokens: list[int]) -> int:
    """Python reference of :func:`extend_hash` applied token by token from :data:`EMPTY_HASH`."""
    h1 = h2 = 0
    for tok in tokens:
        h1 = (h1 * _P1 + tok + 1) % _M1
        h2 = (h2 * _P2 + tok + 1) % _M2
    return (h1 << 32) | h2


@dataclass
class BeamTree:
    """Backpointer tree of a batched beam search over ``[B, K]`` slots.

    Each recorded step stores ``tokens [B, K]`` (token appended by the hypothesis now in that slot,
    ``-1`` if none), ``parents [B, K]`` (its slot at the previous step) and ``data [B, K]`` or ``[B]``
    (an integer stored with each appended token, e.g. a frame index). Recording only appends the
    tensors to lists: no copy, no sync.
    """

    tokens: list[torch.Tensor] = field(default_factory=list)
    parents: list[torch.Tensor] = field(default_factory=list)
    data: list[torch.Tensor] = field(default_factory=list)

    def record(self, tokens: torch.Tensor, parents: torch.Tensor, data: torch.Tensor) -> None:
        """Append one step (tokens ``[B, K]``, parents ``[B, K]``, data ``[B, K]`` or ``[B]``)."""
        self.tokens.append(tokens)
        self.parents.append(parents)
        self.data.append(data if data.dim() == 2 else data[:, None].expand_as(tokens))

    def __len__(self) -> int:
        return len(self.tokens)

    def take_rows(self, rows: torch.Tensor) -> "BeamTree":
        """The tree of the utterances ``rows [N]`` only (every step restricted to those rows)."""
        return BeamTree([t[rows] for t in self.tokens], [p[rows] for p in self.parents], [d[rows] for d in self.data])

    def extend(self, later: "BeamTree") -> None:
        """Append the steps of ``later`` (same batch rows, recorded after this tree's last step)."""
        self.tokens.extend(later.tokens)
        self.parents.extend(later.parents)
        self.data.extend(later.data)

    def backtrack(self, slots: torch.Tensor) -> list[list[tuple[list[int], list[int]]]]:
        """Token sequences and stored data of the hypotheses in ``slots [B, N]`` after the last step.

        Returns ``out[b][n] = (tokens, data)``. Entries of ``slots`` that are negative give empty
        sequences (callers use them for padding).
        """
        slots_np = slots.detach().cpu().numpy().astype(np.int64)
        batch, n = slots_np.shape
        if not self.tokens:
            return [[([], []) for _ in range(n)] for _ in range(batch)]
        tok = torch.stack(self.tokens).cpu().numpy()  # [S, B, K]
        par = torch.stack(self.parents).cpu().numpy()
        dat = torch.stack(self.data).cpu().numpy()  # [S, B, K]
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
            row = []
            for j in range(n):
                if slots_np[b, j] < 0:
                    row.append(([], []))
                    continue
                seq = out_tok_t[b, j]
                where = np.nonzero(seq >= 0)[0]
                row.append((seq[where].tolist(), out_dat_t[b, j, where].tolist()))
            result.append(row)
        return result
