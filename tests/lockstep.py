"""Lockstep comparison of a device loop's rounds: each round run in the loop's own mode (compile, CUDA
graphs, compiled graphs) and eagerly on a copy of the same state, the state tensors compared after every
round. The first round and state field that differ say where a compiled round leaves the eager one
(used by tests/app/test_compile_exact.py, on the CPU and, with a GPU, on CUDA)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from asrdecode.accel import StepRunner
from asrdecode.round_check import first_difference, state_twin


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
        return state_twin(state, self.names)

    def _compare(self, a: Any, b: Any, rnd: int) -> Divergence | None:
        diff = first_difference(a, b, self.names, self.rel)
        return None if diff is None else Divergence(rnd, diff.name, diff.leaf, diff.count, diff.detail)
