"""``_validation.weights_versions``: the key by which caches of data derived from model weights (native
weight copies, the LSTM step weights, captured graphs) notice in-place changes, inference tensors included."""

from __future__ import annotations

import torch

from asrdecode._validation import weights_versions
from asrdecode.accel import count_host_reads, parameters_key


def test_ordinary_tensors_are_keyed_by_their_version_counter():
    a, b = torch.zeros(3), torch.ones(2, dtype=torch.float64)
    before = weights_versions([a, b])
    assert before == [(a._version, 0), (b._version, 0)]
    a.add_(0.0)  # an in-place op bumps the counter even when no value changes
    assert weights_versions([a, b]) == [(before[0][0] + 1, 0), before[1]]


def test_inference_tensors_are_keyed_by_their_contents_in_one_host_read():
    with torch.inference_mode():
        ts = [torch.randn(4, 5), torch.randn(7, dtype=torch.float64), torch.arange(6, dtype=torch.int16),
              torch.tensor([True, False]), torch.randn(3, dtype=torch.complex64), torch.randn(2, 3).t()]
        with count_host_reads() as reads:
            before = weights_versions(ts)
        assert reads.count == 1
        assert all(v == -1 for v, _ in before)
        assert weights_versions(ts) == before  # unchanged contents: the same key
        for i, t in enumerate(ts):
            old = t.clone()
            at = (0,) * t.dim()
            t[at] = ~t[at] if t.dtype == torch.bool else t[at] + 1  # one element
            after = weights_versions(ts)
            assert after[i] != before[i] and after[:i] + after[i + 1:] == before[:i] + before[i + 1:], i
            t.copy_(old)
        assert weights_versions(ts) == before


def test_parameters_key_of_a_module_made_under_inference_mode_follows_an_in_place_edit():
    with torch.inference_mode():
        m = torch.nn.Linear(3, 2)
        key = parameters_key(m)
        assert parameters_key(m) == key
        m.bias.mul_(2.0)
        assert parameters_key(m) != key
