"""libdevice functions for Triton's interpreter (tests/triton_on_cpu.py): the interpreter evaluates
``triton.language``'s math with numpy, while libdevice's functions are empty stubs there. These give the
ones Inductor's kernels call in terms of ``triton.language`` (close to libdevice's values, not equal to them)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def log1p(x):  # type: ignore[no-untyped-def]
    return tl.where(tl.abs(x) < 1e-4, x - 0.5 * x * x, tl.log(1.0 + x))


@triton.jit
def expm1(x):  # type: ignore[no-untyped-def]
    return tl.where(tl.abs(x) < 1e-4, x + 0.5 * x * x, tl.exp(x) - 1.0)


@triton.jit
def tanh(x):  # type: ignore[no-untyped-def]
    t = tl.exp(-2.0 * tl.abs(x))  # in (0, 1]: no overflow
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -r, r)


@triton.jit
def isinf(x):  # type: ignore[no-untyped-def]
    return tl.abs(x) == float("inf")


@triton.jit
def isnan(x):  # type: ignore[no-untyped-def]
    return x != x


@triton.jit
def signbit(x):  # type: ignore[no-untyped-def]
    return x < 0


@triton.jit
def trunc(x):  # type: ignore[no-untyped-def]
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


DEFINED = {"log1p": log1p, "expm1": expm1, "tanh": tanh, "isinf": isinf, "isnan": isnan, "signbit": signbit, "trunc": trunc}


class Libdevice:
    """``libdevice.<fn>`` of Inductor's kernels: the functions above, else ``triton.language``'s of that name
    (looked up at call time, when the interpreter has patched ``triton.language``)."""

    def __getattr__(self, name: str) -> Any:
        return DEFINED[name] if name in DEFINED else getattr(tl, name)
