"""FusionScorer (asrdecode.fusion) over an n-gram LM and a boosting tree, and lmplz estimation."""

from __future__ import annotations

import math
import random

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.fusion import FusionModel, FusionScorer, check_fusion, gather_next_states, weigh, weigh_float
from asrdecode.lm import BoostingTree, NGramLM, TokenMap, estimate_arpa, find_kenlm_tool, read_arpa

V, BLANK = 6, 5
ARPA = "\n".join([
    "\\data\\", "ngram 1=7", "ngram 2=3", "", "\\1-grams:", "-1.0\t<unk>", "-99\t<s>\t-0.5", "-0.7\t</s>",
    "-0.6\td\t-0.3", "-0.8\te\t-0.2", "-0.9\tf", "-1.1\tg", "", "\\2-grams:", "-0.3\t<s> d", "-0.4\td e",
    "-0.2\te </s>", "", "\\end\\", "",
])


@pytest.fixture()
def models(tmp_path):
    p = tmp_path / "lm.arpa"
    p.write_text(ARPA)
    lm = NGramLM.from_arpa(p, vocab_size=V, blank_id=BLANK)
    tree = BoostingTree.from_token_sequences([[0, 1, 2], [3]], vocab_size=V, blank_id=BLANK)
    return lm, tree


def test_protocol(models):
    lm, tree = models
    assert isinstance(lm, FusionModel) and isinstance(tree, FusionModel)


def test_weighted_sum_and_states(models):
    lm, tree = models
    fs = FusionScorer([(lm, 0.5), (tree, 2.0)], vocab_size=V, blank_id=BLANK)
    states = fs.initial(4)
    assert states.shape == (4, 2) and states.dtype == torch.int64
    rng = random.Random(0)
    for _ in range(6):
        scores, nxt = fs.advance(states)
        assert scores.shape == (4, V) and nxt.shape == (4, V, 2)
        s_lm, n_lm = lm.advance(states[:, 0])
        s_tr, n_tr = tree.advance(states[:, 1])
        torch.testing.assert_close(scores, 0.5 * s_lm + 2.0 * s_tr)
        assert torch.equal(nxt[..., 0], n_lm) and torch.equal(nxt[..., 1], n_tr)
        toks = torch.tensor([[rng.randrange(V) for _ in range(3)] for _ in range(4)])
        st_, nt_ = fs.score_tokens(states, toks)
        torch.testing.assert_close(st_, scores.gather(1, toks))
        assert torch.equal(nt_, gather_next_states(nxt, toks))
        torch.testing.assert_close(fs.final(states), 0.5 * lm.final(states[:, 0]) + 2.0 * tree.final(states[:, 1]))
        states = nxt[torch.arange(4), toks[:, 0]]


def test_scorer_moves_states_with_hypotheses(models):
    lm, tree = models
    fs = FusionScorer([(lm, 0.5), (tree, 2.0)], vocab_size=V, blank_id=BLANK)
    _, nxt = fs.advance(fs.initial(3))  # [3, V, 2]: distinct states to move around
    rows = torch.tensor([2, 0, 2])
    assert torch.equal(fs.select(nxt[:, 1], rows), nxt[rows, 1])
    assert torch.equal(fs.select(nxt, (rows, torch.tensor([1, 2, 3]))), nxt[rows, torch.tensor([1, 2, 3])])
    idx = torch.tensor([[3, 1], [0, 0], [V - 1, 2]])
    picked = fs.gather(nxt, idx)  # [3, 2, 2]
    for b in range(3):
        for q in range(2):
            assert torch.equal(picked[b, q], nxt[b, idx[b, q]])
    take = torch.tensor([True, False, True])
    mixed = fs.where(take, nxt[:, 1], nxt[:, 2])
    assert torch.equal(mixed[0], nxt[0, 1]) and torch.equal(mixed[1], nxt[1, 2]) and torch.equal(mixed[2], nxt[2, 1])
    grid = fs.where(take[:, None], nxt[:, :2], nxt[:, 2:4])  # [3, 2] mask broadcast over a [3, 2, M] pool
    assert torch.equal(grid[1], nxt[1, 2:4]) and torch.equal(grid[0], nxt[0, :2])


def test_empty_scorer():
    fs = FusionScorer([], vocab_size=V)
    st_ = fs.initial(3)
    assert st_.shape == (3, 0)
    sc, nx = fs.advance(st_)
    assert sc.shape == (3, V) and nx.shape == (3, V, 0) and not sc.any()
    assert not fs.final(st_).any()
    sc, nx = fs.score_tokens(st_, torch.zeros(3, 2, dtype=torch.long))
    assert sc.shape == (3, 2) and nx.shape == (3, 2, 0)


def test_per_utterance_trees_through_scorer(models):
    lm, _ = models
    a = BoostingTree.from_token_sequences([[0]], vocab_size=V, blank_id=BLANK)
    b = BoostingTree.from_token_sequences([[1]], vocab_size=V, blank_id=BLANK)
    fs = FusionScorer([(lm, 1.0), (BoostingTree.stack([a, b]), 1.0)], vocab_size=V, blank_id=BLANK)
    st_ = fs.initial(2, utterances=torch.tensor([1, 0]))
    sc, _ = fs.advance(st_)
    lm_sc, _ = lm.advance(st_[:, 0])
    bonus = sc - lm_sc
    assert bonus[0, 1] == pytest.approx(1.0) and bonus[0, 0] == pytest.approx(0.0)
    assert bonus[1, 0] == pytest.approx(1.0) and bonus[1, 1] == pytest.approx(0.0)


