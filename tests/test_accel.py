"""The acceleration layers run the same step functions: check their CPU-visible mechanics.

CUDA-graph capture itself needs a GPU; what it relies on is tested here on CPU: the static-shape
path (every row evaluated, as compile and graphs do) and the in-place state update wrapper that
makes a captured step replayable (fixed tensor addresses).
"""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from asrdecode.accel import StepRunner, resolve_mode
from asrdecode.transducer import greedy
from test_transducer_greedy import assert_equal_to_reference, decoding_case

greedy_module = sys.modules["asrdecode.transducer.greedy"]


class _InPlaceRunner(StepRunner):
    """What CUDA-graph replay does, run eagerly: the step updates state tensors in place."""

    def _replay(self, fn, state):
        before = [id(getattr(state, n)) for n in self.state_names]
        self._in_place(fn, state)()
        assert [id(getattr(state, n)) for n in self.state_names] == before  # same tensor objects


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=decoding_case())
def test_graph_mode_mechanics_equal_reference(case, monkeypatch_module):
    model, enc, lengths, max_symbols = case
    hyps = greedy(model, enc, lengths, max_symbols=max_symbols, window=1)
    assert_equal_to_reference(model, enc, lengths, hyps, max_symbols)
    graph_like = greedy(model, enc, lengths, max_symbols=max_symbols, acceleration="graphs-on-cpu")
    assert [h.tokens for h in graph_like] == [h.tokens for h in hyps]
    assert [h.timestamps for h in graph_like] == [h.timestamps for h in hyps]
    assert all(abs(a.score - b.score) < 1e-9 * max(1, abs(b.score)) for a, b in zip(graph_like, hyps))


@pytest.fixture(scope="module")
def monkeypatch_module():
    """Route acceleration='graphs-on-cpu' to the static, in-place path CUDA graphs replay."""
    mp = pytest.MonkeyPatch()
    real_resolve = greedy_module.resolve_mode
    mp.setattr(greedy_module, "resolve_mode", lambda m, d: "cuda_graphs" if m == "graphs-on-cpu" else real_resolve(m, d))
    mp.setattr(greedy_module, "StepRunner", _InPlaceRunner)
    yield mp
    mp.undo()


def test_resolve_mode():
    cpu = torch.device("cpu")
    assert resolve_mode(None, cpu) == "eager" and resolve_mode("auto", cpu) == "eager"
    assert resolve_mode("compile", cpu) == "compile"
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_mode("cuda_graphs", cpu)
    with pytest.raises(ValueError, match="acceleration mode"):
        resolve_mode("fast", cpu)


def test_step_arguments_only_in_eager_mode():
    runner = StepRunner("compile", ())
    with pytest.raises(ValueError, match="not supported"):
        runner(lambda s, rows: None, object(), torch.tensor([0]))


@pytest.mark.slow
def test_torch_compile_equals_eager():
    """torch.compile of the step functions (15-20 s cold per function: not in the fast suite)."""
    from transducer_models import random_model

    model = random_model(0, 9, 0, None, blank_bias=1.0)
    enc = torch.randn(4, 30, 5, dtype=torch.float64)
    lengths = torch.tensor([30, 20, 10, 0])
    eager = greedy(model, enc, lengths, max_symbols=3)
    compiled = greedy(model, enc, lengths, max_symbols=3, acceleration="compile")
    assert [h.tokens for h in compiled] == [h.tokens for h in eager]
