"""Every bad input to the transducer greedy decoders raises a ValueError naming the problem."""

from __future__ import annotations

import functools

import pytest
import torch

from asrdecode import DecodingInputError
from asrdecode.transducer import LSTMTransducer, greedy, reference_greedy
from asrdecode.transducer._checks import NonFiniteJointError
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
    with pytest.raises(NonFiniteJointError, match=r"NaN or \+inf logits"):
        reference_greedy(model, enc[0])


class _Protocol:
    """A parameterless protocol model wrapping ``inner`` (no .parameters(): the width probe is used)."""

    def __init__(self, inner):
        self.inner = inner
        self.blank_id, self.vocab_size, self.durations = inner.blank_id, inner.vocab_size, inner.durations

    def __getattr__(self, name):
        if name in ("parameters", "enc_proj"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.mark.parametrize("decode", ["greedy", "beam", "wind"])
def test_encoder_dtype_and_width_checked_against_the_model(model, enc, decode):
    from asrdecode.transducer import beam_search

    def run(m, x):
        if decode == "greedy":
            return greedy(m, x)
        return beam_search(m, x, beam=2, method="wind" if decode == "wind" else "alsd")

    for dtype in (torch.float16, torch.float32, torch.bfloat16):
        with pytest.raises(DecodingInputError, match=f"dtype {dtype}.*parameters are torch.float64"):
            run(model, enc.to(dtype))
    for width in (4, 7):
        with pytest.raises(DecodingInputError, match=f"width {width} but the model expects 5"):
            run(model, torch.randn(2, 5, width, dtype=torch.float64))
    with pytest.raises(DecodingInputError, match="project_encoder does not accept .* width 7"):
        run(_Protocol(model), torch.randn(2, 5, 7, dtype=torch.float64))
    run(_Protocol(model), enc)  # the right width passes the probe


class _Tok:
    def __init__(self, n):
        self.vocab_size = n

    def decode(self, ids):
        return " ".join(map(str, ids))


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_tokenizer_vocabulary_size_checked(model, enc, decode):
    from asrdecode.transducer import beam_search

    fn = greedy if decode == "greedy" else functools.partial(beam_search, beam=4)  # (a beam <= V = 6)
    with pytest.raises(DecodingInputError, match="tokenizer has vocab_size 7 but the model has 6"):
        fn(model, enc, tokenizer=_Tok(7))
    out = fn(model, enc, tokenizer=_Tok(6))[0]
    assert (out[0] if decode == "beam" else out).text is not None  # beam: n-best lists


def test_beam_max_symbols_is_the_one_name():
    from asrdecode.transducer import beam_search, reference_beam_search

    model = random_model(4, 3, 0, None, blank_bias=-100.0)  # never emits blank
    enc = torch.randn(1, 3, 5, dtype=torch.float64)
    capped = [row[0] for row in beam_search(model, enc, beam=2)]  # the default cap (10) ends the search
    assert len(capped[0].tokens) == 30
    assert beam_search(model, enc, beam=2, max_symbols=2)[0][0].tokens == reference_beam_search(
        model, enc[0], beam=2, max_symbols=2)[0].tokens
    with pytest.warns(DeprecationWarning, match="max_symbols_per_frame is deprecated"):
        old = beam_search(model, enc, beam=2, max_symbols_per_frame=2)
    assert old[0][0].tokens == beam_search(model, enc, beam=2, max_symbols=2)[0][0].tokens
    with pytest.raises(DecodingInputError, match="pass max_symbols only"), pytest.warns(DeprecationWarning):
        beam_search(model, enc, beam=2, max_symbols=3, max_symbols_per_frame=2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(DecodingInputError, match="max_symbols must be an int >= 1 or None"):
            beam_search(model, enc, beam=2, max_symbols=bad)
        with pytest.raises(DecodingInputError, match="max_symbols must be an int >= 1 or None"):
            reference_greedy(model, enc[0], max_symbols=bad)


@pytest.mark.parametrize("beta", [float("nan"), float("inf"), "1", None])
def test_beam_beta_must_be_finite(model, enc, beta):
    from asrdecode.transducer import beam_search, reference_beam_search

    with pytest.raises(DecodingInputError, match="beta must be a finite number"):
        beam_search(model, enc, beam=2, beta=beta)
    with pytest.raises(DecodingInputError, match="beta must be a finite number"):
        reference_beam_search(model, enc[0], beam=2, beta=beta)


def test_oracles_check_the_encoder_output_too(model, enc):
    from asrdecode.transducer import reference_beam_search, reference_wind_beam_search

    for oracle in (reference_greedy, reference_beam_search, reference_wind_beam_search):
        with pytest.raises(DecodingInputError, match="dtype torch.float32 but the model's parameters are torch.float64"):
            oracle(model, enc[0].float())
        with pytest.raises(DecodingInputError, match="width 4 but the model expects 5"):
            oracle(model, enc[0, :, :4])
