"""Batched ALSD++ / AES++ (asrdecode.transducer.beam) against the per-utterance reference and greedy."""

from __future__ import annotations

import functools
import math
import sys

import pytest
import torch

from asrdecode.accel import EmulatedGraphRunner
from asrdecode.errors import DecodingInputError
from asrdecode.lm import NGramLM
from asrdecode.native import _lib as _native_lib
from asrdecode.transducer import greedy
from asrdecode.transducer import beam as beam_mod
from asrdecode.transducer.beam import beam_search, initial_beam_state
from asrdecode.transducer.reference_beam import reference_beam_search

from transducer_models import (FUSION_BLANK, FUSION_V, TINY_ARPA, hyp_key, random_encoder, random_model,
                               tiny_boosting_tree, tiny_lm)

V, BLANK = FUSION_V, FUSION_BLANK
TDT = [0, 1, 2]


@pytest.fixture(autouse=True, params=["native", "torch", "graphs"])
def engine(request, monkeypatch):
    """Every test on both engines (``beam_search`` here defaults to the fixture's; WIND runs on torch), and
    on the torch engine's CUDA-graph path run on CPU ("graphs": :class:`~asrdecode.accel.EmulatedGraphRunner`,
    the cached static loop of whole calls, the plain static loop of chunks)."""
    if request.param == "native" and not _native_lib.available():
        pytest.skip("native engine unavailable (no C++ compiler)")
    options = {"engine": request.param}
    if request.param == "graphs":
        real = beam_mod.resolve_mode
        monkeypatch.setattr(beam_mod, "resolve_mode", lambda m, d: "cuda_graphs" if m == "graphs" else real(m, d))
        monkeypatch.setattr(beam_mod, "StepRunner", EmulatedGraphRunner)
        options = {"engine": "torch", "acceleration": "graphs"}
    monkeypatch.setattr(sys.modules[__name__], "beam_search", functools.partial(beam_mod.beam_search, **options))
    return request.param


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("beam_lm"))


@pytest.fixture(scope="module")
def tree():
    return tiny_boosting_tree()


_enc = random_encoder
_key = hyp_key


# -- beam = 1 is greedy --------------------------------------------------------------------------


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes"])
@pytest.mark.parametrize("pruning", ["late", "early"])
def test_beam1_equals_greedy(durations, method, pruning):
    """Beam 1 without fusion takes greedy's decisions (same symbol cap: a label reaching the cap
    advances one frame unscored in both), for ALSD and AES, RNN-T and TDT (joint argmax of
    token + duration = greedy's separate argmaxes). Low blank bias: the cap is hit."""
    for seed in range(6):
        for blank_bias, cap in ((-1.0, 2), (0.0, 3), (3.0, None)):
            m = random_model(seed, V, seed % V, durations, blank_bias=blank_bias, kind="lstm" if seed % 2 else "stateless")
            enc = _enc(seed, 3, 9)
            lengths = torch.tensor([9, 5, 0])
            g = greedy(m, enc, lengths, max_symbols=cap)
            b = beam_search(m, enc, lengths, beam=1, method=method, pruning=pruning, max_symbols=cap)
            assert all(len(row) == 1 for row in b)  # n-best lists, also for nbest=1
            assert _key([row[0] for row in b]) == _key(g)


# -- batched == reference ----------------------------------------------------------------------


def _check_vs_reference(m, enc, lengths, **kw):
    beam = kw["beam"]
    res = beam_search(m, enc, lengths, nbest=beam, **kw)
    for b in range(enc.shape[0]):
        ref = reference_beam_search(m, enc[b, : int(lengths[b])], **kw)
        # sorted: exactly tied scores (equal sums of the same terms) may come in either order
        assert sorted(_key(res[b], 7)) == sorted(_key(ref, 7)), (b, kw)
        # n-best transcripts are distinct: equal transcripts were merged
        assert len({tuple(h.tokens) for h in res[b]}) == len(res[b])
        assert all(x.score >= y.score for x, y in zip(res[b], res[b][1:]))


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes"])
def test_matches_reference_no_fusion(durations, method):
    for seed in range(5):
        # stateless context 2 (context 1 makes many exactly tied scores)
        m = random_model(100 + seed, V, seed % V, durations, blank_bias=0.5, kind="lstm" if seed % 2 else "stateless",
                         pred_layers=2)
        enc = _enc(seed, 3, 8)
        lengths = torch.tensor([8, 3, 6])
        for beam, pruning in ((2, "late"), (4, "early"), (V, "late")):
            _check_vs_reference(m, enc, lengths, beam=beam, method=method, pruning=pruning, max_symbols=3)


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes"])
@pytest.mark.parametrize("pruning", ["late", "early"])
@pytest.mark.parametrize("blank_scoring", ["lm_weighted", "none"])
def test_matches_reference_with_fusion(lm, tree, durations, method, pruning, blank_scoring):
    for seed in range(3):
        m = random_model(200 + seed, V, BLANK, durations, blank_bias=0.5)
        enc = _enc(seed, 2, 7)
        lengths = torch.tensor([7, 5])
        fusion = [(lm, 0.3 + seed * 0.4), (tree, 0.5)]
        _check_vs_reference(m, enc, lengths, beam=3, method=method, pruning=pruning, blank_scoring=blank_scoring,
                            fusion=fusion, max_symbols=3, beta=0.5 * seed)


