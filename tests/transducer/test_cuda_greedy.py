"""Transducer greedy decoding on a CUDA device: the same hypotheses as the CPU's for every loop (label-looping
RNN-T and TDT, WIND, frame-looping), eager and CUDA-graph modes, with no host sync inside the loops
(``strict_syncs``), and a warm call of the same (B, T) bucket capturing no graph.

A paper-sized prediction / joint network (LSTM 640, joint 640, 1024 labels + blank) in float64, so that
CPU and GPU rounding cannot flip a decision; B=32, T=150."""

from __future__ import annotations

import copy

import pytest
import torch

from asrdecode.accel import strict_syncs
from asrdecode.transducer import GreedyDecoder, LSTMTransducer

pytestmark = pytest.mark.cuda

TDT = [0, 1, 2, 3, 4]
LOOPS = [("labels", False, {"loop": "labels"}), ("labels-tdt", True, {"loop": "labels"}),
         ("wind8", False, {"loop": "labels", "window": 8}), ("frames", False, {"loop": "frames"}),
         ("frames-tdt", True, {"loop": "frames"})]


def _paper_ish(tdt: bool) -> LSTMTransducer:
    """Random paper-sized weights; the blank bias raised so that ~0.1-1 labels per frame are emitted."""
    torch.manual_seed(0)
    model = LSTMTransducer(1025, 512, 640, 640, blank_id=1024, durations=TDT if tdt else None)
    model = model.double().eval().requires_grad_(False)
    model.joint_out.bias[1024] += 1.0 if tdt else 1.35
    return model


def _inputs(seed: int, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(B, T, 512, generator=g, dtype=torch.float64)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    lengths[0], lengths[-1] = T, 0
    return enc, lengths


def _assert_same(got, want):
    assert [(h.tokens, h.timestamps, h.durations) for h in got] == [(h.tokens, h.timestamps, h.durations)
                                                                     for h in want]
    for a, b in zip(got, want):
        assert abs(a.score - b.score) <= 1e-9 * max(1.0, abs(b.score))


@pytest.mark.parametrize("name,tdt,options", LOOPS, ids=[c[0] for c in LOOPS])
def test_cuda_equals_cpu_eager_and_graphs(name, tdt, options):
    cpu_model = _paper_ish(tdt)
    gpu_model = copy.deepcopy(cpu_model).cuda()
    cpu = GreedyDecoder(cpu_model, engine="torch", **options)
    eager = GreedyDecoder(gpu_model, engine="torch", acceleration="eager", **options)
    graphs = GreedyDecoder(gpu_model, engine="torch", acceleration="cuda_graphs", **options)
    first, warm = _inputs(1, 32, 150), _inputs(2, 30, 145)  # one bucket: (32, 160)
    want_first, want_warm = cpu.decode(*first), cpu.decode(*warm)
    assert sum(len(h.tokens) for h in want_first) > 32  # labels and blanks both decided
    with strict_syncs():
        _assert_same(eager.decode(first[0].cuda(), first[1].cuda()), want_first)
        _assert_same(graphs.decode(first[0].cuda(), first[1].cuda()), want_first)
        captures = graphs.captures
        assert captures >= 1
        _assert_same(graphs.decode(warm[0].cuda(), warm[1].cuda()), want_warm)
        assert graphs.captures == captures  # warm: the cached loop's graphs replayed
        _assert_same(eager.decode(warm[0].cuda(), warm[1].cuda()), want_warm)


def test_cuda_graph_streaming_equals_cpu():
    """Chunks through ``advance`` in CUDA-graph mode (skip / offset carried between chunks) equal the CPU."""
    cpu_model = _paper_ish(True)
    gpu_model = copy.deepcopy(cpu_model).cuda()
    enc, lengths = _inputs(3, 8, 60)
    want = GreedyDecoder(cpu_model, engine="torch").decode(enc, lengths)
    dec = GreedyDecoder(gpu_model, engine="torch", acceleration="cuda_graphs")
    state = dec.init_state(8, device="cuda", dtype=torch.float64)
    with strict_syncs():
        for start, end in ((0, 20), (20, 40), (40, 60)):
            chunk = (lengths - start).clamp(0, end - start)
            state = dec.advance(state, enc[:, start:end].cuda(), chunk.cuda())
    _assert_same(dec.finalize(state), want)
