"""The fused per-state tables of the back-off automaton (asrdecode.lm._fused) against the chain walk.

``advance`` / ``score_tokens`` read tables resolved at load; ``_advance`` / ``_score_tokens_walk`` walk
the back-off chain level by level (the former implementation). They must agree on every state of
random ARPA models and boosting trees, in every dense-row layout, with and without a blank.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.accel import count_device_syncs
from asrdecode.lm import BoostingTree, NGramLM, TokenMap
from asrdecode.lm import _fused
from asrdecode.lm._automaton import BackoffAutomaton

from test_lm_ngram import _write_tmp, random_arpa

DENSE = {"root": dict(dense_memory_mb=0.0), "auto": dict(min_dense_degree=2),
         "tiny": dict(dense_memory_mb=0.001, min_dense_degree=1), "all": dict(min_dense_degree=0)}


def _lm(seed: int, order: int, n_words: int, blank: str, dense: str, max_per_order: int = 40) -> NGramLM:
    rng = random.Random(seed)
    path = _write_tmp(random_arpa(rng, n_words, order, with_unk=rng.random() < 0.7, max_per_order=max_per_order))
    if blank == "first":  # blank 0, token t >= 1 is word t - 1, one extra token (-> <unk>)
        words = [None] + [chr(100 + i) for i in range(n_words + 1)]
        return NGramLM.from_arpa(path, token_map=TokenMap.from_words(words, blank_id=0), **DENSE[dense])
    V = n_words + 2
    return NGramLM.from_arpa(path, vocab_size=V, blank_id=V - 1 if blank == "last" else None, **DENSE[dense])


def _assert_same_as_walk(a: BackoffAutomaton, rng: random.Random) -> None:
    """Every state: fused advance and score_tokens equal the walk (scores within 1e-6, states exactly)."""
    assert a.fused is not None
    states = torch.arange(a.num_states)
    s1, n1 = a.advance(states)
    s0, n0 = a._advance(states, a.max_chain, a.light_degree)
    torch.testing.assert_close(s1, s0, atol=1e-6, rtol=0)
    assert torch.equal(n1, n0)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    tokens = torch.randint(0, a.vocab_size, (a.num_states, 5), generator=gen)
    t1, m1 = a.score_tokens(states, tokens)
    t0, m0 = a._score_tokens_walk(states, tokens)
    torch.testing.assert_close(t1, t0, atol=1e-6, rtol=0)
    assert torch.equal(m1, m0)
    # and the whole row gathered (score_tokens vs advance, both fused)
    t2, m2 = a.score_tokens(states, torch.arange(a.vocab_size).expand(a.num_states, -1))
    torch.testing.assert_close(t2, s1, atol=1e-6, rtol=0)
    assert torch.equal(m2, n1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(1, 5), n_words=st.integers(1, 8),
       blank=st.sampled_from(["last", "first", "none"]), dense=st.sampled_from(sorted(DENSE)))
def test_fused_equals_walk_on_random_arpas(seed, order, n_words, blank, dense):
    lm = _lm(seed, order, n_words, blank, dense, max_per_order=60)
    _assert_same_as_walk(lm.automaton, random.Random(seed))


@st.composite
def _phrases(draw):
    V = draw(st.integers(3, 7))
    blank = draw(st.sampled_from([None, 0, V - 1]))
    tokens = [t for t in range(V) if t != blank]
    trees = []
    for _ in range(draw(st.integers(1, 3))):
        seqs = [(draw(st.lists(st.sampled_from(tokens), min_size=1, max_size=5)), draw(st.sampled_from([0.5, 1.0, 2.0])))
                for _ in range(draw(st.integers(1, 6)))]
        trees.append(seqs)
    return V, blank, trees


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_phrases(), dense=st.sampled_from([0.0, 16.0]), seed=st.integers(0, 2**31 - 1))
def test_fused_equals_walk_on_boosting_trees(data, dense, seed):
    V, blank, trees = data
    built = [BoostingTree.from_token_sequences(s, vocab_size=V, blank_id=blank, dense_memory_mb=dense) for s in trees]
    tree = built[0] if len(built) == 1 else BoostingTree.stack(built, dense_memory_mb=dense)
    _assert_same_as_walk(tree.automaton, random.Random(seed))


def test_kernels_per_call_do_not_grow_with_the_order():
    """A constant number of ops per advance / score_tokens call whatever the chain length, none syncing;
    the walk grows by about 25 per level."""
    fused_ops, walk_ops = [], []
    for order in (3, 4, 5):
        a = _lm(7, order, 6, "last", "tiny", max_per_order=60).automaton
        assert a.fused is not None and a.fused.levels >= 1 and a.fused.degree >= 1
        s = torch.arange(a.num_states)
        tok = torch.zeros(a.num_states, 3, dtype=torch.int64)
        with count_device_syncs() as c:
            a.advance(s)
            a.score_tokens(s, tok)
        assert c.count == 0
        fused_ops.append(c.ops)
        with count_device_syncs() as w:
            a._advance(s, a.max_chain, a.light_degree)
        walk_ops.append((a.max_chain, w.ops))
    assert len(set(fused_ops)) == 1 and fused_ops[0] <= 80, fused_ops
    assert max(walk_ops)[1] > fused_ops[0], walk_ops


def test_no_fused_tables_when_light_states_have_too_many_arcs(monkeypatch):
    monkeypatch.setattr(_fused, "MAX_ENTRIES", 1)
    lm = _lm(3, 4, 6, "last", "root", max_per_order=60)
    a = lm.automaton
    assert a.fused is None and a.fused_bytes() == 0
    states = torch.arange(a.num_states)
    s, n = a.advance(states)
    s0, n0 = a._advance(states, a.max_chain, a.light_degree)
    torch.testing.assert_close(s, s0, atol=0, rtol=0)
    assert torch.equal(n, n0)


@pytest.mark.parametrize("field", ["int_table", "float_table", "keep"])
def test_fused_tables_changed_in_place_are_rebuilt(field):
    a = _lm(5, 4, 6, "last", "auto", max_per_order=60).automaton
    states = torch.arange(a.num_states)
    want = a.advance(states)
    assert a.fused is not None
    getattr(a.fused, field).fill_(3)
    got = a.advance(states)
    torch.testing.assert_close(got[0], want[0], atol=0, rtol=0)
    assert torch.equal(got[1], want[1])


def test_memory_and_device_copy():
    a = _lm(2, 3, 5, "none", "auto").automaton
    t = a.fused
    assert t is not None
    assert a.fused_bytes() == sum(x.numel() * x.element_size() for x in (t.int_table, t.float_table, t.keep, t.arange_d))
    assert a.memory_bytes() > a.fused_bytes() > 0
    meta = a.to("meta")
    assert meta.fused is not None and meta.fused.int_table.device.type == "meta"
    sc, nx = meta.advance(torch.zeros(4, dtype=torch.int64, device="meta"))
    assert sc.shape == (4, a.vocab_size) and nx.device.type == "meta"


def test_entry_tables_follow_the_arcs_and_stay_out_of_copies():
    """The per-state entry tables ``advance`` reads (derived, cached on the automaton) are rebuilt after an
    in-place change of the arcs, and neither a device copy nor a pickle carries them."""
    import pickle

    a = _lm(5, 4, 6, "last", "auto", max_per_order=60).automaton
    states = torch.arange(a.num_states)
    a.advance(states)
    assert _fused.entry_tables(a, a.fused) is not None and "_entry_cache" in a.__dict__
    with torch.no_grad():
        a.arc_weight.mul_(2.0)
    s, n = a.advance(states)
    s0, n0 = a._advance(states, a.max_chain, a.light_degree)
    torch.testing.assert_close(s, s0, atol=1e-6, rtol=0)
    assert torch.equal(n, n0)
    assert "_entry_cache" not in a.to("cpu").__dict__
    assert "_entry_cache" not in pickle.loads(pickle.dumps(a)).__dict__


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(1, 5), n_words=st.integers(1, 8),
       blank=st.sampled_from(["last", "first", "none"]))
def test_with_dense_rows_scores_as_the_lm_it_copies(seed, order, n_words, blank):
    """``NGramLM.with_dense_rows()``: every state gets a dense row (no chain to walk), the scores are the
    original LM's up to float rounding (the back-off weights summed in another order), the next states and
    final scores exactly; the prepared advance of such an LM is row gathers only; the original is untouched."""
    lm = _lm(seed, order, n_words, blank, "auto")
    chain = lm.automaton.max_chain
    dense = lm.with_dense_rows()
    a, d = lm.automaton, dense.automaton
    assert d.max_chain == 0 and bool((d.dense_index >= 0).all()) and a.max_chain == chain
    assert (dense.order, dense.bos_state, dense.token_map, dense.num_ngrams) == (lm.order, lm.bos_state,
                                                                             lm.token_map, lm.num_ngrams)
    states = torch.arange(a.num_states)
    s0, n0 = a.advance(states)
    s1, n1 = d.advance(states)
    torch.testing.assert_close(s1, s0, atol=1e-5, rtol=1e-6)
    assert torch.equal(n1, n0)
    gen = torch.Generator().manual_seed(seed % 2**31)
    tokens = torch.randint(0, a.vocab_size, (a.num_states, 4), generator=gen)
    t0, m0 = a.score_tokens(states, tokens)
    t1, m1 = d.score_tokens(states, tokens)
    torch.testing.assert_close(t1, t0, atol=1e-5, rtol=1e-6)
    assert torch.equal(m1, m0)
    assert torch.equal(dense.final(states), lm.final(states))
    prepared = _fused.PreparedAdvance(d, d.fused, states.clone())
    with count_device_syncs() as ops:
        p_s, p_n = prepared.run()
    # the two table rows, the dense score and next rows, the back-off add (and the blank's score set to 0)
    assert ops.ops <= 5 + (a.blank_id is not None), ops.ops
    keep = torch.ones(a.vocab_size, dtype=torch.bool)
    if a.blank_id is not None:  # (the prepared advance: the blank's score 0 as advance's, its state any valid one)
        keep[a.blank_id] = False
        assert bool((p_s[:, a.blank_id] == 0).all()) and bool(((p_n[:, a.blank_id] >= 0)
                                                                & (p_n[:, a.blank_id] < a.num_states)).all())
    assert torch.equal(p_s[:, keep], s1[:, keep]) and torch.equal(p_n[:, keep], n1[:, keep])


def test_with_dense_rows_within_a_budget_and_its_checks():
    """A budget too small for every row gives the states with the most arcs theirs (the chain stays, the
    scores are the LM's up to rounding); a budget that is not a positive number is refused."""
    from asrdecode.errors import DecodingInputError

    lm = _lm(3, 4, 8, "last", "root")
    row_mb = lm.vocab_size * 12 / 2**20
    part = lm.with_dense_rows(memory_mb=3 * row_mb)
    rows = int((part.automaton.dense_index >= 0).sum())
    assert 3 <= rows < lm.num_states and part.automaton.max_chain > 0
    states = torch.arange(lm.num_states)
    torch.testing.assert_close(part.advance(states)[0], lm.advance(states)[0], atol=1e-5, rtol=1e-6)
    for bad in (0, -1.0, float("nan"), float("inf"), "64", True):
        with pytest.raises(DecodingInputError, match="memory_mb"):
            lm.with_dense_rows(memory_mb=bad)


def test_with_dense_rows_survives_save_and_load(tmp_path):
    """The dense-row setting is part of the saved LM: loading rebuilds every row."""
    dense = _lm(5, 3, 6, "last", "auto").with_dense_rows()
    again = NGramLM.load(dense.save(tmp_path / "dense.lm"))
    assert again.automaton.max_chain == 0 and bool((again.automaton.dense_index >= 0).all())
    states = torch.arange(dense.num_states)
    assert torch.equal(again.advance(states)[0], dense.advance(states)[0])