def test_fusion_changes_scores_and_scorings_differ(lm):
    m = random_model(7, V, BLANK, None, blank_bias=0.5)
    enc = _enc(7, 2, 8)
    plain = beam_search(m, enc, beam=3, nbest=3)
    a = beam_search(m, enc, beam=3, nbest=3, fusion=[(lm, 1.0)], blank_scoring="lm_weighted")
    b = beam_search(m, enc, beam=3, nbest=3, fusion=[(lm, 1.0)], blank_scoring="none")
    assert _key(plain[0]) != _key(a[0]) and _key(a[0]) != _key(b[0])
    # weight 0 is no fusion
    z = beam_search(m, enc, beam=3, nbest=3, fusion=[(lm, 0.0)])
    assert _key(z[0]) == _key(plain[0]) and _key(z[1]) == _key(plain[1])


# -- batch invariance ----------------------------------------------------------------------------


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes"])
def test_batch_invariance(lm, durations, method):
    m = random_model(11, V, BLANK, durations, blank_bias=0.5)
    enc = _enc(3, 4, 10)
    lengths = torch.tensor([10, 0, 4, 7])
    kw = dict(beam=3, method=method, nbest=3, fusion=[(lm, 0.5)], max_symbols=4)
    full = beam_search(m, enc, lengths, **kw)
    for b in range(4):
        alone = beam_search(m, enc[b : b + 1, : max(int(lengths[b]), 1)], lengths[b : b + 1], **kw)[0]
        assert _key(alone, 9) == _key(full[b], 9)
    perm = [2, 0, 3, 1]
    shuffled = beam_search(m, enc[perm], lengths[perm], **kw)
    for i, b in enumerate(perm):
        assert _key(shuffled[i], 9) == _key(full[b], 9)
    assert full[1][0].tokens == [] and len(full[1]) == 1


# -- merging: only truly equal transcripts, and all of them --------------------------------------


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes"])
def test_merges_are_equal_transcripts(monkeypatch, engine, durations, method):
    """After every step, backtrack every selected slot: two live slots never share (transcript, frame),
    and every slot removed by merging has a live slot with its transcript and frame."""
    if engine == "graphs":
        pytest.skip("reads the tree between steps: a static tree counts its steps ahead, per batch of rounds")
    checked = {"merges": 0}
    orig_step = beam_mod.BeamLoop.step

    def step(self):
        orig_step(self)
        K = self.K
        slots = torch.arange(K).expand(self.B, K)
        seqs = self.tree.backtrack(slots)
        for b in range(self.B):
            live = {}
            for k in range(K):
                if self.score[b, k] > -math.inf:
                    key = (tuple(seqs[b][k][0]), int(self.time[b, k]))
                    assert key not in live
                    live[key] = k
            for k in range(K):
                if self.score[b, k] == -math.inf and self._selected_ok[b, k]:
                    key = (tuple(seqs[b][k][0]), int(self.time[b, k]))
                    assert key in live  # merged into an equal transcript on the same frame
                    checked["merges"] += 1

    monkeypatch.setattr(beam_mod.BeamLoop, "step", step)
    for seed in range(4):
        m = random_model(300 + seed, V, BLANK, durations, blank_bias=1.0)
        beam_search(m, _enc(seed, 2, 8), beam=4, method=method, max_symbols=2)
    assert checked["merges"] > 0


