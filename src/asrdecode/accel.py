"""Acceleration layers over sync-free step functions: eager, ``torch.compile`` and CUDA graphs.

Decoders are written as a loop state (an object whose attributes are tensors, or pytrees of
tensors) plus step functions ``step(state) -> None`` that replace those attributes with new
tensors computed by masked tensor operations only (no host synchronisation, no Python
branching on tensor values). The driver loop checks one flag tensor between steps.

:class:`StepRunner` runs such steps in one of three modes, always the same step functions:

- ``"eager"``: call the function (CPU tests cover this path);
- ``"compile"``: call ``torch.compile(function)`` (optional; costs seconds per function cold);
- ``"cuda_graphs"``: capture the function once per (state layout) in a CUDA graph and replay
  it. Capture needs fixed memory addresses, so the captured callable copies every attribute the
  step replaced back into the tensors it read (the state is updated in place) — the step's
  logic is unchanged. A state layout change (e.g. hypotheses storage doubled) re-captures.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["StepRunner", "resolve_mode"]

MODES = ("eager", "compile", "cuda_graphs")


def resolve_mode(mode: str | None, device: torch.device) -> str:
    """``None``/"auto" -> CUDA graphs on a CUDA device, eager elsewhere; validate explicit modes."""
    if mode in (None, "auto"):
        return "cuda_graphs" if device.type == "cuda" else "eager"
    if mode not in MODES:
        raise ValueError(f"acceleration mode must be one of {MODES} or 'auto', got {mode!r}")
    if mode == "cuda_graphs" and device.type != "cuda":
        raise ValueError("acceleration mode 'cuda_graphs' needs tensors on a CUDA device")
    return mode


def _state_tensors(state: Any, names: tuple[str, ...]) -> list[torch.Tensor]:
    leaves: list[torch.Tensor] = []
    for name in names:
        value = getattr(state, name)
        if hasattr(value, "tensors"):  # objects updated in place, e.g. BatchedHyps
            value = value.tensors()
        flat, _ = tree_flatten(value)
        leaves.extend(x for x in flat if isinstance(x, torch.Tensor))
    return leaves


class StepRunner:
    """Runs step functions over a loop state in the chosen mode.

    Args:
        mode: "eager", "compile" or "cuda_graphs".
        state_names: the state attributes the steps read and replace (tensors or pytrees of
            tensors); for CUDA graphs these are the static buffers.
    """

    def __init__(self, mode: str, state_names: tuple[str, ...]) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.state_names = state_names
        self._compiled: dict[Callable, Callable] = {}
        self._graphs: dict[tuple, Any] = {}

    def __call__(self, fn: Callable[..., None], state: Any, *args: Any) -> None:
        """Run ``fn(state, *args)``; extra arguments (e.g. a row subset) exist in eager mode only."""
        if self.mode == "eager":
            fn(state, *args)
        elif any(a is not None for a in args):
            raise ValueError(f"step arguments are not supported in {self.mode} mode")
        elif self.mode == "compile":
            compiled = self._compiled.get(fn)
            if compiled is None:
                compiled = self._compiled[fn] = torch.compile(fn, dynamic=False)
            compiled(state)
        else:
            self._replay(fn, state)

    def _in_place(self, fn: Callable[[Any], None], state: Any) -> Callable[[], None]:
        """Wrap ``fn`` so that the state's tensors are updated in place (fixed addresses)."""

        def run() -> None:
            before = {name: getattr(state, name) for name in self.state_names}
            fn(state)
            for name, old in before.items():
                new = getattr(state, name)
                old_leaves, _ = tree_flatten(old)
                new_leaves, _ = tree_flatten(new)
                for o, n in zip(old_leaves, new_leaves):
                    if isinstance(o, torch.Tensor) and o is not n:
                        o.copy_(n)
                setattr(state, name, old)

        return run

    def _replay(self, fn: Callable[[Any], None], state: Any) -> None:  # pragma: no cover - needs CUDA
        leaves = _state_tensors(state, self.state_names)
        key = (fn, tuple(x.data_ptr() for x in leaves))
        graph = self._graphs.get(key)
        if graph is None:
            run = self._in_place(fn, state)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            saved = [x.clone() for x in leaves]
            with torch.cuda.stream(stream):
                run()  # warm-up on a side stream, as capture requires
            torch.cuda.current_stream().wait_stream(stream)
            for x, s in zip(leaves, saved):
                x.copy_(s)  # undo the warm-up: the step must run exactly once
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            for x, s in zip(leaves, saved):
                x.copy_(s)  # capture does not execute; restore and replay below
            self._graphs[key] = graph
        graph.replay()
