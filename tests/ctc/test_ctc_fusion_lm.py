"""CTC prefix beam search with the library's NGramLM and BoostingTree as fusion models."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.lm import NGramLM
from asrdecode.lm.boosting import BoostingTree
from test_ctc_helpers import peaky_log_probs, random_lengths, random_token_arpa

SETTINGS = settings(max_examples=25, deadline=None)


def make_lm(tmp_path_factory, seed: int, vocab: int, blank: int, order: int = 3) -> NGramLM:
    path = tmp_path_factory.mktemp("arpa") / f"lm_{seed}_{vocab}_{blank}_{order}.arpa"
    path.write_text(random_token_arpa(seed, vocab, blank, order=order))
    return NGramLM.from_arpa(path, vocab_size=vocab, blank_id=blank)


def assert_same(batched, reference, tol=1e-4):
    for got, want in zip(batched, reference):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        assert [h.timestamps for h in got] == [h.timestamps for h in want]
        for g, w in zip(got, want):
            assert g.score == pytest.approx(w.score, abs=tol)


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 14), st.integers(3, 7), st.integers(1, 6),
       st.sampled_from([None, 2]), st.sampled_from([None, 0.9]), st.sampled_from(["torch", "native"]),
       st.sampled_from([0.7, -0.4]))
def test_ngram_lm_batched_equals_reference(tmp_path_factory, seed, batch, frames, vocab, beam, token_beam, collapse,
                                           engine, weight):
    """Also at a negative weight (an internal-LM subtraction): the torch engine's prepared LM step once left
    an absent entry's -inf in the blank's column, which the weight made +inf and the masked blank extension
    NaN, and every search ended empty with score -inf."""
    blank = seed % vocab
    lm = make_lm(tmp_path_factory, seed, vocab, blank, order=1 + seed % 3)
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=4.0)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, fusion=[(lm, weight)], beta=0.5, token_beam=token_beam, blank_collapse=collapse, nbest=beam)
    assert_same(ctc.beam_search(lp, lens, blank, engine=engine, **kw), ctc.reference_beam_search(lp, lens, blank, **kw))


@SETTINGS
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(0, 14), st.integers(1, 6), st.sampled_from(["torch", "native"]))
def test_lm_and_per_utterance_boosting_trees(tmp_path_factory, seed, batch, frames, beam, engine):
    vocab, blank = 6, 0
    lm = make_lm(tmp_path_factory, seed, vocab, blank)
    g = torch.Generator().manual_seed(seed)
    trees = [
        BoostingTree.from_token_sequences(
            [torch.randint(1, vocab, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g).tolist()
             for _ in range(2)], vocab_size=vocab, blank_id=blank, weight=1.5)
        for _ in range(batch)
    ]
    boost = BoostingTree.stack(trees)
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=4.0)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, fusion=[(lm, 0.5), (boost, 1.0)], beta=0.2, nbest=beam)
    assert_same(ctc.beam_search(lp, lens, blank, engine=engine, **kw), ctc.reference_beam_search(lp, lens, blank, **kw))


def test_boosting_recovers_a_phrase():
    """A phrase that is acoustically second best wins with a boosting tree."""
    vocab, blank = 5, 4
    logits = torch.full((1, 6, vocab), -4.0, dtype=torch.float64)
    logits[0, :, blank] = 0.0
    logits[0, 1, 1], logits[0, 1, 2] = 3.0, 2.0  # token 1 beats token 2
    logits[0, 3, 3] = 3.0
    lp = torch.log_softmax(logits, -1)
    plain = ctc.beam_search(lp, None, blank, beam=4)[0][0]
    tree = BoostingTree.from_token_sequences([[2, 3]], vocab_size=vocab, blank_id=blank, weight=2.0)
    boosted = ctc.beam_search(lp, None, blank, beam=4, fusion=[(tree, 1.0)])[0][0]
    assert plain.tokens == [1, 3] and boosted.tokens == [2, 3]


def test_ngram_lm_streaming_equals_whole(tmp_path_factory):
    vocab, blank = 9, 8
    lm = make_lm(tmp_path_factory, 5, vocab, blank)
    lp = peaky_log_probs(5, 3, 40, vocab, blank, peak=4.0)
    lens = torch.tensor([40, 33, 12])
    kw = dict(beam=5, fusion=[(lm, 0.6)], beta=0.3, blank_collapse=0.9, nbest=3)
    whole = ctc.beam_search(lp, lens, blank, **kw)
    state = None
    for a in range(0, 40, 7):
        z = min(a + 7, 40)
        state = ctc.beam_search(lp[:, a:z], (lens - a).clamp(0, z - a), blank, state=state, final=z == 40, **kw)
    assert_same(state, whole, tol=0.0)


def test_single_boosting_tree_serves_every_utterance_of_a_batch():
    """One (unstacked) tree with batch > 1 boosts each utterance as it does alone."""
    vocab, blank = 5, 4
    logits = torch.full((3, 6, vocab), -4.0, dtype=torch.float64)
    logits[:, :, blank] = 0.0
    logits[:, 1, 1], logits[:, 1, 2] = 3.0, 2.0
    logits[:, 3, 3] = 3.0
    lp = torch.log_softmax(logits, -1)
    tree = BoostingTree.from_token_sequences([[2, 3]], vocab_size=vocab, blank_id=blank, weight=2.0)
    batched = ctc.beam_search(lp, None, blank, beam=4, fusion=[(tree, 1.0)])
    alone = ctc.beam_search(lp[:1], None, blank, beam=4, fusion=[(tree, 1.0)])[0][0]
    assert [nb[0].tokens for nb in batched] == [alone.tokens] * 3 == [[2, 3]] * 3


@pytest.mark.parametrize("engine", ["torch", "native"])
@pytest.mark.parametrize("fusion", ["negative", "lm-minus-ilm"])
def test_negative_weight_where_the_lm_step_spills_into_the_blank(tmp_path_factory, engine, fusion):
    """The example the differential fuzzer found (benchmarks/fuzz_differential.py, ctc-beam:109): this
    bigram's prepared LM step spills an absent entry's -inf into the blank's column; at weight -1 the
    torch engine returned one empty hypothesis scored -inf on every frame count from 2 on."""
    from test_ctc_helpers import TableBigram

    vocab, blank = 3, 1
    lm = make_lm(tmp_path_factory, 4, vocab, blank, order=2)
    lp = peaky_log_probs(109, 1, 14, vocab, blank, peak=25.0, dtype=torch.float32)
    weights = [(lm, -1.0)] if fusion == "negative" else [(lm, 0.6), (TableBigram(vocab, blank, seed=5), -0.4)]
    kw = dict(beam=4, fusion=weights, beta=0.5, beam_threshold=20.0, nbest=2)
    got = ctc.beam_search(lp, None, blank, engine=engine, **kw)
    assert all(h.score > -float("inf") for h in got[0])
    assert_same(got, ctc.reference_beam_search(lp, None, blank, **kw), tol=1e-3)
