"""A fusion model that returns NaN or +inf scores is a named error (FusionScoreError) in every search.

Before, a user fusion model's NaN gave silent finite results on the native engine (a NaN candidate never
compares above another) and in the CTC oracle, one empty ``-inf`` hypothesis on the CTC tensor engine,
``+inf`` scores for a +inf, and the transducer tensor engine blamed the joint (``NonFiniteJointError``).
A ``-inf`` (a forbidden token) stays allowed. The library's models check their tables when they are built;
a user model's scores are watched as they are read, with no host read per step.
"""

from __future__ import annotations

import math

import pytest
import torch

from asrdecode import ctc
from asrdecode.fusion import FusionScoreError, FusionScorer, scores_checked
from asrdecode.lm import NGramLM
from asrdecode.native import _lib
from asrdecode.transducer.beam import BeamSearchDecoder, beam_search
from asrdecode.transducer.reference_beam import reference_beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from test_ctc_helpers import TableBigram, peaky_log_probs
from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model

ENGINES = ["torch", pytest.param("native", marks=pytest.mark.skipif(not _lib.available(),
                                                                     reason="native engine unavailable"))]


def _broken(vocab: int, blank: int, where: str, value: float) -> TableBigram:
    """A table bigram whose labels score ``value`` (``where="advance"``; a search that reads none of them, as
    early pruning may, has nothing to report) or whose end of sentence does (``"final"``), from every state."""
    m = TableBigram(vocab, blank, seed=3)
    if where == "advance":
        m.scores[:, [v for v in range(vocab) if v != blank]] = value
    else:
        m.eos[:] = value
    return m


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", ["advance", "final"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_ctc_beam_search(engine, where, value):
    lp = peaky_log_probs(1, 2, 8, 5, 0, peak=4.0, dtype=torch.float32)
    fusion = [(_broken(5, 0, where, value), 0.5)]
    with pytest.raises(FusionScoreError, match=r"fusion\[0\] \(TableBigram\) returned NaN or \+inf"):
        ctc.beam_search(lp, None, 0, beam=3, fusion=fusion, engine=engine)
    dec = ctc.CTCBeamDecoder(0, beam=3, fusion=fusion, engine=engine)
    with pytest.raises(FusionScoreError):  # a stream: by the chunk that reads it, or at the end
        dec.finalize(dec.advance(dec.init_state(2, vocab_size=5), lp))
    with pytest.raises(FusionScoreError):
        ctc.reference_beam_search(lp, None, 0, beam=3, fusion=fusion)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
