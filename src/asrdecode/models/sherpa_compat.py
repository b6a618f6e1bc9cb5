"""Decode as sherpa-onnx does: the options that make our searches return what sherpa-onnx returns.

sherpa-onnx's offline transducer searches differ from our defaults in four ways:

- **start context** (icefall stateless decoders): sherpa-onnx starts with ``[-1, ..., -1, blank]``,
  we start with ``[blank] * context``. A property of the model's initial state:
  ``load_onnx_transducer(..., start_context="sherpa")``.
- **symbols per frame**: icefall greedy and modified beam search emit at most 1 symbol a frame,
  NeMo RNN-T greedy 10, NeMo TDT greedy 5 (then it forces a one-frame step); we allow 10 -- the
  searches' ``max_symbols``.
- **``<unk>`` is blank** in sherpa-onnx (icefall searches, NeMo beam search): never emitted; greedy
  takes an ``<unk>`` argmax as blank, beam search merges the ``<unk>`` expansion into the blank one
  (``unk_as_blank="max"`` / ``"sum"``, :func:`~asrdecode.models.onnx_transducer.fold_unk`).
- **the beam search itself** (icefall): sherpa-onnx's modified beam search extends each hypothesis by
  one symbol per frame and merges equal label sequences; ALSD++ / AES++ with ``max_symbols=1`` and the
  rerank agree with it on peaked models but not on flat random ones:
  :func:`asrdecode.models.sherpa_search.modified_beam_search` reproduces it exactly.
- **final choice of beam search** (icefall): the hypothesis with the best
  ``score / (len(tokens) + context)`` (the context counts in the length): :func:`length_normalised`.
  sherpa-onnx's NeMo beam search picks by raw score.
- **NeMo TDT beam search** is not reproduced: sherpa-onnx's extends each hypothesis with the top
  tokens but only its single best duration (argmax of the duration logits, used as a frame skip:
  durations must be ``0..K-1``), where our TDT searches (ALSD++ / AES++) score every (token,
  duration) pair; on TDT models the two return different hypotheses by design. Greedy agrees.

Why our defaults differ: a model trained with ``[blank] * context`` start (ours) decodes worse from
``-1``; a cap of 1 symbol per frame drops tokens whenever the encoder is more subsampled than the
text is dense (8x-subsampled parakeets emit 2+ tokens on many frames); ``<unk>`` is a real output
of our models; and dividing by length favours long hypotheses, which the searches' own scores (exact
log-probabilities of the alignment lattice) do not need. So compatibility is an opt-in preset.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import DecodingInputError
from ..results import Hypothesis

__all__ = ["SHERPA_COMPAT", "sherpa_options", "length_normalised", "FINAL_CHOICES"]

#: ``final_choice`` values: ours (best raw score) and sherpa-onnx's (best score / length)
FINAL_CHOICES = ("score", "length-norm")

#: the preset for sherpa-onnx's icefall (zipformer / conformer) searches: option name -> value.
#: ``start_context`` / ``unk_as_blank`` are loader options (``load_onnx_transducer``), ``max_symbols``
#: the searches', ``final_choice`` the beam search's n-best rerank (:func:`length_normalised`);
#: for beam search, ``search="modified"`` (:func:`asrdecode.models.sherpa_search.modified_beam_search`).
#: :func:`sherpa_options` gives the exact values for a loaded model (NeMo layouts differ).
SHERPA_COMPAT: dict[str, Any] = {"start_context": "sherpa", "max_symbols": 1, "unk_as_blank": "max",
                                 "final_choice": "length-norm"}


def sherpa_options(model: Any, decoder: str) -> dict[str, Any]:
    """The options that make ``decoder`` (``"greedy"`` or ``"beam"``) on ``model`` (a loaded ONNX
    transducer) return what sherpa-onnx's ``greedy_search`` / ``modified_beam_search`` return."""
    if decoder not in ("greedy", "beam"):
        raise DecodingInputError(f"decoder must be 'greedy' or 'beam', got {decoder!r}")
    nemo = type(model).__name__ == "NemoOnnxTransducer"
    if nemo:
        if decoder == "greedy":
            return {"max_symbols": 5 if model.durations else 10, "unk_as_blank": None}
        # sherpa-onnx's NeMo beam search is its own algorithm (per-hypothesis top-k, best duration
        # only for TDT) picked by raw score: these options align what can be aligned, not all
        return {"max_symbols": 10, "unk_as_blank": "sum", "final_choice": "score"}
    out = dict(SHERPA_COMPAT)
    if decoder == "greedy":
        out.pop("final_choice")
        return out
    # beam: sherpa-onnx's modified beam search (asrdecode.models.sherpa_search), which treats <unk>
    # as blank itself (folding it into the joint would free a top-k slot sherpa-onnx spends on it)
    out.update(unk_as_blank=None, search="modified")
    return out


def length_normalised(nbest_lists: Sequence[Sequence[Hypothesis]], context_size: int = 0) -> list[list[Hypothesis]]:
    """Each n-best list re-sorted by ``score / (len(tokens) + context_size)``, best first (ties keep their
    order); sherpa-onnx's final choice is the first. ``context_size``: the stateless decoder's context
    (icefall divides by the length of the sequence that starts with it).
    An empty hypothesis with no context has no length: it ranks by its raw score."""
    if context_size < 0:
        raise DecodingInputError(f"context_size must be >= 0, got {context_size}")
    out = []
    for hyps in nbest_lists:
        def key(h: Hypothesis) -> float:
            n = len(h.tokens) + context_size
            return h.score / n if n else h.score
        out.append(sorted(hyps, key=key, reverse=True))
    return out
