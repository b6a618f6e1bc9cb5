"""Inductor's GPU code path on the CPU: torch.compile generates Triton kernels (as it does for CUDA) and
Triton's interpreter runs them on CPU tensors (numpy, one program of a kernel's grid after another).

A CPU proxy for the compile faults that only a GPU showed so far: the compiled rounds' lockstep tests
(tests/app/test_compile_exact.py) then check the Triton code Inductor writes, not its C++ code. With
``order="reverse"`` each kernel's programs run last to first; a GPU runs them in parallel, so a result
that changes with the order is a race between programs (one reading what another writes).

What it does not cover: a CUDA kernel's own numerics (libdevice's ``exp`` / ``log1p`` are mapped to
``triton.language`` functions by tests/triton_libdevice.py, which the interpreter evaluates with numpy), ATen's CUDA fallback kernels
(topk, sort: here the CPU ones) and the CUDA runtime (streams, graphs).

Used by ``make triton-cpu`` (``ASRDECODE_TRITON_CPU=forward|reverse``, read by tests/conftest.py). Needs
the ``triton`` package (the Makefile puts it in ``work/triton``; it is not a dependency of the library).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

ORDERS = ("forward", "reverse")
#: the program order enabled in this process (``None``: torch.compile on the CPU writes C++ as usual)
ENABLED: str | None = None


def enable(order: str = "forward") -> None:
    """Route every torch.compile on the CPU through Triton's interpreter from now on, running each
    kernel's programs in ``order``. Call before torch.compile compiles anything."""
    global ENABLED
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # (silences Triton 3.9's warning; fusion is a GPU codegen setting)
    import torch._inductor.config as inductor_config
    import triton  # noqa: F401 - imported after TRITON_INTERPRET is set
    from torch._inductor.runtime import triton_helpers

    sys.modules["triton.runtime.driver"].driver.set_active(_CudaTargetDriver())
    inductor_config.cpu_backend = "triton"
    triton_helpers.set_driver_to_cpu = lambda: None  # (the generated modules call it; it wants triton-cpu)
    from triton_libdevice import Libdevice

    triton_helpers.libdevice = Libdevice()
    if order == "reverse":
        from triton.runtime import interpreter

        interpreter.GridExecutor.__call__ = _call_in_reverse
    ENABLED = order


class _CudaTargetDriver:
    """The driver Inductor asks for the compile target: an sm_90 card (the kernels are interpreted, never
    compiled for it)."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:  # noqa: ARG002 - driver interface
        return 0

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:  # noqa: ARG002 - driver interface
        return (9, 0)


def _call_in_reverse(self: Any, *args_dev: Any, **kwargs: Any) -> None:
    """Triton's ``GridExecutor.__call__`` (3.9), the grid walked from its last program to its first."""
    from triton.runtime import interpreter

    spec = inspect.getfullargspec(self.fn)
    kwargs = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
    args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
    for hook in self.pre_run_hooks:
        hook(*args_hst, **kwargs_hst)
    scope = interpreter._patch_lang(self.fn)
    try:
        args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        args = {name: arg if name in self.constexprs else interpreter._implicit_cvt(arg) for name, arg in args.items()}
        grid = self.grid(args) if callable(self.grid) else self.grid
        grid = tuple(grid) + (1,) * (3 - len(grid))
        interpreter.interpreter_builder.set_grid_dim(*grid)
        for x in reversed(range(grid[0])):
            for y in reversed(range(grid[1])):
                for z in reversed(range(grid[2])):
                    interpreter.interpreter_builder.set_grid_idx(x, y, z)
                    self.fn(**args)
    finally:
        scope.restore()
    self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)


def enable_from_environment() -> str | None:
    """:func:`enable` with ``ASRDECODE_TRITON_CPU``'s order when that is set; returns the order (``None``: unset)."""
    order = os.environ.get("ASRDECODE_TRITON_CPU")
    if not order:
        return None
    enable(order)
    return order
