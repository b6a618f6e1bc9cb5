"""The library's error types and the input checks every decoder shares.

Every check raises :class:`DecodingInputError` (a ``ValueError``) naming the argument and
what was expected, so bad input never turns into a wrong answer.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Literal, cast, overload

import torch

__all__ = [
    "AsrDecodeError",
    "DecodingInputError",
    "FileFormatError",
    "check_emissions",
    "check_lengths",
    "check_finite",
    "check_int",
    "check_number",
    "check_tokenizer_size",
    "check_weight",
    "check_metadata_number",
    "MAX_ABS_WEIGHT",
    "RemoteCodeError",
    "NonFiniteJointError",
    "NON_FINITE_JOINT_MESSAGE",
]

#: the largest |value| accepted for a fusion weight, a bonus or a score scale: far beyond any
#: useful setting (typical weights are 0.1..10), far below where sums of scores overflow
MAX_ABS_WEIGHT = 1e4


class AsrDecodeError(Exception):
    """Base class of every error raised by asrdecode."""


class DecodingInputError(AsrDecodeError, ValueError):
    """An argument has the wrong shape, dtype, range or content."""


class FileFormatError(AsrDecodeError, ValueError):
    """A file (ARPA, lexicon, graph, manifest) is malformed; the message names file and line."""

    def __init__(self, path: object, line: int | None, message: str) -> None:
        where = f"{path}" if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class RemoteCodeError(FileFormatError):
    """A model file or folder asks to import or run code of its own choosing; asrdecode never does."""


class NonFiniteJointError(DecodingInputError):
    """A transducer's joint network returned NaN or +inf logits, or -inf for every token: the decisions have no
    meaning (every search and engine raises it; a -inf logit alone is a masked class and decodes)."""


NON_FINITE_JOINT_MESSAGE = ("model.joint returned NaN or +inf logits, or -inf for every token (a non-finite decision "
                            "score); check the model's weights and the encoder output")


def check_emissions(name: str, x: object, *, ndim: int = 3) -> torch.Tensor:
    """Check that ``x`` is a floating tensor of rank ``ndim`` (e.g. ``[B, T, D]``)."""
    if not isinstance(x, torch.Tensor):
        raise DecodingInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise DecodingInputError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise DecodingInputError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.layout != torch.strided:
        raise DecodingInputError(f"{name} must be a dense (strided) tensor, got layout {x.layout}")
    if x.device.type == "meta":
        raise DecodingInputError(f"{name} is a meta tensor (no data)")
    return x


def check_finite(name: str, x: torch.Tensor) -> None:
    """Raise if ``x`` holds NaN or +-inf. The sum first (one pass, no mask: 40x faster on CPU): it is
    finite when every value is, unless it overflows; the elementwise test only when it is not."""
    if not bool(torch.isfinite(x.sum())) and not bool(torch.isfinite(x).all()):
        raise DecodingInputError(f"{name} contains NaN or inf values")


_UNSIGNED = tuple(getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n))


def _bounds(low: float | None, high: float | None, *, low_open: bool = False) -> str:
    """The range part of a check's message: `` >= 1``, `` in 0..1``, `` > 0 and <= 5`` or ``""``."""
    def fmt(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"
    if low is not None and high is not None and not low_open:
        return f" in {fmt(low)}..{fmt(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {fmt(low)}")
    if high is not None:
        parts.append(f"<= {fmt(high)}")
    return " " + " and ".join(parts) if parts else ""


@overload
def check_int(name: str, value: object, *, low: int | None = ..., high: int | None = ...,
              optional: Literal[False] = ..., error: Callable[[str], Exception] = ...) -> int: ...
@overload
def check_int(name: str, value: object, *, low: int | None = ..., high: int | None = ...,
              optional: bool, error: Callable[[str], Exception] = ...) -> int | None: ...
def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None,
              optional: bool = False, error: Callable[[str], Exception] = DecodingInputError) -> int | None:
    """An ``int`` (not ``bool``) in ``low..high`` (``None``: unbounded on that side), or ``None`` when
    ``optional``; returned unchanged. Else raises ``error(message)`` (default
    :class:`DecodingInputError`), the message naming ``name`` and the range, e.g.
    ``"beam must be an int >= 1, got 0"``."""
    if value is None and optional:
        return None
    if (isinstance(value, bool) or not isinstance(value, int)
            or (low is not None and value < low) or (high is not None and value > high)):
        raise error(f"{name} must be an int{_bounds(low, high)}{' or None' if optional else ''}, got {value!r}")
    return value