def test_hash_collision_is_not_merged(monkeypatch):
    """With a degenerate hash (every prefix collides), merges rely on length/last token only: the
    result then differs from the reference, so the reference comparison does catch false merges (the
    tensor engine, whose hash function can be replaced; the native engine checks the same keys)."""
    m = random_model(5, V, BLANK, None, blank_bias=0.5)
    enc = _enc(5, 1, 10)
    ref = reference_beam_search(m, enc[0], beam=4, max_symbols=3)
    ok = beam_search(m, enc, beam=4, nbest=4, max_symbols=3, engine="torch")[0]
    assert _key(ok, 7) == _key(ref, 7)
    from asrdecode.transducer import beam_alsd

    monkeypatch.setattr(beam_alsd, "extend_hash", lambda h, t: torch.zeros_like(h))
    bad = beam_search(m, enc, beam=4, nbest=4, max_symbols=3, engine="torch")[0]
    assert _key(bad, 7) != _key(ref, 7)


# -- Equation 2 and 3 by hand ----------------------------------------------------------------------


@pytest.mark.parametrize("blank_scoring", ["lm_weighted", "none"])
def test_blank_scoring_by_hand(lm, blank_scoring):
    """One frame, cap 1, beam = V: every token is one finished hypothesis, scored by hand."""
    m = random_model(9, V, BLANK, None, blank_bias=0.0)
    enc = _enc(9, 1, 1)
    lam = 0.8
    hyps = beam_search(m, enc, beam=V, nbest=V, fusion=[(lm, lam)], blank_scoring=blank_scoring,
                       max_symbols=1)[0]
    assert len(hyps) == V
    with torch.no_grad():
        dec, _ = m.predict(torch.tensor([BLANK]), m.initial_state(1))
        logits = m.joint(m.project_encoder(enc[0, 0]), m.project_decoder(dec)[0])
    p = torch.softmax(logits, dim=-1).tolist()
    got = {tuple(h.tokens): h.score for h in hyps}
    for k in range(V):
        if k == BLANK:
            blank_term = (1 + lam) * math.log(p[BLANK]) if blank_scoring == "lm_weighted" else math.log(p[BLANK])
            want = blank_term + lam * lm.score_sequence([])
            assert got[()] == pytest.approx(want, abs=1e-6)
        else:
            if blank_scoring == "lm_weighted":  # ln p[k] + lam * ln((1 - p[blank]) * p_lm[k])
                want = math.log(p[k]) + lam * math.log(1 - p[BLANK]) + lam * lm.score_sequence([k])
            else:
                want = math.log(p[k]) + lam * lm.score_sequence([k])
            assert got[(k,)] == pytest.approx(want, abs=1e-6)
            assert [h.timestamps for h in hyps if h.tokens == [k]] == [[0]]


# -- API and bad input -----------------------------------------------------------------------------


def test_nbest_and_tokenizer():
    class Tok:
        def decode(self, ids):
            return "".join("abcdef"[i] for i in ids)

    m = random_model(1, V, BLANK, TDT, blank_bias=0.5)
    enc = _enc(1, 2, 6)
    one = [row[0] for row in beam_search(m, enc, beam=3, tokenizer=Tok())]
    many = beam_search(m, enc, beam=3, nbest=2, tokenizer=Tok())
    assert len(one) == 2 and all(isinstance(h.text, str) for h in one)
    assert all(len(row) <= 2 for row in many) and many[0][0].tokens == one[0].tokens
    assert all(h.durations is not None and all(d in TDT for d in h.durations) for h in one)


def test_bad_inputs(tmp_path):
    m = random_model(0, V, BLANK, None)
    enc = _enc(0, 1, 4)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=0)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=V + 1)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="beam")
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, blank_scoring="full")
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, pruning="middle")
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=2, nbest=3)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, max_symbols=0)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beta=float("nan"))
    p = tmp_path / "lm.arpa"
    p.write_text(TINY_ARPA)
    other = NGramLM.from_arpa(p, vocab_size=V + 2, blank_id=BLANK)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, fusion=[(other, 0.5)])
    nan = enc.clone()
    nan[0, 1, 2] = float("nan")
    with pytest.raises(DecodingInputError):
        beam_search(m, nan)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, torch.tensor([5]))
    with pytest.raises(DecodingInputError):
        beam_search(m, enc[0])
    with pytest.raises(DecodingInputError):
        reference_beam_search(m, enc[0], beam=0)


def test_one_shot_config_per_argument_types():
    """One-shot calls reuse the config built for the same keyword settings, never one of equal values of
    another type: beam=2.0 / True stay errors after beam=2 was searched, and the results repeat."""
    m = random_model(0, V, BLANK, None)
    enc = _enc(0, 2, 5)
    first = beam_search(m, enc, beam=2, max_symbols=3)
    for bad in (2.0, True):
        with pytest.raises(DecodingInputError, match="beam must be an int"):
            beam_search(m, enc, beam=bad, max_symbols=3)
    again = beam_search(m, enc, beam=2, max_symbols=3)
    assert [_key(row) for row in again] == [_key(row) for row in first]
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=2, max_symbols=0)


