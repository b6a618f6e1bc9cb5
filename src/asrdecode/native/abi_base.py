"""What the generated ctypes mirrors (``abi.py``, made by ``abi_gen.py`` from ``abi.h``) are built on: the
keyword-only struct base, the scalar ctypes and the reader of the library's own layout table."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

__all__ = ["Struct", "P", "I", "D", "F", "c_layout"]

P = ctypes.c_void_p
I = ctypes.c_int64  # noqa: E741  (the C field type int64_t, as the generated tables spell it)
D = ctypes.c_double
F = ctypes.c_float


@functools.lru_cache(maxsize=None)
def _names(cls: type) -> frozenset[str]:
    """The field names of a struct class (made once per class: a set per instance cost ~1 us a struct)."""
    return frozenset(f[0] for f in cls._fields_)  # type: ignore[attr-defined]


class Struct(ctypes.Structure):
    """A C struct filled by field name (a positional argument would bind by declaration order)."""

    def __init__(self, **fields: Any) -> None:
        super().__init__()
        names = _names(type(self))
        for key, value in fields.items():
            if key not in names:
                raise TypeError(f"{type(self).__name__} has no field {key!r}")
            setattr(self, key, value)


def c_layout(lib: ctypes.CDLL) -> dict[str, tuple[int, list[tuple[str, int, int]]]]:
    """The library's layout table: per C struct, ``(sizeof, [(field, offset, size), ...])`` in declaration order
    (``lib`` as :func:`~asrdecode.native._lib.load` returns it: its signatures bound from ``exports.py``)."""
    fn = lib.asrd_abi_field
    out: dict[str, tuple[int, list[tuple[str, int, int]]]] = {}
    t, f, off, size = ctypes.c_char_p(), ctypes.c_char_p(), I(), I()
    i = 0
    while fn(i, ctypes.byref(t), ctypes.byref(f), ctypes.byref(off), ctypes.byref(size)):
        name, field = (t.value or b"").decode(), (f.value or b"").decode()
        if not field:
            out[name] = (size.value, [])
        else:
            out[name][1].append((field, off.value, size.value))
        i += 1
    return out
