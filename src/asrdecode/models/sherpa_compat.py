"""Decode as sherpa-onnx does: the options that make our searches return what sherpa-onnx returns.

sherpa-onnx's offline transducer searches differ from our defaults in these ways:

- **start context** (icefall stateless decoders): sherpa-onnx starts with ``[-1, ..., -1, blank]``,
  we start with ``[blank] * context``. A property of the model's initial state:
  ``load_onnx_transducer(..., start_context="sherpa")``.
- **symbols per frame**: icefall greedy and modified beam search emit at most 1 symbol a frame,
  NeMo RNN-T greedy 10, NeMo TDT greedy 5 (then it forces a one-frame step); we allow 10 -- the
  searches' ``max_symbols``.
- **``<unk>`` is blank** in sherpa-onnx (icefall searches, NeMo beam search): never emitted; greedy
  takes an ``<unk>`` argmax as blank (``unk_as_blank="max"``, :func:`~asrdecode.models.onnx_transducer.fold_unk`),
  the beam searches extend an ``<unk>`` expansion like a blank one (their ``unk_id``).
- **the beam search itself** (icefall): sherpa-onnx's modified beam search extends each hypothesis by
  one symbol per frame and merges equal label sequences; ALSD++ / AES++ with ``max_symbols=1`` and the
  rerank agree with it on peaked models but not on flat random ones:
  :func:`asrdecode.models.sherpa_search.modified_beam_search` reproduces it exactly.
- **the beam search itself** (NeMo RNN-T and TDT): sherpa-onnx's NeMo ``modified_beam_search`` is
  another algorithm, frame-asynchronous: each hypothesis at the earliest frame is extended by its top
  ``beam`` tokens (TDT: with only its single best duration, whose log-prob every token gets, used as
  the frame skip), up to 10 labels a frame, the ``beam`` best candidates kept without merging:
  :func:`asrdecode.models.sherpa_nemo_search.nemo_beam_search` reproduces it exactly (equal scores
  ordered as sherpa-onnx's ``std::partial_sort`` orders them), where our TDT searches (ALSD++ / AES++)
  score every (token, duration) pair.
- **final choice of beam search** (icefall): the hypothesis with the best
  ``score / (len(tokens) + context)`` (the context counts in the length): :func:`length_normalised`.
  sherpa-onnx's NeMo beam search picks by raw score.

Not reproduced: hotwords (sherpa-onnx's context graph) and ``blank_penalty``; the beam searches of
this preset refuse fusion.

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
#: :func:`sherpa_options` gives the exact values for a loaded model (NeMo layouts differ: their beam
#: search is ``search="nemo"``, :func:`asrdecode.models.sherpa_nemo_search.nemo_beam_search`).
SHERPA_COMPAT: dict[str, Any] = {"start_context": "sherpa", "max_symbols": 1, "unk_as_blank": "max",
                                 "final_choice": "length-norm"}


def sherpa_options(model: Any, decoder: str) -> dict[str, Any]:
    """The options that make ``decoder`` (``"greedy"`` or ``"beam"``) on ``model`` (a loaded ONNX
    transducer) return what sherpa-onnx's ``greedy_search`` / ``modified_beam_search`` return; for beam,
    ``search`` names the search that does it (``"modified"``: icefall layout, ``"nemo"``: NeMo layout)."""
    if decoder not in ("greedy", "beam"):
        raise DecodingInputError(f"decoder must be 'greedy' or 'beam', got {decoder!r}")
    nemo = type(model).__name__ == "NemoOnnxTransducer"
    if nemo:
        if decoder == "greedy":
            return {"max_symbols": 5 if model.durations else 10, "unk_as_blank": None}
        # sherpa-onnx's NeMo beam search (asrdecode.models.sherpa_nemo_search): its own algorithm, which
        # treats <unk> as blank itself, picked by raw score
        return {"max_symbols": 10, "unk_as_blank": None, "final_choice": "score", "search": "nemo"}
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