# -- streaming: chunked == whole -----------------------------------------------------------------


def _chunked(m, enc, lengths, bounds, initial=False, **kw):
    """Decode ``enc`` in chunks split at ``bounds`` (common to the batch), carrying the beam state (from
    ``initial_beam_state`` when ``initial``, else from None)."""
    settings = {k: v for k, v in kw.items() if k != "nbest"}
    state = initial_beam_state(m, enc.shape[0], enc.shape[2], **settings) if initial else None
    edges = [0, *bounds, enc.shape[1]]
    for a, b in zip(edges, edges[1:]):
        clen = (lengths - a).clamp(min=0, max=b - a)
        last = lengths <= b  # per utterance: this chunk holds its last frame
        out, state = beam_search(m, enc[:, a:b], clen, state=state, return_state=True, final=last, **kw)
    return out


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_streaming_equals_whole(lm, durations, method):
    """Random chunk boundaries (chunks of 1 frame, of 0 frames for short utterances, longer than a
    WIND window or not): the final hypotheses equal whole-utterance decoding exactly."""
    if method == "wind" and durations is not None:
        pytest.skip("WIND is RNN-T only")
    gen = torch.Generator().manual_seed(5)
    for seed in range(4):
        m = random_model(800 + seed, V, BLANK, durations, blank_bias=0.5 + 0.5 * seed)
        T = 14
        enc = _enc(seed, 3, T)
        lengths = torch.tensor([T, 9, 3])
        kw = dict(beam=3, nbest=3, method=method, max_symbols=3)
        if method == "wind":
            kw["window"] = 1 + seed
        if seed % 2:
            kw["fusion"] = [(lm, 0.5)]
        whole = beam_search(m, enc, lengths, **kw)
        for trial in range(3):
            k = int(torch.randint(1, 6, (1,), generator=gen))
            bounds = sorted(set(torch.randint(1, T, (k,), generator=gen).tolist()))
            got = _chunked(m, enc, lengths, bounds, initial=trial == 1, **kw)
            assert [_key(r, 9) for r in got] == [_key(r, 9) for r in whole], (seed, bounds)


def test_streaming_pause_is_needed():
    """Without the pause (every chunk marked final) ALSD and WIND chunked decoding differ from
    whole-utterance decoding: the test above does test the pause."""
    m = random_model(801, V, BLANK, None, blank_bias=1.0)
    enc = _enc(1, 2, 12)
    lengths = torch.tensor([12, 12])
    for kw in (dict(method="alsd"), dict(method="wind", window=4)):
        whole = beam_search(m, enc, lengths, beam=3, nbest=3, **kw)
        state, diff = None, False
        for a in range(0, 12, 3):
            out, state = beam_search(m, enc[:, a : a + 3], torch.tensor([3, 3]), beam=3, nbest=3, state=state,
                                     return_state=True, **kw)
        diff = [_key(r, 9) for r in out] != [_key(r, 9) for r in whole]
        assert diff, kw


def test_initial_beam_state_checks(lm):
    m = random_model(0, V, BLANK, None)
    D = _enc(0, 2, 4).shape[2]
    st = initial_beam_state(m, 2, D, beam=3, fusion=[(lm, 0.5)])
    assert st.offset.tolist() == [0, 0]
    with pytest.raises(DecodingInputError):  # made for beam 3
        beam_search(m, _enc(0, 2, 4), beam=2, fusion=[(lm, 0.5)], state=st)
    for bad in (dict(batch=-1), dict(batch=1.5), dict(encoder_dim=0), dict(encoder_dim=D + 1), dict(beam=0),
                dict(method="x"), dict(nbest=2), dict(return_state=True)):
        args = dict(batch=2, encoder_dim=D) | bad
        with pytest.raises(DecodingInputError):
            initial_beam_state(m, args.pop("batch"), args.pop("encoder_dim"), **args)


def test_streaming_state_checks():
    m = random_model(0, V, BLANK, None)
    enc = _enc(0, 2, 4)
    _, st = beam_search(m, enc, beam=2, return_state=True, final=False)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=3, state=st)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc[:1], beam=2, state=st)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=2, method="aes", state=st)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, beam=2, state=st, final=[True, False, True])
    # per-utterance final flags, timestamps in global frames
    out, st2 = beam_search(m, enc, beam=2, state=st, final=[True, True], return_state=True)
    assert all(0 <= x < 8 for row in out for h in row for x in h.timestamps)
    assert st2.offset.tolist() == [8, 8] and st2.received.tolist() == [8, 8]
