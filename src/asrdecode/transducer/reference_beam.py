"""Per-utterance reference beam searches for RNN-T and TDT (ALSD and mAES): the oracles.

Readable, one utterance, one hypothesis object per beam entry, transcripts compared as Python
tuples (no hashes). The batched ALSD++ / AES++ of :mod:`asrdecode.transducer.beam` must return
the same hypotheses with the same scores, utterance by utterance.

The search (shared by both methods; "alsd" and "aes" differ only in which hypotheses expand):

* A hypothesis has a score, a frame ``t``, a count of labels emitted on its current frame, its
  labels (with emission frames and TDT durations), a prediction-network state and fusion states.
  It is *active* while ``t < length``; finished hypotheses keep ``t = length``.
* One step: every expanding hypothesis evaluates the joint at its frame and proposes one
  candidate per (token, duration) pair: ``C = V`` candidates for RNN-T, ``V * len(durations)``
  for TDT. Non-expanding hypotheses propose themselves unchanged (a "carry" candidate).
  ALSD (alignment-length synchronous, Saon et al.): every active hypothesis expands.
  AES (adaptive expansion, frame synchronous, Kim et al.): only the active hypotheses on the
  earliest frame of the beam expand; the others wait, and a frame's expansions go on until no
  hypothesis is left on it (so the number of expansions per frame adapts).
* Time: a blank advances ``max(d, 1)`` frames (RNN-T: 1), a label advances ``d`` (RNN-T: 0).
  A label that makes ``max_symbols`` labels on one frame also advances one frame (no score),
  exactly as greedy decoding's forced advance. With ``beam=1`` and no fusion both methods take
  greedy's decisions (see tests).
* Scores (log, natural): acoustic ``log p[k] (+ log p_dur[d])`` plus fusion, ``lam`` being the
  sum of the fusion weights and ``lm[k]`` the weighted fusion score of token k:
  ``blank_scoring="none"`` (Eq. 2 of the ALSD++ paper): label ``log p[k] + lm[k]``, blank
  ``log p[blank]``; ``"lm_weighted"`` (Eq. 3): label ``log p[k] + lam * log(1 - p[blank]) + lm[k]``,
  blank ``(1 + lam) * log p[blank]``. Every label also gets the insertion bonus ``beta``.
* Selection: ``pruning="late"`` keeps the ``beam`` best candidates by fused score;
  ``"early"`` first keeps each hypothesis's ``beam`` best candidates by acoustic score, then
  the ``beam`` best of those by fused score.
* Merging after selection: candidates with the same transcript and the same frame (and the
  same active/finished status, implied) are merged into the best of them, whose score becomes
  the log-sum-exp of theirs.
* At the end, the fusion end-of-sentence score (weighted) is added; hypotheses are returned
  best first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..configs import TransducerBeamConfig, takes_config
from ..errors import check_emissions, check_finite
from ..fusion import FusionModel, FusionScorer, weigh_float
from ..results import Hypothesis
from . import _checks, blank_scoring
from ._checks import MISSING, check_beam_args, check_encoder_output, check_joint_logits, deprecated_max_symbols
from .durations import DurationRule
from .model import TransducerModel, check_model

__all__ = ["reference_beam_search"]



@dataclass
class _Hyp:
    score: float
    t: int
    symbols: int
    tokens: tuple[int, ...]
    stamps: tuple[int, ...]
    durs: tuple[int, ...]
    pred_state: Any
    dec_proj: torch.Tensor
    lm_states: torch.Tensor  # [1, M]


def logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


@dataclass
class _Search:
    """The fixed inputs of one utterance's search: the model, its encoder output and the options."""
    model: TransducerModel
    enc_proj: torch.Tensor  # [T, H]: the projected encoder output
    scorer: FusionScorer
    beam: int
    method: str
    blank_scoring: str
    pruning: str
    max_symbols: int | None
    beta: float

    def __post_init__(self) -> None:
        self.V, self.blank = self.model.vocab_size, self.model.blank_id
        self.durations = self.model.durations
        self.rule = DurationRule(self.durations)
        self.dvals = [1] if self.durations is None else list(self.durations)
        self.lam = sum(self.scorer.weights)
        self.T = self.enc_proj.shape[0]
        self.dev = self.enc_proj.device


