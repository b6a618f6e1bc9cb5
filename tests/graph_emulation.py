"""Tests' route to the CUDA-graph path on the CPU: a module's device loop resolves to "cuda_graphs" and
runs on :class:`asrdecode.accel.EmulatedGraphRunner` (the same in-place wrapper a capture uses)."""

from __future__ import annotations

import functools
from types import ModuleType

import pytest

from asrdecode.accel import EmulatedGraphRunner


def emulate_graphs(mp: pytest.MonkeyPatch, module: ModuleType, pure: bool = False) -> None:
    """Patch ``module``'s ``resolve_mode`` (every mode -> "cuda_graphs") and ``StepRunner`` (the emulator;
    ``pure``: rounds with a ``PureStep`` run as that, as compiled graphs would, Inductor aside), and clear
    its ``LOOPS`` cache so each test captures afresh."""
    module.LOOPS.clear()
    mp.setattr(module, "resolve_mode", lambda mode, device: "cuda_graphs")
    mp.setattr(module, "StepRunner", functools.partial(EmulatedGraphRunner, pure=True) if pure else EmulatedGraphRunner)
