"""The WFST tensor engine's CUDA requirements, checked on the CPU: no scatter / gather / index_put on bool
tensors (CUDA has no such kernels), and results unchanged against the native engine."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import WFSTDecoder, build_tlg  # noqa: E402
from asrdecode.ctc.wfst import fixed  # noqa: E402
from test_ctc_wfst import BLANK, LEXICON, V, _lm  # noqa: E402

_NO_BOOL = frozenset({
    "aten::scatter", "aten::scatter_", "aten::scatter_reduce", "aten::scatter_reduce_", "aten::scatter_add",
    "aten::scatter_add_", "aten::gather", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
})  # fmt: skip


class NoBoolScatterGather(TorchDispatchMode):
    """Raises on a scatter / gather / scatter_reduce / index_put whose self or source is a bool tensor."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func._schema.name in _NO_BOOL:
            values = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if any(v.dtype == torch.bool for v in values):
                raise AssertionError(f"{func._schema.name} on a bool tensor (CUDA has no kernel for it)")
        return func(*args, **kwargs)


def test_the_guard_catches_a_bool_scatter_reduce():
    with NoBoolScatterGather(), pytest.raises(AssertionError, match="bool tensor"):
        torch.zeros(2, dtype=torch.bool).scatter_reduce(0, torch.tensor([0, 1]), torch.tensor([True, False]), "amax")


@pytest.mark.parametrize("kw", [{}, {"min_active": 3}, {"max_active": 2, "beam": 6.0},
                                {"loop": "fixed", "dense_min_degree": 1}])  # (1-best: the pre-pruned fixed loop)
def test_torch_engine_uses_no_bool_scatter_and_agrees_with_native(kw):
    g = build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK)
    gen = torch.Generator().manual_seed(5)
    lp = torch.log_softmax(2 * torch.randn(4, 30, V, generator=gen), -1)
    lens = torch.tensor([30, 17, 0, 25])
    with NoBoolScatterGather():
        hyps, lats = WFSTDecoder(g, engine="torch", **kw)(lp, lens, nbest=3, return_lattice=True)
        best = WFSTDecoder(g, engine="torch", **kw)(lp, lens)
    want, _ = WFSTDecoder(g, engine="native", **kw)(lp, lens, nbest=3, return_lattice=True)
    assert [[h.words for h in n] for n in hyps] == [[h.words for h in n] for n in want]
    assert [n[0].tokens for n in hyps] == [h.tokens for h in best]
    for n, m in zip(hyps, want):
        assert [h.score for h in n] == pytest.approx([h.score for h in m], rel=1e-5)



_ACCUMULATING = frozenset({
    "aten::scatter_reduce", "aten::scatter_reduce_", "aten::scatter_add", "aten::scatter_add_", "aten::index_add",
    "aten::index_add_", "aten::index_reduce", "aten::index_reduce_",
})  # fmt: skip


class CrowdedAtomics(TorchDispatchMode):
    """Records each accumulating scatter (atomics on a GPU) whose source has more elements than its output
    has cells: there, several sources must share a cell, and on a GPU a batch's pruned candidates sent to
    one dummy cell (or every candidate to ``B`` cells) serialised: 73 % of a B=128 decode's time on an H100."""

    def __init__(self) -> None:
        super().__init__()
        self.crowded: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _ACCUMULATING:
            src = args[3] if "index" in name else args[3 if len(args) > 3 else 2]
            if isinstance(src, torch.Tensor) and src.numel() > args[0].numel():
                self.crowded.append((name, args[0].numel(), src.numel()))
        return func(*args, **kwargs)


def test_the_crowding_guard_sees_a_scatter_max_into_few_cells():
    with CrowdedAtomics() as mode:
        torch.zeros(2).scatter_reduce_(0, torch.tensor([0, 1, 1]), torch.tensor([1.0, 2.0, 3.0]), "amax")
    assert mode.crowded == [("aten::scatter_reduce_", 2, 3)]


@pytest.mark.parametrize("kw", [{}, {"min_active": 3}, {"max_active": 2, "beam": 6.0}, {"dense_min_degree": 1}])
def test_fixed_loop_frames_make_no_crowded_atomics(kw, monkeypatch):
    """Every accumulating scatter of the fixed loop's frames has a cell per source element (distinct spare
    cells for the entries that take no part), whatever the batch. (Once-per-call steps, as the final
    token's choice, are not counted.)"""
    g = build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK)
    gen = torch.Generator().manual_seed(7)
    lp = torch.log_softmax(2 * torch.randn(6, 24, V, generator=gen), -1)
    lens = torch.tensor([24, 11, 0, 19, 24, 5])
    dec = WFSTDecoder(g, engine="torch", loop="fixed", **kw)
    mode = CrowdedAtomics()
    rounds = []

    def watched(loop: Any, inner: Any = fixed._round) -> None:
        rounds.append(1)
        with mode:
            inner(loop)

    monkeypatch.setattr(fixed, "_round", watched)
    got = dec(lp, lens)
    assert rounds and mode.crowded == []
    want = WFSTDecoder(g, engine="native", **kw)(lp, lens)
    assert [h.words for h in got] == [h.words for h in want]
