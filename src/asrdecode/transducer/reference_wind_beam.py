"""Per-utterance reference of WIND beam search for RNN-T (Algorithm 3 and Equation 1 of the WIND paper),
the oracle of ``beam_search(..., method="wind")`` in :mod:`asrdecode.transducer.beam`.

The search keeps ``t2hyps``: frame -> the hypotheses whose next frame to read is that frame, each
frame's list holding at most ``beam`` hypotheses (a hypothesis is *finished* at ``t = T``). One step:

1. pop the hypotheses of the smallest pending frame ``t0 < T`` (the other frames wait);
2. ``recombine_prune_prefix_search`` (the paper's line 8; recombination and pruning already hold
   for every frame's list, see 5.): for every pair (A, B) of popped hypotheses where B's transcript
   is A's plus one label ``v``, B's score becomes ``logaddexp(B, A + score of emitting v from A on
   frame t0)`` (both computed with the scores before this step) and A is removed, as the paper
   says (mAES's prefix search, Kim et al. Algorithm 1 lines 5-7, adds the mass without removing A;
   keeping A would count the paths "A, then v on t0" twice, because A's own expansion proposes them
   again). The pair is only formed when A may still emit on ``t0`` (A's labels on ``t0`` + 1 below
   ``max_symbols``);
3. each remaining hypothesis reads the window ``t0 .. t0 + n - 1``, ``n = min(window, T - t0)``,
   and scores Equation 1 in log space (``lp[j]`` the log-softmax at frame ``t0 + j``):

   - label ``v`` first emitted on frame ``t0 + j`` (blanks on the frames before it):
     ``sum_{i < j} lp[i][blank] + lp[j][v]``; the hypothesis moves to frame ``t0 + j``;
   - blank (blanks on the whole window): ``sum_{i < n} lp[i][blank]``; it moves to ``t0 + n``;

   with shallow fusion every frame's terms get the fusion terms of the ALSD++ paper (``lam`` the sum of
   the fusion weights, ``lm[v]`` the weighted fusion score of ``v`` after the hypothesis's labels):
   ``blank_scoring="lm_weighted"`` (Eq. 3) makes a blank frame ``(1 + lam) * lp[i][blank]`` and a label
   ``lp[j][v] + lam * log(1 - p[j][blank]) + lm[v]``; ``"none"`` (Eq. 2) adds ``lm[v]`` to labels
   only. Every label also gets the bonus ``beta``. So the window regroups the frame-by-frame terms
   and window 1 is the frame-by-frame search;
4. each hypothesis keeps its ``beam`` best expansions (the paper's line 13, ``top_expansions_for_each_b``):
   ``pruning="late"`` by the fused score, ``"early"`` by the acoustic score (Equation 1 alone); with
   ``expansion_gamma`` set (off by default, as in the paper), only those of them within
   ``expansion_gamma`` of the best one by that same score (the expansion threshold of mAES, Kim et
   al. 2020: fewer hypotheses to extend, fewer prediction-network and joint calls);
5. every expansion goes to the list of its frame; each receiving frame's list (the hypotheses it
   already held plus the new ones) is recombined (equal transcripts merged into the best of them,
   whose score becomes the log-sum-exp of theirs) and pruned to its ``beam`` best.

Safeguard against staying on one frame (the paper leaves it to its code): a label that makes
``max_symbols`` labels on its frame also advances one frame (no score), as the per-frame
symbol cap of greedy decoding and of ALSD++ / AES++.

At the end the fusion end-of-sentence scores are added to the finished hypotheses (``t2hyps[T]``),
returned best first.

Difference from the paper's Algorithm 3: the paper appends to a frame's list without bound and
recombines and prunes it when the frame is popped; here a list is recombined and pruned whenever
expansions arrive (so it never holds more than ``beam``: the batched search has ``(window + 1) *
beam`` fixed slots). Both keep the same ``beam`` best, except when an expansion pruned on arrival
would later have been merged with an equal transcript arriving from another frame. TDT models are
not supported (the window is defined for RNN-T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..configs import TransducerBeamConfig, takes_config
from ..errors import check_emissions, check_finite
from ..fusion import FusionModel, FusionScorer, weigh, weigh_float
from ..results import Hypothesis
from .blank_scoring import log_nonblank
from .model import TransducerModel, check_model
from . import _checks
from ._checks import (MISSING, check_beam_args, check_encoder_output, check_joint_logits, check_window,
                      deprecated_max_symbols)
from .reference_beam import logaddexp

__all__ = ["reference_wind_beam_search", "check_window"]


@dataclass
class _Hyp:
    score: float
    t: int
    symbols: int  # labels emitted on frame ``t`` so far
    tokens: tuple[int, ...]
    stamps: tuple[int, ...]
    pred_state: Any
    dec_proj: torch.Tensor
    lm_states: torch.Tensor  # [1, M]


def _recombine_prune(hyps: list[_Hyp], beam: int) -> list[_Hyp]:
    """Equal transcripts merged into the best of them (log-sum-exp of the scores), the ``beam`` best kept."""
    merged: dict[tuple[int, ...], _Hyp] = {}
    for h in sorted(hyps, key=lambda x: -x.score):  # best first: the first of a group is its best
        if h.tokens in merged:
            merged[h.tokens].score = logaddexp(merged[h.tokens].score, h.score)
        else:
            merged[h.tokens] = _Hyp(h.score, h.t, h.symbols, h.tokens, h.stamps, h.pred_state, h.dec_proj, h.lm_states)
    return sorted(merged.values(), key=lambda x: -x.score)[:beam]


@dataclass
class _Search:
    """The fixed inputs of one utterance's search: the model, its encoder output and the options."""
    model: TransducerModel
    enc_proj: torch.Tensor  # [T, H]: the projected encoder output
    scorer: FusionScorer
    beam: int
    window: int
    blank_scoring: str
    pruning: str
    cap: int | None  # max_symbols
    beta: float
    gamma: float | None  # expansion_gamma

    def __post_init__(self) -> None:
        self.V, self.blank = self.model.vocab_size, self.model.blank_id
        self.lam = float(sum(self.scorer.weights))
        self.weighted = self.blank_scoring == "lm_weighted" and self.lam != 0.0
        self.T = self.enc_proj.shape[0]
        self.dev = self.enc_proj.device


