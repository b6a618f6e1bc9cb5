"""WIND beam search: batched ``beam_search(method="wind")`` (the default engine: native on CPU; native ==
tensor engine is tested in test_transducer_beam_native.py) against its per-utterance reference (with
and without fusion), window 1 against an independent frame-by-frame search, beam 1, scores against
the model, batch invariance, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.lm import NGramLM
from asrdecode.transducer import greedy
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search

from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, random_model, tiny_boosting_tree, tiny_lm

V, BLANK = FUSION_V, FUSION_BLANK


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("wind_lm"))


@pytest.fixture(scope="module")
def tree():
    return tiny_boosting_tree()


_enc = random_encoder
_key = hyp_key


@pytest.mark.parametrize("window", [1, 2, 3, 8])
def test_matches_reference(window):
    for seed in range(6):
        # LSTM only: a stateless model makes exactly tied scores (the order of equal scores is free)
        m = random_model(400 + seed, V, seed % V, None, blank_bias=0.5 + 0.5 * (seed % 3), pred_layers=1 + seed % 2)
        enc = _enc(seed, 3, 9)
        lengths = torch.tensor([9, 4, 7])
        for beam, cap, beta in ((2, 3, 0.0), (4, 1, 0.3), (V, 5, 0.0)):
            kw = dict(beam=beam, window=window, max_symbols=cap, beta=beta)
            res = beam_search(m, enc, lengths, method="wind", nbest=beam, **kw)
            for b in range(3):
                ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
                assert sorted(_key(res[b], 7)) == sorted(_key(ref, 7)), (seed, b, kw)
                assert len({tuple(h.tokens) for h in res[b]}) == len(res[b])  # merged
                assert all(x.score >= y.score for x, y in zip(res[b], res[b][1:]))


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("pruning", ["late", "early"])
@pytest.mark.parametrize("blank_scoring", ["lm_weighted", "none"])
def test_matches_reference_with_fusion(lm, tree, window, pruning, blank_scoring):
    """Shallow fusion (n-gram LM + boosting tree), both blank scorings, early / late pruning."""
    for seed in range(3):
        m = random_model(900 + seed, V, BLANK, None, blank_bias=0.5, pred_layers=1 + seed % 2)
        enc = _enc(seed, 2, 8)
        lengths = torch.tensor([8, 5])
        kw = dict(beam=3, window=window, max_symbols=3, beta=0.5 * seed, fusion=[(lm, 0.3 + 0.4 * seed), (tree, 0.5)],
                  pruning=pruning, blank_scoring=blank_scoring)
        res = beam_search(m, enc, lengths, method="wind", nbest=3, **kw)
        for b in range(2):
            ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
            assert sorted(_key(res[b], 7)) == sorted(_key(ref, 7)), (seed, b, kw)
    plain = beam_search(m, enc, lengths, method="wind", beam=3, window=window, max_symbols=3)
    assert [row[0].score for row in plain] != [row[0].score for row in res]


@pytest.mark.parametrize("engine", ["torch", "native"])
@pytest.mark.parametrize("pruning", ["late", "early"])
def test_expansion_gamma_matches_reference(lm, engine, pruning):
    """mAES's expansion threshold: both engines keep exactly the reference's expansions."""
    for seed in range(3):
        m = random_model(950 + seed, V, BLANK, None, blank_bias=0.5, pred_layers=1 + seed % 2)
        enc = _enc(seed, 2, 9)
        lengths = torch.tensor([9, 6])
        for gamma, fusion in ((0.0, ()), (0.7, [(lm, 0.4)]), (2.3, ())):
            kw = dict(beam=3, window=1 + seed, max_symbols=3, fusion=fusion, pruning=pruning, expansion_gamma=gamma)
            res = beam_search(m, enc, lengths, method="wind", nbest=3, engine=engine, **kw)
            for b in range(2):
                ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
                assert sorted(_key(res[b], 7)) == sorted(_key(ref, 7)), (seed, b, gamma, engine)


def test_expansion_gamma_prunes_expansions(monkeypatch):
    """A huge threshold is the paper's search; threshold 0 keeps one expansion per hypothesis
    (up to ties), so far fewer hypotheses reach the joint network."""
    m = random_model(960, V, BLANK, None, blank_bias=0.5, pred_layers=1)
    enc = _enc(3, 2, 12)
    off = beam_search(m, enc, method="wind", beam=4, window=3, nbest=4, engine="torch")
    huge = beam_search(m, enc, method="wind", beam=4, window=3, nbest=4, engine="torch", expansion_gamma=1e6)
    assert [_key(r, 7) for r in off] == [_key(r, 7) for r in huge]
    rows = []
    joint = type(m).joint

    def counting(self, enc_proj, dec_proj):
        out = joint(self, enc_proj, dec_proj)
        rows.append(out.reshape(-1, out.shape[-1]).shape[0])
        return out

    def joint_rows(gamma):
        rows.clear()
        beam_search(m, enc, method="wind", beam=4, window=3, engine="native", expansion_gamma=gamma)
        return sum(rows)

    monkeypatch.setattr(type(m), "joint", counting)
    full, pruned = joint_rows(None), joint_rows(0.0)
    assert pruned < 0.8 * full, (pruned, full)


def test_expansion_gamma_bad_inputs():
    m = random_model(0, V, BLANK, None)
    enc = _enc(0, 1, 4)
    for gamma in (-0.1, math.inf, math.nan, True, "1"):
        with pytest.raises(DecodingInputError, match="expansion_gamma"):
            beam_search(m, enc, method="wind", expansion_gamma=gamma)
        with pytest.raises(DecodingInputError, match="expansion_gamma"):
            reference_wind_beam_search(m, enc[0], expansion_gamma=gamma)
    for method in ("alsd", "aes"):
        with pytest.raises(DecodingInputError, match="method='wind' only"):
            beam_search(m, enc, method=method, expansion_gamma=1.0)


def _frame_by_frame(m, enc, beam, cap, stats):
    """The frame-by-frame search that WIND beam search is with window 1, written independently: the
    hypotheses of frame ``t`` (``cur``) and of frame ``t + 1`` (``nxt``), each list merged and pruned
    to ``beam``; prefix search on every pop; each hypothesis keeps its ``beam`` best expansions."""

    def lse(a, b):
        return max(a, b) + math.log1p(math.exp(-abs(a - b))) if min(a, b) > -math.inf else max(a, b)

    def insert(lst, hyps):
        best = {}
        for h in sorted(lst + hyps, key=lambda h: -h["score"]):
            if h["tokens"] in best:
                best[h["tokens"]]["score"] = lse(best[h["tokens"]]["score"], h["score"])
            else:
                best[h["tokens"]] = dict(h)
        return sorted(best.values(), key=lambda h: -h["score"])[:beam]

    T = enc.shape[0]
    enc_proj = m.project_encoder(enc)
    dec, st = m.predict(torch.tensor([m.blank_id]), m.initial_state(1, dtype=enc.dtype))
    cur = [dict(score=0.0, tokens=(), stamps=(), sym=0, st=st, dec=m.project_decoder(dec)[0])]
    nxt = []
    t = 0
    while t < T:
        if not cur:
            cur, nxt, t = nxt, [], t + 1
            continue
        popped, cur = cur, []
        lps = [torch.log_softmax(m.joint(enc_proj[t], h["dec"]), -1).tolist() for h in popped]
        by_tokens = {h["tokens"]: i for i, h in enumerate(popped)}
        scores = [h["score"] for h in popped]
        gone = set()
        for i, h in enumerate(popped):
            a = by_tokens.get(h["tokens"][:-1]) if h["tokens"] else None
            if a is not None and (cap is None or popped[a]["sym"] + 1 < cap):
                scores[i] = lse(scores[i], popped[a]["score"] + lps[a][h["tokens"][-1]])
                gone.add(a)
                stats["prefix"] += 1
        to_cur, to_nxt = [], []
        for i, h in enumerate(popped):
            if i in gone:
                continue
            for v in sorted(range(V), key=lambda v: -lps[i][v])[:beam]:
                score = scores[i] + lps[i][v]
                if v == m.blank_id:
                    to_nxt.append(dict(h, score=score, sym=0))
                    continue
                dec, st = m.predict(torch.tensor([v]), h["st"])
                new = dict(score=score, tokens=h["tokens"] + (v,), stamps=h["stamps"] + (t,), sym=h["sym"] + 1,
                           st=st, dec=m.project_decoder(dec)[0])
                if cap is not None and new["sym"] >= cap:
                    to_nxt.append(dict(new, sym=0))
                else:
                    to_cur.append(new)
        cur = insert(cur, to_cur) if to_cur else cur
        nxt = insert(nxt, to_nxt) if to_nxt else nxt
    return sorted(((list(h["tokens"]), list(h["stamps"]), None, h["score"]) for h in cur),
                  key=lambda k: -k[3])


def test_window_one_is_frame_by_frame():
    """Window 1: Equation 1 is the per-frame distribution, and WIND beam search is the frame-by-frame
    search with per-frame lists (written independently above), prefix search included."""
    stats = {"prefix": 0}
    for seed in range(6):
        m = random_model(500 + seed, V, seed % V, None, blank_bias=0.5, kind="lstm", pred_layers=1 + seed % 2)
        enc = _enc(seed, 3, 10)
        lengths = torch.tensor([10, 6, 0])
        for beam, cap in ((1, 2), (3, 3), (5, 4)):
            w = beam_search(m, enc, lengths, beam=beam, nbest=beam, method="wind", window=1, max_symbols=cap)
            with torch.inference_mode():
                for b in range(3):
                    want = _frame_by_frame(m, enc[b, : int(lengths[b])], beam, cap, stats)
                    assert sorted(_key(w[b], 9)) == sorted(want), (seed, beam, b)
    assert stats["prefix"] > 0  # the prefix search did take part


def test_beam1_window1_is_greedy():
    for seed in range(4):
        m = random_model(600 + seed, V, BLANK, None, blank_bias=0.0)
        enc = _enc(seed, 2, 9)
        g = greedy(m, enc, max_symbols=2)
        w = beam_search(m, enc, beam=1, method="wind", window=1, max_symbols=2)
        assert _key([row[0] for row in w]) == _key(g)


def _alignment_logprob(m, enc, tokens, stamps, cap):
    """Log-probability of one RNN-T alignment given by labels and their frames (blank closes each
    frame, except a frame left by the symbol cap), computed directly from the model."""
    T = enc.shape[0]
    state = m.initial_state(1, dtype=enc.dtype)
    dec, state = m.predict(torch.tensor([BLANK]), state)
    total, i = 0.0, 0
    for t in range(T):
        on_frame = 0
        while True:
            lp = torch.log_softmax(m.joint(m.project_encoder(enc[t]), m.project_decoder(dec)[0]), -1)
            if i < len(tokens) and stamps[i] == t:
                total += float(lp[tokens[i]])
                dec, state = m.predict(torch.tensor([tokens[i]]), state)
                i += 1
                on_frame += 1
                if cap is not None and on_frame >= cap:
                    break
            else:
                total += float(lp[BLANK])
                break
    assert i == len(tokens)
    return total


@pytest.mark.parametrize("window", [2, 4])
def test_beam1_score_is_its_alignment(window):
    """Beam 1 never merges: the score of its single path is the model's log-probability of that
    alignment (Equation 1 only regroups the per-frame terms); a model that only emits blank gives []."""
    for seed in range(4):
        m = random_model(700 + seed, V, BLANK, None, blank_bias=0.0)
        enc = _enc(seed, 1, 9)
        for cap in (1, 3):
            with torch.inference_mode():
                h = beam_search(m, enc, beam=1, method="wind", window=window, max_symbols=cap)[0][0]
                want = _alignment_logprob(m, enc[0], h.tokens, h.timestamps, cap)
            assert h.score == pytest.approx(want, abs=1e-9)
            assert h.timestamps == sorted(h.timestamps)
    m = random_model(1, V, BLANK, None, blank_bias=30.0)
    h = beam_search(m, _enc(1, 1, 7), beam=1, method="wind", window=3)[0][0]
    assert h.tokens == [] and h.score < 0


def test_batch_invariance(lm):
    m = random_model(11, V, BLANK, None, blank_bias=0.5)
    enc = _enc(3, 4, 10)
    lengths = torch.tensor([10, 0, 4, 7])
    kw = dict(beam=3, method="wind", window=3, nbest=3, max_symbols=4)
    full = beam_search(m, enc, lengths, **kw)
    for b in range(4):
        alone = beam_search(m, enc[b : b + 1, : max(int(lengths[b]), 1)], lengths[b : b + 1], **kw)[0]
        assert _key(alone, 9) == _key(full[b], 9)
    kw = dict(kw, fusion=[(lm, 0.5)], beta=0.5)
    full = beam_search(m, enc, lengths, **kw)
    for b in range(4):
        alone = beam_search(m, enc[b : b + 1, : max(int(lengths[b]), 1)], lengths[b : b + 1], **kw)[0]
        assert _key(alone, 9) == _key(full[b], 9)
    assert full[1][0].tokens == [] and full[1][0].score == pytest.approx(0.5 * lm.score_sequence([]))  # </s> only


def test_bad_inputs(tmp_path):
    m = random_model(0, V, BLANK, None)
    enc = _enc(0, 1, 4)
    for w in (0, -1, 1.5, True):
        with pytest.raises(DecodingInputError):
            beam_search(m, enc, method="wind", window=w)
        with pytest.raises(DecodingInputError):
            reference_wind_beam_search(m, enc[0], window=w)
    tdt = random_model(0, V, BLANK, [0, 1, 2])
    with pytest.raises(DecodingInputError):
        beam_search(tdt, enc, method="wind", window=2)
    with pytest.raises(DecodingInputError):
        reference_wind_beam_search(tdt, enc[0], window=2)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="wind", pruning="middle")
    with pytest.raises(DecodingInputError):
        reference_wind_beam_search(m, enc[0], blank_scoring="full")
    p = tmp_path / "lm.arpa"
    p.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t<unk>\n-99\t<s>\n-0.5\t</s>\n\n\\end\\\n")
    other = NGramLM.from_arpa(p, vocab_size=V + 1, blank_id=BLANK)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="wind", fusion=[(other, 0.5)])
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="wind", beam=0)
    assert math.isfinite(beam_search(m, enc, method="wind", window=100, beam=4)[0][0].score)


def test_merge_equal_matches_a_loop():
    """The all-pairs merge of the WIND step against a plain loop over the entries: live entries equal in
    every key merge into the best (the first on exact ties), whose score becomes the log-sum-exp of the
    group's; the others and the removed entries are ``-inf``."""
    from asrdecode.transducer.beam_wind import merge_equal

    g = torch.Generator().manual_seed(0)
    neg = float("-inf")
    for _ in range(200):
        B, P = 3, 14
        keys = torch.stack([torch.randint(0, 3, (B, P), generator=g), torch.randint(0, 3, (B, P), generator=g),
                            torch.randint(0, 2, (B, P), generator=g)])
        score = torch.randint(-3, 2, (B, P), generator=g).double() / 2  # exact ties
        score[torch.rand(B, P, generator=g) < 0.3] = neg
        before = torch.arange(P)[None, :] < torch.arange(P)[:, None]
        got = merge_equal(score, keys[..., None], keys[:, :, None, :], before)
        for b in range(B):
            groups: dict[tuple, list[int]] = {}
            for i in range(P):
                if score[b, i] > neg:
                    groups.setdefault(tuple(keys[:, b, i].tolist()), []).append(i)
            want = [neg] * P
            for members in groups.values():
                best = max(members, key=lambda i: (float(score[b, i]), -i))
                want[best] = math.log(sum(math.exp(float(score[b, i])) for i in members))
            assert [x == neg for x in got[b].tolist()] == [x == neg for x in want], b
            assert all(abs(x - y) <= 1e-12 for x, y in zip(got[b].tolist(), want) if y > neg)


