"""Batched greedy decoders (label-looping, WIND, frame-looping) equal the per-utterance reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.hyps import BatchedHyps
from asrdecode.transducer import greedy, reference_greedy
from transducer_models import assert_same_hypothesis, random_model

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def decoding_case(draw, tdt: bool | None = None):
    vocab = draw(st.integers(2, 10))
    blank = draw(st.sampled_from([0, vocab - 1, draw(st.integers(0, vocab - 1))]))
    if tdt is None:
        tdt = draw(st.booleans())
    durations = None
    if tdt:
        durations = draw(st.lists(st.integers(0, 8), min_size=1, max_size=5, unique=True).filter(lambda d: max(d) > 0))
    kind = draw(st.sampled_from(["lstm", "stateless"]))
    layers = draw(st.integers(1, 2))
    max_symbols = draw(st.sampled_from([None, 1, 2, 3]))
    batch = draw(st.integers(1, 16))
    frames = draw(st.integers(1, 14))
    lengths = draw(st.lists(st.integers(0, frames), min_size=batch, max_size=batch))
    seed = draw(st.integers(0, 2**16))
    bias = 8.0 if max_symbols is None else draw(st.floats(-1.0, 2.0))
    model = random_model(seed, vocab, blank, durations, kind, layers, blank_bias=bias)
    g = torch.Generator().manual_seed(seed + 1)
    enc = torch.randn(batch, frames, 5, generator=g, dtype=torch.float64)
    return model, enc, torch.tensor(lengths), max_symbols


def assert_equal_to_reference(model, enc, lengths, hyps, max_symbols):
    assert len(hyps) == enc.shape[0]
    for b, h in enumerate(hyps):
        ref = reference_greedy(model, enc[b, : int(lengths[b])], max_symbols=max_symbols)
        assert h.tokens == ref.tokens, b
        assert h.timestamps == ref.timestamps, b
        assert h.durations == ref.durations, b
        assert abs(h.score - ref.score) <= 1e-9 * max(1.0, abs(ref.score)), (h.score, ref.score)


@SETTINGS
@given(decoding_case(), st.booleans())
def test_label_looping_equals_reference(case, precompute):
    model, enc, lengths, max_symbols = case
    hyps = greedy(model, enc, lengths, loop="labels", max_symbols=max_symbols, precompute_projections=precompute)
    assert_equal_to_reference(model, enc, lengths, hyps, max_symbols)


@SETTINGS
@given(decoding_case(), st.booleans())
def test_frame_looping_equals_reference(case, precompute):
    model, enc, lengths, max_symbols = case
    hyps = greedy(model, enc, lengths, loop="frames", max_symbols=max_symbols, precompute_projections=precompute)
    assert_equal_to_reference(model, enc, lengths, hyps, max_symbols)


@SETTINGS
@given(decoding_case(tdt=False), st.integers(2, 9))
def test_wind_equals_reference(case, window):
    model, enc, lengths, max_symbols = case
    hyps = greedy(model, enc, lengths, loop="labels", window=window, max_symbols=max_symbols)
    assert_equal_to_reference(model, enc, lengths, hyps, max_symbols)


@SETTINGS
@given(decoding_case(), st.sampled_from(["labels", "frames", "wind"]), st.data())
def test_streaming_chunks_equal_whole_utterance(case, loop, data):
    model, enc, lengths, max_symbols = case
    window = 1
    if loop == "wind":
        loop, window = "labels", (4 if model.durations is None else 1)
    T = enc.shape[1]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, T), max_size=4)) + [T]))
    whole = greedy(model, enc, lengths, loop=loop, window=window, max_symbols=max_symbols)
    state, start = None, 0
    for end in cuts:
        chunk_len = (lengths - start).clamp(0, end - start)
        out = greedy(
            model, enc[:, start:end], chunk_len, loop=loop, window=window, max_symbols=max_symbols,
            state=state, return_state=True,
        )
        hyps, state = out
        start = end
    for h, w in zip(hyps, whole):
        assert h.tokens == w.tokens and h.timestamps == w.timestamps and h.durations == w.durations
        assert abs(h.score - w.score) <= 1e-9 * max(1.0, abs(w.score))


@SETTINGS
@given(decoding_case(), st.integers(0, 15))
def test_batch_invariance(case, pick):
    """An utterance decodes the same alone and inside any batch."""
    model, enc, lengths, max_symbols = case
    b = pick % enc.shape[0]
    batched = greedy(model, enc, lengths, max_symbols=max_symbols)[b]
    alone = greedy(model, enc[b : b + 1, : int(lengths[b])], lengths[b : b + 1], max_symbols=max_symbols)[0]
    assert batched.tokens == alone.tokens and batched.timestamps == alone.timestamps


def test_tdt_durations_are_values_not_indices():
    # durations [0, 2, 4, 8]: a TDT model that always predicts index 3 must advance 8 frames.
    model = random_model(0, 5, 4, [0, 2, 4, 8], blank_bias=-50.0)
    with torch.no_grad():
        model.joint_out.bias[5:] = torch.tensor([-50.0, -50.0, -50.0, 50.0], dtype=torch.float64)
    enc = torch.randn(1, 20, 5, dtype=torch.float64)
    h = greedy(model, enc, torch.tensor([20]))[0]
    assert h.timestamps == [0, 8, 16]
    assert h.durations == [8, 8, 8]
    assert_same_hypothesis(h, reference_greedy(model, enc[0]))  # float scores: a tolerance, never ==


def test_tdt_blank_with_duration_zero_advances_one_frame():
    model = random_model(1, 4, 0, [0, 3], blank_bias=12.0)
    with torch.no_grad():
        model.joint_out.bias[4:] = torch.tensor([6.0, -6.0], dtype=torch.float64)  # duration 0 wins
    enc = torch.randn(2, 6, 5, dtype=torch.float64)
    hyps = greedy(model, enc, torch.tensor([6, 3]))
    assert [h.tokens for h in hyps] == [[], []]
    # six blank decisions, each scored (token + duration log-probs)
    ref = reference_greedy(model, enc[0])
    assert abs(hyps[0].score - ref.score) < 1e-12 and ref.score < 0


def test_zero_length_and_empty_batch():
    model = random_model(2, 6, 0, None)
    enc = torch.randn(3, 5, 5, dtype=torch.float64)
    hyps = greedy(model, enc, torch.tensor([0, 0, 0]))
    assert all(h.tokens == [] and h.score == 0.0 for h in hyps)
    assert greedy(model, torch.zeros(0, 4, 5, dtype=torch.float64), torch.zeros(0, dtype=torch.long)) == []
    assert greedy(model, torch.zeros(2, 0, 5, dtype=torch.float64))[1].tokens == []


def test_tokenizer_fills_text():
    from asrdecode import CharTokenizer

    model = random_model(3, 4, 0, None, blank_bias=0.0)
    tok = CharTokenizer(["<b>", "a", "b", "c"], blank_id=0)
    enc = torch.randn(2, 6, 5, dtype=torch.float64)
    for h in greedy(model, enc, tokenizer=tok, max_symbols=2):
        assert h.text == tok.decode(h.tokens)


def test_batched_hyps_grow_by_doubling_with_masked_appends():
    hyps = BatchedHyps(3, 1, torch.device("cpu"))
    expected: list[list[int]] = [[], [], []]
    for step in range(9):
        mask = torch.tensor([True, step % 2 == 0, step % 3 == 0])
        tokens = torch.tensor([step, 10 + step, 20 + step])
        hyps.append(mask, tokens, tokens * 2)
        for b in range(3):
            if mask[b]:
                expected[b].append(int(tokens[b]))
    assert hyps.capacity >= 9
    out = hyps.to_hypotheses()
    assert [h.tokens for h in out] == expected
    assert [h.timestamps for h in out] == [[2 * x for x in e] for e in expected]


def test_runaway_model_without_max_symbols_raises(monkeypatch):
    """A model that never emits blank must not hang the decoder when max_symbols is None."""
    import asrdecode.transducer._checks as checks

    monkeypatch.setattr(checks, "MAX_SYMBOLS_GUARD", 50)
    model = random_model(4, 3, 0, None, blank_bias=-100.0)
    enc = torch.randn(2, 3, 5, dtype=torch.float64)
    for loop in ("labels", "frames"):
        with pytest.raises(ValueError, match="set max_symbols"):
            greedy(model, enc, loop=loop, max_symbols=None)
    with pytest.raises(ValueError, match="set max_symbols"):
        reference_greedy(model, enc[0], max_symbols=None)


def test_symbol_cap_is_on_by_default():
    """A model that never emits blank finishes with the default cap (10 labels per frame)."""
    model = random_model(4, 3, 0, None, blank_bias=-100.0)
    enc = torch.randn(2, 3, 5, dtype=torch.float64)
    for loop in ("labels", "frames"):
        hyps = greedy(model, enc, loop=loop)
        assert [len(h.tokens) for h in hyps] == [30, 30]
        for b, h in enumerate(hyps):
            ref = reference_greedy(model, enc[b])
            assert h.tokens == ref.tokens and h.timestamps == ref.timestamps
            assert abs(h.score - ref.score) < 1e-9


def test_duration_rule() -> None:
    from asrdecode.transducer.durations import DurationRule

    rnnt, tdt = DurationRule(None), DurationRule([0, 1, 2, 4])
    assert (rnnt.blank_advance(0), rnnt.label_advance(3), rnnt.pack) == (1, 0, 1)
    assert (tdt.blank_advance(0), tdt.blank_advance(2), tdt.label_advance(4), tdt.pack) == (1, 2, 4, 5)
    d = torch.tensor([0, 1, 4])
    assert tdt.blank_advance(d).tolist() == [1, 1, 4] and rnnt.label_advance(d).tolist() == [0, 0, 0]
    data = tdt.pack_data(torch.tensor([0, 3, 7]), d).tolist()
    assert tdt.unpack_data(data) == ([0, 3, 7], [0, 1, 4])
    assert rnnt.unpack_data(rnnt.pack_data(torch.tensor([2, 5]), 0).tolist()) == ([2, 5], None)
