"""The WFST decoder's carried state between chunks, and its batching across streams.

A :class:`WFSTStreamState` holds a batch's active tokens (utterance, graph state, score, history
id), the backpointer history (:class:`History`, appended frame by frame) and the frames consumed.
Streaming sessions keep one batch-1 state per stream: :meth:`WFSTStreamState.cat` makes one batch
state whose history starts with one *bridge* entry per carried token (the batched call never
backtracks through them), and :meth:`WFSTStreamState.split_into` appends each stream's new history
entries to its own history with their ids renumbered, and gives it back its tokens and offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ...errors import DecodingInputError
from .lattice import LatticeRecorder, take1d

__all__ = ["WFSTStreamState", "WFSTBridge"]


@dataclass
class Tokens:
    b: torch.Tensor  # [N] utterance
    s: torch.Tensor  # [N] state
    score: torch.Tensor  # [N] float32
    hid: torch.Tensor  # [N] history id

    def take(self, idx: torch.Tensor) -> "Tokens":
        return Tokens(take1d(self.b, idx), take1d(self.s, idx), take1d(self.score, idx), take1d(self.hid, idx))

    @staticmethod
    def cat(a: "Tokens", c: "Tokens") -> "Tokens":
        return Tokens(torch.cat([a.b, c.b]), torch.cat([a.s, c.s]), torch.cat([a.score, c.score]), torch.cat([a.hid, c.hid]))


@dataclass
class WFSTStreamState:
    """A batch's decoding state between chunks: active tokens, backpointer history, frames consumed ``[B]``."""

    toks: "Tokens"
    hist: "History"
    offset: torch.Tensor
    boost: torch.Tensor | None
    batch: int
    lattice: LatticeRecorder | None = None
    #: a joined batch state's link to the states it joined (:meth:`split_into` reads it)
    bridge: "WFSTBridge | None" = None

    @classmethod
    def join(cls, states: Sequence["WFSTStreamState"], /) -> "WFSTStreamState":
        """One batch state from batch-1 ``states`` (see the module docstring), holding the bridge that
        :meth:`split_into` splits it by."""
        if any(getattr(s, "lattice", None) is not None for s in states):
            raise DecodingInputError("WFST states that record a lattice cannot be batched across streams")
        counts = torch.tensor([s.toks.b.numel() for s in states], dtype=torch.long)
        owner = torch.repeat_interleave(torch.arange(len(states)), counts)
        carried = torch.cat([s.toks.hid for s in states])
        hist = History()
        m = carried.numel()
        neg = torch.full((m,), -1, dtype=torch.long)
        bridge = hist.add(neg, torch.zeros(m, dtype=torch.long), neg, neg, torch.zeros(m, dtype=torch.bool))
        toks = Tokens(owner, torch.cat([s.toks.s for s in states]), torch.cat([s.toks.score for s in states]), bridge)
        boosts = [s.boost for s in states]
        boost = None
        if any(b is not None for b in boosts):
            width = next(b for b in boosts if b is not None).shape[1]
            boost = torch.cat([b if b is not None else torch.zeros(1, width) for b in boosts])
        offset = torch.cat([s.offset for s in states])
        return cls(toks, hist, offset, boost, len(states), bridge=WFSTBridge(carried, owner))

    def split_into(self, states: Sequence["WFSTStreamState"], /) -> None:
        """Give each of ``states`` (the batch-1 states :meth:`join` joined) its part of this batch state."""
        bridge = self.bridge
        if bridge is None:
            raise DecodingInputError("split_into needs a batch state made by WFSTStreamState.join")
        hist = self.hist
        m = bridge.carried.numel()
        owner = _history_owners(hist, bridge)
        new_owner = owner[m:]
        n = len(states)
        counts = torch.bincount(new_owner, minlength=n)
        order = torch.argsort(new_owner, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel()) - starts[new_owner[order]]
        base = torch.tensor([s.hist.size for s in states], dtype=torch.long)
        local = torch.cat([bridge.carried, base[new_owner] + rank])  # every batch id -> its stream's id
        cols = {name: torch.cat(getattr(hist, name)[1:]) if len(getattr(hist, name)) > 1 else None
                for name in ("prev", "word", "frame", "token", "start")}
        toks = self.toks
        counts_l, starts_l = counts.tolist(), starts.tolist()
        for i, st in enumerate(states):
            if counts_l[i] and cols["prev"] is not None:
                assert cols["word"] is not None and cols["frame"] is not None and cols["token"] is not None
                assert cols["start"] is not None  # all columns are None together
                idx = order[starts_l[i] : starts_l[i] + counts_l[i]]
                st.hist.add(local[cols["prev"][idx]], cols["word"][idx], cols["frame"][idx], cols["token"][idx],
                            cols["start"][idx])
            mine = torch.nonzero(toks.b == i).squeeze(1)
            mt = toks.take(mine)
            st.toks = Tokens(torch.zeros_like(mt.b), mt.s, mt.score, local[mt.hid])
            st.offset = self.offset[i : i + 1].clone()


class History:
    """Per-entry arrays appended frame by frame: predecessor id, word, frame, token (-1 = epsilon arc)."""

    def __init__(self) -> None:
        self.prev: list[torch.Tensor] = []
        self.word: list[torch.Tensor] = []
        self.frame: list[torch.Tensor] = []
        self.token: list[torch.Tensor] = []
        self.start: list[torch.Tensor] = []
        self.size = 0

    def add(self, prev: torch.Tensor, word: torch.Tensor, frame: torch.Tensor, token: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        n = prev.shape[0]
        ids = torch.arange(self.size, self.size + n, device=prev.device)
        self.prev.append(prev)
        self.word.append(word)
        self.frame.append(frame)
        self.token.append(token)
        self.start.append(start)
        self.size += n
        return ids


@dataclass
class WFSTBridge:
    """What :meth:`WFSTStreamState.split_into` needs from :meth:`WFSTStreamState.cat`: the carried history
    id of each bridge entry (entry ``i`` of the batch history stands for ``carried[i]`` of stream ``owner[i]``)."""

    carried: torch.Tensor
    owner: torch.Tensor


def _history_owners(hist: History, bridge: WFSTBridge) -> torch.Tensor:
    """The stream of every entry of the batch history (an entry's stream is its predecessor's)."""
    owner = torch.empty(hist.size, dtype=torch.long)
    m = bridge.carried.numel()
    owner[:m] = bridge.owner
    start = m
    for prev in hist.prev[1:]:
        # an entry's predecessor may be in the same chunk (the native engine appends a whole call's
        # entries at once; predecessors always come first): jump to an ancestor before the chunk
        up = prev.clone()
        inside = torch.nonzero(up >= start).squeeze(1)
        while inside.numel():
            up[inside] = up[up[inside] - start]
            inside = inside[up[inside] >= start]
        owner[start : start + prev.numel()] = owner[up]
        start += prev.numel()
    return owner
