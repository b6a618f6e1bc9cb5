"""LM-weighted blank scoring's ``log(1 - p[blank])`` (Eq. 3), :mod:`asrdecode.transducer.blank_scoring`.

It is the log-sum-exp of the labels' log-probabilities, so a frame whose blank probability rounds to 1 keeps
finite label scores: with a negative fusion weight ``log1p(-exp(lp[blank]))`` made them ``+inf`` and every
engine raised ``NonFiniteJointError`` (found by a random draw of ``test_native_wind_lazy``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.native import _lib
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.blank_scoring import log_nonblank
from asrdecode.transducer.reference_beam import reference_beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, random_model, tiny_lm

ENGINES = ["torch", pytest.param("native", marks=pytest.mark.skipif(not _lib.available(),
                                                                     reason="native engine unavailable"))]


@settings(max_examples=60, deadline=None)
@given(logits=st.lists(st.floats(-30.0, 30.0), min_size=2, max_size=12), data=st.data())
def test_log_nonblank_is_log_one_minus_p_blank(logits, data):
    """Equal to ``log(1 - p[blank])`` computed exactly (``math.fsum`` of the labels' probabilities, in
    double from the same double logits), for a blank at any column."""
    blank = data.draw(st.integers(0, len(logits) - 1))
    x = torch.tensor(logits, dtype=torch.float64)
    got = log_nonblank(torch.log_softmax(x, -1), blank)
    assert got.shape == (1,)
    m = max(logits)
    z = math.fsum(math.exp(v - m) for v in logits)
    nb = math.fsum(math.exp(v - m) for i, v in enumerate(logits) if i != blank)
    assert float(got) == pytest.approx(math.log(nb) - math.log(z), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("blank", [0, 3, 6])
def test_log_nonblank_stays_finite_where_log1p_does_not(blank):
    """A float32 frame with the blank 40 nats above every label: ``lp[blank]`` rounds to 0, so the old
    ``log1p(-exp(lp[blank]))`` is ``-inf``; the label mass is ``log(6) - 40`` (batched rows, keepdim)."""
    x = torch.zeros(2, 3, 7)
    x[..., blank] = 40.0
    lp = torch.log_softmax(x, -1)
    assert bool(torch.isinf(torch.log1p(-torch.exp(lp[..., blank]))).all())
    got = log_nonblank(lp, blank)
    assert got.shape == (2, 3, 1)
    torch.testing.assert_close(got, torch.full((2, 3, 1), math.log(6.0) - 40.0), rtol=1e-5, atol=1e-5)


def test_log_nonblank_of_a_blank_only_vocabulary_is_minus_inf():
    assert float(log_nonblank(torch.zeros(1), 0)) == -math.inf


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("blank_scoring_lm"))


def _confident_model():
    """The draw that found the defect: a float32 random model whose joint output is scaled 8x (blank bias
    0.5), so some frames have ``p[blank]`` that rounds to 1 in float32."""
    m = random_model(855, FUSION_V, FUSION_BLANK, None, blank_bias=0.5)
    with torch.no_grad():
        m.joint_out.weight.mul_(8.0)
        m.joint_out.bias.mul_(8.0)
    return m.float()


def _blank_rounds_to_one(m, enc: torch.Tensor) -> bool:
    """Whether, after the start symbol, some frame of ``enc [T, D]`` has ``lp[blank] == 0`` in float32."""
    with torch.no_grad():
        dec, _ = m.predict(torch.full((1,), FUSION_BLANK), m.initial_state(1))
        lp = torch.log_softmax(m.joint(m.project_encoder(enc), m.project_decoder(dec)), -1)
    return bool((lp[..., FUSION_BLANK] == 0.0).any())


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
@pytest.mark.parametrize("weight", [-0.4, 0.4])
def test_confident_frames_with_a_negative_lm_weight_equal_the_oracle(lm, engine, method, weight):
    """Every method and engine decodes the example (finite scores) and equals its oracle."""
    m = _confident_model()
    enc = random_encoder(855, 3, 14).float()
    lengths = [14, 9, 0]
    kw = dict(beam=2, pruning="late", blank_scoring="lm_weighted", max_symbols=2, beta=0.0, fusion=[(lm, weight)])
    if method == "wind":
        kw["window"] = 2
    assert _blank_rounds_to_one(m, enc[0])  # (the example covers the case)
    got = beam_search(m, enc, torch.tensor(lengths), nbest=2, method=method, engine=engine, **kw)
    for b, n in enumerate(lengths):
        assert all(math.isfinite(h.score) for h in got[b])
        if method == "wind":
            ref = reference_wind_beam_search(m, enc[b, :n], **kw)
        else:
            ref = reference_beam_search(m, enc[b, :n], method=method, **kw)
        assert sorted(hyp_key(got[b], 4)) == sorted(hyp_key(ref[:2], 4)), b
