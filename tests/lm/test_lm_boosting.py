"""Phrase boosting tree (asrdecode.lm.BoostingTree) against brute-force phrase matching."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode import CharTokenizer
from asrdecode.errors import DecodingInputError
from asrdecode.lm import BoostingTree


# --------------------------------------------------------------------------- brute force reference
def completed_bonus(tokens: list[int], phrases: dict[tuple[int, ...], float]) -> float:
    """Sum over every occurrence (overlaps included) of every phrase of weight * length."""
    total = 0.0
    for end in range(1, len(tokens) + 1):
        for p, w in phrases.items():
            if len(p) <= end and tuple(tokens[end - len(p) : end]) == p:
                total += w * len(p)
    return total


def potential(tokens: list[int], phrases: dict[tuple[int, ...], float]) -> float:
    """Credit of the current partial match (the documented potential phi), by brute force.

    Take the longest suffix of ``tokens`` that is a prefix of some phrase; if it is a proper
    prefix of some phrase (it can still grow) the credit is len * (max weight of those phrases);
    otherwise recurse on shorter suffixes.
    """
    for start in range(0, len(tokens) + 1):
        s = tuple(tokens[start:])
        if not s:
            return 0.0
        through = [w for p, w in phrases.items() if p[: len(s)] == s]
        if not through:
            continue
        growing = [w for p, w in phrases.items() if len(p) > len(s) and p[: len(s)] == s]
        if growing:
            return max(through) * len(s)
        # a leaf: its credit is that of the next shorter matching suffix
    return 0.0


def cumulative(tokens, phrases):
    return completed_bonus(tokens, phrases) + potential(tokens, phrases)


def _dedupe(seqs):
    d: dict[tuple[int, ...], float] = {}
    for ids, w in seqs:
        d[tuple(ids)] = max(d.get(tuple(ids), float("-inf")), w)
    return d


@st.composite
def phrase_sets(draw):
    V = draw(st.integers(3, 6))
    blank = draw(st.sampled_from([None, 0, V - 1]))
    tokens = [t for t in range(V) if t != blank]
    n = draw(st.integers(1, 5))
    seqs = []
    for _ in range(n):
        ids = draw(st.lists(st.sampled_from(tokens), min_size=1, max_size=4))
        w = draw(st.sampled_from([1.0, 0.5, 2.0, 1.5]))
        seqs.append((ids, w))
    return V, blank, seqs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=phrase_sets(), seed=st.integers(0, 2**31 - 1), dense=st.sampled_from([0.0, 16.0]))
def test_matches_brute_force(data, seed, dense):
    V, blank, seqs = data
    rng = random.Random(seed)
    tree = BoostingTree.from_token_sequences(seqs, vocab_size=V, blank_id=blank, dense_memory_mb=dense)
    phrases = _dedupe(seqs)
    non_blank = [t for t in range(V) if t != blank]
    for _ in range(4):
        # sequences built from phrase pieces and noise so that matches, overlaps and abandons occur
        seq: list[int] = []
        while len(seq) < 10:
            r = rng.random()
            if r < 0.4:
                p = rng.choice(seqs)[0]
                seq += p[: rng.randint(1, len(p))]
            else:
                seq.append(rng.choice(non_blank))
        assert tree.score_sequence(seq) == pytest.approx(completed_bonus(seq, phrases), abs=1e-5)
        state = tree.initial_states(1)
        for i in range(len(seq) + 1):
            prefix = seq[:i]
            scores, nxt = tree.advance(state)
            base = cumulative(prefix, phrases)
            exp = [0.0 if v == blank else cumulative(prefix + [v], phrases) - base for v in range(V)]
            torch.testing.assert_close(scores[0], torch.tensor(exp, dtype=torch.float32), atol=1e-5, rtol=0)
            s2, n2 = tree.score_tokens(state, torch.arange(V)[None])
            torch.testing.assert_close(s2, scores, atol=1e-6, rtol=0)
            assert torch.equal(n2, nxt)
            # final takes back the partial credit exactly
            assert float(tree.final(state)[0]) == pytest.approx(-potential(prefix, phrases), abs=1e-5)
            if blank is not None:
                assert int(nxt[0, blank]) == int(state[0])
            if i < len(seq):
                state = nxt[:, seq[i]]


def test_completed_phrase_and_abandoned_prefix():
    tok = CharTokenizer(list("_abcdxyz"), blank_id=0)
    tree = BoostingTree.from_phrases(["abc", ("xy", 2.0)], tok, weight=1.5)
    enc = tok.encode
    assert tree.score_sequence(enc("abc")) == pytest.approx(4.5)
    assert tree.score_sequence(enc("zabcz")) == pytest.approx(4.5)
    assert tree.score_sequence(enc("xy")) == pytest.approx(4.0)
    assert tree.score_sequence(enc("abcxy")) == pytest.approx(8.5)
    # abandoned prefixes net zero, with or without the final correction being needed
    assert tree.score_sequence(enc("abz")) == pytest.approx(0.0)
    assert tree.score_sequence(enc("ab")) == pytest.approx(0.0)
    assert tree.score_sequence(enc("ab"), final=False) == pytest.approx(3.0)  # partial credit while matching
    assert tree.score_sequence(enc("abab")) == pytest.approx(0.0)
    assert tree.score_sequence(enc("aabc")) == pytest.approx(4.5)


def test_overlapping_phrases():
    tree = BoostingTree.from_token_sequences([[1, 2, 3], [2, 3, 4], [3]], vocab_size=6, blank_id=0)
    assert tree.score_sequence([1, 2, 3, 4]) == pytest.approx(3 + 3 + 1)
    assert tree.score_sequence([3, 3]) == pytest.approx(2)


def test_stacked_trees_per_utterance():
    V = 7
    a = BoostingTree.from_token_sequences([[1, 2], [3]], vocab_size=V, blank_id=0)
    b = BoostingTree.from_token_sequences([[2, 2, 4], ([5, 6], 3.0)], vocab_size=V, blank_id=0)
    c = BoostingTree.from_token_sequences([[1, 2, 3, 4, 5, 6]], vocab_size=V, blank_id=0, dense_memory_mb=0.0)
    stacked = BoostingTree.stack([a, b, c])
    assert stacked.num_trees == 3
    rng = random.Random(0)
    # batch-major layout: 3 utterances x beam 2
    states = stacked.initial_states(6)
    assert states.tolist() == [stacked.roots[0]] * 2 + [stacked.roots[1]] * 2 + [stacked.roots[2]] * 2
    single = [a, b, c]
    s_single = [t.initial_states(2) for t in single]
    for _ in range(12):
        sc, nx = stacked.advance(states)
        toks = torch.tensor([rng.randrange(1, V) for _ in range(6)])
        for u, t in enumerate(single):
            sc1, nx1 = t.advance(s_single[u])
            torch.testing.assert_close(sc[2 * u : 2 * u + 2], sc1)
            s_single[u] = nx1[torch.arange(2), toks[2 * u : 2 * u + 2]]
        states = nx[torch.arange(6), toks]
        for u, t in enumerate(single):
            torch.testing.assert_close(stacked.final(states[2 * u : 2 * u + 2]), t.final(s_single[u]))
    explicit = stacked.initial_states(3, utterances=torch.tensor([2, 0, 1]))
    assert explicit.tolist() == [int(stacked.roots[2]), int(stacked.roots[0]), int(stacked.roots[1])]
    assert stacked.score_sequence([5, 6], tree=1) == pytest.approx(6.0)
    assert stacked.score_sequence([5, 6], tree=0) == pytest.approx(0.0)


def test_bad_inputs():
    tok = CharTokenizer(list("_abc"), blank_id=0)
    with pytest.raises(DecodingInputError, match="phrase list is empty"):
        BoostingTree.from_phrases([], tok)
    with pytest.raises(DecodingInputError, match="not a single string"):
        BoostingTree.from_phrases("abc", tok)
    with pytest.raises(DecodingInputError, match=r"phrases\[1\] is empty"):
        BoostingTree.from_phrases(["ab", "  "], tok)
    with pytest.raises(DecodingInputError, match=r"phrases\[0\] = 'az' holds characters the tokenizer cannot spell \('z'\)"):
        BoostingTree.from_phrases(["az"], tok)
    with pytest.raises(DecodingInputError, match="on_unknown must be one of"):
        BoostingTree.from_phrases(["ab"], tok, on_unknown="ignore")
    with pytest.raises(DecodingInputError, match="has no tokenisation"):
        BoostingTree.from_phrases(["ab"], lambda text: [], vocab_size=4, blank_id=0)
    with pytest.raises(DecodingInputError, match="must be a str"):
        BoostingTree.from_phrases([3], tok)
    with pytest.raises(DecodingInputError, match="weight must be a finite number"):
        BoostingTree.from_phrases(["ab"], tok, weight=float("nan"))
    with pytest.raises(DecodingInputError, match=r"token id 4 is outside the vocabulary 0..3"):
        BoostingTree.from_token_sequences([[1, 4]], vocab_size=4, blank_id=0)
    with pytest.raises(DecodingInputError, match="is the blank"):
        BoostingTree.from_token_sequences([[1, 0]], vocab_size=4, blank_id=0)
    with pytest.raises(DecodingInputError, match="has no tokens"):
        BoostingTree.from_token_sequences([[]], vocab_size=4, blank_id=0)
    with pytest.raises(DecodingInputError, match="phrase list is empty"):
        BoostingTree.from_token_sequences([], vocab_size=4, blank_id=0)
    a = BoostingTree.from_token_sequences([[1]], vocab_size=4, blank_id=0)
    b = BoostingTree.from_token_sequences([[1]], vocab_size=5, blank_id=0)
    with pytest.raises(DecodingInputError, match="vocab_size"):
        BoostingTree.stack([a, b])
    with pytest.raises(DecodingInputError, match="at least one"):
        BoostingTree.stack([])
    s = BoostingTree.stack([a, a])
    with pytest.raises(DecodingInputError, match="multiple of 2"):
        s.initial_states(3)
    with pytest.raises(DecodingInputError, match="utterances must be in 0..1"):
        s.initial_states(2, utterances=torch.tensor([0, 2]))
    with pytest.raises(DecodingInputError, match="not a token id"):
        a.score_sequence([9])


def test_empty_tree_in_a_stack():
    a = BoostingTree.from_token_sequences([[1, 2]], vocab_size=4, blank_id=0)
    e = BoostingTree.empty(4, 0)
    s = BoostingTree.stack([e, a])
    sc, nx = s.advance(s.initial_states(2))
    assert torch.all(sc[0] == 0) and sc[1, 1] == pytest.approx(1.0)
    assert e.score_sequence([1, 2, 3]) == 0.0
    assert s.score_sequence([1, 2], tree=1) == pytest.approx(2.0)