# per hypothesis: label terms ``label[j][v]`` (fused, without the score so far) and their acoustic
# part, the blank over the whole window (fused, acoustic) and the fusion states after each label
_Terms = tuple[list[list[float]], list[list[float]], float, float, torch.Tensor]


@torch.inference_mode()
@takes_config(TransducerBeamConfig)
def reference_wind_beam_search(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    *,
    config: TransducerBeamConfig | None = None,
    fusion: Sequence[tuple[FusionModel, float]] = (),
    max_symbols_per_frame: Any = MISSING,
    **settings: Any,
) -> list[Hypothesis]:
    """WIND beam search of one utterance, encoder output ``[T, D]``; returns its hypotheses, best first.

    See the module docstring for the exact search (its steps 1-5 are marked below); ``config`` and / or
    its fields as in :func:`asrdecode.transducer.beam.beam_search` (the method is "wind"; ``nbest``,
    ``acceleration`` and ``engine`` are not used).
    """
    cfg = TransducerBeamConfig.build(config, {"method": "wind",
                                              **deprecated_max_symbols(settings, max_symbols_per_frame)},
                                     caller="reference_wind_beam_search")
    beam, window, blank_scoring, pruning = cfg.beam, cfg.window, cfg.blank_scoring, cfg.pruning
    max_symbols, beta, gamma = cfg.max_symbols, cfg.beta, cfg.expansion_gamma
    check_model(model)
    check_emissions("encoder_output", encoder_output, ndim=2)
    check_encoder_output(model, encoder_output)
    check_finite("encoder_output", encoder_output)
    check_beam_args(model, beam, "aes", blank_scoring, pruning, max_symbols, 1)
    check_window(model, window)
    scorer = FusionScorer(fusion, model.vocab_size, model.blank_id)
    s = _Search(model, model.project_encoder(encoder_output), scorer, beam, window, blank_scoring, pruning,
                max_symbols, beta, gamma)
    t2hyps: dict[int, list[_Hyp]] = {0: [_start(s, encoder_output.dtype)]}
    while any(t < s.T for t in t2hyps):
        t0 = min(t for t in t2hyps if t < s.T)  # 1.
        hyps = t2hyps.pop(t0)
        n = min(window, s.T - t0)
        terms = [_window_terms(s, h, t0, n) for h in hyps]  # 3.
        scores, removed = _prefix_search(s, hyps, terms)  # 2.
        arrivals: dict[int, list[_Hyp]] = {}
        for i, h in enumerate(hyps):
            if i not in removed:
                for new in _expand(s, h, scores[i], terms[i], t0, n):  # 4.
                    arrivals.setdefault(new.t, []).append(new)
        for t, arrived in arrivals.items():  # 5.
            t2hyps[t] = _recombine_prune(t2hyps.get(t, []) + arrived, beam)
    out = _finish(s, t2hyps.get(s.T, []))
    s.scorer.check_scores()  # (a user fusion model's NaN / +inf)
    return out


def _start(s: _Search, dtype: torch.dtype) -> _Hyp:
    """The empty hypothesis: the prediction network fed blank (start of sequence), frame 0."""
    state = s.model.initial_state(1, device=s.dev, dtype=dtype)
    dec, state = s.model.predict(torch.tensor([s.blank], device=s.dev), state)
    return _Hyp(0.0, 0, 0, (), (), state, s.model.project_decoder(dec)[0], s.scorer.initial(1, s.dev))