@torch.inference_mode()
@takes_config(TransducerBeamConfig)
def reference_beam_search(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    *,
    config: TransducerBeamConfig | None = None,
    fusion: Sequence[tuple[FusionModel, float]] = (),
    max_symbols_per_frame: Any = MISSING,
    **settings: Any,
) -> list[Hypothesis]:
    """Beam-search one utterance, encoder output ``[T, D]``; returns its hypotheses, best first.

    See the module docstring for the exact search; ``config`` and / or its fields as in
    :func:`asrdecode.transducer.beam.beam_search` (``method`` "alsd" or "aes"; ``nbest``, ``window``,
    ``acceleration`` and ``engine`` are not used).
    """
    cfg = TransducerBeamConfig.build(config, deprecated_max_symbols(settings, max_symbols_per_frame),
                                     caller="reference_beam_search")
    beam, method, blank_scoring, pruning = cfg.beam, cfg.method, cfg.blank_scoring, cfg.pruning
    max_symbols, beta = cfg.max_symbols, cfg.beta
    check_model(model)
    check_emissions("encoder_output", encoder_output, ndim=2)
    check_encoder_output(model, encoder_output)
    check_finite("encoder_output", encoder_output)
    check_beam_args(model, beam, method, blank_scoring, pruning, max_symbols, 1)
    scorer = FusionScorer(fusion, model.vocab_size, model.blank_id)
    s = _Search(model, model.project_encoder(encoder_output), scorer, beam, method, blank_scoring, pruning,
                max_symbols, beta)
    hyps = [_start(s, encoder_output.dtype)]
    while any(h.t < s.T for h in hyps):
        cands = _candidates(s, hyps)
        cands.sort(key=lambda c: -c[0])
        chosen = [c for c in cands[:beam] if c[0] > -math.inf]
        hyps = _merge_equal(_extend(s, hyps, chosen))
    out = _finish(s, hyps)
    s.scorer.check_scores()  # (a user fusion model's NaN / +inf)
    return out


def _start(s: _Search, dtype: torch.dtype) -> _Hyp:
    """The empty hypothesis: the prediction network fed blank (start of sequence), frame 0."""
    state = s.model.initial_state(1, device=s.dev, dtype=dtype)
    dec, state = s.model.predict(torch.tensor([s.blank], device=s.dev), state)
    return _Hyp(0.0, 0, 0, (), (), (), state, s.model.project_decoder(dec)[0], s.scorer.initial(1, s.dev))


def _candidates(s: _Search, hyps: list[_Hyp]) -> list[tuple[float, int, int, int]]:
    """Every expansion of this step: ``(fused score, hyp index, token (-1: carry), duration idx)``.

    ALSD expands every unfinished hypothesis, AES those on the smallest frame; the others are carried."""
    tmin = min(h.t for h in hyps if h.t < s.T)
    cands: list[tuple[float, int, int, int]] = []
    for i, h in enumerate(hyps):
        expanding = h.t < s.T and (s.method == "alsd" or h.t == tmin)
        if not expanding:
            cands.append((h.score, i, -1, 0))
            continue
        mine = _expansions(s, h)
        if s.pruning == "early":
            mine.sort(key=lambda c: -c[0])
            mine = mine[:s.beam]
        cands.extend((h.score + fused, i, k, j) for _, fused, k, j in mine)
    return cands