def test_fusion_bad_input(models):
    lm, tree = models
    with pytest.raises(DecodingInputError, match="vocab_size 6 but the acoustic model has 7"):
        FusionScorer([(lm, 1.0)], vocab_size=7)
    with pytest.raises(DecodingInputError, match="blank_id 5 but the acoustic model's is 0"):
        FusionScorer([(lm, 1.0)], vocab_size=V, blank_id=0)
    with pytest.raises(DecodingInputError, match="does not implement FusionModel"):
        check_fusion([(object(), 1.0)], V)
    with pytest.raises(DecodingInputError, match=r"fusion\[0\] must be a \(FusionModel, weight\) pair"):
        check_fusion([lm], V)


# --------------------------------------------------------------------------- estimation with lmplz
def _lmplz_or_skip():
    try:
        return find_kenlm_tool("lmplz")
    except FileNotFoundError:
        pytest.skip("KenLM's lmplz is not built (recipes/build_kenlm.sh)")


def test_estimate_token_lm_is_normalised(tmp_path):
    _lmplz_or_skip()
    rng = random.Random(1)
    vocab_size, blank = 12, 11
    tm = TokenMap.offset(vocab_size, blank)
    # token 10 never occurs in the corpus: the model scores it as <unk>
    corpus = [[rng.choice(range(10)) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    path = estimate_arpa([tm.encode_line(s) for s in corpus], 3, tmp_path / "tok.arpa")
    model = read_arpa(path)
    assert model.order == 3 and model.counts()[0] == 13  # 10 tokens + <s> </s> <unk>
    lm = NGramLM.from_arpa(path, token_map=tm)
    states = torch.arange(lm.num_states)
    scores, _ = lm.advance(states)
    non_blank = [t for t in range(vocab_size) if t != blank]
    total = torch.logsumexp(torch.cat([scores[:, non_blank], lm.final(states)[:, None]], dim=1), dim=1)
    # every history's distribution (tokens, <unk> once, </s>) sums to 1 (ARPA rounds to 6-7 digits)
    torch.testing.assert_close(total, torch.zeros_like(total), atol=1e-4, rtol=0)
    # seen sequences are more likely than shuffled ones on average
    seen = sum(lm.score_sequence(s) for s in corpus[:50])
    assert math.isfinite(seen)


def test_estimate_bad_input(tmp_path):
    with pytest.raises(DecodingInputError, match="order must be a positive int"):
        estimate_arpa(["a b"], 0, tmp_path / "x.arpa")
    with pytest.raises(DecodingInputError, match="holds no words"):
        estimate_arpa(["", "  "], 2, tmp_path / "x.arpa")
    with pytest.raises(DecodingInputError, match=r"text_lines\[1\] must be a str"):
        estimate_arpa(["a", 3], 2, tmp_path / "x.arpa")
    with pytest.raises(FileNotFoundError):
        estimate_arpa(["a b"], 2, tmp_path / "x.arpa", lmplz=tmp_path / "no-such-lmplz")


@pytest.mark.parametrize("weight", [0.7, 0.0, -0.4])
def test_a_forbidden_token_stays_forbidden_at_any_weight(weight):
    """``weigh``: ``weight * score``, but a model's ``-inf`` (it forbids the token) stays ``-inf`` at a weight
    <= 0 (the product would be +inf or NaN); the float version agrees element by element."""
    scores = torch.tensor([[-1.5, -math.inf, 0.0, -20.0]], dtype=torch.float64)
    got = weigh(scores, weight)
    assert not bool(torch.isnan(got).any()) and float(got[0, 1]) == -math.inf
    assert got[0, [0, 2, 3]].tolist() == pytest.approx((scores[0, [0, 2, 3]] * weight).tolist())
    assert [weigh_float(x, weight) for x in scores[0].tolist()] == got[0].tolist()


class _Forbids:
    """A fusion model forbidding token 2 from every state (score -inf), 0 elsewhere; no end score."""

    def __init__(self, vocab: int, blank: int) -> None:
        self.vocab_size, self.blank_id = vocab, blank

    def initial_states(self, n, device=None):
        return torch.zeros(n, dtype=torch.long, device=device)

    def advance(self, states):
        sc = torch.zeros(states.shape[0], self.vocab_size)
        sc[:, 2] = -math.inf
        return sc, states[:, None].expand(-1, self.vocab_size).clone()

    def final(self, states):
        return torch.zeros(states.shape[0])


@pytest.mark.parametrize("weight", [0.5, -0.5])
def test_scorers_and_searches_keep_a_forbidden_token_out_at_a_negative_weight(weight):
    """The scorer's advance, score_tokens and prepared run weigh alike; the CTC beam search on either engine
    and its oracle never emit the forbidden token, also where the emissions favour it."""
    from asrdecode import ctc

    model = _Forbids(4, 0)
    scorer = FusionScorer([(model, weight)], 4, 0)
    st = scorer.initial(3, torch.device("cpu"))
    sc, _ = scorer.advance(st)
    assert float(sc[0, 2]) == -math.inf and not bool(torch.isnan(sc).any())
    tok, _ = scorer.score_tokens(st, torch.tensor([[2, 1]] * 3))
    assert tok[:, 0].tolist() == [-math.inf] * 3
    out = torch.empty(3, 4)
    scorer.prepare(st, out).run()
    assert torch.equal(out, sc)
    lp = torch.log_softmax(torch.tensor([[[0.0, 0.0, 6.0, 0.0]] * 5]), -1)  # token 2 favoured on every frame
    for engine in ("torch", "native"):
        hyps = ctc.beam_search(lp, None, 0, beam=3, fusion=[(model, weight)], engine=engine)[0]
        assert hyps and all(2 not in h.tokens and h.score > -math.inf for h in hyps), engine
    ref = ctc.reference_beam_search(lp, None, 0, beam=3, fusion=[(model, weight)])[0]
    assert all(2 not in h.tokens for h in ref)
