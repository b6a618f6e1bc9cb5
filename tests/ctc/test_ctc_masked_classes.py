"""CTC emissions with classes of probability 0 (``-inf`` log-probs: a masked vocabulary, suppressed tokens).

Every CTC decoder takes them: no hypothesis emits a class on a frame where it is ``-inf``, the engines
agree with each other and with the oracle, and a masked class decodes as one of vanishing probability
(a floor of -1e4) does, less the hypotheses that only the floor made possible. NaN, ``+inf`` and a frame
whose classes are all ``-inf`` stay errors with a message that says which.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.errors import DecodingInputError
from test_ctc_helpers import TableBigram, mask_classes, peaky_log_probs, random_lengths

FLOOR = -1e4  # far below any real path: exp(FLOOR) is 0 in float32 and float64


def _masked(seed: int, batch: int, frames: int, vocab: int, blank: int, rate: float,
            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return mask_classes(peaky_log_probs(seed, batch, frames, vocab, blank, peak=6.0, dtype=dtype), seed, rate)


def _assert_possible(lp: torch.Tensor, hyps: list) -> None:
    """Each hypothesis of utterance ``b`` has a finite score and emits each token on a frame where its
    log-prob in ``lp [B, T, V]`` is finite."""
    for b, nbest in enumerate(hyps):
        for h in nbest:
            assert math.isfinite(h.score), (b, h)
            for tok, t in zip(h.tokens, h.timestamps):
                assert lp[b, t, tok] > -math.inf, (b, tok, t)


def _keys(hyps: list) -> list:
    return [[(h.tokens, h.timestamps, round(h.score, 3)) for h in nbest] for nbest in hyps]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 3), frames=st.integers(0, 12), vocab=st.integers(3, 7),
       beam=st.integers(1, 6), rate=st.sampled_from([0.2, 0.5, 0.8]), float32=st.booleans(),
       token_beam=st.sampled_from([None, 2]), collapse=st.sampled_from([None, 0.9]),
       fusion=st.sampled_from(["none", "bigram", "negative-bigram"]))
def test_prefix_beam_engines_agree_and_never_emit_a_masked_class(seed, batch, frames, vocab, beam, rate, float32,
                                                                 token_beam, collapse, fusion):
    blank = seed % vocab
    lp = _masked(seed, batch, frames, vocab, blank, rate, torch.float32 if float32 else torch.float64)
    lens = random_lengths(seed, batch, frames)
    models = {"none": [], "bigram": [(TableBigram(vocab, blank, seed=seed), 0.6)],
              "negative-bigram": [(TableBigram(vocab, blank, seed=seed), -0.4)]}[fusion]
    kw = dict(beam=beam, nbest=beam, token_beam=token_beam, blank_collapse=collapse, fusion=models)
    ref = ctc.reference_beam_search(lp, lens, blank, **kw)
    _assert_possible(lp, ref)
    tol = 1e-3 if float32 else 1e-4
    for engine in ("native", "torch"):
        got = ctc.beam_search(lp, lens, blank, engine=engine, **kw)
        assert [[(h.tokens, h.timestamps) for h in n] for n in got] == [[(h.tokens, h.timestamps) for h in n]
                                                                        for n in ref], engine
        for g, w in zip(got, ref):
            assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=tol, rel=tol), engine


@pytest.mark.parametrize("engine", ["native", "torch"])
@pytest.mark.parametrize("seed", range(6))
def test_a_masked_class_decodes_as_a_vanishing_one(engine, seed):
    """-inf against a floor of -1e4: the same hypotheses and scores, once the floor's extra hypotheses
    (paths through a floored class, scored below -1e3) are left out."""
    blank, vocab = 0, 6
    lp = _masked(seed, 2, 15, vocab, blank, 0.5)
    lens = torch.tensor([15, 9])
    floored = lp.masked_fill(torch.isneginf(lp), FLOOR)
    kw = dict(beam=8, nbest=8, engine=engine)
    want = [[h for h in nbest if h.score > -1e3] for nbest in ctc.beam_search(floored, lens, blank, **kw)]
    got = ctc.beam_search(lp, lens, blank, **kw)
    assert _keys(got) == _keys(want)
    assert all(len(n) >= 1 for n in got)


def test_greedy_and_blank_collapse_skip_masked_classes():
    lp = torch.log_softmax(torch.tensor([[[0.0, 5.0, 1.0], [0.0, 5.0, 1.0], [3.0, 0.0, 1.0]]]), -1)
    lp[0, 1, 1] = -math.inf  # the best class of frame 1, masked
    lp = lp.log_softmax(-1)
    hyp = ctc.greedy(lp, None, 0)[0]
    assert hyp.tokens == [1, 2] and hyp.timestamps == [0, 1]
    assert hyp.score == pytest.approx(float(lp[0, 0, 1] + lp[0, 1, 2] + lp[0, 2, 0]))
    masked_blank = lp.clone()
    masked_blank[0, :, 0] = -math.inf  # blank masked everywhere: nothing collapses
    masked_blank = masked_blank.log_softmax(-1)
    collapsed, lengths, _ = ctc.blank_collapse(masked_blank, None, 0, threshold=0.5)
    assert lengths.tolist() == [3] and torch.equal(collapsed, masked_blank)


@pytest.mark.parametrize("name,value,message", [("nan", math.nan, r"NaN or \+inf"), ("+inf", math.inf, r"NaN or \+inf"),
                                                ("frame", -math.inf, "all -inf")])
def test_bad_values_are_named_by_every_ctc_decoder(name, value, message):
    lp = _masked(1, 2, 6, 4, 0, 0.3, torch.float32)
    bad = lp.clone()
    if name == "frame":
        bad[1, 2] = value
    else:
        bad[1, 2, 3] = value
    decoders = {
        "greedy": lambda x: ctc.greedy(x, None, 0),
        "collapse": lambda x: ctc.blank_collapse(x, None, 0),
        "beam native": lambda x: ctc.beam_search(x, None, 0, engine="native"),
        "beam torch": lambda x: ctc.beam_search(x, None, 0, engine="torch"),
        "reference": lambda x: ctc.reference_beam_search(x, None, 0),
        "stream": lambda x: (lambda d: d.advance(d.init_state(x.shape[0], vocab_size=4), x))(ctc.CTCBeamDecoder(0)),
        "logits": lambda x: ctc.greedy(x, None, 0, log_softmax=True),
    }
    for what, decode in decoders.items():
        decode(lp)  # the masked emissions are fine
        with pytest.raises(DecodingInputError, match=message):
            decode(bad)
            pytest.fail(f"{what} took {name}")
        decode(bad[:1])  # utterance 1 holds the bad value
    lens = torch.tensor([6, 2])  # the bad frame is padding: not inspected
    assert ctc.beam_search(bad, lens, 0)[1] and ctc.greedy(bad, lens, 0)[1].tokens is not None