def _expansions(s: _Search, h: _Hyp) -> list[tuple[float, float, int, int]]:
    """``(acoustic, fused, token, duration idx)`` of every token and duration from ``h`` on its frame."""
    V, blank, lam = s.V, s.blank, s.lam
    logits = s.model.joint(s.enc_proj[h.t], h.dec_proj).double()
    check_joint_logits(logits, s.V)
    lp_tok_t = torch.log_softmax(logits[:V], dim=-1)
    lp_tok = lp_tok_t.tolist()
    lp_dur = [0.0] if s.durations is None else torch.log_softmax(logits[V:], dim=-1).tolist()
    lm = s.scorer.advance(h.lm_states, dtype=torch.float64)[0][0].tolist()
    log_nonblank = float(blank_scoring.log_nonblank(lp_tok_t, blank)) if lam != 0.0 else 0.0
    mine = []
    for k in range(V):
        for j in range(len(s.dvals)):
            acoustic = lp_tok[k] + lp_dur[j]
            if k == blank:
                fused = acoustic + (weigh_float(lp_tok[blank], lam) if s.blank_scoring == "lm_weighted" else 0.0)
            else:
                fused = (acoustic + lm[k] + (weigh_float(log_nonblank, lam) if s.blank_scoring == "lm_weighted" else 0.0)
                         + s.beta)
            mine.append((acoustic, fused, k, j))
    return mine


def _extend(s: _Search, hyps: list[_Hyp], chosen: list[tuple[float, int, int, int]]) -> list[_Hyp]:
    """The chosen expansions as hypotheses (in the order of ``chosen``): carried, blank (time moves) or
    label (prediction network and fusion states advance; the symbol cap may move time)."""
    new: list[_Hyp] = []
    for score, i, k, j in chosen:
        h = hyps[i]
        if k == -1:
            new.append(_Hyp(score, h.t, h.symbols, h.tokens, h.stamps, h.durs, h.pred_state, h.dec_proj, h.lm_states))
            continue
        d = s.rule.label_advance(s.dvals[j])  # the label's duration (0 for RNN-T)
        if k == s.blank:
            t = h.t + s.rule.blank_advance(d)
            new.append(_Hyp(score, min(t, s.T), 0, h.tokens, h.stamps, h.durs, h.pred_state, h.dec_proj,
                            h.lm_states))
            continue
        symbols = h.symbols + 1 if d == 0 else 0
        t = h.t + d
        if s.max_symbols is not None and d == 0 and symbols >= s.max_symbols:
            t, symbols = t + 1, 0
        if symbols > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()
        dec, st = s.model.predict(torch.tensor([k], device=s.dev), h.pred_state)
        lm_next = s.scorer.advance(h.lm_states)[1][:, k]  # [1, M]
        new.append(_Hyp(score, min(t, s.T), symbols, h.tokens + (k,), h.stamps + (h.t,), h.durs + (d,),
                        st, s.model.project_decoder(dec)[0], lm_next))
    return new


def _merge_equal(new: list[_Hyp]) -> list[_Hyp]:
    """Equal transcripts on the same frame merged into the best of them (log-sum-exp of scores)."""
    merged: dict[tuple, _Hyp] = {}
    for h in new:  # ``new`` is sorted best first, so the first of a group is its best
        key = (h.tokens, h.t)
        if key in merged:
            merged[key].score = logaddexp(merged[key].score, h.score)
        else:
            merged[key] = h
    return list(merged.values())


def _finish(s: _Search, hyps: list[_Hyp]) -> list[Hypothesis]:
    """The fusion end-of-sentence scores added; the hypotheses best first."""
    out = []
    for h in hyps:
        final = float(s.scorer.final(h.lm_states, dtype=torch.float64)[0]) if s.scorer.num_models else 0.0
        out.append(Hypothesis(tokens=list(h.tokens), timestamps=list(h.stamps), score=h.score + final,
                              durations=list(h.durs) if s.durations is not None else None))
    out.sort(key=lambda x: -x.score)
    return out
