"""Kernels per round of greedy decoding's device loops (ATen ops on the CPU: each is a kernel launch in a
replayed CUDA graph), the in-place state updates they rely on, and the caller's state left as it was."""

from __future__ import annotations

import sys

import pytest
import torch

from asrdecode.accel import count_device_syncs
from asrdecode.transducer import GreedyDecoder, LSTMTransducer
from asrdecode.transducer.model import replace_state_inplace
from test_transducer_greedy import assert_equal_to_reference
from transducer_models import random_encoder, random_model

greedy_module = sys.modules["asrdecode.transducer.greedy"]

#: (name, TDT?, loop, window, static loop?, most ATen ops of one round, views included): a one-layer LSTM
#: model, max_symbols set. Before these rounds were cut they took 98 (RNN-T: two find steps), 119 (TDT), 92
#: (WIND), 68 / 82 (frames) ops, plus a copy back per replaced state tensor (~13) in a graph, and each
#: logsumexp was nine kernels on a GPU
ROUNDS = [
    ("labels-window", False, "labels", 1, True, 72),
    ("labels-eager", False, "labels", 1, False, 80),
    ("labels-tdt", True, "labels", 1, True, 74),
    ("wind", False, "labels", 8, False, 72),
    ("frames", False, "frames", 1, False, 61),
    ("frames-tdt", True, "frames", 1, False, 78),
]


class _OpNames(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name,tdt,loop,window,static,most", ROUNDS, ids=[r[0] for r in ROUNDS])
def test_round_ops_are_bounded(name, tdt, loop, window, static, most):
    model = random_model(1, 12, 0, [0, 1, 2, 3] if tdt else None, blank_bias=1.0, enc_dim=5)
    enc = random_encoder(2, 6, 20)
    lengths = torch.tensor([20, 19, 7, 0, 20, 12])
    with torch.inference_mode():
        state = greedy_module._initial_state(model, 6, 64, enc)
        lp = greedy_module._Loop(model, enc, lengths, state, window, 10, True, static=static)
        body = greedy_module._label_round if loop == "labels" else greedy_module._frame_round
        body(lp)  # the model's cached step weights
        with count_device_syncs() as ops, _OpNames() as seen:
            body(lp)
    assert ops.count == 0  # nothing syncs inside a round
    assert ops.ops <= most, ops.ops
    assert "aten::logsumexp" not in seen.names  # nine kernels on a GPU: one log_softmax instead
    assert not {"aten::clone", "aten::copy_"} & seen.names  # state updated in place: a graph copies nothing back


def test_static_label_looping_uses_a_window_find_step():
    """The static loop's RNN-T label-looping round is one FIND_FRAMES-frame find step; the eager loop's is
    FIND_STEPS single-frame steps; TDT one decision; WIND its window."""
    assert greedy_module._round_shape(1, False, True) == (1, greedy_module.FIND_FRAMES)
    assert greedy_module._round_shape(1, False, False) == (greedy_module.FIND_STEPS, 1)
    assert greedy_module._round_shape(1, True, True) == (1, 1)
    assert greedy_module._round_shape(8, False, False) == (1, 8)


@pytest.mark.parametrize("frames", [2, 3, 4, 7])
def test_window_find_rounds_equal_reference(monkeypatch, frames):
    """Static loops' label-looping with other window sizes (compile-free: the static loop run eagerly)."""
    monkeypatch.setattr(greedy_module, "FIND_FRAMES", frames)
    model = random_model(3, 9, 4, None, blank_bias=0.5)
    enc = random_encoder(4, 7, 23)
    lengths = torch.tensor([23, 22, 1, 0, 15, 23, 9])
    for max_symbols in (1, 3, 10):
        with torch.inference_mode():
            state = greedy_module._initial_state(model, 7, 8, enc)
            lp = greedy_module._Loop(model, enc, lengths, state, 1, max_symbols, True, static=True)
            greedy_module._run_loop(lp, greedy_module.StepRunner("eager", lp.STATE), "labels",
                                    greedy_module.LoopStats(0.5), 23, 7)
        assert_equal_to_reference(model, enc, lengths, lp.hyps.to_hypotheses(), max_symbols)


def _models():
    plain = random_model(5, 7, 1, None, pred_layers=2)

    class NoInPlace(torch.nn.Module):  # the protocol without replace_state_: the generic fallback
        def __init__(self, inner: LSTMTransducer) -> None:
            super().__init__()
            self.inner = inner

        def replace_state(self, state, new, mask):
            return self.inner.replace_state(state, new, mask)

    return [random_model(5, 7, 1, None), plain, random_model(5, 7, 1, None, kind="stateless", pred_layers=3),
            NoInPlace(plain)]


@pytest.mark.parametrize("index", range(4))
def test_replace_state_inplace_equals_replace_state(index):
    model = _models()[index]
    inner = getattr(model, "inner", model)
    with torch.inference_mode():
        state = inner.initial_state(5, dtype=torch.float64)
        _, state = inner.predict(torch.tensor([2, 3, 4, 5, 6]), state)
        _, new = inner.predict(torch.tensor([3, 1, 6, 2, 4]), state)
        mask = torch.tensor([True, False, True, True, False])
        want = model.replace_state(state, new, mask)
        leaves = torch.utils._pytree.tree_flatten(state)[0]
        ptrs = [x.data_ptr() for x in leaves]
        replace_state_inplace(model, state, new, mask)
    for got, exp in zip(leaves, torch.utils._pytree.tree_flatten(want)[0]):
        assert torch.equal(got, exp)
    assert [x.data_ptr() for x in leaves] == ptrs


@pytest.mark.parametrize("tdt", [False, True])
def test_advance_leaves_the_given_state_unchanged(tdt):
    """The loop updates its state in place, on its own copies: a state given to advance stays valid (a
    caller may decode from it again)."""
    model = random_model(6, 8, 0, [0, 1, 2] if tdt else None, blank_bias=0.5)
    dec = GreedyDecoder(model, engine="torch")
    enc = random_encoder(7, 3, 12)
    state = dec.advance(dec.init_state(3, dtype=torch.float64), enc[:, :5])
    before = [x.clone() for x in torch.utils._pytree.tree_flatten(state.pred_state)[0]] + [state.dec_out.clone()]
    first = dec.advance(state, enc[:, 5:])
    after = torch.utils._pytree.tree_flatten(state.pred_state)[0] + [state.dec_out]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert not all(torch.equal(a, b) for a, b in zip(after, torch.utils._pytree.tree_flatten(first.pred_state)[0]))
