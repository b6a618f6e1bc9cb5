"""A device loop's round checked against itself: the loop state's tensors, an independent copy of the state,
and where two states differ.

:func:`~asrdecode.accel.run_until_done` uses these to check a compiled round (``torch.compile``, or compiled
inside CUDA graphs) against the eager round on the first call of each loop: every round also runs eagerly on
a copy of the state it started from, and the first round whose state differs turns the compilation off for
that loop (:class:`CompiledRoundMismatch`). The lockstep tests (tests/lockstep.py) compare the same way.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["CHECK_REL", "CompiledRoundMismatch", "Difference", "state_leaves", "state_twin", "mismatch",
           "first_difference"]

#: how far a compiled round's float state may be from the eager round's: relative, and at least as much
#: absolute (Inductor fuses and reorders float operations: their rounding, not another search)
CHECK_REL = 1e-5


class CompiledRoundMismatch(UserWarning):
    """A compiled round's state differed from the eager round's from the same state: the loop keeps the eager
    result and runs that round uncompiled from then on."""


@dataclass
class Difference:
    """Where two states first differ: the state field, the leaf's index in it, how many elements, and up to
    three of them (``at [index]: got [...] want [...]``)."""

    name: str
    leaf: int
    count: int
    detail: str


def state_leaves(state: Any, names: tuple[str, ...]) -> list[torch.Tensor]:
    """The tensors of the state's fields ``names`` in order (pytrees flattened; an object with a ``tensors()``
    method, e.g. ``BatchedHyps``, gives those)."""
    leaves: list[torch.Tensor] = []
    for name in names:
        value = getattr(state, name)
        if hasattr(value, "tensors"):
            value = value.tensors()
        flat, _ = tree_flatten(value)
        leaves.extend(x for x in flat if isinstance(x, torch.Tensor))
    return leaves


def state_twin(state: Any, names: tuple[str, ...]) -> Any:
    """An independent copy of a loop state: its own ``twin()`` where it has one (a state whose tensors are
    also reached through views), else a shallow copy whose fields ``names`` are cloned."""
    twin = getattr(state, "twin", None)
    if callable(twin):
        return twin()
    other = copy.copy(state)
    for name in names:
        value = getattr(state, name)
        if value is not None:
            setattr(other, name, _clone_tree(value))
    return other


def mismatch(x: torch.Tensor, y: torch.Tensor, rel: float = CHECK_REL) -> torch.Tensor:
    """The elements of ``x`` that differ from ``y`` (same shape; a bool tensor): integers and bools exactly,
    floats beyond ``rel`` (relative to ``y``, at least ``rel`` absolute); infinities and NaN must match."""
    if not x.is_floating_point():
        return x != y
    x, y = x.double(), y.double()
    finite = torch.isfinite(x) & torch.isfinite(y)
    close = (x - y).abs() <= rel * torch.clamp(y.abs(), min=1.0)
    same_special = (x == y) | (torch.isnan(x) & torch.isnan(y))
    return ~torch.where(finite, close, same_special)


def first_difference(a: Any, b: Any, names: tuple[str, ...], rel: float = CHECK_REL) -> Difference | None:
    """The first field (in ``names`` order) and leaf where states ``a`` and ``b`` differ (:func:`mismatch`;
    a leaf of another shape differs whole); ``None`` where they agree. Reads the device (a check, not a
    loop step)."""
    for name in names:
        xs = state_leaves(a, (name,))
        ys = state_leaves(b, (name,))
        if len(xs) != len(ys):
            return Difference(name, min(len(xs), len(ys)), 1, f"{len(xs)} tensors against {len(ys)}")
        for i, (x, y) in enumerate(zip(xs, ys)):
            if x.shape != y.shape:
                return Difference(name, i, x.numel(), f"shape {tuple(x.shape)} against {tuple(y.shape)}")
            bad = mismatch(x, y, rel)
            count = int(bad.sum())
            if count:
                where = torch.nonzero(bad)[:3].tolist()
                got = [x[tuple(w)].item() for w in where]
                want = [y[tuple(w)].item() for w in where]
                return Difference(name, i, count, f"at {where}: got {got} want {want}")
    return None


def _clone_tree(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone_tree(v) for v in value)
    return copy.deepcopy(value)
