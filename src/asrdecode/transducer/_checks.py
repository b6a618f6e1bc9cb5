"""Argument checks shared by the transducer decoders (greedy, beam searches) and their oracles.

The fast searches (:mod:`.greedy`, :mod:`.beam`) and the per-utterance oracles
(:mod:`.reference`, :mod:`.reference_beam`, :mod:`.reference_wind_beam`) take their checks from
here, so a bad argument gets the same :class:`~asrdecode.errors.DecodingInputError` everywhere.

The symbol cap: ``max_symbols`` labels on one frame force time to advance one frame. It is on by
default (``DEFAULT_MAX_SYMBOLS = 10``, NeMo's default too), so a degenerate model that never
emits blank finishes in ``T * 10`` steps instead of running away; ``None`` switches the cap off,
and then a frame with more than :data:`MAX_SYMBOLS_GUARD` labels is an error. A cap above
:data:`MAX_SYMBOLS_CEILING` is refused.

NaN or +inf logits from the model's joint raise :class:`NonFiniteJointError` once the search
ends (:func:`check_greedy_scores`, :func:`check_nbest_lists`: one check per call, none per step).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from ..errors import DecodingInputError, check_int, check_number, check_tokenizer_size, check_weight
from .model import TransducerModel

__all__ = [
    "MAX_SYMBOLS_GUARD",
    "DEFAULT_MAX_SYMBOLS",
    "METHODS",
    "BLANK_SCORINGS",
    "PRUNINGS",
    "check_max_symbols",
    "resolve_max_symbols",
    "check_beam_args",
    "check_window",
    "check_beta",
    "check_encoder_output",
    "check_tokenizer",
    "runaway_error",
    "MAX_SYMBOLS_CEILING",
    "NonFiniteJointError",
    "MAX_WINDOW",
    "check_window_size",
    "check_greedy_scores",
    "check_nbest_lists",
]

MAX_SYMBOLS_GUARD = 100_000  # with max_symbols=None: labels on one frame before a runaway error
#: the largest max_symbols accepted: more labels on one frame than any model emits (a frame is
#: 10-80 ms); 10**9 would let a model that never emits blank run for hours
MAX_SYMBOLS_CEILING = 1_000
#: the widest WIND window (frames evaluated at once per hypothesis): its tensors grow with it
MAX_WINDOW = 1_024
DEFAULT_MAX_SYMBOLS = 10
METHODS = ("alsd", "aes")
BLANK_SCORINGS = ("lm_weighted", "none")
PRUNINGS = ("late", "early")

_MISSING: Any = object()


def check_max_symbols(max_symbols: object) -> int | None:
    """The per-frame symbol cap: an int >= 1, or None (no cap)."""
    checked = check_int("max_symbols", max_symbols, low=1, optional=True)
    if checked is not None and checked > MAX_SYMBOLS_CEILING:
        raise DecodingInputError(f"max_symbols must be <= {MAX_SYMBOLS_CEILING} (labels on one frame), "
                                 f"got {checked}")
    return checked


def resolve_max_symbols(max_symbols: object, max_symbols_per_frame: object = _MISSING) -> int | None:
    """``max_symbols``, or the deprecated ``max_symbols_per_frame`` keyword (same meaning) with a warning.

    ``max_symbols`` is the caller's value (its default is :data:`DEFAULT_MAX_SYMBOLS`); a
    deprecated value that disagrees with a non-default ``max_symbols`` is an error.
    """
    if max_symbols_per_frame is not _MISSING:
        warnings.warn("max_symbols_per_frame is deprecated; use max_symbols (same meaning)",
                      DeprecationWarning, stacklevel=3)
        if max_symbols != DEFAULT_MAX_SYMBOLS and max_symbols != max_symbols_per_frame:
            raise DecodingInputError("pass max_symbols only (max_symbols_per_frame is its deprecated alias)")
        max_symbols = max_symbols_per_frame
    return check_max_symbols(max_symbols)


class NonFiniteJointError(DecodingInputError):
    """The model's joint network returned NaN or +inf logits: the decisions have no meaning."""


def _non_finite_joint() -> NonFiniteJointError:
    return NonFiniteJointError("model.joint returned NaN or +inf logits (a non-finite decision score); "
                               "check the model's weights and the encoder output")


def check_greedy_scores(scores: torch.Tensor) -> None:
    """After a greedy search: the summed decision scores ``[B]`` are finite (one check per call; a NaN or
    +inf logit makes its decision's log-prob NaN, and a NaN stays in the sum)."""
    if scores.numel() and not bool(torch.isfinite(scores).all()):
        raise _non_finite_joint()


def check_nbest_lists(nbest: list) -> None:
    """After a beam search: every utterance kept a hypothesis with a finite score (NaN / +inf logits
    leave NaN scores, or prune every hypothesis away: an empty list)."""
    for row in nbest:
        if not row or not all(math.isfinite(h.score) for h in row):
            raise _non_finite_joint()


