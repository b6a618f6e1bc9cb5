"""The "validated" mark of the structures the search engines read (graphs, LMs, boosting trees).

A structure is checked once when it is loaded or built (its ``validate()``: offsets monotone and in
range, labels and states in range, lengths consistent, scores finite where required) and keeps a
:class:`ValidationMark`: the tensor objects it was checked with and their in-place version counters.
Before an engine reads the arrays, ``ensure_valid()`` compares the structure's current arrays with the
mark (a few microseconds): a structure changed since (an array replaced, or changed in place, e.g.
``arc_offsets *= 1000``) is validated again and refused with a named error if it no longer passes.

Not seen: writes through another view of the memory (``tensor.numpy()[...] = x``) and in-place writes
to inference-mode tensors (they keep no version counter).

**Files a cache vouches for.** A file of the per-user cache (:mod:`asrdecode.models.graph_cache`) is
checked against its record on every use (size and a CRC-32 of all its bytes). The cache notes such a
file here (:func:`note_verified_file`: its identity as checked, and the fingerprint of the validation
rules its bytes last passed, from its record); a loader that opens the same file (same device, inode,
size, modification time: not replaced or rewritten since) and runs rules of that fingerprint may skip
its ``validate()``, and after a full validation it records its fingerprint there (``remember``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Optional, Sequence

import torch

from .errors import DecodingInputError

__all__ = ["ValidationMark", "Checker", "version_of", "weights_versions", "VerifiedFile", "note_verified_file",
           "verified_file"]


def version_of(t: torch.Tensor) -> int:
    """The in-place version counter of ``t`` (-1 for an inference tensor, which keeps none)."""
    try:
        return t._version
    except RuntimeError:
        return -1


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bit_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t``'s elements' bit patterns (a 0-d int64 tensor on its device)."""
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(_BITS[flat.element_size()]).sum(dtype=torch.int64)


def weights_versions(tensors: Sequence[torch.Tensor]) -> list[tuple[int, int]]:
    """What a cache of data derived from model weights keys each of ``tensors`` by, so that it notices an
    in-place change: ``(version counter, 0)``, or for an inference tensor (made under
    ``torch.inference_mode``: it keeps no counter, and can be changed in place there) ``(-1, the sum of its
    elements' bit patterns)``: one pass over it (0.3 ms for demo-rnnt's 0.8 M weights on one CPU thread),
    the sums of all of them read in one host read."""
    out: list[tuple[int, int]] = []
    frozen: list[int] = []
    for i, t in enumerate(tensors):
        if t.is_inference():
            frozen.append(i)
            out.append((-1, 0))
        else:
            out.append((t._version, 0))
    if frozen:
        sums = torch.stack([_bit_sum(tensors[i]).to(tensors[frozen[0]].device) for i in frozen]).tolist()
        for i, total in zip(frozen, sums):
            out[i] = (-1, int(total))
    return out


class ValidationMark:
    """What a structure was validated with: ``parts`` (tensors, compared by identity and version;
    anything else by equality)."""

    __slots__ = ("parts", "versions")

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = tuple(parts)
        self.versions = tuple(version_of(p) if isinstance(p, torch.Tensor) else 0 for p in self.parts)

    def matches(self, parts: Sequence[Any]) -> bool:
        """Whether ``parts`` are the same objects, unchanged since the mark was made."""
        if len(parts) != len(self.parts):
            return False
        for now, then, version in zip(parts, self.parts, self.versions):
            if isinstance(then, torch.Tensor):
                if now is not then or version_of(now) != version:
                    return False
            elif now is not then and now != then:
                return False
        return True


