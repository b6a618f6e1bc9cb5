"""Lockstep comparison of a device loop's rounds: each round run in the loop's own mode (compile, CUDA
graphs, compiled graphs) and eagerly on a copy of the same state, the state tensors compared after every
round. The first round and state field that differ say where a compiled round leaves the eager one
(used by tests/app/test_compile_exact.py, on the CPU and, with a GPU, on CUDA)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from asrdecode.accel import StepRunner


@dataclass
class Divergence:
    """The first difference found: round number (from 0), state field, leaf index, how many elements."""

    round: int
    name: str
    leaf: int
    count: int
    detail: str


@dataclass
class Lockstep:
    """A drop-in ``run_until_done`` (monkeypatch it into a decoder module) that also runs each round
    eagerly on a copy of the state and records the first :class:`Divergence` (``None``: none)."""

    names: tuple[str, ...]
    rel: float = 1e-5
    rounds: int = 0
    first: Divergence | None = None
    calls: list[int] = field(default_factory=list)

    def __call__(self, run: StepRunner, body: Callable[[Any], None], state: Any, done: Callable[[Any], torch.Tensor],
                 *, first_check: int, limit: int, on_check: Callable[[int], None] | None = None) -> int:
        n = 0
        while True:
            if on_check is not None:
                on_check(1)
            twin = self._copy(state)
            run.bound(body, state)()
            body(twin)  # eager, the same round from the same state
            if self.first is None:
                self.first = self._compare(state, twin, self.rounds)
            n += 1
            self.rounds += 1
            if bool(done(state)) or n >= limit:
                self.calls.append(n)
                return n

    def _copy(self, state: Any) -> Any:
        if callable(getattr(state, "twin", None)):  # a state whose tensors are also reached through views
            return state.twin()
        twin = copy.copy(state)
        for name in self.names:
            value = getattr(state, name)
            if value is None:
                continue
            setattr(twin, name, _clone_tree(value))
        return twin

    def _compare(self, a: Any, b: Any, rnd: int) -> Divergence | None:
        for name in self.names:
            x_leaves, _ = tree_flatten(getattr(a, name))
            y_leaves, _ = tree_flatten(getattr(b, name))
            for i, (x, y) in enumerate(zip(x_leaves, y_leaves)):
                if not isinstance(x, torch.Tensor):
                    continue
                bad = _mismatch(x, y, self.rel)
                count = int(bad.sum())
                if count:
                    where = torch.nonzero(bad)[:3].tolist()
                    detail = f"at {where}: got {[x[tuple(w)].item() for w in where]} want {[y[tuple(w)].item() for w in where]}"
                    return Divergence(rnd, name, i, count, detail)
        return None


def _clone_tree(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone_tree(v) for v in value)
    return copy.deepcopy(value)


def _mismatch(x: torch.Tensor, y: torch.Tensor, rel: float) -> torch.Tensor:
    """Elements that differ: exactly for integer/bool tensors, beyond ``rel`` (relative, at least absolute
    ``rel``) for floats; -inf/inf/nan must match exactly."""
    if not x.is_floating_point():
        return x != y
    x, y = x.double(), y.double()
    finite = torch.isfinite(x) & torch.isfinite(y)
    close = (x - y).abs() <= rel * torch.clamp(y.abs(), min=1.0)
    same_special = (x == y) | (torch.isnan(x) & torch.isnan(y))
    return ~torch.where(finite, close, same_special)
