"""Batched CTC prefix beam search against the dictionary-based reference, greedy, and streaming."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import CharTokenizer, ctc
from asrdecode.beam_hyps import EMPTY_HASH, extend_hash, hash_sequence
from asrdecode.errors import DecodingInputError
from test_ctc_helpers import TableBigram, peaky_log_probs, random_lengths, random_log_probs

SETTINGS = settings(max_examples=40, deadline=None)


def assert_same(batched, reference, *, tol=1e-4):
    assert len(batched) == len(reference)
    for got, want in zip(batched, reference):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.tokens == w.tokens
            assert g.timestamps == w.timestamps
            assert g.score == pytest.approx(w.score, abs=tol)


search_dims = st.tuples(
    st.integers(0, 100_000),  # seed
    st.integers(1, 3),  # batch
    st.integers(0, 14),  # frames
    st.integers(2, 6),  # vocabulary
    st.integers(1, 8),  # beam
)


ENGINES = st.sampled_from(["torch", "native"])


@SETTINGS
@given(search_dims, st.booleans(), st.sampled_from([0.0, 0.7, -0.5]), st.sampled_from([math.inf, 20.0, 3.0]),
       st.booleans(), st.sampled_from([None, None, 1, 2, 3]), ENGINES)
def test_batched_equals_reference(d, with_lm, beta, beam_threshold, peaky, token_beam, engine):
    seed, batch, frames, vocab, beam = d
    blank = seed % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank, peak=6.0) if peaky
          else random_log_probs(seed, batch, frames, vocab, scale=2.0))
    lens = random_lengths(seed, batch, frames)
    fusion = [(TableBigram(vocab, blank, seed=seed), 0.8)] if with_lm else []
    nbest = 1 + seed % beam
    kw = dict(beam=beam, fusion=fusion, beta=beta, beam_threshold=beam_threshold, nbest=nbest, token_beam=token_beam)
    assert_same(ctc.beam_search(lp, lens, blank, engine=engine, **kw), ctc.reference_beam_search(lp, lens, blank, **kw))


@SETTINGS
@given(search_dims, st.sampled_from([None, "weak", 0.9]), ENGINES)
def test_batched_equals_reference_two_models_and_collapse(d, collapse, engine):
    seed, batch, frames, vocab, beam = d
    blank = (seed // 7) % vocab
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=5.0, blank_rate=0.6)
    lens = random_lengths(seed, batch, frames)
    fusion = [(TableBigram(vocab, blank, seed=seed), 0.5), (TableBigram(vocab, blank, seed=seed + 1, sharpness=2.0), 0.3)]
    kw = dict(beam=beam, fusion=fusion, beta=0.4, blank_collapse=collapse, nbest=beam)
    got = ctc.beam_search(lp, lens, blank, engine=engine, **kw)
    assert_same(got, ctc.reference_beam_search(lp, lens, blank, **kw))
    for hyps in got:
        for h in hyps:  # timestamps are original frames, increasing
            assert h.timestamps == sorted(h.timestamps) and len(set(h.timestamps)) == len(h.timestamps)


@SETTINGS
@given(st.tuples(st.integers(0, 100_000), st.integers(1, 4), st.integers(0, 30), st.integers(2, 8)))
def test_beam1_without_lm_equals_greedy_on_peaky_inputs(d):
    """With P(argmax) > 1 - 1e-3 per frame and T <= 30, the greedy path holds > 0.97 of the mass,
    so its prefix always wins the single beam slot: same tokens, same timestamps (token run starts)."""
    seed, batch, frames, vocab = d
    blank = seed % vocab
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=18.0)
    assert bool((lp.max(-1).values.exp() > 1 - 1e-3).all())
    lens = random_lengths(seed, batch, frames)
    greedy = ctc.greedy(lp, lens, blank)
    beam = ctc.beam_search(lp, lens, blank, beam=1)
    for g, b in zip(greedy, beam):
        assert b[0].tokens == g.tokens
        assert b[0].timestamps == g.timestamps
        assert b[0].score >= g.score - 1e-9  # prefix probability >= best path probability
    # A wider beam finds the same prefix, and stamps each token at its peak: greedy's run start.
    for g, b in zip(greedy, ctc.beam_search(lp, lens, blank, beam=8)):
        assert (b[0].tokens, b[0].timestamps) == (g.tokens, g.timestamps)


@SETTINGS
@given(search_dims, st.integers(1, 5), st.integers(0, 10_000), st.sampled_from([None, "weak", 0.9]), st.booleans(),
       ENGINES)
def test_streaming_equals_whole(d, n_chunks, cut_seed, collapse, with_lm, engine):
    seed, batch, frames, vocab, beam = d
    blank = seed % vocab
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=5.0, blank_rate=0.6)
    lens = random_lengths(seed, batch, frames)
    fusion = [(TableBigram(vocab, blank, seed=seed), 0.6)] if with_lm else []
    kw = dict(beam=beam, fusion=fusion, beta=0.3, blank_collapse=collapse, nbest=beam, engine=engine)
    whole = ctc.beam_search(lp, lens, blank, **kw)  # the same engine: chunked == whole exactly
    g = torch.Generator().manual_seed(cut_seed)
    cuts = sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist())
    bounds = [0, *cuts, frames]
    state = None  # a stream starts from None or from its initial state: the same
    if cut_seed % 2:
        state = ctc.initial_beam_state(batch, vocab, blank, dtype=lp.dtype,
                                       **{k: v for k, v in kw.items() if k not in ("nbest", "engine")})
    for i, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
        chunk_lens = (lens - a).clamp(min=0, max=z - a)  # each utterance streams its own frames
        last = i == len(bounds) - 2
        state = ctc.beam_search(lp[:, a:z], chunk_lens, blank, state=state, final=last, **kw)
    assert_same(state, whole, tol=0.0)


def test_initial_beam_state():
    lm = TableBigram(5, 0)
    st = ctc.initial_beam_state(3, 5, 0, beam=4, fusion=[(lm, 0.5)], blank_collapse=0.9, token_beam=2)
    assert st.p_b.shape == (3, 4) and st.fstates.shape == (3, 4, 1) and st.collapse is not None
    assert [[h.tokens for h in r] for r in st.hypotheses()] == [[[]]] * 3
    lp = torch.log_softmax(torch.randn(3, 6, 5, dtype=torch.float64), -1)
    with pytest.raises(DecodingInputError, match="settings"):  # made for float32 and beam 4
        ctc.beam_search(lp, None, 0, beam=4, fusion=[(lm, 0.5)], blank_collapse=0.9, token_beam=2, state=st)
    st64 = ctc.initial_beam_state(3, 5, 0, beam=4, fusion=[(lm, 0.5)], blank_collapse=0.9, token_beam=2,
                                  dtype=torch.float64)
    kw = dict(beam=4, fusion=[(lm, 0.5)], blank_collapse=0.9, token_beam=2)
    assert_same(ctc.beam_search(lp, None, 0, state=st64, **kw), ctc.beam_search(lp, None, 0, **kw), tol=0.0)
    for bad, match in [(dict(batch=-1), "batch"), (dict(batch=True), "batch"), (dict(vocab_size=0), "vocab_size"),
                       (dict(blank_id=5), "blank_id"), (dict(beam=0), "beam"), (dict(beam=10**6), "beam"),
                       (dict(token_beam=0), "token_beam"), (dict(blank_collapse=2.0), "threshold"),
                       (dict(beam_threshold=-1.0), "beam_threshold")]:
        args = dict(batch=2, vocab_size=5, blank_id=0) | bad
        with pytest.raises(DecodingInputError, match=match):
            ctc.initial_beam_state(args.pop("batch"), args.pop("vocab_size"), args.pop("blank_id"), **args)


def test_float32_and_large_vocab_agree_with_reference():
    lp = peaky_log_probs(3, 4, 40, 30, 29, peak=4.0, dtype=torch.float32)
    lens = torch.tensor([40, 31, 7, 0])
    fusion = [(TableBigram(30, 29, seed=3), 0.5)]
    kw = dict(beam=6, fusion=fusion, beta=1.0, nbest=3)
    got = ctc.beam_search(lp, lens, 29, **kw)
    want = ctc.reference_beam_search(lp, lens, 29, **kw)
    for g, w in zip(got, want):
        assert g[0].tokens == w[0].tokens
        assert g[0].score == pytest.approx(w[0].score, abs=1e-3)
    # zero-length utterance: the empty hypothesis with the LM's end-of-sentence score
    assert got[3][0].tokens == [] and got[3][0].score == pytest.approx(0.5 * float(fusion[0][0].eos[30]))


@pytest.mark.parametrize("beam", [1, 2, 4, 9])
@pytest.mark.parametrize("scale", [0.3, 2.5])
def test_no_lm_token_shortcut_is_exact(beam, scale):
    """Without fusion only the 2*beam best tokens are scored per frame: same result as the reference.
    (Flat emissions with small beams make fewer tokens, e.g. beam, give different results.)"""
    for seed in range(12):
        lp = random_log_probs(seed, 3, 20, 12, scale=scale)
        lens = torch.tensor([20, 15, 5])
        kw = dict(beam=beam, beta=0.2, nbest=beam)
        assert_same(ctc.beam_search(lp, lens, 3, **kw), ctc.reference_beam_search(lp, lens, 3, **kw))


def test_lm_changes_the_result():
    """A strong LM that forbids the acoustically best continuation must change the best hypothesis."""
    vocab, blank = 4, 0
    lp = torch.log_softmax(torch.tensor([[[0.0, 3.0, 2.5, 0.0], [3.0, 0.0, 0.0, 0.0]]], dtype=torch.float64), -1)
    lm = TableBigram(vocab, blank)
    lm.scores[:, 1] = -50.0
    lm.scores[:, 2] = 0.0
    lm.eos[:] = 0.0
    no_lm = ctc.beam_search(lp, None, blank, beam=4)[0][0]
    with_lm = ctc.beam_search(lp, None, blank, beam=4, fusion=[(lm, 1.0)])[0][0]
    assert no_lm.tokens == [1] and with_lm.tokens == [2]


def test_text_and_nbest_order():
    tok = CharTokenizer(["_", "a", "b", " "], blank_id=0)
    lp = random_log_probs(5, 2, 8, 4)
    res = ctc.beam_search(lp, None, 0, beam=5, nbest=5, tokenizer=tok)
    for hyps in res:
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        assert all(h.text == tok.decode(h.tokens) for h in hyps)


def test_hash_matches_python_reference():
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 5000, (n,), generator=g).tolist() for n in (0, 1, 2, 7, 50)]
    for seq in seqs:
        h = torch.tensor(EMPTY_HASH)
        for tok in seq:
            h = extend_hash(h, torch.tensor(tok))
        assert int(h) == hash_sequence(seq)
    assert hash_sequence([0]) != hash_sequence([]) and hash_sequence([1, 2]) != hash_sequence([2, 1])


def test_bad_inputs():
    lp = random_log_probs(0, 2, 5, 4, dtype=torch.float32)
    lm = TableBigram(4, 0)
    for fn in (ctc.beam_search, ctc.reference_beam_search):
        with pytest.raises(DecodingInputError, match="beam"):
            fn(lp, None, 0, beam=0)
        with pytest.raises(DecodingInputError, match="beam"):
            fn(lp, None, 0, beam=2.5)
        with pytest.raises(DecodingInputError, match="nbest"):
            fn(lp, None, 0, beam=2, nbest=3)
        with pytest.raises(DecodingInputError, match="blank_id"):
            fn(lp, None, 9)
        with pytest.raises(DecodingInputError, match="vocab_size"):
            fn(lp, None, 0, fusion=[(TableBigram(5, 0), 1.0)])
        with pytest.raises(DecodingInputError, match="fusion"):
            fn(lp, None, 0, fusion=[lm])
        with pytest.raises(DecodingInputError, match="fusion"):
            fn(lp, None, 0, fusion=[(object(), 1.0)])
        with pytest.raises(DecodingInputError, match="vocab_size"):
            fn(lp, None, 0, tokenizer=CharTokenizer(["_", "a", "b"], blank_id=0))
        with pytest.raises(DecodingInputError, match="normalised"):
            fn(lp * 2, None, 0)
        with pytest.raises(DecodingInputError, match="NaN"):
            fn(torch.where(lp > -1, float("nan"), lp), None, 0)
        with pytest.raises(DecodingInputError, match="beam_threshold"):
            fn(lp, None, 0, beam_threshold=0.0)
        with pytest.raises(DecodingInputError, match="beta"):
            fn(lp, None, 0, beta=float("nan"))
        with pytest.raises(DecodingInputError, match="blank_collapse"):
            fn(lp, None, 0, blank_collapse="strong")
        with pytest.raises(DecodingInputError, match="threshold"):
            fn(lp, None, 0, blank_collapse=1.0)
        with pytest.raises(DecodingInputError, match="lengths"):
            fn(lp, torch.tensor([3]), 0)
        with pytest.raises(DecodingInputError, match="token_beam"):
            fn(lp, None, 0, token_beam=0)
    with pytest.raises(DecodingInputError, match="blank_id"):
        ctc.beam_search(lp, None, 0, fusion=[(TableBigram(4, 1), 1.0)])
    state = ctc.beam_search(lp, None, 0, beam=3, final=False)
    with pytest.raises(DecodingInputError, match="settings"):
        ctc.beam_search(lp, None, 0, beam=4, state=state)
    with pytest.raises(DecodingInputError, match="settings"):
        ctc.beam_search(lp[:1], None, 0, beam=3, state=state)
    with pytest.raises(DecodingInputError, match="state"):
        ctc.beam_search(lp, None, 0, beam=3, state="x")
    # logits are accepted only with the explicit flag
    logits = torch.randn(2, 5, 4)
    a = ctc.beam_search(logits, None, 0, beam=3, log_softmax=True)
    b = ctc.beam_search(torch.log_softmax(logits, -1), None, 0, beam=3)
    assert [h[0].tokens for h in a] == [h[0].tokens for h in b]


def test_empty_batch_and_no_frames():
    lm = TableBigram(4, 0)
    assert ctc.beam_search(torch.zeros(0, 5, 4), None, 0, beam=3, fusion=[(lm, 1.0)]) == []
    x = torch.log_softmax(torch.randn(2, 0, 4), -1)
    for collapse in (None, 0.9):
        res = ctc.beam_search(x, None, 0, beam=3, fusion=[(lm, 1.0)], blank_collapse=collapse)
        assert [[h.tokens for h in r] for r in res] == [[[]], [[]]]
        assert res[0][0].score == pytest.approx(float(lm.eos[lm.start]))


def test_partial_hypotheses_of_a_stream():
    """Without fusion (no end-of-sentence score), the partial n-best after every chunk equals the
    final result of a call on the frames so far."""
    lp = peaky_log_probs(4, 2, 30, 7, 6, peak=5.0)
    lens = torch.tensor([30, 21])
    kw = dict(beam=4, beta=0.3)
    state = None
    for a in range(0, 30, 10):
        chunk_lens = (lens - a).clamp(0, 10)
        state = ctc.beam_search(lp[:, a : a + 10], chunk_lens, 6, state=state, final=False, **kw)
        assert_same(state.hypotheses(nbest=3), ctc.beam_search(lp[:, : a + 10], lens.clamp(max=a + 10), 6, nbest=3, **kw))
    with pytest.raises(DecodingInputError, match="nbest"):
        state.hypotheses(nbest=0)