def runaway_error() -> DecodingInputError:
    """The error of a search that emitted over :data:`MAX_SYMBOLS_GUARD` labels on one frame."""
    return DecodingInputError(
        f"model emitted over {MAX_SYMBOLS_GUARD} labels on one frame (it never emits blank); set max_symbols"
    )


def check_beam_args(
    model: TransducerModel, beam: object, method: str, blank_scoring: str, pruning: str,
    max_symbols: object, nbest: object,
) -> None:
    """Shared argument checks of the reference and batched beam searches (``beam <= vocab_size``)."""
    beam = check_int("beam", beam, low=1)
    if beam > model.vocab_size:
        raise DecodingInputError(f"beam {beam} is larger than the vocabulary ({model.vocab_size} tokens)")
    if method not in METHODS:
        raise DecodingInputError(f"method must be one of {METHODS}, got {method!r}")
    if blank_scoring not in BLANK_SCORINGS:
        raise DecodingInputError(f"blank_scoring must be one of {BLANK_SCORINGS}, got {blank_scoring!r}")
    if pruning not in PRUNINGS:
        raise DecodingInputError(f"pruning must be one of {PRUNINGS}, got {pruning!r}")
    check_max_symbols(max_symbols)
    check_int("nbest", nbest, low=1, high=beam,
              error=lambda message: DecodingInputError(f"{message} (nbest is at most beam)"))


def check_window_size(window: object) -> int:
    """A WIND window: an int in ``1..MAX_WINDOW``."""
    size = check_int("window", window, low=1)
    if size > MAX_WINDOW:
        raise DecodingInputError(f"window must be <= {MAX_WINDOW} frames, got {size}")
    return size


def check_window(model: TransducerModel, window: object) -> int:
    """The WIND window: an int in ``1..MAX_WINDOW``, RNN-T only."""
    size = check_window_size(window)
    if model.durations is not None:
        raise DecodingInputError("WIND beam search (method='wind') supports RNN-T models only, not TDT")
    return size


def check_expansion_gamma(gamma: object, method: str) -> float | None:
    """WIND's expansion threshold: None (off) or a finite number >= 0, for ``method="wind"`` only."""
    if gamma is None:
        return None
    if method != "wind":
        raise DecodingInputError("expansion_gamma is an option of method='wind' only")
    return float(check_number("expansion_gamma", gamma, low=0))


def check_beta(beta: object) -> float:
    """The insertion bonus: a real number with ``|beta| <= MAX_ABS_WEIGHT`` (:func:`~asrdecode.errors.check_weight`)."""
    if not isinstance(beta, (int, float)):  # numbers only (a tensor or string is a caller's mistake here)
        raise DecodingInputError(f"beta must be a finite number, got {beta!r}")
    return check_weight("beta", beta)


def _parameter_dtype(model: object) -> torch.dtype | None:
    params = getattr(model, "parameters", None)
    if not callable(params):
        return None
    try:
        for p in params():
            if isinstance(p, torch.Tensor) and p.is_floating_point():
                return p.dtype
    except (TypeError, RuntimeError):
        return None
    return None


def _encoder_width(model: object) -> int | None:
    proj = getattr(model, "enc_proj", None)
    return int(proj.in_features) if isinstance(proj, torch.nn.Linear) else None


def check_encoder_output(model: TransducerModel, enc: torch.Tensor) -> None:
    """Check ``enc [..., D]`` against the model: dtype and width, before any decoding.

    Rule: the encoder output must have the dtype of the model's floating parameters (no silent
    cast: a float16 encoder output of a float32 model is an error, cast it with ``.to(dtype)``),
    and ``model.project_encoder`` must accept its width ``D``. Models without parameters (any
    object meeting the protocol) are probed on one frame; the probe's error is reported with the
    argument's dtype and shape.
    """
    want = _parameter_dtype(model)
    if want is not None and enc.dtype != want:
        raise DecodingInputError(
            f"encoder_output has dtype {enc.dtype} but the model's parameters are {want}; "
            f"cast it with encoder_output.to({want})"
        )
    width = _encoder_width(model)
    if width is not None and enc.shape[-1] != width:
        raise DecodingInputError(f"encoder_output has width {enc.shape[-1]} but the model expects {width} "
                                 f"(shape {tuple(enc.shape)})")
    if enc.numel() == 0:
        return
    probe = enc.reshape(-1, enc.shape[-1])[:1]
    try:
        model.project_encoder(probe)
    except (RuntimeError, TypeError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DecodingInputError(
            f"model.project_encoder does not accept encoder_output of dtype {enc.dtype} and width "
            f"{enc.shape[-1]}: {first}"
        ) from None


def check_tokenizer(tokenizer: Any, model: TransducerModel) -> None:
    """A tokenizer with a ``vocab_size`` must match the model's (blank included)."""
    check_tokenizer_size(tokenizer, model.vocab_size, f"the model has {int(model.vocab_size)}")
