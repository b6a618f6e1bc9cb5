"""Which engine runs a search: the one place that resolves the ``engine=`` setting every search with a
native twin takes (:class:`~asrdecode.configs.EngineSetting`).

``"native"`` (the C++ engine: CPU tensors, eager execution), ``"torch"`` (the tensor engine: any
device, compile / CUDA graphs) or ``"auto"`` (native where it can run and is available, else torch,
with one warning when the engine could not be built). :func:`use_native` decides from the device and
the mode; :func:`native_fit` also asks the search whether this call fits its C++ twin (model weights,
dtype) and turns a misfit into the named error of ``engine="native"`` or the tensor engine of ``"auto"``.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional, TypeVar

import torch

from ..configs import ENGINES
from ..errors import DecodingInputError
from . import _lib

__all__ = ["ENGINES", "use_native", "native_fit"]

_warned_fallback = False
T = TypeVar("T")


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


def native_fit(engine: object, device: torch.device, what: str, fit: Callable[[], tuple[Optional[T], str]],
               task: str, *, eager: bool = True) -> Optional[T]:
    """What the C++ search runs this call with (``fit() -> (it, why not)``, asked only when
    :func:`use_native` picks the native engine), or None for the tensor engine; ``engine="native"`` where
    ``fit`` finds nothing is a named error saying why (``task``: "run this NeMo beam search", ...)."""
    if not use_native(engine, device, what, eager=eager):
        return None
    found, why = fit()
    if found is None and engine == "native":
        raise DecodingInputError(f"engine='native' cannot {task}: {why}; use engine='torch' or 'auto'")
    return found
