"""Per-utterance reference of WIND beam search for RNN-T (Algorithm 3 of the WIND paper), the oracle of
``beam_search(..., method="wind")`` in :mod:`asrdecode.transducer.beam`.

The search keeps a map ``t2hyps``: frame -> hypotheses whose next frame to read is that frame
(a hypothesis is *finished* at ``t = T``). One step:

* take the hypotheses of the smallest pending frame ``t0 < T`` (the others wait);
* for each of them, evaluate the joint on the window ``t0 .. t0 + n - 1``, ``n = min(window, T - t0)``,
  and score Equation 1 of the paper in log space (``lp[j]`` the log-softmax at frame ``t0 + j``):

  - label ``v`` first emitted at frame ``t0 + j`` (blanks on the frames before it):
    ``sum_{i < j} lp[i][blank] + lp[j][v]``; the hypothesis moves to frame ``t0 + j``;
  - blank (blanks on the whole window): ``sum_{i < n} lp[i][blank]``; it moves to ``t0 + n``;

  every label also gets the bonus ``beta``;
* pruning: the candidates and the waiting hypotheses compete, and the ``beam`` best are kept
  (one beam over all pending frames, as AES++ keeps waiting hypotheses in its beam: the
  batched search holds exactly ``beam`` hypotheses per utterance);
* recombination: hypotheses with the same transcript on the same frame are merged into the best
  of them, whose score becomes the log-sum-exp of theirs (probabilities summed).

Safeguard against staying on one frame forever (the paper leaves it to its code): a label that
makes ``max_symbols_per_frame`` labels on its frame also advances one frame (no score), as the
per-frame symbol cap of greedy decoding and of ALSD++ / AES++. With ``window=1`` Equation 1 is
the plain per-frame distribution and the search is AES++ without fusion step for step (tested).

Not in this search (documented differences from the paper's Algorithm 3): the paper prunes the
hypotheses of each frame separately (t2hyps buckets, unbounded in total), here one beam holds all
pending frames, so a candidate that blanks over a whole window competes with candidates that stay
on the window's first frame (on a model whose blanks are not confident this keeps hypotheses
behind and fills frames up to the symbol cap; see benchmarks/results_transducer_beam.md); the
mAES prefix search (adding the probability of completing a hypothesis into a longer one on the
same frame); shallow fusion; TDT models (the window is defined for RNN-T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import DecodingInputError, check_emissions, check_finite
from ..results import Hypothesis
from .model import TransducerModel, check_model
from .reference_beam import MAX_SYMBOLS_GUARD, _logaddexp, check_beam_args

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


def check_window(model: TransducerModel, window: object) -> int:
    """The WIND window: an int >= 1, RNN-T only."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise DecodingInputError(f"window must be an int >= 1, got {window!r}")
    if model.durations is not None:
        raise DecodingInputError("WIND beam search (method='wind') supports RNN-T models only, not TDT")
    return window


@torch.inference_mode()
def reference_wind_beam_search(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    *,
    beam: int = 4,
    window: int = 8,
    max_symbols_per_frame: int | None = 10,
    beta: float = 0.0,
) -> list[Hypothesis]:
    """WIND beam search of one utterance, encoder output ``[T, D]``; returns its hypotheses, best first.

    See the module docstring for the exact search.
    """
    check_model(model)
    check_emissions("encoder_output", encoder_output, ndim=2)
    check_finite("encoder_output", encoder_output)
    check_beam_args(model, beam, "aes", "none", "late", max_symbols_per_frame, 1)
    check_window(model, window)
    V, blank = model.vocab_size, model.blank_id
    T = encoder_output.shape[0]
    dev = encoder_output.device
    enc_proj = model.project_encoder(encoder_output)
    state = model.initial_state(1, device=dev, dtype=encoder_output.dtype)
    dec, state = model.predict(torch.tensor([blank], device=dev), state)
    t2hyps: dict[int, list[_Hyp]] = {0: [_Hyp(0.0, 0, 0, (), (), state, model.project_decoder(dec)[0])]}

    while any(t < T for t in t2hyps):
        t0 = min(t for t in t2hyps if t < T)
        hyps = t2hyps.pop(t0)
        n = min(window, T - t0)
        # (score, source hypothesis, token or None for a waiting one, frame offset j in the window)
        cands: list[tuple[float, _Hyp, int | None, int]] = []
        for h in hyps:
            logits = model.joint(enc_proj[t0 : t0 + n], h.dec_proj[None, :]).double()  # [n, V]
            if not bool(torch.isfinite(logits).all()):
                raise DecodingInputError("model.joint produced NaN or inf logits")
            lp = torch.log_softmax(logits, dim=-1).tolist()
            blanks_before = 0.0  # log prod_{i < j} P(blank | t0 + i)
            for j in range(n):
                for v in range(V):
                    if v != blank:
                        cands.append((h.score + blanks_before + lp[j][v] + beta, h, v, j))
                blanks_before += lp[j][blank]
            cands.append((h.score + blanks_before, h, blank, n - 1))  # blank on the whole window
        for t, waiting in t2hyps.items():
            cands.extend((h.score, h, None, 0) for h in waiting)
        cands.sort(key=lambda c: -c[0])

        new_t2hyps: dict[int, list[_Hyp]] = {}
        merged: dict[tuple[tuple[int, ...], int], _Hyp] = {}
        for score, h, v, j in cands[:beam]:
            if score == -math.inf:
                continue
            if v is None:
                new = _Hyp(score, h.t, h.symbols, h.tokens, h.stamps, h.pred_state, h.dec_proj)
            elif v == blank:
                new = _Hyp(score, t0 + n, 0, h.tokens, h.stamps, h.pred_state, h.dec_proj)
            else:
                frame = t0 + j
                symbols = h.symbols + 1 if j == 0 else 1
                t = frame
                if max_symbols_per_frame is not None and symbols >= max_symbols_per_frame:
                    t, symbols = t + 1, 0  # the safeguard: leave a frame that holds the cap
                if symbols > MAX_SYMBOLS_GUARD:
                    raise DecodingInputError(
                        f"model emitted over {MAX_SYMBOLS_GUARD} labels on one frame; set max_symbols_per_frame")
                dec, st = model.predict(torch.tensor([v], device=dev), h.pred_state)
                new = _Hyp(score, t, symbols, h.tokens + (v,), h.stamps + (frame,), st, model.project_decoder(dec)[0])
            key = (new.tokens, new.t)
            if key in merged:  # candidates come best first: the first of a group is its best
                merged[key].score = _logaddexp(merged[key].score, new.score)
            else:
                merged[key] = new
                new_t2hyps.setdefault(new.t, []).append(new)
        t2hyps = new_t2hyps

    out = [Hypothesis(tokens=list(h.tokens), timestamps=list(h.stamps), score=h.score)
           for hyps in t2hyps.values() for h in hyps]
    out.sort(key=lambda x: -x.score)
    return out
