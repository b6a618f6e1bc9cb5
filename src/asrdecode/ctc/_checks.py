"""Input checks shared by the CTC decoders (greedy, blank collapse, beam searches)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from .. import configs
from ..errors import DecodingInputError, check_emissions, check_lengths, check_tokenizer_size
from ..native import _lib

__all__ = ["prepare_log_probs", "check_emission_values", "check_blank_id", "check_tokenizer", "valid_mask", "MAX_BEAM"]

#: the widest CTC beam (CTCBeamConfig's cap; why: :data:`asrdecode.configs.MAX_BEAM`)
MAX_BEAM = configs.MAX_BEAM


def valid_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B, T]`` bool mask of the frames ``t < lengths[b]``."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def check_blank_id(blank_id: object, vocab_size: int) -> int:
    """Check that ``blank_id`` is an integer in ``[0, vocab_size)``."""
    if isinstance(blank_id, bool) or not isinstance(blank_id, (int, torch.Tensor)):
        raise DecodingInputError(f"blank_id must be an int, got {type(blank_id).__name__}")
    if isinstance(blank_id, torch.Tensor):
        if blank_id.numel() != 1 or blank_id.is_floating_point():
            raise DecodingInputError("blank_id must be a single integer")
        blank_id = int(blank_id)
    if not 0 <= blank_id < vocab_size:
        raise DecodingInputError(f"blank_id must be in [0, {vocab_size - 1}] (vocabulary size {vocab_size}), got {blank_id}")
    return int(blank_id)


def check_tokenizer(tokenizer: Any, vocab_size: int) -> None:
    """Check the tokenizer's vocabulary size (when it has one) against the emissions'."""
    check_tokenizer_size(tokenizer, vocab_size, f"log_probs have {vocab_size} classes")


def prepare_log_probs(
    log_probs: object,
    lengths: object,
    *,
    log_softmax: bool = False,
    name: str = "log_probs",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate ``log_probs [B, T, V]`` and ``lengths [B]``; return them ready for decoding.

    The returned emissions are float32 (float64 stays float64). With ``log_softmax=True`` the
    input is taken as logits and normalised; otherwise every valid frame must already be a
    log-probability distribution (``logsumexp`` within a tolerance of 0), which is checked, never
    guessed. A ``-inf`` entry is a class of probability 0 (a masked token): it is allowed, and no
    decoder emits it on that frame. NaN, ``+inf`` and a frame whose classes are all ``-inf`` are
    rejected either way. Padding frames (``t >= lengths[b]``) are not inspected.
    """
    x = check_emissions(name, log_probs)
    batch, max_len, vocab = x.shape
    if vocab < 1:
        raise DecodingInputError(f"{name} must have at least one class, got shape {tuple(x.shape)}")
    every_frame = lengths is None  # no padding: no mask needed
    lens = check_lengths(lengths, batch, max_len, device=x.device)
    tol = 1e-3 if x.dtype in (torch.float32, torch.float64) else 2e-2  # half precision: its rounding
    if x.dtype != torch.float64:
        x = x.float()
    if x.numel() == 0:
        return x, lens
    valid_lens = None if every_frame else lens
    worst = _largest_abs_logsumexp(x, valid_lens)
    if not math.isfinite(worst):
        _reject_bad_values(name, x, valid_lens)
    if log_softmax:
        return torch.log_softmax(x, dim=-1), lens
    if not worst <= tol:
        raise DecodingInputError(
            f"{name} rows are not normalised log-probabilities (largest |logsumexp| = {worst:.3g} > {tol:g}); "
            "pass log_softmax=True to decode raw logits"
        )
    return x, lens


def check_emission_values(name: str, x: torch.Tensor, lengths: torch.Tensor | None) -> None:
    """Check the values of the valid frames of ``x [B, T, V]`` (``lengths [B]``; ``None``: every frame) for a
    decoder that takes any scores (the WFST decoder): ``-inf`` entries are allowed (classes of probability
    0); NaN, ``+inf`` and a frame whose classes are all ``-inf`` raise
    :class:`~asrdecode.errors.DecodingInputError`. One sum when every value is finite (the usual case)."""
    if not bool(torch.isfinite(x.sum())):
        _reject_bad_values(name, x, lengths)


def _largest_abs_logsumexp(x: torch.Tensor, lengths: torch.Tensor | None) -> float:
    """The largest ``|logsumexp|`` of the valid frames of ``x [B, T, V]`` (0 without one); not finite when a
    valid frame holds a NaN or +inf or only -inf. One pass: the native engine's when it is loaded, one
    ``logsumexp`` otherwise."""
    native = _lib.log_prob_extremes(x, lengths)
    if native is not None:
        return native[0]
    lse = torch.logsumexp(x, dim=-1)
    if lengths is not None:
        lse = lse[valid_mask(lengths, x.shape[1])]
    return float(lse.abs().max()) if lse.numel() else 0.0


def _reject_bad_values(name: str, x: torch.Tensor, lengths: torch.Tensor | None) -> None:
    """Raise if a valid frame of ``x [B, T, V]`` holds a NaN or +inf, or only -inf (no class possible)."""
    valid = x if lengths is None else x[valid_mask(lengths, x.shape[1])]
    if bool(torch.isnan(valid).any()) or bool(torch.isposinf(valid).any()):
        raise DecodingInputError(f"{name} contains NaN or +inf values in valid frames")
    if valid.numel() and bool(torch.isneginf(valid.amax(dim=-1)).any()):
        raise DecodingInputError(f"{name} has a valid frame whose classes are all -inf (no class is possible)")


def check_positive_int(name: str, value: object) -> int:
    """Check that ``value`` is an integer >= 1 (Python or numpy int, not bool); return it as an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DecodingInputError(f"{name} must be an int >= 1, got {value!r}")
    if value < 1:
        raise DecodingInputError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_float(name: str, value: object, *, positive: bool = False, allow_inf: bool = False) -> float:
    """Check that ``value`` is a real number (finite unless ``allow_inf``; > 0 if ``positive``)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DecodingInputError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise DecodingInputError(f"{name} must be finite, got {v}")
    if positive and not v > 0:
        raise DecodingInputError(f"{name} must be > 0, got {v}")
    return v


def check_beam_search_args(
    log_probs: object,
    lengths: object,
    blank_id: object,
    tokenizer: Any,
    *,
    log_softmax: bool,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The data checks shared by the batched and the reference CTC beam search (the settings are
    :class:`~asrdecode.configs.CTCBeamConfig`'s, checked when it was made).

    Returns ``(log_probs [B, T, V], lengths [B], blank)``.
    """
    x, lens = prepare_log_probs(log_probs, lengths, log_softmax=log_softmax)
    blank = check_blank_id(blank_id, x.shape[2])
    check_tokenizer(tokenizer, x.shape[2])
    return x, lens, blank