@pytest.mark.parametrize("pruning", ["late", "early"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_transducer_beam_searches(engine, method, pruning, value):
    m = random_model(1, FUSION_V, FUSION_BLANK, None).float()
    enc = random_encoder(1, 2, 6).float()
    fusion = [(_broken(FUSION_V, FUSION_BLANK, "advance", value), 0.5)]
    kw = dict(beam=2, method=method, fusion=fusion, pruning=pruning)
    with pytest.raises(FusionScoreError):
        beam_search(m, enc, engine=engine, **kw)
    dec = BeamSearchDecoder(m, engine=engine, **kw)
    with pytest.raises(FusionScoreError):
        dec.advance(dec.init_state(2), enc, final=True)
    oracle = reference_wind_beam_search if method == "wind" else reference_beam_search
    extra = {} if method == "wind" else {"method": method}
    with pytest.raises(FusionScoreError):
        oracle(m, enc[0], beam=2, fusion=fusion, pruning=pruning, **extra)


@pytest.mark.parametrize("engine", ENGINES)
def test_transducer_final_scores(engine):
    m = random_model(1, FUSION_V, FUSION_BLANK, None).float()
    enc = random_encoder(1, 2, 6).float()
    with pytest.raises(FusionScoreError):
        beam_search(m, enc, beam=2, fusion=[(_broken(FUSION_V, FUSION_BLANK, "final", math.nan), 0.5)], engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_forbidden_token_is_no_error_and_the_scorer_resets(engine):
    """-inf scores pass; after an error, the same decoder decodes a good call (the watch is reset)."""
    lp = peaky_log_probs(2, 2, 8, 5, 0, peak=4.0, dtype=torch.float32)
    model = TableBigram(5, 0, seed=3)
    model.scores[:, 2] = -math.inf  # token 2 forbidden
    hyps = ctc.beam_search(lp, None, 0, beam=3, fusion=[(model, 0.5)], engine=engine)
    assert all(2 not in h.tokens and math.isfinite(h.score) for row in hyps for h in row)
    m = random_model(1, FUSION_V, FUSION_BLANK, None).float()
    enc = random_encoder(1, 2, 6).float()
    table = TableBigram(FUSION_V, FUSION_BLANK, seed=3)
    dec = BeamSearchDecoder(m, beam=2, fusion=[(table, 0.5)], engine=engine)
    good = dec.decode(enc)
    table.scores[:, 2] = math.nan
    with pytest.raises(FusionScoreError):
        dec.decode(enc)
    table.scores[:, 2] = TableBigram(FUSION_V, FUSION_BLANK, seed=3).scores[:, 2]
    assert [[h.tokens for h in row] for row in dec.decode(enc)] == [[h.tokens for h in row] for row in good]


def test_the_library_models_are_not_watched(tmp_path):
    """Their tables are checked when built: no watch, so no host read at the end of a call."""
    from test_ctc_helpers import random_token_arpa

    path = tmp_path / "lm.arpa"
    path.write_text(random_token_arpa(0, 5, 0, order=2))
    lm = NGramLM.from_arpa(path, vocab_size=5, blank_id=0)
    assert scores_checked(lm) and not scores_checked(TableBigram(5, 0))
    scorer = FusionScorer([(lm, 0.5)], 5, 0)
    scorer.advance(scorer.initial(3))
    assert scorer._bad is None
    scorer.check_scores()  # nothing to read


@pytest.mark.slow
@pytest.mark.parametrize("search", ["ctc", "alsd"])
def test_the_watch_reports_from_compiled_rounds(search):
    """acceleration="compile": a watched model's scores are read inside compiled rounds (pure rounds: their state
    written back outside the compiled code), and the flag they set still reaches the end of the call, on the
    checked first call and on a later one that runs the verified compiled rounds alone; a healthy model's
    compiled results equal eager ones."""
    from asrdecode import accel

    accel.ROUND_CHECKS.clear()
    if search == "ctc":
        lp = peaky_log_probs(4, 2, 8, 5, 0, peak=4.0, dtype=torch.float32)
        table = TableBigram(5, 0, seed=3)
        dec = ctc.CTCBeamDecoder(0, beam=3, fusion=[(table, 0.5)], engine="torch", acceleration="compile")
        eager = ctc.CTCBeamDecoder(0, beam=3, fusion=[(table, 0.5)], engine="torch")
        run, want = (lambda: dec.decode(lp)), (lambda: eager.decode(lp))
    else:
        m = random_model(1, FUSION_V, FUSION_BLANK, None).float()
        enc = random_encoder(1, 2, 6).float()
        table = TableBigram(FUSION_V, FUSION_BLANK, seed=3)
        dec = BeamSearchDecoder(m, beam=2, fusion=[(table, 0.5)], engine="torch", acceleration="compile")
        eager = BeamSearchDecoder(m, beam=2, fusion=[(table, 0.5)], engine="torch")
        run, want = (lambda: dec.decode(enc)), (lambda: eager.decode(enc))
    keep = table.scores.clone()
    good = [[h.tokens for h in row] for row in want()]
    table.scores[:, 2] = math.nan
    with pytest.raises(FusionScoreError):
        run()  # the first call: each compiled round checked against eager
    assert accel.ROUND_CHECKS and all(accel.ROUND_CHECKS.values()), "no compiled round was run, or it was rejected"
    with pytest.raises(FusionScoreError):
        run()  # the verified compiled rounds alone
    table.scores.copy_(keep)
    assert [[h.tokens for h in row] for row in run()] == good
