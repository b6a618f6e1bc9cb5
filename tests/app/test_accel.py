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

from asrdecode.accel import EmulatedGraphRunner, StepRunner, resolve_mode
from asrdecode.transducer import greedy
from test_transducer_greedy import assert_equal_to_reference, decoding_case

greedy_module = sys.modules["asrdecode.transducer.greedy"]


class _InPlaceRunner(EmulatedGraphRunner):
    """What CUDA-graph replay does, run eagerly: the step updates state tensors in place."""

    def _replay(self, fn, state):
        before = [id(getattr(state, n)) for n in self.state_names]
        super()._replay(fn, state)
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


# -- device-resident loop helpers ------------------------------------------------------------------------


def test_count_host_reads_counts_each_kind_of_read():
    from asrdecode.accel import count_host_reads

    x = torch.tensor([1, 2, 3])
    with count_host_reads() as reads:
        _ = x + 1  # device work: not a read
        bool(x.any())
        x.max().item()
        x.tolist()
        int(x[0])
        float(x[1])
        _ = [1, 2, 3][x[0]]
    assert reads.count == 6
    assert reads.by_name == {"__bool__": 1, "item": 1, "tolist": 1, "__int__": 1, "__float__": 1, "__index__": 1}


class _Counter:
    """A loop state: counts up to ``stop`` with masked steps (no-op once done)."""

    def __init__(self, stop: int) -> None:
        self.value = torch.zeros((), dtype=torch.long)
        self.stop = torch.tensor(stop)
        self.done = torch.tensor(stop <= 0)


def _count_step(s: _Counter) -> None:
    s.value = torch.where(s.done, s.value, s.value + 1)
    s.done = s.value >= s.stop


@pytest.mark.parametrize("stop,first", [(1, 1), (5, 1), (100, 10), (100, 100), (1000, 7), (3, 50)])
def test_run_until_done_reaches_the_end_with_logarithmic_reads(stop, first):
    from asrdecode.accel import StepRunner, count_host_reads, run_until_done

    state = _Counter(stop)
    with count_host_reads() as reads:
        rounds = run_until_done(StepRunner("eager", ("value", "done")), _count_step, state, lambda s: s.done,
                                first_check=first, limit=10_000)
    assert int(state.value) == stop  # the rounds past the end changed nothing
    assert rounds >= stop
    assert rounds <= max(first, 2 * stop + first)  # the overshoot is bounded by the doubling
    assert reads.count <= 2 + max(0, (stop // max(first // 4, 1))).bit_length()


def test_run_until_done_raises_past_its_limit():
    from asrdecode.accel import StepRunner, run_until_done

    with pytest.raises(RuntimeError, match="did not finish"):
        run_until_done(StepRunner("eager", ("value", "done")), _count_step, _Counter(10**6), lambda s: s.done,
                       first_check=4, limit=64)


def test_bucket_pads_little_and_shares_sizes():
    from asrdecode.accel import bucket

    for n in range(1, 5000):
        b = bucket(n)
        assert b >= n and b >= 16
        assert b <= max(16, n * 1.25 + 1)
    assert bucket(150) == bucket(160) == 160
    assert bucket(1, minimum=1) == 1 and bucket(3, minimum=1) == 3 and bucket(9, minimum=1) == 10


def test_loop_cache_keeps_entries_and_evicts_the_least_recent():
    from asrdecode.accel import LoopCache

    made = []
    cache = LoopCache(size=2)
    get = lambda k: cache.get(k, lambda: made.append(k) or k)  # noqa: E731
    get("a"), get("b"), get("a"), get("c")  # "b" is the least recent when "c" comes
    assert made == ["a", "b", "c"] and len(cache) == 2
    get("a")
    get("b")
    assert made == ["a", "b", "c", "b"]


def test_parameters_key_follows_replaced_parameters():
    from asrdecode.accel import parameters_key

    m = torch.nn.Linear(3, 2)
    key = parameters_key(m)
    assert parameters_key(m) == key
    with torch.no_grad():
        m.weight.add_(1.0)  # in place: data derived from it (a model's cached step weights) is stale
    in_place = parameters_key(m)
    assert in_place != key
    m.weight = torch.nn.Parameter(torch.zeros(2, 3))  # replaced: new address
    assert parameters_key(m) not in (key, in_place)


def test_count_device_syncs_names_the_syncing_ops():
    from asrdecode.accel import count_device_syncs

    x = torch.tensor([1.0, 2.0, 3.0])
    mask = x > 1
    with count_device_syncs() as syncs:
        torch.where(mask, x, 0.0)
        x[torch.tensor([0, 2])]
        x.repeat_interleave(torch.tensor([1, 2, 1]), output_size=4)
    assert syncs.count == 0 and syncs.ops >= 3
    with count_device_syncs() as syncs:
        x[mask]
        mask.nonzero()
        bool(mask.any())
        x.repeat_interleave(torch.tensor([1, 2, 1]))
    assert syncs.by_op == {"aten::index with a boolean mask": 1, "aten::nonzero": 1, "aten::_local_scalar_dense": 1,
                           "aten::repeat_interleave (no output_size)": 1}


def test_compiles_says_which_modes_run_torch_compile():
    from asrdecode.accel import compiled_graphs, compiles

    assert compiles("compile") and not compiles("eager") and not compiles("cuda_graphs")
    with compiled_graphs():
        assert compiles("cuda_graphs") and compiles("compile") and not compiles("eager")
    assert not compiles("cuda_graphs")
