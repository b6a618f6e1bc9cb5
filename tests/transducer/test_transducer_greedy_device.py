"""Greedy decoding's device-resident loops on the CPU: host reads per call bounded by a small constant,
no hidden syncing ops, and the static path that CUDA graphs replay (EmulatedGraphRunner: padded B/T
buckets, buffers and graphs cached on the decoder, storage growth) equal to the reference."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.accel import EmulatedGraphRunner, count_device_syncs, count_host_reads
from asrdecode.transducer import GreedyDecoder, greedy
from test_transducer_greedy import assert_equal_to_reference, decoding_case
from transducer_models import random_encoder, random_model

greedy_module = sys.modules["asrdecode.transducer.greedy"]

TDT = [0, 1, 2, 3, 4]
#: (name, TDT?, options): every loop of the module
LOOPS = [("labels", False, {"loop": "labels"}), ("labels-tdt", True, {"loop": "labels"}),
         ("wind8", False, {"loop": "labels", "window": 8}), ("frames", False, {"loop": "frames"}),
         ("frames-tdt", True, {"loop": "frames"})]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model(tdt: bool, seed: int = 0) -> torch.nn.Module:
    """A random LSTM model emitting ~0.2 (RNN-T) / ~0.4 (TDT) labels per frame."""
    return random_model(seed, 30, 0, TDT if tdt else None, blank_bias=1.0 if tdt else 2.7, enc_dim=16)


@pytest.mark.parametrize("name,tdt,options", LOOPS, ids=[c[0] for c in LOOPS])
def test_host_reads_per_call_are_a_small_constant(name, tdt, options):
    """B=8, T=150 (~1000 host reads per call before the loops moved to the device): at most 16 over the
    whole call, validation and results included; no syncing op beyond those reads."""
    model = _model(tdt)
    enc = random_encoder(1, 8, 150, 16)
    lengths = torch.tensor([150, 149, 140, 120, 150, 77, 0, 150])
    for call in (lambda: greedy(model, enc, lengths, engine="torch", **options),
                 lambda: GreedyDecoder(model, engine="torch", **options).decode(enc, lengths)):
        with count_host_reads() as reads, count_device_syncs() as syncs:
            hyps = call()
        assert sum(len(h.tokens) for h in hyps) > 100  # the loop did real work
        assert reads.count <= 16, reads.by_name
        assert syncs.count <= reads.count, syncs.by_op
        assert set(syncs.by_op) <= {"aten::_local_scalar_dense", "aten::is_nonzero"}, syncs.by_op


@pytest.fixture
def graphs_on_cpu(monkeypatch):
    """acceleration="graphs-on-cpu" takes the cuda_graphs path (padded, cached static loop) with the
    CPU twin of graph capture."""
    real = greedy_module.resolve_mode
    monkeypatch.setattr(greedy_module, "resolve_mode", lambda m, d: "cuda_graphs" if m == "graphs-on-cpu" else real(m, d))
    monkeypatch.setattr(greedy_module, "StepRunner", EmulatedGraphRunner)
    return monkeypatch


@SETTINGS
@given(case=decoding_case(), loop=st.sampled_from(["labels", "frames", "wind"]), precompute=st.booleans())
def test_graph_path_equals_reference(case, loop, precompute):
    model, enc, lengths, max_symbols = case
    window = 3 if loop == "wind" and model.durations is None else 1
    mp = pytest.MonkeyPatch()
    real = greedy_module.resolve_mode
    mp.setattr(greedy_module, "resolve_mode", lambda m, d: "cuda_graphs" if m == "graphs-on-cpu" else real(m, d))
    mp.setattr(greedy_module, "StepRunner", EmulatedGraphRunner)
    try:
        dec = GreedyDecoder(model, loop="frames" if loop == "frames" else "labels", window=window,
                            max_symbols=max_symbols, precompute_projections=precompute, acceleration="graphs-on-cpu",
                            engine="torch")
        assert_equal_to_reference(model, enc, lengths, dec.decode(enc, lengths), max_symbols)
        captures = dec.captures
        rev = torch.flip(enc, [0]), torch.flip(lengths, [0])  # same bucket, other inputs: warm
        assert_equal_to_reference(model, *rev, dec.decode(*rev), max_symbols)
        assert dec.captures == captures
    finally:
        mp.undo()


@pytest.mark.parametrize("name,tdt,options", LOOPS, ids=[c[0] for c in LOOPS])
def test_graph_path_buckets_and_warm_calls(graphs_on_cpu, name, tdt, options):
    """Calls whose (B, T) share a bucket reuse the cached loop (no capture); another bucket makes its own."""
    model = _model(tdt, seed=3)
    dec = GreedyDecoder(model, acceleration="graphs-on-cpu", engine="torch", **options)
    eager = GreedyDecoder(model, engine="torch", **options)
    shapes = [(5, 150, [150, 0, 77, 149, 10]), (8, 140, [140] * 8), (3, 131, [3, 131, 64]), (20, 40, [40] * 20)]
    counts = []
    for i, (B, T, n) in enumerate(shapes):
        enc = random_encoder(10 + i, B, T, 16)
        got, want = dec.decode(enc, n), eager.decode(enc, n)
        assert [(h.tokens, h.timestamps, h.durations) for h in got] == [(h.tokens, h.timestamps, h.durations) for h in want]
        assert all(abs(a.score - b.score) <= 1e-9 * max(1.0, abs(b.score)) for a, b in zip(got, want))
        counts.append(dec.captures)
    assert counts[0] >= 1 and counts[1] == counts[0] and counts[2] == counts[0]  # buckets (16, 160)
    assert counts[3] > counts[2]  # bucket (20, 40): a new loop


def test_graph_path_storage_grows_and_streams(graphs_on_cpu):
    """Many labels per frame: the cached hypotheses storage grows at a check point (a new capture), still
    exact; streaming chunks in graph mode equal whole-utterance decoding."""
    model = random_model(5, 6, 2, None, blank_bias=-0.5)
    enc = random_encoder(6, 3, 14, 5)
    lengths = torch.tensor([14, 9, 12])
    dec = GreedyDecoder(model, max_symbols=5, acceleration="graphs-on-cpu", engine="torch")
    hyps = dec.decode(enc, lengths)
    assert max(len(h.tokens) for h in hyps) > 2 * 16 + 8  # past the cached loop's first capacity
    assert_equal_to_reference(model, enc, lengths, hyps, 5)
    state = dec.init_state(3, dtype=torch.float64)
    for start, end in ((0, 5), (5, 6), (6, 14)):
        state = dec.advance(state, enc[:, start:end], (lengths - start).clamp(0, end - start))
    for a, b in zip(dec.finalize(state), hyps):
        assert (a.tokens, a.timestamps) == (b.tokens, b.timestamps)
        assert abs(a.score - b.score) <= 1e-9 * max(1.0, abs(b.score))


def test_graph_path_runaway_raises(graphs_on_cpu):
    import asrdecode.transducer._checks as checks

    graphs_on_cpu.setattr(checks, "MAX_SYMBOLS_GUARD", 30)
    model = random_model(4, 3, 0, None, blank_bias=-100.0)
    for loop in ("labels", "frames"):
        dec = GreedyDecoder(model, loop=loop, max_symbols=None, acceleration="graphs-on-cpu", engine="torch")
        with pytest.raises(ValueError, match="set max_symbols"):
            dec.decode(random_encoder(0, 2, 3))


def test_in_place_weight_update_makes_a_new_loop(graphs_on_cpu):
    """A captured graph may bake in data derived from the weights: an in-place update is a new cache entry."""
    model = _model(False, seed=7)
    dec = GreedyDecoder(model, acceleration="graphs-on-cpu", engine="torch")
    enc = random_encoder(2, 4, 30, 16)
    dec.decode(enc)
    captures = dec.captures
    with torch.no_grad():
        model.embedding.weight.mul_(3.0)
    got = dec.decode(enc)
    assert dec.captures > captures
    want = GreedyDecoder(model, engine="torch").decode(enc)
    assert [h.tokens for h in got] == [h.tokens for h in want]
