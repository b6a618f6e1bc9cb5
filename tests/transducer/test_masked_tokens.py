"""Transducers whose joint masks classes (a ``-inf`` logit: probability 0, a suppressed token or duration).

Every greedy and beam search, on both engines, equals its oracle and never emits a masked label. A masked
blank too: the symbol cap moves time, and LM-weighted blank scoring keeps its blank ``-inf`` at every fusion
weight (``lam * log p[blank]`` was NaN at ``lam = 0`` and ``+inf`` below it, found by the differential
fuzzer's ``masked`` entry). A joint with no possible label at all is an error in every search.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.native import _lib
from asrdecode.transducer._checks import NonFiniteJointError
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.greedy import greedy
from asrdecode.transducer.reference import reference_greedy
from asrdecode.transducer.reference_beam import reference_beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from test_transducer_bad_input import _Protocol
from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, random_model, tiny_lm

NATIVE = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable")
ENGINES = ["torch", pytest.param("native", marks=NATIVE)]
LABELS = [v for v in range(FUSION_V) if v != FUSION_BLANK]


def _masked_model(seed: int, masked: list[int], tdt: bool = False, sharp: float = 1.0) -> torch.nn.Module:
    """A float32 random LSTM transducer whose joint gives the classes ``masked`` (token ids; TDT durations
    as ``FUSION_V + index``) probability 0 everywhere."""
    m = random_model(seed, FUSION_V, FUSION_BLANK, [0, 1, 2] if tdt else None, blank_bias=1.0)
    with torch.no_grad():
        m.joint_out.weight.mul_(sharp)
        m.joint_out.bias.mul_(sharp)
        m.joint_out.bias[masked] = -math.inf
    return m.float()


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("masked_lm"))


def _oracle(m, enc, method: str, kw: dict):
    if method == "wind":
        return reference_wind_beam_search(m, enc, **kw)
    return reference_beam_search(m, enc, method=method, **kw)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 5000), masked=st.lists(st.sampled_from(LABELS[1:]), max_size=3, unique=True),
       blank=st.booleans(), method=st.sampled_from(["alsd", "aes", "wind"]), tdt=st.booleans(),
       weight=st.sampled_from([0.0, 0.4, -0.4]), scoring=st.sampled_from(["lm_weighted", "none"]),
       engine=st.sampled_from(["torch", "native"]))
def test_beam_searches_equal_their_oracles_with_masked_classes(lm, seed, masked, blank, method, tdt, weight,
                                                               scoring, engine):
    if engine == "native" and not _lib.available():
        pytest.skip("native engine unavailable")
    tdt = tdt and method != "wind"
    off = masked + ([FUSION_BLANK] if blank else []) + ([FUSION_V + 1] if tdt and seed % 2 else [])
    m = _masked_model(seed, off, tdt, sharp=4.0)
    enc = random_encoder(seed, 2, 7).float()
    lengths = [7, 4]
    kw = dict(beam=3, pruning="late", blank_scoring=scoring, max_symbols=2, beta=0.0,
              fusion=[(lm, weight)] if weight else [])
    if method == "wind":
        kw["window"] = 3
    got = beam_search(m, enc, torch.tensor(lengths), nbest=3, method=method, engine=engine, **kw)
    for b, n in enumerate(lengths):
        assert got[b] and all(math.isfinite(h.score) for h in got[b]), b
        assert not any(set(h.tokens) & set(masked) for h in got[b])
        assert sorted(hyp_key(got[b], 3)) == sorted(hyp_key(_oracle(m, enc[b, :n], method, kw)[:3], 3)), b


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("loop,window", [("labels", 1), ("frames", 1), ("labels", 3)])
@pytest.mark.parametrize("blank", [False, True])
def test_greedy_equals_its_oracle_with_masked_classes(engine, loop, window, blank):
    masked = [LABELS[1], LABELS[3]] + ([FUSION_BLANK] if blank else [])
    m = _masked_model(3, masked, sharp=3.0)
    enc = random_encoder(3, 3, 9).float()
    lengths = torch.tensor([9, 5, 0])
    got = greedy(m, enc, lengths, engine=engine, loop=loop, window=window, max_symbols=2)
    for b in range(3):
        want = reference_greedy(m, enc[b, : int(lengths[b])], 2)
        assert (got[b].tokens, got[b].timestamps) == (want.tokens, want.timestamps)
        assert got[b].score == pytest.approx(want.score, abs=1e-4)
        assert not set(got[b].tokens) & set(masked)
    if blank:  # no blank: every frame takes the cap's two labels
        assert [len(h.tokens) for h in got] == [18, 10, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_joint_with_no_possible_label_is_an_error(engine):
    m = _masked_model(5, list(range(FUSION_V)))
    enc = random_encoder(5, 1, 4).float()
    with pytest.raises(NonFiniteJointError, match="-inf for every token"):
        greedy(m, enc, engine=engine)
    with pytest.raises(NonFiniteJointError, match="-inf for every token"):
        beam_search(m, enc, beam=2, engine=engine)
    for oracle in (lambda: reference_greedy(m, enc[0], 2), lambda: reference_beam_search(m, enc[0], beam=2),
                   lambda: reference_wind_beam_search(m, enc[0], beam=2)):
        with pytest.raises(NonFiniteJointError, match="-inf for every token"):
            oracle()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_or_inf_joints_are_named_errors_in_every_search(engine, value):
    """The native greedy and sherpa-onnx's modified and NeMo beam searches (both engines) returned hypotheses
    scored NaN, and the native ALSD++ / AES++ / WIND finite ones (a NaN candidate never compares above
    another), silently, where the tensor engine raises."""
    from asrdecode.models.sherpa_nemo_search import nemo_beam_search
    from asrdecode.models.sherpa_search import modified_beam_search
    from test_native_modified_beam import _lstm_model

    m = _masked_model(5, [])
    with torch.no_grad():
        m.joint_out.bias[1] = value
    enc = random_encoder(5, 2, 4).float()
    with pytest.raises(NonFiniteJointError):
        greedy(m, enc, engine=engine)
    for method in ("alsd", "aes", "wind"):
        for model in (m, _Protocol(m)):  # (native: the engine's own networks, then its step on torch's joint)
            with pytest.raises(NonFiniteJointError):
                beam_search(model, enc, beam=2, method=method, engine=engine)
    t = _lstm_model(1, 6, 1, 3)
    with torch.no_grad():
        t.joint_out.bias[2] = value
    enc = torch.randn(2, 6, 10, generator=torch.Generator().manual_seed(1))
    for search in (modified_beam_search, nemo_beam_search):
        with pytest.raises(NonFiniteJointError):
            search(t, enc, [6, 4], engine=engine, beam=2)
        with torch.no_grad():
            t.joint_out.bias[2] = -math.inf  # a masked class is fine
        assert all(math.isfinite(h.score) for row in search(t, enc, [6, 4], engine=engine, beam=2) for h in row)
        with torch.no_grad():
            t.joint_out.bias[2] = value