def test_sorted_merge_equals_pairwise():
    """The O(P log P) merge of the WIND step (large pools: sort, group runs) against the pairwise definition:
    live entries equal in every key merge into the best (the first on exact ties), log-sum-exp."""
    from asrdecode.transducer.beam_wind import merge_sorted

    g = torch.Generator().manual_seed(0)
    neg = float("-inf")
    for _ in range(300):
        B, P = 3, 14
        hsh = torch.randint(0, 3, (B, P), generator=g)
        time = torch.randint(0, 3, (B, P), generator=g)
        nl, last = hsh.clone(), torch.randint(0, 2, (B, P), generator=g)
        score = torch.randint(-3, 2, (B, P), generator=g).double() / 2  # exact ties
        score[torch.rand(B, P, generator=g) < 0.3] = neg
        ok = score > neg
        eq = ((hsh[:, :, None] == hsh[:, None, :]) & (time[:, :, None] == time[:, None, :])
              & (nl[:, :, None] == nl[:, None, :]) & (last[:, :, None] == last[:, None, :]) & ok[:, :, None] & ok[:, None, :])
        s_i, s_j = score[:, :, None], score[:, None, :]
        idx = torch.arange(P)
        better = eq & ((s_j > s_i) | ((s_j == s_i) & (idx[None, None, :] < idx[None, :, None])))
        want = torch.where(ok & ~better.any(dim=2), torch.logsumexp(torch.where(eq, s_j, neg), dim=2), neg)
        got = merge_sorted(score, hsh, time * 3 + last, (nl, time, last))
        assert torch.equal(got == neg, want == neg)
        assert torch.allclose(got[want > neg], want[want > neg], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pruning", ["late", "early"])
def test_sorted_merge_path_equals_the_pairwise_path(lm, monkeypatch, pruning):
    """A pool above ``PAIRWISE_MAX`` (beam 16 and more) merges by sorting: forced on a small search, it gives
    the hypotheses of the all-pairs merge."""
    from asrdecode.transducer import beam_wind

    m = random_model(8, V, BLANK, None, blank_bias=1.0)
    enc = _enc(8, 3, 12)
    lengths = torch.tensor([12, 9, 5])
    kw = dict(beam=3, nbest=3, method="wind", window=3, max_symbols=3, fusion=[(lm, 0.4)], beta=0.2,
              pruning=pruning, engine="torch")
    pairwise = beam_search(m, enc, lengths, **kw)
    monkeypatch.setattr(beam_wind, "PAIRWISE_MAX", 0)
    assert [_key(r, 9) for r in beam_search(m, enc, lengths, **kw)] == [_key(r, 9) for r in pairwise]


def test_hash_collision_is_not_merged(monkeypatch):
    """With a degenerate hash (every prefix collides) the WIND merge and prefix search rely on length /
    last token / frame only and the result departs from the oracle: the oracle comparison catches
    false merges (the tensor engine, whose hash function can be replaced; the native engine checks the
    same keys)."""
    from asrdecode.transducer import beam_wind

    m = random_model(5, V, BLANK, None, blank_bias=0.5)
    enc = _enc(5, 1, 10)
    kw = dict(beam=4, window=3, max_symbols=3, engine="torch")
    ref = reference_wind_beam_search(m, enc[0], **{k: v for k, v in kw.items() if k != "engine"})
    ok = beam_search(m, enc, method="wind", nbest=4, **kw)[0]
    assert sorted(_key(ok, 7)) == sorted(_key(ref, 7))
    monkeypatch.setattr(beam_wind, "extend_hash", lambda h, t: torch.zeros_like(h))
    bad = beam_search(m, enc, method="wind", nbest=4, **kw)[0]
    assert sorted(_key(bad, 7)) != sorted(_key(ref, 7))
