"""ARPA files read by the native engine (``arpa.cpp``): :func:`asrdecode.lm.read_arpa`'s first reader.

The file is read in blocks of :data:`CHUNK` bytes (4 MiB; gzip data decompressed block by block), each
block handed to the C++ reader, which parses it in one pass and writes every n-gram straight into numpy
arrays sized by the header's counts: int32 word ids, float32 log10 probabilities and backoffs, and the
n-gram trie's links (each n-gram's context and longest proper suffix, :class:`~asrdecode.lm.arpa.ArpaModel`'s
``context`` / ``suffix``: int32 while every order below the highest has under 2^25 n-grams, else
int64). Lines are kept as runs (``ArpaModel.line_runs``), not per n-gram. No Python object
is made per n-gram, and memory holds one block of text at a time (the line reader's limits apply: line
length, ``max_bytes``, the gzip ratio, given by the caller).

:func:`read` returns the arrays (:class:`NativeArpa`; ``asrdecode.lm.arpa`` makes the
:class:`~asrdecode.lm.arpa.ArpaModel`, this module does not import it), or ``None`` for anything the
C++ reader does not take (a malformed file, an unusual number such as ``-inf``, non-UTF-8 words, a
duplicate, a limit passed): the caller then reads the file with the Python readers, which give the
same model or the error naming file and line.
"""

from __future__ import annotations

import ctypes
import gzip
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import _lib
from .abi import ArpaArgs

__all__ = ["read", "NativeArpa", "CHUNK"]

#: bytes of text handed to the C++ reader per call (the memory the text takes while reading)
CHUNK = 1 << 22
_MAX_ORDER = 32  # arpa.cpp's kMaxOrder
_MORE, _NEED_OUTPUTS, _DONE, _FALLBACK, _BAD_ARGS = 0, 1, 2, 3, -1
_GZIP_MAGIC = b"\x1f\x8b"
#: int32 links hold indices below this (a suffix link is ``(index << 6) | order``); arpa.cpp's kNarrowLimit
NARROW_LINKS = 1 << 25


@dataclass
class NativeArpa:
    """What the reader found: the 1-gram words and, per order, the arrays of
    :class:`~asrdecode.lm.arpa.ArpaModel` (``context`` / ``suffix``: its trie links) and the runs of
    n-grams on consecutive lines (int64 ``[R_k, 2]``: index of a run's first n-gram, its line)."""

    vocab: list[str]
    words: list[np.ndarray]
    logprob: list[np.ndarray]
    backoff: list[np.ndarray]
    has_backoff: list[np.ndarray]
    runs: list[np.ndarray]
    context: list[np.ndarray]
    suffix: list[np.ndarray]


class _Outputs:
    """The arrays of every order, sized by the declared ``counts``, and the pointer tables that bind them."""

    def __init__(self, counts: list[int]) -> None:
        order = len(counts)
        self.counts = counts
        self.words = [np.empty((c, k), dtype=np.int32) for k, c in enumerate(counts, start=1)]
        self.logprob = [np.empty(c, dtype=np.float32) for c in counts]
        # zero-filled (the reader writes only the backoffs a line has): calloc'd pages never written stay
        # out of memory, as the highest order's do
        self.backoff = [np.zeros(c, dtype=np.float32) for c in counts]
        self.has_backoff = [np.zeros(c, dtype=bool) for c in counts]
        # the trie links of orders >= 3 (a 1-gram has none; a 2-gram's are its words)
        links = link_dtype(counts)
        self.context = [np.empty(c if k > 2 else 0, dtype=links) for k, c in enumerate(counts, start=1)]
        self.suffix = [np.empty(c if k > 2 else 0, dtype=links) for k, c in enumerate(counts, start=1)]
        self.link_bytes = links.itemsize
        self.capacity = np.asarray(counts, dtype=np.int64)
        table = ctypes.c_void_p * order
        self.tables = {name: table(*(a.ctypes.data for a in getattr(self, name)))
                       for name in ("words", "logprob", "backoff", "has_backoff", "context", "suffix")}

    def bind(self, args: ArpaArgs) -> None:
        args.link_bytes = self.link_bytes
        args.capacity = self.capacity.ctypes.data
        for name, table in self.tables.items():
            setattr(args, name, ctypes.cast(table, ctypes.c_void_p))


def link_dtype(counts: list[int]) -> np.dtype:
    """The trie links' dtype for these declared counts: int32 while every order below the highest has
    under :data:`NARROW_LINKS` n-grams, else int64."""
    return np.dtype(np.int32 if all(c < NARROW_LINKS for c in counts[:-1]) else np.int64)


def _fits(counts: list[int], text_bytes: int) -> bool:
    """Whether ``text_bytes`` of text can hold the declared n-grams (a k-gram line takes >= 2k + 1 bytes),
    so a header that declares more than the file holds allocates nothing."""
    return sum(c * (2 * k + 1) for k, c in enumerate(counts, start=1)) <= text_bytes


