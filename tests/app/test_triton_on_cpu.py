"""The Triton-on-CPU harness (tests/triton_on_cpu.py) itself: Inductor's Triton kernels run on the CPU and
equal eager; the reverse program order really reverses (a racy kernel shows it). Run by ``make triton-cpu``
(``ASRDECODE_TRITON_CPU`` set), skipped otherwise: the harness changes how the whole process compiles."""

from __future__ import annotations

import math

import pytest
import torch

import triton_on_cpu

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(triton_on_cpu.ENABLED is None, reason="ASRDECODE_TRITON_CPU unset (make triton-cpu)")]


def test_bad_order_is_refused():
    with pytest.raises(ValueError, match="order"):
        triton_on_cpu.enable("sideways")


def test_compiled_code_is_triton_and_equals_eager():
    from torch._inductor.utils import run_and_get_code

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.logaddexp(a, b).amax(1) + torch.log1p(a.exp()).sum(1) + torch.isinf(b).sum(1) + a.tanh().sum(1)

    a, b = torch.randn(64, 33), torch.randn(64, 33)
    b[3, 5] = -math.inf
    torch._dynamo.reset()
    got, code = run_and_get_code(torch.compile(f), a, b)
    assert "@triton.jit" in "\n".join(code)  # Inductor's GPU code, not its C++
    torch.testing.assert_close(got, f(a, b), rtol=1e-5, atol=1e-5)


def test_program_order_is_the_one_asked_for():
    """Each program of a 1-D grid writes the step at which it ran: forward 0, 1, 2...; reverse ..., 1, 0."""
    import triton
    import triton.language as tl

    @triton.jit
    def stamp(counter_ptr, out_ptr):
        pid = tl.program_id(0)
        n = tl.load(counter_ptr)
        tl.store(out_ptr + pid, n)
        tl.store(counter_ptr, n + 1)

    counter, out = torch.zeros(1, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    stamp[(8,)](counter, out)
    want = list(range(8)) if triton_on_cpu.ENABLED == "forward" else list(range(7, -1, -1))
    assert out.tolist() == want
