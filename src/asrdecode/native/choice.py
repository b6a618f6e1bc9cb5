"""Which engine runs a search: the ``engine=`` argument every search with a native twin takes.

``"native"`` (the C++ engine: CPU tensors, eager execution), ``"torch"`` (the tensor engine: any
device, compile / CUDA graphs) or ``"auto"`` (native where it can run and is available, else torch,
with one warning when the engine could not be built).
"""

from __future__ import annotations

import warnings

import torch

from ..errors import DecodingInputError
from . import _lib

__all__ = ["ENGINES", "use_native"]

ENGINES = ("auto", "native", "torch")
_warned_fallback = False


def use_native(engine: object, device: torch.device, what: str, *, eager: bool = True) -> bool:
    """Resolve ``engine`` for a search on ``device`` (``what``: the tensor argument, for messages;
    ``eager``: False when an acceleration mode that needs the tensor engine was asked for)."""
    global _warned_fallback
    if not isinstance(engine, str) or engine not in ENGINES:
        raise DecodingInputError(f"engine must be one of {', '.join(repr(e) for e in ENGINES)}, got {engine!r}")
    if engine == "torch":
        return False
    if device.type != "cpu" or not eager:
        if engine == "native":
            why = f"{what} is on {device}" if device.type != "cpu" else "an acceleration mode other than 'eager' was asked for"
            raise DecodingInputError(f"engine='native' needs CPU tensors and eager execution; {why}")
        return False
    if engine == "native":
        _lib.load()  # raises NativeEngineUnavailable with the reason
        return True
    if _lib.available():
        return True
    if not _warned_fallback and not _lib.disabled():
        _warned_fallback = True
        warnings.warn(f"asrdecode: native engine unavailable ({_lib.unavailable_reason()}); using the torch engine",
                      RuntimeWarning, stacklevel=3)
    return False