class Checker:
    """Named checks of one structure's arrays; every failure raises :class:`DecodingInputError`
    prefixed with the structure's name (``what``)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def fail(self, message: str) -> NoReturn:
        raise DecodingInputError(f"{self.what}: {message}")

    def tensor(self, name: str, t: object, *, ndim: int | None = None, length: int | None = None,
               kind: str | None = None) -> torch.Tensor:
        """``t`` must be a tensor (of rank ``ndim``, ``length`` rows, ``kind`` "int" / "float" / "bool")."""
        if not isinstance(t, torch.Tensor):
            self.fail(f"{name} must be a tensor, got {type(t).__name__}")
        if ndim is not None and t.dim() != ndim:
            self.fail(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
        if length is not None and (t.dim() == 0 or t.shape[0] != length):
            self.fail(f"{name} must have {length} entries, got shape {tuple(t.shape)}")
        if kind == "int" and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            self.fail(f"{name} must be an integer tensor, got {t.dtype}")
        if kind == "float" and not t.is_floating_point():
            self.fail(f"{name} must be a floating-point tensor, got {t.dtype}")
        if kind == "bool" and t.dtype != torch.bool:
            self.fail(f"{name} must be a bool tensor, got {t.dtype}")
        return t

    def in_range(self, name: str, t: torch.Tensor, low: int, high: int) -> None:
        """Every entry of ``t`` in ``[low, high)``."""
        if t.numel() and (int(t.min()) < low or int(t.max()) >= high):
            self.fail(f"{name} must be in [{low}, {high}), found values in [{int(t.min())}, {int(t.max())}]")

    def offsets(self, name: str, ptr: torch.Tensor, count: int) -> None:
        """CSR offsets: start at 0, never decrease, end at ``count``."""
        if ptr.numel() == 0 or int(ptr[0]) != 0 or int(ptr[-1]) != count:
            self.fail(f"{name} must start at 0 and end at the arc count {count}")
        if ptr.numel() > 1 and not bool((ptr[1:] >= ptr[:-1]).all()):
            self.fail(f"{name} must be non-decreasing")

    def no_nan(self, name: str, t: torch.Tensor, *, finite: bool = False) -> None:
        """No NaN and no +inf in ``t`` (``finite``: no -inf either)."""
        if t.numel() == 0:
            return
        if finite:
            if not bool(torch.isfinite(t).all()):
                self.fail(f"{name} must be finite (found NaN or inf)")
        elif bool(torch.isnan(t).any()) or bool((t == float("inf")).any()):
            self.fail(f"{name} must not hold NaN or +inf")

    def integer(self, name: str, v: object, low: int, high: int | None = None) -> int:
        """A plain int in ``[low, high)`` (``high`` None: no upper bound)."""
        if not isinstance(v, int) or isinstance(v, bool) or v < low or (high is not None and v >= high):
            bound = f"[{low}, {high})" if high is not None else f">= {low}"
            self.fail(f"{name} must be an int {bound}, got {v!r}")
        return int(v)


@dataclass(frozen=True)
class VerifiedFile:
    """A file whose bytes a cache checked against its record in this process.

    ``identity``: ``(st_dev, st_ino, st_size, st_mtime_ns)`` when checked; ``validated_by``: the
    fingerprint of the validation rules these bytes passed (from the record; ``None``: not known);
    ``remember(fingerprint)``: writes a fingerprint into the record after a full validation passed."""

    identity: tuple[int, int, int, int]
    validated_by: Optional[str]
    remember: Callable[[str], None]


_VERIFIED: dict[str, VerifiedFile] = {}


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def note_verified_file(path: str | os.PathLike, st: os.stat_result, validated_by: Optional[str],
                       remember: Callable[[str], None]) -> None:
    """Note that the bytes of ``path`` (as ``st`` describes it, taken before they were read) matched a
    cache record (see the module docstring)."""
    _VERIFIED[os.path.realpath(path)] = VerifiedFile(_identity(st), validated_by, remember)


def verified_file(path: str | os.PathLike, st: os.stat_result) -> Optional[VerifiedFile]:
    """What :func:`note_verified_file` noted of ``path``, if the file ``st`` describes (the ``os.fstat`` of
    the file a loader opened) is still that one; else ``None``."""
    noted = _VERIFIED.get(os.path.realpath(path))
    return noted if noted is not None and noted.identity == _identity(st) else None
