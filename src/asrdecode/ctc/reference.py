"""Per-utterance reference CTC prefix beam search: dictionaries, no tensors. The test oracle.

Same algorithm, scores and pruning rule as :func:`asrdecode.ctc.beam_search`, written for reading:

for each frame, every prefix in the beam stays (blank, or a repeat of its last token) and is
extended by every non-blank token (or, with ``token_beam``, the ``token_beam`` most likely ones); contributions to the same prefix are summed in log space; a
new prefix gets its parent's fusion score plus the weighted fusion scores of the appended token
and the frame as its last token's timestamp; a prefix already in the beam keeps its own, unless
this frame's arrival of its last token (``p(parent) + y[token]``) beats the best seen so far:
then its timestamps become the parent's (as of the previous frame) plus this frame. Candidates are ranked
by ``logaddexp(p_blank, p_nonblank) + fusion + beta * len``; the top ``beam`` are kept, minus
those more than ``beam_threshold`` below the best. At the end, the fusion models' end-of-sentence
scores are added and the ``nbest`` best are returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ..configs import CTCBeamConfig, takes_config
from ..fusion import FusionModel, FusionScorer, check_fusion, check_model_scores, weigh_float
from ..results import Hypothesis, Tokenizer, attach_text
from ._checks import check_beam_search_args
from .beam import parse_collapse
from .collapse import blank_collapse as _blank_collapse

__all__ = ["reference_beam_search"]

NEG = -math.inf


def _lae(a: float, b: float) -> float:
    """log(exp(a) + exp(b)), exact for -inf."""
    if a == NEG:
        return b
    if b == NEG:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass
class _Entry:
    p_b: float
    p_nb: float
    fscore: float  # sum of weight * fusion score of the prefix's tokens
    fstates: tuple[int, ...]
    times: tuple[int, ...]
    peak: float  # best arrival log-prob of the last token (its timestamp is times[-1])


class _FusionCache:
    """Per-state fusion scores, computed with the model's own ``advance``/``final`` one state at a time."""

    def __init__(self, fusion: list[tuple[FusionModel, float]], vocab: int, blank: int) -> None:
        self.fusion = fusion
        self.scorer = FusionScorer(fusion, vocab, blank)  # validates blank ids; gives initial states
        self.rows: dict[tuple[int, int], tuple[list[float], list[int]]] = {}

    def row(self, i: int, state: int) -> tuple[list[float], list[int]]:
        key = (i, state)
        if key not in self.rows:
            sc, nx = self.fusion[i][0].advance(torch.tensor([state], dtype=torch.long))
            check_model_scores(i, self.fusion[i][0], sc)
            self.rows[key] = (sc[0].double().tolist(), nx[0].tolist())
        return self.rows[key]

    def final(self, i: int, state: int) -> float:
        f = self.fusion[i][0].final(torch.tensor([state], dtype=torch.long))
        check_model_scores(i, self.fusion[i][0], f)
        return float(f[0])