def _as_float(value: object) -> float | None:
    """``value`` as a float when it is an int or a float (not a bool); None otherwise, or for an int
    too large for a float (``10**400`` is no finite number in float arithmetic)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


@overload
def check_number(name: str, value: object, *, low: float | None = ..., high: float | None = ...,
                 low_open: bool = ..., finite: bool = ..., optional: Literal[False] = ...,
                 error: Callable[[str], Exception] = ...) -> float: ...
@overload
def check_number(name: str, value: object, *, low: float | None = ..., high: float | None = ...,
                 low_open: bool = ..., finite: bool = ..., optional: bool,
                 error: Callable[[str], Exception] = ...) -> float | None: ...
def check_number(name: str, value: object, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, finite: bool = True, optional: bool = False,
                 error: Callable[[str], Exception] = DecodingInputError) -> float | None:
    """A real number (``int`` or ``float``, not ``bool``), finite unless ``finite=False`` (NaN is never
    accepted), with ``value >= low`` (``> low`` if ``low_open``) and ``value <= high`` (``None``: no
    bound), or ``None`` when ``optional``; returned unchanged. Else raises ``error(message)``
    (default :class:`DecodingInputError`), e.g. ``"max_wait_ms must be a finite number >= 0, got -1"``."""
    if value is None and optional:
        return None
    v = _as_float(value)
    if (v is None or math.isnan(v) or (finite and math.isinf(v))
            or (low is not None and not (v > low if low_open else v >= low))
            or (high is not None and not v <= high)):
        what = "a finite number" if finite else "a number"
        bounds = _bounds(low, high, low_open=low_open)
        raise error(f"{name} must be {what}{bounds}{' or None' if optional else ''}, got {value!r}")
    return cast(float, value)  # the caller's int or float, unchanged


def check_lengths(lengths: object, batch: int, max_len: int, *, device: torch.device) -> torch.Tensor:
    """Check per-utterance lengths ``[B]`` against the padded length; return them as int64 on ``device``.

    ``None`` means every utterance uses the full ``max_len``.
    """
    if lengths is None:
        return torch.full((batch,), max_len, dtype=torch.long, device=device)
    if not isinstance(lengths, torch.Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError) as err:
            raise DecodingInputError(f"lengths must be a 1-D integer tensor: {err}") from None
    if lengths.dim() != 1:
        raise DecodingInputError(f"lengths must be 1-D [B], got shape {tuple(lengths.shape)}")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise DecodingInputError(f"lengths must have an integer dtype, got {lengths.dtype}")
    if lengths.shape[0] != batch:
        raise DecodingInputError(
            f"lengths has {lengths.shape[0]} entries but the batch has {batch} utterances"
        )
    if lengths.layout != torch.strided or lengths.device.type == "meta":
        raise DecodingInputError(f"lengths must be a dense tensor with data, got layout {lengths.layout} "
                                 f"on {lengths.device}")
    if lengths.dtype in _UNSIGNED:  # torch has no min/max for them: check as Python ints, then int64
        values = lengths.tolist()
        if any(v > max_len for v in values):
            raise DecodingInputError(f"lengths must be <= the padded length {max_len}, got {max(values)}")
        lengths = torch.tensor(values, dtype=torch.long)
    if batch > 0:
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 0:
            raise DecodingInputError(f"lengths must be >= 0, got {lo}")
        if hi > max_len:
            raise DecodingInputError(f"lengths must be <= the padded length {max_len}, got {hi}")
    return lengths.to(device=device, dtype=torch.long)


def check_tokenizer_size(tokenizer: object, vocab_size: int, what: str) -> None:
    """A tokenizer (``None``: none) has ``decode`` and, when it says its ``vocab_size``, ``vocab_size``
    ids; ``what`` names the other side in the message (e.g. ``"the model has 257"``)."""
    if tokenizer is None:
        return
    if not callable(getattr(tokenizer, "decode", None)):
        raise DecodingInputError("tokenizer must have a decode(ids) -> str method")
    size = getattr(tokenizer, "vocab_size", None)
    if size is not None and int(size) != int(vocab_size):
        raise DecodingInputError(f"tokenizer has vocab_size {int(size)} but {what} (blank included)")


def check_weight(name: str, value: object, *, limit: float = MAX_ABS_WEIGHT, positive: bool = False) -> float:
    """A weight, bonus or scale: a real number (not bool) with ``|value| <= limit`` (``> 0`` if
    ``positive``); returned as a float. NaN, inf and huge values (``1e308``) would turn every fused
    score into NaN / inf and the n-best list into nothing, so they are errors."""
    if isinstance(value, (bool, str, bytes)):
        raise DecodingInputError(f"{name} must be a finite number, got {value!r}")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise DecodingInputError(f"{name} must be a finite number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise DecodingInputError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(v) or abs(v) > limit:
        raise DecodingInputError(f"{name} must be a finite number with |{name}| <= {limit:g}, got {v}")
    if positive and not v > 0:
        raise DecodingInputError(f"{name} must be > 0, got {v}")
    return v


def check_metadata_number(where: object, name: str, value: object, lo: float, hi: float,
                          *, integer: bool = True) -> float | int:
    """A number read from a model file's metadata: finite, in ``lo..hi`` (an int when ``integer``).

    Raises :class:`FileFormatError` naming ``where`` (the file) and ``name``: a header value such
    as ``context_size=1e12`` is refused before it becomes an allocation."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if ok and integer and not float(value).is_integer():  # type: ignore[arg-type]  # a numbers.Real
        ok = False
    if not ok or not math.isfinite(float(value)) or not lo <= value <= hi:  # type: ignore[arg-type, operator]
        kind = "an integer" if integer else "a number"
        raise FileFormatError(where, None, f"metadata {name} must be {kind} in {lo:g}..{hi:g}, got {value!r}")
    return int(value) if integer else float(value)  # type: ignore[arg-type, call-overload]
