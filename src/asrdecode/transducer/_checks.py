"""Argument checks shared by the transducer decoders (greedy, beam searches) and their oracles.

The fast searches (:mod:`.greedy`, :mod:`.beam`) and the per-utterance oracles
(:mod:`.reference`, :mod:`.reference_beam`, :mod:`.reference_wind_beam`) take their checks from
here, so a bad argument gets the same :class:`~asrdecode.errors.DecodingInputError` everywhere.

The symbol cap: ``max_symbols`` labels on one frame force time to advance one frame. It is on by
default (``DEFAULT_MAX_SYMBOLS``, the config's 10, NeMo's default too), so a degenerate model that never
emits blank finishes in ``T * 10`` steps instead of running away; ``None`` switches the cap off,
and then a frame with more than :data:`MAX_SYMBOLS_GUARD` labels is an error. A cap above
:data:`MAX_SYMBOLS_CEILING` is refused.

NaN or +inf logits from the model's joint raise :class:`NonFiniteJointError` once the search
ends (:func:`check_greedy_scores`, :func:`check_nbest_lists`: one check per call, none per step); the
oracles check each joint output (:func:`check_joint_logits`). A -inf logit is a class of probability 0 (a
masked token): allowed, never emitted.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, cast

import torch

from ..configs import (MAX_SYMBOLS_CEILING, MAX_WINDOW, MaxSymbolsSetting, TransducerGreedyConfig,
                       check_setting, default_of)
from ..errors import NON_FINITE_JOINT_MESSAGE, DecodingInputError, NonFiniteJointError, check_int, check_tokenizer_size
from .model import TransducerModel

__all__ = [
    "MAX_SYMBOLS_GUARD",
    "DEFAULT_MAX_SYMBOLS",
    "STEP_METHODS",
    "BLANK_SCORINGS",
    "PRUNINGS",
    "check_max_symbols",
    "check_beam_args",
    "check_window",
    "check_encoder_output",
    "check_tokenizer",
    "runaway_error",
    "MAX_SYMBOLS_CEILING",
    "NonFiniteJointError",
    "MAX_WINDOW",
    "check_window_size",
    "check_greedy_scores",
    "check_nbest_lists",
    "check_joint_logits",
]

MAX_SYMBOLS_GUARD = 100_000  # with max_symbols=None: labels on one frame before a runaway error
#: the config's default cap (:class:`~asrdecode.configs.MaxSymbolsSetting`)
DEFAULT_MAX_SYMBOLS = cast(int, default_of(MaxSymbolsSetting, "max_symbols"))
#: the methods whose step is :mod:`.beam_alsd`'s (WIND, the third of :data:`~asrdecode.configs.METHODS`,
#: has its own: :mod:`.beam_wind`)
STEP_METHODS = ("alsd", "aes")
BLANK_SCORINGS = ("lm_weighted", "none")
PRUNINGS = ("late", "early")

MISSING: Any = object()


def check_max_symbols(max_symbols: object) -> int | None:
    """The per-frame symbol cap: an int in ``1..MAX_SYMBOLS_CEILING``, or None (no cap); the config's check."""
    return cast("int | None", check_setting(MaxSymbolsSetting, "max_symbols", max_symbols))


def deprecated_max_symbols(settings: dict[str, Any], max_symbols_per_frame: object = MISSING) -> dict[str, Any]:
    """A search's keyword ``settings`` with the deprecated ``max_symbols_per_frame`` (same meaning as
    ``max_symbols``, warns) as their ``max_symbols``; both given and different is an error."""
    if max_symbols_per_frame is MISSING:
        return settings
    warnings.warn("max_symbols_per_frame is deprecated; use max_symbols (same meaning)",
                  DeprecationWarning, stacklevel=3)
    if "max_symbols" in settings and settings["max_symbols"] != max_symbols_per_frame:
        raise DecodingInputError("pass max_symbols only (max_symbols_per_frame is its deprecated alias)")
    return {**settings, "max_symbols": max_symbols_per_frame}


def _non_finite_joint() -> NonFiniteJointError:
    return NonFiniteJointError(NON_FINITE_JOINT_MESSAGE)


def check_joint_logits(logits: torch.Tensor, vocab_size: int) -> None:
    """The oracles' check of joint outputs ``logits [..., V (+ durations)]``: a NaN or +inf, or a row whose
    tokens (or durations) are all -inf, raises :class:`NonFiniteJointError`; -inf entries (masked classes,
    probability 0) pass, as in the fast searches."""
    if not bool((logits < math.inf).all()):  # (NaN compares False)
        raise _non_finite_joint()
    parts = [logits[..., :vocab_size]] + ([logits[..., vocab_size:]] if logits.shape[-1] > vocab_size else [])
    if any(bool(torch.isneginf(part.amax(dim=-1)).any()) for part in parts):
        raise _non_finite_joint()


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
    if method not in STEP_METHODS:
        raise DecodingInputError(f"method must be one of {STEP_METHODS}, got {method!r}")
    if blank_scoring not in BLANK_SCORINGS:
        raise DecodingInputError(f"blank_scoring must be one of {BLANK_SCORINGS}, got {blank_scoring!r}")
    if pruning not in PRUNINGS:
        raise DecodingInputError(f"pruning must be one of {PRUNINGS}, got {pruning!r}")
    check_max_symbols(max_symbols)
    check_int("nbest", nbest, low=1, high=beam,
              error=lambda message: DecodingInputError(f"{message} (nbest is at most beam)"))


def check_window_size(window: object) -> int:
    """A WIND window: an int in ``1..MAX_WINDOW`` (the configs' check)."""
    return cast(int, check_setting(TransducerGreedyConfig, "window", window))


def check_window(model: TransducerModel, window: object) -> int:
    """The WIND window: an int in ``1..MAX_WINDOW``, RNN-T only."""
    size = check_window_size(window)
    if model.durations is not None:
        raise DecodingInputError("WIND beam search (method='wind') supports RNN-T models only, not TDT")
    return size


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


def encoder_width(model: object) -> int | None:
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
    width = encoder_width(model)
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