def _decode_one(
    utterance: int,
    frames: list[list[float]], times: list[int], blank: int, beam: int, fusion: list[tuple[FusionModel, float]],
    cache: _FusionCache, beta: float, beam_threshold: float, token_beam: Optional[int], nbest: int,
) -> list[Hypothesis]:
    init_states = tuple(int(s) for s in cache.scorer.initial(1, utterances=torch.tensor([utterance]))[0].tolist())
    hyps: dict[tuple[int, ...], _Entry] = {(): _Entry(0.0, NEG, 0.0, init_states, (), NEG)}

    def score(prefix: tuple[int, ...], e: _Entry) -> float:
        return _lae(e.p_b, e.p_nb) + e.fscore + beta * len(prefix)

    for y, frame in zip(frames, times):
        tokens = [k for k in range(len(y)) if k != blank]
        if token_beam is not None:  # token pruning: the token_beam most likely non-blank tokens
            tokens = sorted(tokens, key=lambda k: y[k], reverse=True)[:token_beam]
        nxt: dict[tuple[int, ...], _Entry] = {}
        # Stays first, so a prefix already in the beam keeps its own fusion states and timestamps.
        for prefix, h in hyps.items():
            p_tot = _lae(h.p_b, h.p_nb)
            p_nb = h.p_nb + y[prefix[-1]] if prefix else NEG
            nxt[prefix] = _Entry(p_tot + y[blank], p_nb, h.fscore, h.fstates, h.times, h.peak)
        for prefix, h in hyps.items():
            p_tot = _lae(h.p_b, h.p_nb)
            rows = [cache.row(i, s) for i, s in enumerate(h.fstates)]
            for k in tokens:
                acoustic = (h.p_b if prefix and prefix[-1] == k else p_tot) + y[k]
                new = prefix + (k,)
                if new in nxt:
                    old = nxt[new]
                    old.p_nb = _lae(old.p_nb, acoustic)
                    if acoustic > old.peak:
                        old.peak = acoustic
                        old.times = h.times + (frame,)
                else:
                    fscore = h.fscore
                    for (_, weight), (sc, _) in zip(fusion, rows):
                        fscore += weigh_float(sc[k], weight)
                    states = tuple(nx[k] for _, nx in rows)
                    nxt[new] = _Entry(NEG, acoustic, fscore, states, h.times + (frame,), acoustic)
        ranked = sorted(((score(p, e), p) for p, e in nxt.items()), key=lambda se: se[0], reverse=True)
        ranked = [(s, p) for s, p in ranked[:beam] if s > NEG]
        best = ranked[0][0] if ranked else NEG
        hyps = {p: nxt[p] for s, p in ranked if s >= best - beam_threshold}

    finals = []
    for prefix, h in hyps.items():
        s = score(prefix, h)
        for i, (_, weight) in enumerate(fusion):
            s += weigh_float(cache.final(i, h.fstates[i]), weight)
        finals.append((s, prefix, h))
    finals.sort(key=lambda x: x[0], reverse=True)
    # as the engines: a prefix the end-of-sentence scores make impossible (a word a lexicon-mode LM cannot
    # finish) leaves the list; when none is left, one empty hypothesis with score -inf
    possible = [Hypothesis(tokens=list(p), timestamps=list(h.times), score=s) for s, p, h in finals[:nbest] if s > NEG]
    return possible or [Hypothesis(tokens=[], timestamps=[], score=NEG)]


@takes_config(CTCBeamConfig)
def reference_beam_search(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    *,
    config: Optional[CTCBeamConfig] = None,
    fusion: Sequence[tuple[FusionModel, float]] = (),
    tokenizer: Optional[Tokenizer] = None,
    log_softmax: bool = False,
    **settings: Any,
) -> list[list[Hypothesis]]:
    """Reference CTC prefix beam search, one utterance at a time (slow; for tests).

    Arguments and results as :func:`asrdecode.ctc.beam_search` (without streaming; ``engine`` is not
    used). Scores are computed in Python floats (float64).
    """
    cfg = CTCBeamConfig.build(config, settings, caller="reference_beam_search")
    blank_collapse, token_beam = cfg.blank_collapse, cfg.token_beam
    x, lens, blank = check_beam_search_args(log_probs, lengths, blank_id, tokenizer, log_softmax=log_softmax)
    beam, nbest, beta, beam_threshold = cfg.beam, cfg.nbest, cfg.beta, cfg.beam_threshold
    vocab = x.shape[2]
    fusion_l = check_fusion(fusion, vocab)
    collapse_on, collapse_th = parse_collapse(blank_collapse)
    if collapse_on:
        x, lens, frame_index = _blank_collapse(x, lens, blank, collapse_th)
    else:
        frame_index = torch.arange(x.shape[1])[None, :].expand(x.shape[0], -1)
    cache = _FusionCache(fusion_l, vocab, blank)
    out = []
    for b in range(x.shape[0]):
        n = int(lens[b])
        frames = x[b, :n].double().tolist()
        times = frame_index[b, :n].tolist()
        hyps = _decode_one(b, frames, times, blank, beam, fusion_l, cache, beta, beam_threshold, token_beam, nbest)
        out.append(attach_text(hyps, tokenizer))
    return out
