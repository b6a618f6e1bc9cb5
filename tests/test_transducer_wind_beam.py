"""WIND beam search: batched ``beam_search(method="wind")`` against its per-utterance reference,
window 1 against AES++, beam 1, scores against the model, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.lm import NGramLM
from asrdecode.transducer import greedy
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search

from transducer_models import random_model

V, BLANK = 6, 5


def _enc(seed: int, B: int, T: int) -> torch.Tensor:
    return torch.randn(B, T, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _key(hyps, digits: int = 8):
    return [(h.tokens, h.timestamps, h.durations, round(h.score, digits)) for h in hyps]


@pytest.mark.parametrize("window", [1, 2, 3, 8])
def test_matches_reference(window):
    for seed in range(6):
        # LSTM only: a stateless model makes exactly tied scores (the order of equal scores is free)
        m = random_model(400 + seed, V, seed % V, None, blank_bias=0.5 + 0.5 * (seed % 3), pred_layers=1 + seed % 2)
        enc = _enc(seed, 3, 9)
        lengths = torch.tensor([9, 4, 7])
        for beam, cap, beta in ((2, 3, 0.0), (4, 1, 0.3), (V, 5, 0.0)):
            kw = dict(beam=beam, window=window, max_symbols_per_frame=cap, beta=beta)
            res = beam_search(m, enc, lengths, method="wind", nbest=beam, **kw)
            for b in range(3):
                ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
                assert sorted(_key(res[b], 7)) == sorted(_key(ref, 7)), (seed, b, kw)
                assert len({tuple(h.tokens) for h in res[b]}) == len(res[b])  # merged
                assert all(x.score >= y.score for x, y in zip(res[b], res[b][1:]))


def test_window_one_is_aes():
    """Window 1: Equation 1 is the per-frame distribution, so WIND beam is AES++ (no fusion), the
    frame-by-frame search that also expands only the earliest frame's hypotheses, step for step."""
    for seed in range(6):
        m = random_model(500 + seed, V, seed % V, None, blank_bias=0.5, kind="lstm" if seed % 2 else "stateless",
                         pred_layers=2)
        enc = _enc(seed, 3, 10)
        lengths = torch.tensor([10, 6, 0])
        for beam, cap in ((1, 2), (3, 3), (5, 4)):
            w = beam_search(m, enc, lengths, beam=beam, nbest=beam, method="wind", window=1, max_symbols_per_frame=cap)
            a = beam_search(m, enc, lengths, beam=beam, nbest=beam, method="aes", max_symbols_per_frame=cap)
            if beam == 1:  # nbest 1: one hypothesis per utterance
                w, a = [[h] for h in w], [[h] for h in a]
            assert [_key(r, 12) for r in w] == [_key(r, 12) for r in a]


def test_beam1_window1_is_greedy():
    for seed in range(4):
        m = random_model(600 + seed, V, BLANK, None, blank_bias=0.0)
        enc = _enc(seed, 2, 9)
        g = greedy(m, enc, max_symbols=2)
        w = beam_search(m, enc, beam=1, method="wind", window=1, max_symbols_per_frame=2)
        assert _key(w) == _key(g)


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
                h = beam_search(m, enc, beam=1, method="wind", window=window, max_symbols_per_frame=cap)[0]
                want = _alignment_logprob(m, enc[0], h.tokens, h.timestamps, cap)
            assert h.score == pytest.approx(want, abs=1e-9)
            assert h.timestamps == sorted(h.timestamps)
    m = random_model(1, V, BLANK, None, blank_bias=30.0)
    h = beam_search(m, _enc(1, 1, 7), beam=1, method="wind", window=3)[0]
    assert h.tokens == [] and h.score < 0


def test_batch_invariance():
    m = random_model(11, V, BLANK, None, blank_bias=0.5)
    enc = _enc(3, 4, 10)
    lengths = torch.tensor([10, 0, 4, 7])
    kw = dict(beam=3, method="wind", window=3, nbest=3, max_symbols_per_frame=4)
    full = beam_search(m, enc, lengths, **kw)
    for b in range(4):
        alone = beam_search(m, enc[b : b + 1, : max(int(lengths[b]), 1)], lengths[b : b + 1], **kw)[0]
        assert _key(alone, 9) == _key(full[b], 9)
    assert full[1][0].tokens == [] and full[1][0].score == 0.0


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
        beam_search(m, enc, method="wind", pruning="early")
    p = tmp_path / "lm.arpa"
    p.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t<unk>\n-99\t<s>\n-0.5\t</s>\n\n\\end\\\n")
    lm = NGramLM.from_arpa(p, vocab_size=V, blank_id=BLANK)
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="wind", fusion=[(lm, 0.5)])
    with pytest.raises(DecodingInputError):
        beam_search(m, enc, method="wind", beam=0)
    assert math.isfinite(beam_search(m, enc, method="wind", window=100)[0].score)
