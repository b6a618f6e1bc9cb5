"""Every bad input to the transducer greedy decoders raises a ValueError naming the problem."""

from __future__ import annotations

import pytest
import torch

from asrdecode import DecodingInputError
from asrdecode.transducer import LSTMTransducer, greedy, reference_greedy
from transducer_models import random_model


@pytest.fixture
def model():
    return random_model(0, 6, 0, None, blank_bias=8.0)


@pytest.fixture
def enc():
    return torch.randn(2, 5, 5, dtype=torch.float64)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lengths": torch.tensor([-1, 3])}, ">= 0"),
        ({"lengths": torch.tensor([6, 3])}, "<= the padded length"),
        ({"lengths": torch.tensor([1, 2, 3])}, "3 entries"),
        ({"lengths": torch.tensor([[1, 2]])}, "1-D"),
        ({"lengths": torch.tensor([1.0, 2.0])}, "integer dtype"),
        ({"loop": "tokens"}, "loop must be"),
        ({"window": 0}, "window"),
        ({"window": 2, "loop": "frames"}, "WIND"),
        ({"max_symbols": 0}, "max_symbols"),
        ({"acceleration": "turbo"}, "acceleration mode"),
        ({"acceleration": "cuda_graphs"}, "CUDA device"),
    ],
)
def test_bad_arguments(model, enc, kwargs, match):
    with pytest.raises(ValueError, match=match):
        greedy(model, enc, **kwargs)


def test_bad_encoder_output(model, enc):
    with pytest.raises(DecodingInputError, match="3 dimensions"):
        greedy(model, enc[0])
    with pytest.raises(DecodingInputError, match="floating-point"):
        greedy(model, enc.long())
    with pytest.raises(DecodingInputError, match="torch.Tensor"):
        greedy(model, enc.tolist())
    bad = enc.clone()
    bad[1, 2, 3] = float("nan")
    with pytest.raises(DecodingInputError, match="NaN or inf"):
        greedy(model, bad)
    bad[1, 2, 3] = float("inf")
    with pytest.raises(DecodingInputError, match="NaN or inf"):
        reference_greedy(model, bad[1])


def test_vocab_mismatch_between_model_and_joint(enc):
    model = random_model(0, 6, 0, None)
    model.vocab_size = 7  # joint still has 6 outputs
    with pytest.raises(DecodingInputError, match="joint returns 6 outputs"):
        greedy(model, enc)


def test_tdt_window_rejected(enc):
    model = random_model(0, 6, 0, [0, 1, 2])
    with pytest.raises(DecodingInputError, match="WIND"):
        greedy(model, enc, window=4)


def test_not_a_model(enc):
    with pytest.raises(DecodingInputError, match="TransducerModel"):
        greedy(object(), enc)


@pytest.mark.parametrize("blank, durations", [(6, None), (-1, None), (0, [0]), (0, [1, 1]), (0, [-1, 2])])
def test_bad_model_definitions(blank, durations, enc):
    with pytest.raises(DecodingInputError):
        m = LSTMTransducer(6, 5, 4, 4, blank_id=0, durations=None)
        m.blank_id, m.durations = blank, durations
        greedy(m.double(), enc)


def test_streaming_state_batch_mismatch(model, enc):
    _, state = greedy(model, enc, return_state=True)
    with pytest.raises(DecodingInputError, match="state has batch 2"):
        greedy(model, enc[:1], state=state)


def test_nan_logits_from_model_detected_by_reference(model, enc):
    with torch.no_grad():
        model.joint_out.bias[1] = float("nan")
    with pytest.raises(DecodingInputError, match="NaN or inf logits"):
        reference_greedy(model, enc[0])
