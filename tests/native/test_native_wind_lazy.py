"""The native WIND beam search's lazy window (transducer_wind_step.h, the one-call search): a popped
hypothesis reads its window frame by frame and stops once no later frame can place a candidate among its
``beam`` best. Its n-best lists equal, bit for bit, those of the engine reading every window frame
(``ASRDECODE_WIND_FULL_WINDOW=1``: the same logits, the same kept candidates) and the oracle's, while the
joint rows it computes (the engine's counter, ``transducer_search.last_counts``) stay well under the full
window's.

The models are float32 (the one-call path's networks are); ``sharp`` scales the joint's output so frames
are peaked as a trained model's are (blank sure on most frames, a label sure on a few): there the window
closes early, which is what the comparison must cover.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import _lib
from asrdecode.native import transducer_search as ts
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, random_model, tiny_lm

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

V, BLANK = FUSION_V, FUSION_BLANK


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("wind_lazy_lm"))


def _model(seed: int, sharp: float, blank_bias: float = 1.0) -> torch.nn.Module:
    """A float32 random model whose joint output (blank bias included) is scaled by ``sharp``."""
    m = random_model(seed, V, BLANK, None, blank_bias=blank_bias)
    with torch.no_grad():
        m.joint_out.weight.mul_(sharp)
        m.joint_out.bias.mul_(sharp)
    return m.float()


@contextmanager
def _window(full: bool):
    """The engine reads every window frame (``full``) or its lazy window."""
    with mock.patch.dict(os.environ, {ts.FULL_WINDOW_ENV: "1" if full else "0"}):
        yield


def _search(full: bool, m, enc, lengths, **kw) -> tuple[list, int]:
    """The n-best lists of the one-call native search and the joint rows it computed."""
    calls = []
    real = ts.search

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    with _window(full), mock.patch.object(ts, "search", spy):
        got = beam_search(m, enc, lengths, nbest=kw["beam"], method="wind", engine="native", **kw)
    assert calls == [True]  # the one-call path ran
    return got, ts.last_counts()["joint_rows"]


def _exact(hyps: list) -> list:
    return [[(h.tokens, h.timestamps, h.score) for h in row] for row in hyps]


def _fusion(kind: str, lm, weight: float, batch: int) -> list:
    if kind == "none":
        return []
    if kind == "lm":
        return [(lm, weight)]
    trees = [BoostingTree.from_token_sequences([[b % 4, 1], [3]], vocab_size=V, blank_id=BLANK, weight=1.5)
             for b in range(batch)]
    return [(lm, weight), (BoostingTree.stack(trees), 1.0)]  # boosting: scores above 0


@settings(max_examples=40, deadline=None, derandomize=True)  # (the same examples on every run)
@given(seed=st.integers(0, 10_000), sharp=st.sampled_from([1.0, 4.0, 8.0]), blank_bias=st.sampled_from([0.5, 1.0, 2.0]),
       window=st.integers(1, 9),
       beam=st.integers(1, 5), pruning=st.sampled_from(["late", "early"]),
       scoring=st.sampled_from(["lm_weighted", "none"]), fusion=st.sampled_from(["none", "lm", "boost"]),
       weight=st.sampled_from([0.3, 1.0, -0.4]), beta=st.sampled_from([0.0, 0.7, -0.5]),
       gamma=st.sampled_from([None, 0.5, 3.0]), cap=st.sampled_from([1, 2, 4]))
def test_lazy_window_equals_the_full_window(lm, seed, sharp, blank_bias, window, beam, pruning, scoring, fusion,
                                            weight, beta, gamma, cap):
    m = _model(seed, sharp, blank_bias)
    enc = random_encoder(seed, 3, 14).float()
    lengths = torch.tensor([14, 9, 0])
    kw = dict(beam=beam, window=window, pruning=pruning, blank_scoring=scoring, max_symbols=cap, beta=beta,
              expansion_gamma=gamma, fusion=_fusion(fusion, lm, weight, 3))
    lazy, lazy_rows = _search(False, m, enc, lengths, **kw)
    full, full_rows = _search(True, m, enc, lengths, **kw)
    assert _exact(lazy) == _exact(full)
    assert lazy_rows <= full_rows


LAZY_CASES = [  # seed, window, beam, pruning, fusion, beta, gamma: each closes windows early
    (0, 8, 4, "late", "lm", 0.0, None),
    (1, 8, 4, "early", "lm", 0.0, None),
    (2, 6, 3, "late", "none", 0.5, None),
    (3, 8, 2, "late", "lm", 0.0, 1.0),
]


@pytest.mark.parametrize("seed,window,beam,pruning,fusion,beta,gamma", LAZY_CASES)
def test_lazy_window_equals_the_oracle_with_fewer_joint_rows(lm, seed, window, beam, pruning, fusion,
                                                             beta, gamma):
    """On peaked frames with frequent labels the lazy window computes at most 0.7 of the full window's joint
    rows (0.25-0.57 at these seeds; on the demo model 83k of 149k rows on its 60 clips) and its n-best lists
    are the oracle's."""
    m = _model(seed, 4.0, 0.5)
    enc = random_encoder(seed, 2, 24).float()
    lengths = torch.tensor([24, 17])
    kw = dict(beam=beam, window=window, pruning=pruning, max_symbols=3, beta=beta, expansion_gamma=gamma,
              fusion=_fusion(fusion, lm, 0.5, 2))
    lazy, lazy_rows = _search(False, m, enc, lengths, **kw)
    full, full_rows = _search(True, m, enc, lengths, **kw)
    assert _exact(lazy) == _exact(full)
    assert lazy_rows <= 0.7 * full_rows, (lazy_rows, full_rows)
    for b in range(2):
        ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
        assert sorted(hyp_key(lazy[b], 4)) == sorted(hyp_key(ref, 4)), b


def test_full_window_rows_are_every_window_frame():
    """The counter counts what the joint computed: with window 1 (one frame per popped hypothesis) the lazy
    and the full window read the same rows, and a batch of one utterance reads as many as it alone."""
    m = _model(7, 4.0)
    enc = random_encoder(7, 1, 12).float()
    lengths = torch.tensor([12])
    kw = dict(beam=3, window=1, max_symbols=2)
    _, lazy_rows = _search(False, m, enc, lengths, **kw)
    _, full_rows = _search(True, m, enc, lengths, **kw)
    assert lazy_rows == full_rows > 0
    two = torch.cat([enc, enc])
    _, both = _search(False, m, two, torch.tensor([12, 12]), **kw)
    assert both == 2 * lazy_rows
