"""The streaming transducer chunk's checks of a carried state (asrd_transducer_beam_chunk's check_chunk, and the
per-step path's check in ``check_stream``): a bad state is a named error and the state passed in is unchanged.

Regressions of ``make test-asan`` findings (benchmarks/fuzz_native.py, case_transducer_chunk): a removed slot's
frame of -2^63 overflowed the step's record arithmetic (UBSan); a live hypothesis on a negative frame was an
IndexError on the per-step path.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.native import _lib
from asrdecode.native import transducer_search as ts
from asrdecode.transducer import _checks
from asrdecode.transducer.beam import BeamSearchDecoder
from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

V, BLANK = FUSION_V, FUSION_BLANK


def _carried(method: str = "alsd"):
    """A decoder (beam 3) and the state after a first chunk of 3 frames of 2 utterances (not final), and the
    next chunk [2, 4, 5]."""
    m = random_model(1, V, BLANK, None, blank_bias=0.5).float()
    kw = dict(window=2) if method == "wind" else {}
    dec = BeamSearchDecoder(m, beam=3, max_symbols=2, method=method, engine="native", **kw)
    enc = random_encoder(1, 2, 7).float()
    state = dec.advance(dec.init_state(2), enc[:, :3])
    return dec, state, enc[:, 3:]


def _edit(state, name: str, slot: tuple[int, int], value: float) -> None:
    """``state.hyps[name][slot] = value`` on a copy (the engine's tensors are inference tensors)."""
    state.hyps[name] = state.hyps[name].clone()
    state.hyps[name][slot] = value


def _snapshot(state) -> tuple:
    return tuple(state.hyps[k].clone() for k in ("score", "time", "symbols", "nlabels", "last")), len(state.tree)


def _unchanged(state, before: tuple) -> bool:
    now = _snapshot(state)
    return now[1] == before[1] and all(torch.equal(a, b) for a, b in zip(now[0], before[0]))


def _engine_chunk(dec, state, frames):
    """The chunk straight on the engine entry (``search_chunk``: no ``check_stream`` before it)."""
    B, T = frames.shape[:2]
    return ts.search_chunk(dec.model, dec.settings, state, frames, torch.full((B,), T), torch.ones(B, dtype=torch.bool),
                           _checks.MAX_SYMBOLS_GUARD)


@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
@pytest.mark.parametrize("name,value,match", [
    ("time", -(2**63), "within"),              # a removed slot (score -inf): was a signed overflow (UBSan)
    ("symbols", 2**62, "within"),
    ("nlabels", -(2**50), "within"),
])
def test_removed_slot_out_of_bound_is_refused(method, name, value, match):
    """Counts of any slot (a removed one too: the step computes with them) beyond +-2^40 are refused by the
    engine entry; the state is unchanged."""
    dec, state, frames = _carried(method)
    _edit(state, "score", (1, 2), float("-inf"))
    _edit(state, name, (1, 2), value)
    before = _snapshot(state)
    with pytest.raises(DecodingInputError, match=match):
        _engine_chunk(dec, state, frames)
    assert _unchanged(state, before)


@pytest.mark.parametrize("name,value,match", [("time", -1, "carried frames must be >= 0"),
                                              ("last", V, "last label out of range"),
                                              ("last", -1, "last label out of range")])
def test_live_hypothesis_out_of_range_is_refused_by_the_engine(name, value, match):
    """A live hypothesis (slot 0: the best) on a negative frame or with a last label outside [0, V): the
    engine entry's named error, the state unchanged; a removed slot's label is not read (the chunk runs)."""
    dec, state, frames = _carried("wind")
    _edit(state, name, (0, 0), value)
    before = _snapshot(state)
    with pytest.raises(DecodingInputError, match=match):
        _engine_chunk(dec, state, frames)
    assert _unchanged(state, before)
    if name == "last":
        _edit(state, "score", (0, 0), float("-inf"))
        assert _engine_chunk(dec, state, frames) is not None


@pytest.mark.parametrize("value", [-(2**63), -1, 2**62 - 1, (2147483647 << 32) | 5])
def test_a_live_hypothesis_hash_that_no_prefix_has_is_refused(value):
    """A live carried hash outside what extend_hash makes (negative: a left shift of a negative value in the
    engine's hash, UBSan; a residue out of range): refused by the engine entry, by the per-step path and by
    the tensor engine; a removed slot's hash is not read."""
    dec, state, frames = _carried("alsd")
    _edit(state, "hash", (0, 0), value)
    before = _snapshot(state)
    with pytest.raises(DecodingInputError, match="not a prefix hash"):
        _engine_chunk(dec, state, frames)
    assert _unchanged(state, before)
    for engine in ("native", "torch"):
        d = BeamSearchDecoder(dec.model, beam=3, max_symbols=2, engine=engine)
        with mock.patch.object(ts, "search_chunk", lambda *a, **k: None):
            with pytest.raises(DecodingInputError, match="not a prefix hash"):
                d.advance(state, frames)
        assert _unchanged(state, before)
    _edit(state, "score", (0, 0), float("-inf"))
    assert _engine_chunk(dec, state, frames) is not None


def test_per_step_path_refuses_a_negative_carried_frame():
    """The per-step path (the one-call path declined) and the tensor engine refuse a live hypothesis on a
    negative frame by name (it was an IndexError); the state is unchanged; a removed slot's frame is not read."""
    for engine in ("native", "torch"):
        dec, state, frames = _carried()
        if engine == "torch":
            dec = BeamSearchDecoder(dec.model, beam=3, max_symbols=2, engine="torch")
        _edit(state, "time", (1, 0), -3)
        before = _snapshot(state)
        with mock.patch.object(ts, "search_chunk", lambda *a, **k: None):
            with pytest.raises(DecodingInputError, match="carried frames must be >= 0"):
                dec.advance(state, frames)
        assert _unchanged(state, before)
    _edit(state, "score", (1, 0), float("-inf"))
    with mock.patch.object(ts, "search_chunk", lambda *a, **k: None):
        assert dec.finalize(dec.advance(state, frames, final=True))[1]


def test_finalize_refuses_a_fusion_state_outside_the_lm(tmp_path):
    """``finalize`` adds the LM's end-of-sentence scores of the carried fusion states: a state outside the
    automaton is a named error (it was an IndexError), the state unchanged."""
    from transducer_models import tiny_lm

    m = random_model(1, V, BLANK, None, blank_bias=0.5).float()
    dec = BeamSearchDecoder(m, beam=3, max_symbols=2, fusion=[(tiny_lm(tmp_path), 0.5)], engine="native")
    state = dec.advance(dec.init_state(1), random_encoder(1, 1, 4).float(), final=True)
    want = dec.finalize(state)
    state.hyps["lm_states"] = state.hyps["lm_states"].clone()
    good = state.hyps["lm_states"].clone()
    state.hyps["lm_states"][0, 0] = 10**6
    with pytest.raises(DecodingInputError, match="lm_states.*must be in"):
        dec.finalize(state)
    assert torch.equal(state.hyps["lm_states"][1:], good[1:])
    state.hyps["lm_states"] = good
    assert [h.tokens for h in dec.finalize(state)[0]] == [h.tokens for h in want[0]]