def _window_terms(s: _Search, h: _Hyp, t0: int, n: int) -> _Terms:
    """Equation 1 with the fusion terms of every frame for ``h`` on the window ``t0 .. t0 + n - 1``."""
    V, blank, lam, weighted = s.V, s.blank, s.lam, s.weighted
    logits = s.model.joint(s.enc_proj[t0 : t0 + n], h.dec_proj[None, :]).double()  # [n, V]
    check_joint_logits(logits, s.V)
    lp_t = torch.log_softmax(logits, dim=-1)
    lp = lp_t.tolist()
    nonblank = weigh(log_nonblank(lp_t, blank)[:, 0], lam).tolist() if weighted else [0.0] * n  # per frame
    lm_t, lm_next = s.scorer.advance(h.lm_states, dtype=torch.float64)
    lm = lm_t[0].tolist()
    label: list[list[float]] = []
    acoustic: list[list[float]] = []
    before = before_ac = 0.0  # blanks on the frames before j: fused, acoustic only
    for j in range(n):
        label.append([before + lp[j][v] + nonblank[j] + lm[v] + s.beta for v in range(V)])
        acoustic.append([before_ac + lp[j][v] for v in range(V)])
        before += weigh_float(lp[j][blank], 1.0 + lam if weighted else 1.0)  # (a masked blank: -inf at any lam)
        before_ac += lp[j][blank]
    return label, acoustic, before, before_ac, lm_next


def _prefix_search(s: _Search, hyps: list[_Hyp], terms: list[_Terms]) -> tuple[list[float], set[int]]:
    """A + (v,) == B, both on t0, gives B the paths "A, then v on t0"; A is removed.

    Returns the scores after the step's prefix search and the indices of the removed hypotheses."""
    index = {h.tokens: i for i, h in enumerate(hyps)}
    new_scores = [h.score for h in hyps]
    removed: set[int] = set()
    for bi, b in enumerate(hyps):
        if not b.tokens:
            continue
        ai = index.get(b.tokens[:-1])
        if ai is None or (s.cap is not None and hyps[ai].symbols + 1 >= s.cap):
            continue
        new_scores[bi] = logaddexp(new_scores[bi], hyps[ai].score + terms[ai][0][0][b.tokens[-1]])
        removed.add(ai)
    return new_scores, removed


def _expand(s: _Search, h: _Hyp, score0: float, terms: _Terms, t0: int, n: int) -> list[_Hyp]:
    """``h``'s ``beam`` best expansions (by the fused or, with early pruning, the acoustic score; within
    ``gamma`` of the best when set), ``score0`` its score after the prefix search."""
    label, acoustic, whole, whole_ac, lm_next = terms
    blank = s.blank
    # (fused, acoustic, v, j): labels on every window frame, blank over the window
    cands = [(label[j][v], acoustic[j][v], v, j) for j in range(n) for v in range(s.V) if v != blank]
    cands.append((whole, whole_ac, blank, n - 1))
    rank = 1 if s.pruning == "early" else 0
    cands.sort(key=lambda c: -c[rank])
    top = cands[:s.beam]
    if s.gamma is not None:
        top = [c for c in top if c[rank] >= top[0][rank] - s.gamma]
    out = []
    for fused, _, v, j in top:
        score = score0 + fused
        if score == -math.inf:
            continue  # a masked class or a forbidden token: no path (the engines keep none either)
        if v == blank:
            out.append(_Hyp(score, t0 + n, 0, h.tokens, h.stamps, h.pred_state, h.dec_proj, h.lm_states))
            continue
        frame = t0 + j
        symbols = h.symbols + 1 if j == 0 else 1
        t = frame
        if s.cap is not None and symbols >= s.cap:
            t, symbols = t + 1, 0  # the safeguard: leave a frame that holds the cap
        if symbols > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()
        dec, st = s.model.predict(torch.tensor([v], device=s.dev), h.pred_state)
        out.append(_Hyp(score, t, symbols, h.tokens + (v,), h.stamps + (frame,), st,
                        s.model.project_decoder(dec)[0], lm_next[:, v]))
    return out


def _finish(s: _Search, finished: list[_Hyp]) -> list[Hypothesis]:
    """The fusion end-of-sentence scores added to the finished hypotheses; best first."""
    out = []
    for h in finished:
        final = float(s.scorer.final(h.lm_states, dtype=torch.float64)[0]) if s.scorer.num_models else 0.0
        out.append(Hypothesis(tokens=list(h.tokens), timestamps=list(h.stamps), score=h.score + final))
    out.sort(key=lambda x: -x.score)
    return out