def read(path: str | os.PathLike, max_bytes: Optional[int], *, max_line_bytes: int,
         max_gzip_ratio: int) -> Optional[NativeArpa]:
    """The arrays of ``path`` read by the C++ reader, or ``None`` where the Python readers must read it
    (see the module docstring); the limits as :func:`~asrdecode.lm.read_arpa`'s (``max_bytes`` of text,
    ``max_line_bytes`` per line, a gzip file's text at most ``max_gzip_ratio`` times its size). Raises
    :class:`~asrdecode.native._lib.NativeEngineUnavailable` without the engine."""
    lib = _lib.load()
    path = Path(path)
    try:
        raw = open(path, "rb", buffering=0)
    except OSError:
        return None
    with raw:
        try:
            st = os.fstat(raw.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None  # a device or pipe: the line reader bounds it
            gz = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
        except OSError:
            return None
        if path.name.endswith(".gz") and not gz:
            return None
        limit = max_bytes
        if gz:
            bomb = max_gzip_ratio * st.st_size + max_line_bytes
            limit = bomb if limit is None else min(limit, bomb)
        src = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        text_bytes = limit if gz else st.st_size
        try:
            return _read(lib, src, limit, int(text_bytes or 0), max_line_bytes)
        except (OSError, EOFError, zlib.error):
            return None  # a corrupt or truncated gzip stream: the line reader names it


def _read(lib: ctypes.CDLL, src, limit: Optional[int], text_bytes: int, max_line_bytes: int) -> Optional[NativeArpa]:
    """Feed ``src`` block by block to a C++ reader; the arrays, or ``None`` (see :func:`read`)."""
    reader = lib.asrd_arpa_open(max_line_bytes)
    if not reader:
        raise _lib.NativeMemoryError("the native ARPA reader ran out of memory")
    try:
        counts = np.zeros(_MAX_ORDER, dtype=np.int64)
        args = ArpaArgs()
        args.counts = counts.ctypes.data
        args.max_order = _MAX_ORDER
        err = ctypes.create_string_buffer(256)
        buf = np.empty(CHUNK, dtype=np.uint8)
        out: Optional[_Outputs] = None
        total = 0
        while True:
            n = src.readinto(buf)
            total += n
            if limit is not None and total > limit:
                return None
            args.data, args.length, args.final_chunk = buf.ctypes.data, n, int(n == 0)
            rc = lib.asrd_arpa_feed(reader, ctypes.byref(args), err, len(err))
            if rc == _NEED_OUTPUTS:
                declared = [int(c) for c in counts[: args.order]]
                if not _fits(declared, text_bytes):
                    return None
                out = _Outputs(declared)
                out.bind(args)
                args.data, args.length = buf.ctypes.data + args.consumed, n - args.consumed
                rc = lib.asrd_arpa_feed(reader, ctypes.byref(args), err, len(err))
            if rc == _FALLBACK:
                return None
            if rc < 0 or rc == _NEED_OUTPUTS:
                _lib.check_status(rc, "the native ARPA reader", err.value.decode("utf-8", "replace"))
                raise _lib.NativeEngineError(f"the native ARPA reader refused its arguments (code {rc})")
            if rc == _DONE or n == 0:
                break
        if rc != _DONE or out is None:
            return None
        return _arrays(lib, reader, out)
    finally:
        lib.asrd_arpa_close(reader)


def _arrays(lib: ctypes.CDLL, reader: int, out: _Outputs) -> Optional[NativeArpa]:
    """The arrays of a file read to its end (``None`` when a word is not UTF-8)."""
    size = int(lib.asrd_arpa_vocab(reader, None, 0))
    blob = np.empty(max(size, 1), dtype=np.uint8)
    lib.asrd_arpa_vocab(reader, blob.ctypes.data, size)
    try:
        text = blob[:size].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    vocab = text.split("\n") if out.counts[0] else []
    if len(vocab) != out.counts[0]:
        return None
    return NativeArpa(vocab, out.words, out.logprob, out.backoff, out.has_backoff, _runs(lib, reader, len(out.counts)),
                      out.context, out.suffix)


def _runs(lib: ctypes.CDLL, reader: int, order: int) -> list[np.ndarray]:
    """Per order, the reader's runs of n-grams on consecutive lines (int64 ``[R_k, 2]``: first index, line)."""
    out = []
    for k in range(1, order + 1):
        n = int(lib.asrd_arpa_lines(reader, k, None, 0))
        runs = np.empty(max(n, 0), dtype=np.int64)
        if n > 0:
            lib.asrd_arpa_lines(reader, k, runs.ctypes.data, n)
        out.append(runs.reshape(-1, 2))
    return out
