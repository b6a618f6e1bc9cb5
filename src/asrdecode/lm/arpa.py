"""ARPA n-gram files: reading, writing, and estimation with KenLM's ``lmplz``.

An ARPA file stores log10 probabilities and log10 backoff weights::

    \\data\\
    ngram 1=<count>
    ngram 2=<count>

    \\1-grams:
    <log10 p> <w1> [<log10 backoff>]
    ...
    \\2-grams:
    <log10 p> <w1> <w2> [<log10 backoff>]
    ...
    \\end\\

Words are separated by ASCII whitespace only (as KenLM does), so token-level LMs may use any
non-ASCII-whitespace character as a word (see :class:`asrdecode.lm.TokenMap`). ``<s>``,
``</s>`` and ``<unk>`` are the sentence-start, sentence-end and unknown-word markers.

:func:`read_arpa` returns an :class:`ArpaModel` (numpy arrays per order, word ids into a
vocabulary list), with a :class:`~asrdecode.errors.FileFormatError` naming the file and line
for every malformed input. :func:`estimate_arpa` runs KenLM's ``lmplz`` (built by
``recipes/build_kenlm.sh``); no estimator is written here.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import subprocess
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..errors import DecodingInputError, FileFormatError

__all__ = [
    "BOS",
    "EOS",
    "UNK",
    "ArpaModel",
    "read_arpa",
    "write_arpa",
    "estimate_arpa",
    "find_kenlm_tool",
    "prune_vocabulary",
    "drop_words",
]

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"

@dataclass
class ArpaModel:
    """An ARPA back-off n-gram model held as arrays (log10 values, as in the file).

    Attributes:
        vocab: every word of the 1-grams, in file order; word id = index in this list.
        words: per order ``k`` (index ``k - 1``), int32 ``[n_k, k]`` word ids of each n-gram.
        logprob: per order, float32 ``[n_k]`` log10 probabilities: the file's decimal read as Python's
            ``float()`` reads it, then rounded to float32 (any float64 given is rounded so); the LMs built
            from a model compute in float64 from these values and keep float32 weights.
        backoff: per order, float32 ``[n_k]`` log10 backoff weights (0 where absent), rounded alike.
        has_backoff: per order, bool ``[n_k]``: whether the file gave a backoff weight.
        lines: per order, int64 ``[n_k]`` line number of each n-gram (0 when built in memory), or an
            empty list where the lines are kept as ``line_runs`` (the native reader) or unknown.
        path: the file it was read from (for error messages), if any.
        context, suffix: the n-gram trie's links as the native reader found them (empty lists when
            unknown): per order ``k >= 3``, int32 ``[n_k]`` (int64 for orders of 2^25 n-grams or more):
            the index (in order ``k - 1``) of each n-gram's context, and ``(index << 6) | m`` of its
            longest proper suffix that is an n-gram (of order ``m``); orders 1 and 2 have empty entries
            (a 2-gram's context is its first word and its longest proper suffix its last: a 1-gram's
            index is its word id). :class:`~asrdecode.lm._trie.NGramTrie` uses them after checking that
            they still name the n-grams' own words (else it looks them up).
        line_runs: the lines without one number per n-gram (empty list when unused): per order, int64
            ``[R_k + 1, 2]``: each run of n-grams on consecutive lines as (index of its first n-gram,
            its line), then ``(n_k, 0)`` (where the n-grams of known lines end). See :meth:`line_of`.
    """

    vocab: list[str]
    words: list[np.ndarray]
    logprob: list[np.ndarray]
    backoff: list[np.ndarray]
    has_backoff: list[np.ndarray]
    lines: list[np.ndarray] = field(default_factory=list)
    path: str | None = None
    context: list[np.ndarray] = field(default_factory=list)
    suffix: list[np.ndarray] = field(default_factory=list)
    line_runs: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        with np.errstate(over="ignore"):  # a log10 value beyond float32's range is -inf (readers refuse +inf)
            self.logprob = [np.asarray(x, dtype=np.float32) for x in self.logprob]
            self.backoff = [np.asarray(x, dtype=np.float32) for x in self.backoff]

    @property
    def order(self) -> int:
        return len(self.words)

    def counts(self) -> list[int]:
        """Number of n-grams of each order."""
        return [int(w.shape[0]) for w in self.words]

    def word_index(self) -> dict[str, int]:
        """Mapping word -> word id."""
        return {w: i for i, w in enumerate(self.vocab)}

    def line_of(self, order: int, i: int) -> int | None:
        """File line of the ``i``-th n-gram of ``order`` (``None`` when unknown)."""
        if len(self.lines) >= order and self.lines[order - 1].shape[0] > i and self.lines[order - 1][i] > 0:
            return int(self.lines[order - 1][i])
        if len(self.line_runs) >= order:
            runs = self.line_runs[order - 1]
            if runs.shape[0] >= 2 and 0 <= i < int(runs[-1, 0]):
                j = int(np.searchsorted(runs[:-1, 0], i, side="right")) - 1
                line = int(runs[j, 1] + (i - runs[j, 0]))
                return line if runs[j, 1] > 0 else None
        return None

    def line_numbers(self, order: int) -> np.ndarray:
        """The line of every n-gram of ``order``: int64 ``[n_k]`` (0 where unknown)."""
        n = self.words[order - 1].shape[0]
        if len(self.lines) >= order and self.lines[order - 1].shape[0] == n:
            return self.lines[order - 1].astype(np.int64)
        if len(self.line_runs) >= order:
            return lines_of_runs(self.line_runs[order - 1], n)
        return np.zeros(n, dtype=np.int64)

    @classmethod
    def from_dict(cls, ngrams: dict[tuple[str, ...], tuple[float, float | None]]) -> "ArpaModel":
        """Build from ``{(w1, .., wk): (log10 p, log10 backoff or None)}`` (every order in one dict)."""
        if not ngrams:
            raise DecodingInputError("ngrams must not be empty")
        order = max(len(k) for k in ngrams)
        vocab: list[str] = []
        index: dict[str, int] = {}
        for key in ngrams:
            if len(key) == 1 and key[0] not in index:
                index[key[0]] = len(vocab)
                vocab.append(key[0])
        per_order: list[list[tuple[tuple[str, ...], float, float | None]]] = [[] for _ in range(order)]
        for key, (lp, bo) in ngrams.items():
            if len(key) == 0:
                raise DecodingInputError("ngrams: empty n-gram key")
            for w in key:
                if w not in index:
                    raise DecodingInputError(f"ngrams: word {w!r} of {key} has no 1-gram")
            per_order[len(key) - 1].append((key, lp, bo))
        words, lps, bos, hbs = [], [], [], []
        for k, items in enumerate(per_order, start=1):
            words.append(np.array([[index[w] for w in key] for key, _, _ in items], dtype=np.int32).reshape(-1, k))
            lps.append(np.array([lp for _, lp, _ in items], dtype=np.float64))
            bos.append(np.array([0.0 if bo is None else bo for _, _, bo in items], dtype=np.float64))
            hbs.append(np.array([bo is not None for _, _, bo in items], dtype=bool))
        return cls(vocab, words, lps, bos, hbs, [np.zeros(len(x), dtype=np.int64) for x in lps])


def lines_of_runs(runs: np.ndarray, n: int) -> np.ndarray:
    """Per n-gram lines ``[n]`` (int64, 0 past the runs' end) from runs ``[R + 1, 2]`` (see ``ArpaModel.line_runs``)."""
    out = np.zeros(n, dtype=np.int64)
    if runs.shape[0] < 2:
        return out
    end = min(int(runs[-1, 0]), n)
    start = runs[:-1, 0]
    # line - index is constant along a run: repeat each run's offset over its length
    lengths = np.diff(np.minimum(np.append(start, end), end))
    out[:end] = np.repeat(runs[:-1, 1] - start, np.maximum(lengths, 0)) + np.arange(end, dtype=np.int64)
    return out


def runs_of_lines(lines: np.ndarray) -> np.ndarray:
    """The runs ``[R + 1, 2]`` (see ``ArpaModel.line_runs``) of per n-gram lines ``[n]``."""
    lines = np.asarray(lines, dtype=np.int64)
    n = lines.shape[0]
    new = np.ones(n, dtype=bool)
    new[1:] = (np.diff(lines) != 1) | (lines[:-1] <= 0)  # an unknown line (0) is a run of its own
    start = np.flatnonzero(new)
    return np.concatenate([np.stack([start, lines[start]], axis=1), [[n, 0]]]).astype(np.int64)


KENLM_BINARY_MAGIC = b"mmap lm http://kheafield.com/code"
KENLM_BINARY_MESSAGE = ("this is a KenLM binary file (from build_binary); asrdecode reads ARPA text files: pass the "
                        ".arpa (or .arpa.gz) it was built from")


def _open_text(path: Path, mode: str):
    if str(path).endswith(".gz"):
        return gzip.open(path, mode)
    return open(path, mode)


MAX_LINE_BYTES = 1 << 20  # an ARPA line is a few words and two numbers; longer is not ARPA
MAX_GZIP_RATIO = 200  # ARPA text compresses 3-6x; a .gz expanding 200x its size is a bomb
MAX_ARPA_BYTES = 1 << 36  # 64 GiB of text by default (read_arpa's max_bytes)
_GZIP_MAGIC = b"\x1f\x8b"


def read_arpa(path: str | os.PathLike, *, max_bytes: int | None = MAX_ARPA_BYTES, engine: str = "auto") -> ArpaModel:
    """Read an ARPA file (gzip-compressed when it starts with the gzip magic bytes) into an :class:`ArpaModel`.

    Reading is bounded: a line longer than ``MAX_LINE_BYTES`` (1 MiB), more than ``max_bytes``
    of (decompressed) text, or a gzip file that expands over ``MAX_GZIP_RATIO`` (200) times its
    size is an error, so a gzip bomb or ``/dev/zero`` never grows memory or runs unbounded.

    ``engine``: ``"auto"`` (the native engine's reader, :mod:`asrdecode.native.arpa`, when the engine
    is available, else the Python readers), ``"native"`` (it, or
    :class:`~asrdecode.native.NativeEngineUnavailable`) or ``"torch"`` (the Python readers: numpy
    blocks, then line by line). Every reader gives the same model; a file the native reader does not
    take (malformed, or unusual such as ``-inf`` values) is read by the Python readers, which name
    the file and line of an error.

    Raises:
        FileNotFoundError: no such file.
        FileFormatError: missing ``\\data\\`` header or sections, counts that disagree with
            the header, n-grams longer than the declared order, non-numeric or positive log
            probabilities, words absent from the 1-grams, non-UTF-8 words, duplicate n-grams, a
            missing ``\\end\\``; a file named ``.gz`` that is not gzip data, truncated or corrupt
            gzip data, the limits above; the message names the file (and line).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"ARPA file {path} does not exist")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise DecodingInputError(f"max_bytes must be an int >= 1 or None, got {max_bytes!r}")
    if _native_reader(engine):
        native = _read_native(path, max_bytes)
        if native is not None and not _duplicates_of_the_top_order(native):
            return native
        # else: the line reader names the file and line of the problem
    data = _bounded_bytes(path, max_bytes)
    if data is not None:
        model = _parse_fast(data, str(path))
        del data
        if model is not None:
            return model
    # anything the fast path does not take (a malformed file, unusual layout) is read line by line,
    # which names the file and line of the problem
    lines = _bounded_lines(path, max_bytes)
    model = _parse(lines, str(path))
    for _ in lines:  # read to the end: a truncated or corrupt gzip tail (its CRC) is an error too
        pass
    return model


def _read_native(path: Path, max_bytes: int | None) -> ArpaModel | None:
    """``path`` read by the native engine (:mod:`asrdecode.native.arpa`), or ``None`` where it does not take it."""
    from ..native import arpa as native_arpa

    r = native_arpa.read(path, max_bytes, max_line_bytes=MAX_LINE_BYTES, max_gzip_ratio=MAX_GZIP_RATIO)
    if r is None:
        return None
    runs = [np.concatenate([x, [[w.shape[0], 0]]]).astype(np.int64) for x, w in zip(r.runs, r.words)]
    return ArpaModel(r.vocab, r.words, r.logprob, r.backoff, r.has_backoff, [], str(path), context=r.context,
                     suffix=r.suffix, line_runs=runs)


def _native_reader(engine: object) -> bool:
    """Whether ``engine`` (see :func:`read_arpa`) picks the native reader here."""
    import torch

    from ..native.choice import use_native

    return use_native(engine, torch.device("cpu"), "path")


#: how :class:`ArpaModel` holds its scores: part of the cache keys of what is built from them (an LM built
#: from float64 scores differs in the last bit of some weights)
SCORES = "float32 log10"

#: the least float64 that rounds to float32 +inf (a backoff this large is an error: the model keeps float32)
F32_OVERFLOW = 2.0**128 - 2.0**103

#: the fast path's limit on a file's (decompressed) size; larger files are read line by line
FAST_PARSE_MAX_BYTES = 1 << 31
_FAST_CHUNK = 1 << 23  # bytes of n-gram lines parsed per vectorised step (bounds the extra memory)
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True  # bytes.split()'s whitespace


def _bounded_bytes(path: Path, max_bytes: int | None) -> bytes | None:
    """The whole (decompressed) text of ``path`` when it is a regular file within :func:`read_arpa`'s
    limits and :data:`FAST_PARSE_MAX_BYTES`, else ``None`` (then the line reader runs and names the
    problem: a device or pipe such as ``/dev/zero`` has no size to bound a whole read by)."""
    limit = FAST_PARSE_MAX_BYTES if max_bytes is None else min(max_bytes, FAST_PARSE_MAX_BYTES)
    try:
        with open(path, "rb") as raw:
            st = os.fstat(raw.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            size = st.st_size
            gz = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            if gz:
                limit = min(limit, MAX_GZIP_RATIO * size + MAX_LINE_BYTES)
                data = gzip.GzipFile(fileobj=raw, mode="rb").read(limit + 1)
            elif path.name.endswith(".gz") or size > limit:
                return None
            else:
                data = raw.read(limit + 1)
    except (OSError, EOFError, zlib.error):
        return None
    if len(data) > limit or data.startswith(KENLM_BINARY_MAGIC):
        return None
    return data


def _parse_fast(data: bytes, where: str) -> ArpaModel | None:
    """An :class:`ArpaModel` from a well-formed ARPA text, parsed a block of lines at a time with numpy;
    ``None`` for anything unusual (the line reader then parses it or names the error)."""
    head = data.find(b"\\data\\")
    if head < 0 or data[:head].strip():
        return None
    first = data.find(b"\n\\1-grams:", head)
    if first < 0:
        return None
    header = data[head:data.find(b"\n", first + 1) + 1 if data.find(b"\n", first + 1) >= 0 else len(data)]
    try:
        declared, (_, first_section) = _read_header(_Lines(iter(header.splitlines(keepends=True)), where))
    except FileFormatError:
        return None
    order = max(declared)
    if first_section != b"\\1-grams:" or max_line_length(data) > MAX_LINE_BYTES:
        return None
    # the section lines: "\k-grams:" for k = 1..order, then "\end\" (each alone on its line)
    names = [f"\\{k}-grams:".encode() for k in range(1, order + 1)] + [b"\\end\\"]
    marks = [first + 1]
    for name in names[1:]:
        at = data.find(b"\n" + name, marks[-1]) + 1
        if at <= 0:
            return None
        marks.append(at)
    for at, name in zip(marks, names):  # each alone on its line, as the line reader reads it (stripped)
        eol = data.find(b"\n", at)
        if data[at:eol if eol >= 0 else len(data)].strip() != name:
            return None
    vocab: list[str] = []
    index: dict[bytes, int] = {}
    sections = []
    for k in range(1, order + 1):
        start = data.find(b"\n", marks[k - 1]) + 1
        first_line = data.count(b"\n", 0, start) + 1
        section = _fast_section(data, start, marks[k], first_line, k, order, index, vocab)
        if section is None or len(section.logprob) != declared[k]:
            return None
        sections.append(section)
    model = ArpaModel(vocab, [x.words for x in sections], [x.logprob for x in sections],
                      [x.backoff for x in sections], [x.has_backoff for x in sections],
                      [x.lines for x in sections], where)
    try:
        _check_structure(model)
    except FileFormatError:
        return None
    return model


def max_line_length(data: bytes) -> int:
    """The longest line of ``data`` in bytes (newline included)."""
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    ends = np.concatenate([[-1], nl, [len(data) - 1]])
    return int(np.diff(ends).max()) if len(ends) > 1 else len(data)


def _fast_section(data: bytes, start: int, end: int, first_line: int, k: int, order: int,
                  index: dict[bytes, int], vocab: list[str]) -> _Section | None:
    """The ``k``-grams of ``data[start:end]`` (no control line inside), block by block; ``None`` for
    anything the line reader has to judge."""
    parts: list[_Section] = []
    line = first_line
    pos = start
    keys = _WordKeys(index) if k > 1 else None
    while pos < end:
        stop = end if end - pos <= _FAST_CHUNK else data.rfind(b"\n", pos, pos + _FAST_CHUNK) + 1
        if stop <= pos:
            return None
        block = data[pos:stop]
        part = _fast_block(block, line, k, order, index, vocab, keys)
        if part is None:
            return None
        parts.append(part)
        line += block.count(b"\n")
        pos = stop
    if not parts:
        return _Section(np.zeros((0, k), np.int32), np.zeros(0), np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64))
    return _Section(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                      ("words", "logprob", "backoff", "has_backoff", "lines")))


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


def _pack(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each field's first 16 bytes as two uint64 (zero padded), and a 64-bit key mixing them with the length."""
    lo = np.zeros(len(starts), dtype=np.uint64)
    hi = np.zeros(len(starts), dtype=np.uint64)
    last = len(arr) - 1
    for j in range(min(16, int(lengths.max()) if len(lengths) else 0)):
        byte = np.where(j < lengths, arr[np.minimum(starts + j, last)], 0).astype(np.uint64)
        if j < 8:
            lo |= byte << np.uint64(8 * j)
        else:
            hi |= byte << np.uint64(8 * (j - 8))
    key = (lo * _MIX[0]) ^ (hi * _MIX[1]) ^ (lengths.astype(np.uint64) * _MIX[2])
    return lo, hi, key


class _WordKeys:
    """Word ids of n-gram fields by exact byte comparison in numpy (words of at most 16 bytes; the
    dictionary look-up otherwise): an open-addressing hash table of the words' 64-bit keys, probed
    for all fields at once."""

    def __init__(self, index: dict[bytes, int]) -> None:
        words = list(index)
        lens = np.array([len(w) for w in words], dtype=np.int64)
        self.ok = bool(len(words)) and int(lens.max()) <= 16
        if not self.ok:
            return
        buf = np.frombuffer(b"".join(words), dtype=np.uint8)
        starts = np.zeros(len(words), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        self.lo, self.hi, self.key = _pack(buf, starts, lens)
        self.len = lens
        self.ids = np.array([index[w] for w in words], dtype=np.int64)
        self.bits = max(4, (2 * len(words)).bit_length())
        slots = np.full(1 << self.bits, -1, dtype=np.int64)
        mask = (1 << self.bits) - 1
        self.probes = 0
        for i, h in enumerate(self._home(self.key).tolist()):
            n = 0
            while slots[h] >= 0:
                if self.key[slots[h]] == self.key[i]:  # two words, one key: dictionary look-ups instead
                    self.ok = False
                    return
                h = (h + 1) & mask
                n += 1
            slots[h] = i
            self.probes = max(self.probes, n)
        self.slots = slots

    def _home(self, key: np.ndarray) -> np.ndarray:
        return ((key * _MIX[0]) >> np.uint64(64 - self.bits)).astype(np.int64)

    def lookup(self, arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
        """The ids of the fields, or ``None`` when a field is longer than 16 bytes or not a known word."""
        if not self.ok or (len(lengths) and int(lengths.max()) > 16):
            return None
        lo, hi, key = _pack(arr, starts, lengths)
        mask = (1 << self.bits) - 1
        pos = self._home(key)
        found = np.full(len(key), -1, dtype=np.int64)
        todo = np.arange(len(key))
        for _ in range(self.probes + 1):
            cand = self.slots[pos[todo]]
            hit = (cand >= 0) & (self.key[np.maximum(cand, 0)] == key[todo])
            found[todo[hit]] = cand[hit]
            miss = ~hit & (cand >= 0)  # an occupied slot of another key: probe the next one
            todo = todo[miss]
            if not len(todo):
                break
            pos[todo] = (pos[todo] + 1) & mask
        w = found
        if bool(np.any(w < 0)) or not bool(np.all((self.lo[w] == lo) & (self.hi[w] == hi) & (self.len[w] == lengths))):
            return None
        return self.ids[w]


def _fast_block(block: bytes, first_line: int, k: int, order: int, index: dict[bytes, int],
                vocab: list[str], keys: _WordKeys | None = None) -> _Section | None:
    arr = np.frombuffer(block, dtype=np.uint8)
    ws = _WS[arr]
    starts_field = ~ws
    starts_field[1:] &= ws[:-1]
    is_nl = arr == 10
    field_pos = np.flatnonzero(starts_field)
    line_of_field = np.cumsum(is_nl, dtype=np.int32)[field_pos]  # newlines before each field (a field is no newline)
    n_lines = int(is_nl.sum()) + 1
    nf = np.bincount(line_of_field, minlength=n_lines)
    used = np.flatnonzero(nf)
    nf = nf[used]
    if np.any((nf != k + 1) & (nf != k + 2)):
        return None
    tok = np.array(block.split(), dtype=object)
    if len(tok) != int(nf.sum()):
        return None
    if len(nf) == 0:
        return _Section(np.zeros((0, k), np.int32), np.zeros(0), np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int64))
    first = np.zeros(len(nf), dtype=np.int64)
    np.cumsum(nf[:-1], out=first[1:])
    try:
        lp = tok[first].astype(np.float64)
    except (ValueError, TypeError):
        return None
    if np.any(~(lp <= 0)):  # positive or NaN
        return None
    has_bo = nf == k + 2
    bo = np.zeros(len(nf), dtype=np.float64)
    if has_bo.any():
        if k == order:
            return None
        try:
            bo[has_bo] = tok[first[has_bo] + k + 1].astype(np.float64)
        except (ValueError, TypeError):
            return None
        if np.any(np.isnan(bo) | (bo >= F32_OVERFLOW)):
            return None
    word_fields = (first[:, None] + 1 + np.arange(k)[None, :]).reshape(-1)
    if keys is not None:
        ends = ~ws
        ends[:-1] &= ws[1:]
        field_len = np.flatnonzero(ends) - field_pos + 1
        found = keys.lookup(arr, field_pos[word_fields], field_len[word_fields])
        if found is not None:
            return _Section(found.astype(np.int32).reshape(-1, k), lp, bo, has_bo, (used + first_line).astype(np.int64))
    words = tok[word_fields].tolist()
    if k == 1:
        ids = []
        for w in words:
            if w in index:
                return None
            try:
                vocab.append(w.decode("utf-8"))
            except UnicodeDecodeError:
                return None
            index[w] = len(vocab) - 1
            ids.append(index[w])
    else:
        try:
            ids = [index[w] for w in words]
        except KeyError:
            return None
    return _Section(np.array(ids, dtype=np.int32).reshape(-1, k), lp, bo, has_bo,
                    (used + first_line).astype(np.int64))


def _bounded_lines(path: Path, max_bytes: int | None) -> Iterator[bytes]:
    """The lines of ``path`` (bytes, gzip decompressed) within the limits of :func:`read_arpa`."""
    try:
        raw = open(path, "rb")
    except OSError as err:
        raise FileFormatError(path, None, f"cannot open: {err.strerror or err}") from None
    try:
        try:
            head = raw.read(2)
            raw.seek(0)
            size = os.fstat(raw.fileno()).st_size
        except OSError as err:
            raise FileFormatError(path, None, f"cannot read: {err.strerror or err}") from None
        gz = head[:2] == _GZIP_MAGIC
        if path.name.endswith(".gz") and not gz:
            raise FileFormatError(path, None, "the file is named .gz but is not gzip-compressed data")
        limit = max_bytes
        if gz:
            bomb = MAX_GZIP_RATIO * size + MAX_LINE_BYTES
            limit = bomb if limit is None else min(limit, bomb)
        f = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        total, lineno = 0, 0
        while True:
            try:
                line = f.readline(MAX_LINE_BYTES + 1)
            except (OSError, EOFError, zlib.error) as err:
                raise FileFormatError(path, lineno + 1, f"truncated or corrupt gzip data ({err})") from None
            if not line:
                return
            lineno += 1
            if lineno == 1 and line.startswith(KENLM_BINARY_MAGIC):
                raise FileFormatError(path, None, KENLM_BINARY_MESSAGE)
            if len(line) > MAX_LINE_BYTES:
                raise FileFormatError(path, lineno, f"line longer than {MAX_LINE_BYTES} bytes: not an ARPA file")
            total += len(line)
            if limit is not None and total > limit:
                why = (f"decompresses to over {MAX_GZIP_RATIO} times its size (a gzip bomb?)"
                       if gz and limit != max_bytes else f"holds over max_bytes={max_bytes} bytes of text")
                raise FileFormatError(path, lineno, why)
            yield line
    finally:
        raw.close()


def _parse(f: io.BufferedIOBase | Iterable[bytes], where: str) -> ArpaModel:
    """An :class:`ArpaModel` from the lines of an ARPA file (errors name ``where`` and the line)."""
    lines = _Lines(f, where)
    declared, (cur_line, s) = _read_header(lines)
    order = max(declared)
    vocab: list[str] = []
    index: dict[bytes, int] = {}
    sections: list[_Section] = []
    for k in range(1, order + 1):
        expected = f"\\{k}-grams:".encode()
        if s != expected:
            if s == b"\\end\\":
                raise lines.error(cur_line, f"missing section '\\{k}-grams:' (header declares order {order})")
            raise lines.error(cur_line, f"expected {_show(expected)}, got {_show(s)}")
        section, nxt = _read_section(lines, k, order, index, vocab)
        if len(section.logprob) != declared[k]:
            raise lines.error(cur_line, f"the header declares {declared[k]} {k}-grams but the section has "
                                        f"{len(section.logprob)} (lines {cur_line + 1}-{nxt[0] - 1})")
        sections.append(section)
        cur_line, s = nxt
    if s != b"\\end\\":
        if s.startswith(b"\\") and s.endswith(b"-grams:"):
            raise lines.error(cur_line, f"section {_show(s)} is beyond the declared order {order}")
        raise lines.error(cur_line, f"expected '\\end\\', got {_show(s)}")
    model = ArpaModel(vocab, [x.words for x in sections], [x.logprob for x in sections],
                      [x.backoff for x in sections], [x.has_backoff for x in sections],
                      [x.lines for x in sections], where)
    _check_structure(model)
    return model


class _Lines:
    """The lines of an ARPA file with their numbers, and errors that name file and line."""

    def __init__(self, f: io.BufferedIOBase | Iterable[bytes], where: str) -> None:
        self.it = iter(f)
        self.where = where
        self.lineno = 0

    def __iter__(self) -> Iterator[bytes]:
        for raw in self.it:
            self.lineno += 1
            yield raw

    def error(self, line: int | None, msg: str) -> FileFormatError:
        return FileFormatError(self.where, line, msg)


def _read_header(lines: _Lines) -> tuple[dict[int, int], tuple[int, bytes]]:
    """``\\data\\`` and its ``ngram K=COUNT`` lines: the counts per order, and the first section line."""
    for raw in lines:
        s = raw.strip()
        if not s:
            continue
        if s != b"\\data\\":
            raise lines.error(lines.lineno, f"expected the '\\data\\' header, got {_show(s)}")
        break
    else:
        raise lines.error(None, "empty file: no '\\data\\' header")
    declared: dict[int, int] = {}
    section_line = None
    for raw in lines:
        s = raw.strip()
        if not s:
            continue
        if not s.startswith(b"ngram"):
            section_line = (lines.lineno, s)
            break
        try:
            k_s, c_s = s[5:].strip().split(b"=")
            k, c = int(k_s), int(c_s)
        except ValueError:
            raise lines.error(lines.lineno, f"malformed count line {_show(s)}; expected 'ngram K=COUNT'") from None
        if k < 1 or c < 0:
            raise lines.error(lines.lineno, f"malformed count line {_show(s)}")
        if k in declared:
            raise lines.error(lines.lineno, f"count for {k}-grams declared twice")
        declared[k] = c
    if not declared:
        raise lines.error(lines.lineno, "no 'ngram K=COUNT' lines after '\\data\\'")
    order = max(declared)
    if sorted(declared) != list(range(1, order + 1)):
        raise lines.error(None, f"header declares orders {sorted(declared)}; expected 1..{order}")
    if section_line is None:
        raise lines.error(lines.lineno, "no '\\1-grams:' section")
    return declared, section_line


@dataclass
class _Section:
    """One ``\\K-grams:`` section: word ids ``[n, K]``, log10 probs, backoffs, which have one, lines."""

    words: np.ndarray
    logprob: np.ndarray
    backoff: np.ndarray
    has_backoff: np.ndarray
    lines: np.ndarray


def _read_section(lines: _Lines, k: int, order: int, index: dict[bytes, int],
                  vocab: list[str]) -> tuple[_Section, tuple[int, bytes]]:
    """The ``k``-grams up to the next ``\\`` line (1-grams add to ``vocab`` / ``index``); returns the
    section and that next line (number, text)."""
    ids: list[int] = []
    lps: list[float] = []
    bos: list[float] = []
    hbs: list[bool] = []
    lns: list[int] = []
    for raw in lines:
        parts = raw.split()
        if not parts:
            continue
        if parts[0].startswith(b"\\"):
            nxt = (lines.lineno, raw.strip())
            break
        lp, bo = _read_ngram_scores(lines, parts, k, order)
        lps.append(lp)
        bos.append(0.0 if bo is None else bo)
        hbs.append(bo is not None)
        if k == 1:
            w = parts[1]
            if w in index:
                raise lines.error(lines.lineno, f"duplicate 1-gram {_show(w)}")
            index[w] = len(vocab)
            try:
                vocab.append(w.decode("utf-8"))
            except UnicodeDecodeError:
                raise lines.error(lines.lineno, "word is not valid UTF-8") from None
            ids.append(index[w])
        else:
            for w in parts[1 : k + 1]:
                i = index.get(w)
                if i is None:
                    raise lines.error(lines.lineno, f"word {_show(w)} of this {k}-gram is not among the 1-grams")
                ids.append(i)
        lns.append(lines.lineno)
    else:
        raise lines.error(lines.lineno, f"file ends inside the {k}-grams section (no '\\end\\')")
    section = _Section(np.array(ids, dtype=np.int32).reshape(-1, k), np.array(lps, dtype=np.float64),
                       np.array(bos, dtype=np.float64), np.array(hbs, dtype=bool), np.array(lns, dtype=np.int64))
    return section, nxt


def _read_ngram_scores(lines: _Lines, parts: list[bytes], k: int, order: int) -> tuple[float, float | None]:
    """The log10 probability and backoff weight (``None``: none given) of one ``k``-gram line."""
    n = len(parts)
    if n != k + 1 and n != k + 2:
        if n > k + 2:
            raise lines.error(lines.lineno, f"{k}-gram line has {n} fields; an n-gram longer than {k} words "
                                            f"(or extra fields) in the {k}-grams section")
        raise lines.error(lines.lineno, f"{k}-gram line has {n} fields; expected {k + 1} or {k + 2}")
    try:
        lp = float(parts[0])
    except ValueError:
        raise lines.error(lines.lineno, f"log probability {_show(parts[0])} is not a number") from None
    if lp > 0 or lp != lp:
        raise lines.error(lines.lineno, f"log10 probability {lp} must be <= 0")
    if n == k + 1:
        return lp, None
    try:
        bo = float(parts[k + 1])
    except ValueError:
        raise lines.error(lines.lineno, f"backoff weight {_show(parts[k + 1])} is not a number") from None
    if bo != bo or bo == float("inf"):
        raise lines.error(lines.lineno, f"backoff weight {bo} is not finite")
    if bo >= F32_OVERFLOW:
        raise lines.error(lines.lineno, f"backoff weight {bo} is beyond float32's range (the model keeps float32)")
    if k == order:
        raise lines.error(lines.lineno, f"{k}-grams of the highest order cannot have a backoff weight")
    return lp, bo


def _show(b: bytes) -> str:
    text = b.decode("utf-8", "replace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check_structure(model: ArpaModel) -> None:
    """Duplicate n-grams and n-grams whose prefix (context) is missing are errors."""
    from ._trie import NGramTrie

    NGramTrie.build(model)  # raises FileFormatError naming the line


def _duplicates_of_the_top_order(model: ArpaModel) -> bool:
    """Whether the highest order of a model the native reader just read holds an n-gram twice (the reader
    found every missing context and every duplicate of the lower orders itself): its (context, last
    word) keys sorted, neighbours compared (8 bytes per n-gram, not a trie)."""
    N = model.order
    if N < 2 or model.words[N - 1].shape[0] < 2:
        return False
    key = (model.words[1][:, 0] if N == 2 else model.context[N - 1]).astype(np.int64)
    key *= max(len(model.vocab), 1)  # in place: one int64 array at a time
    key += model.words[N - 1][:, -1]
    key.sort()
    return bool(np.any(key[1:] == key[:-1]))


def write_arpa(model: ArpaModel, path: str | os.PathLike) -> Path:
    """Write ``model`` as an ARPA text file (``.gz`` compresses); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_text(path, "wt") as f:
        f.write("\\data\\\n")
        for k, w in enumerate(model.words, start=1):
            f.write(f"ngram {k}={w.shape[0]}\n")
        for k in range(1, model.order + 1):
            f.write(f"\n\\{k}-grams:\n")
            words = model.words[k - 1]
            lp = model.logprob[k - 1]
            bo = model.backoff[k - 1]
            hb = model.has_backoff[k - 1]
            vocab = model.vocab
            out = []
            lp_list, bo_list = score_texts(lp), score_texts(bo)
            for i in range(words.shape[0]):
                text = " ".join(vocab[j] for j in words[i])
                if hb[i]:
                    out.append(f"{lp_list[i]}\t{text}\t{bo_list[i]}\n")
                else:
                    out.append(f"{lp_list[i]}\t{text}\n")
            f.write("".join(out))
        f.write("\n\\end\\\n")
    return path


def score_texts(values: np.ndarray) -> list[str]:
    """The decimal text of each float32 score ``[n]`` that reads back (float64, then float32) to it exactly:
    7 significant digits where they do (an ARPA file's usual precision), else the float64 ``repr``."""
    values = np.asarray(values, dtype=np.float32)
    short = [f"{v:.7g}" for v in values.tolist()]
    back = np.array([float(x) for x in short], dtype=np.float64).astype(np.float32) if short else values
    exact = (back == values) & (np.signbit(back) == np.signbit(values))
    full = values.tolist()  # Python floats: repr round-trips exactly (numpy 2 scalars print as np.float32(...))
    return [x if ok else repr(v) for x, ok, v in zip(short, exact.tolist(), full)]


def find_kenlm_tool(name: str = "lmplz") -> Path:
    """Locate a KenLM binary: ``$ASRDECODE_KENLM_BIN``, ``tools/kenlm/bin`` of the source tree, PATH.

    Raises:
        FileNotFoundError: with the command that builds it.
    """
    candidates = []
    env = os.environ.get("ASRDECODE_KENLM_BIN")
    if env:
        candidates.append(Path(env) / name)
    repo = Path(__file__).resolve().parents[3]
    candidates.append(repo / "tools" / "kenlm" / "bin" / name)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found:
        return Path(found)
    raise FileNotFoundError(
        f"KenLM's {name} was not found (looked in $ASRDECODE_KENLM_BIN, {candidates[-1].parent}, PATH); "
        "build it with recipes/build_kenlm.sh"
    )


def estimate_arpa(
    text_lines: Iterable[str],
    order: int,
    out_path: str | os.PathLike,
    *,
    discount_fallback: bool | None = None,
    prune: Sequence[int] | None = None,
    memory: str = "10%",
    lmplz: str | os.PathLike | None = None,
    extra_args: Sequence[str] = (),
) -> Path:
    """Estimate a modified-Kneser-Ney ARPA model of ``order`` from text with KenLM's ``lmplz``.

    Args:
        text_lines: training sentences, words separated by spaces (for token-level LMs use
            :meth:`asrdecode.lm.TokenMap.encode_line`); no ``<s>``/``</s>`` markers.
        order: n-gram order (>= 1; lmplz needs >= 2 without discount fallback on tiny data).
        out_path: the ARPA file to write.
        discount_fallback: pass ``--discount_fallback`` (needed for tiny corpora). ``None``
            (default): try without, and retry with it if lmplz reports a discount problem.
        prune: optional ``--prune`` thresholds, one per order.
        memory: lmplz ``-S`` memory limit.
        lmplz: path of the lmplz binary (default: :func:`find_kenlm_tool`).
        extra_args: more lmplz arguments.

    Returns:
        ``out_path`` as a :class:`~pathlib.Path`.
    """
    if not isinstance(order, int) or isinstance(order, bool) or order < 1:
        raise DecodingInputError(f"order must be a positive int, got {order!r}")
    lines = []
    for i, line in enumerate(text_lines):
        if not isinstance(line, str):
            raise DecodingInputError(f"text_lines[{i}] must be a str, got {type(line).__name__}")
        if "\n" in line.rstrip("\n"):
            raise DecodingInputError(f"text_lines[{i}] contains a newline inside the line")
        lines.append(line.rstrip("\n"))
    if not any(line.strip() for line in lines):
        raise DecodingInputError("text_lines holds no words")
    binary = Path(lmplz) if lmplz is not None else find_kenlm_tool("lmplz")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(lines) + "\n").encode("utf-8")

    def run(fallback: bool) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="lmplz_") as tmp:
            cmd = [str(binary), "-o", str(order), "-S", memory, "-T", tmp, "--arpa", str(out_path)]
            if fallback:
                cmd.append("--discount_fallback")
            if prune:
                cmd += ["--prune", *[str(int(p)) for p in prune]]
            cmd += list(extra_args)
            return subprocess.run(cmd, input=data, capture_output=True)

    res = run(bool(discount_fallback))
    if res.returncode != 0 and discount_fallback is None and b"discount" in res.stderr.lower():
        res = run(True)
    if res.returncode != 0:
        tail = res.stderr.decode("utf-8", "replace").strip().splitlines()[-8:]
        raise RuntimeError(f"lmplz failed (exit {res.returncode}):\n" + "\n".join(tail))
    return out_path


def prune_vocabulary(model: ArpaModel, n_words: int) -> ArpaModel:
    """Keep the ``n_words`` most likely words (by unigram log-prob, plus ``<s>``/``</s>``; ``<unk>`` dropped)
    and only the n-grams made of kept words. Backoff weights are kept as they are (not renormalised),
    so the result is a smaller approximate LM, e.g. for a quick decoding graph."""
    if n_words < 1:
        raise DecodingInputError(f"n_words must be >= 1, got {n_words}")
    order = np.argsort(-model.logprob[0], kind="stable")
    keep = np.zeros(len(model.vocab), dtype=bool)
    keep[order[:n_words]] = True
    for s in ("<s>", "</s>"):
        if s in model.vocab:
            keep[model.vocab.index(s)] = True
    if "<unk>" in model.vocab:
        keep[model.vocab.index("<unk>")] = False
    return _keep_words(model, keep, f"{model.path} (pruned to {n_words} words)")


def drop_words(model: ArpaModel, words: Iterable[str]) -> ArpaModel:
    """``model`` without ``words`` and every n-gram holding one (backoff weights kept as they are,
    as in :func:`prune_vocabulary`); ``model`` itself when none of ``words`` is in it."""
    index = model.word_index()
    drop = [index[w] for w in words if w in index]
    if not drop:
        return model
    keep = np.ones(len(model.vocab), dtype=bool)
    keep[drop] = False
    return _keep_words(model, keep, f"{model.path} (without {len(drop)} words)")


def _keep_words(model: ArpaModel, keep: np.ndarray, path: str) -> ArpaModel:
    """The n-grams of ``model`` made of kept words only (``keep [len(vocab)]``), word ids renumbered."""
    new_id = np.cumsum(keep) - 1
    words, lps, bos, hbs, lines, runs = [], [], [], [], [], []
    for k in range(model.order):
        m = keep[model.words[k]].all(axis=1)
        words.append(new_id[model.words[k][m]].astype(model.words[k].dtype))
        lps.append(model.logprob[k][m])
        bos.append(model.backoff[k][m])
        hbs.append(model.has_backoff[k][m])
        if model.lines:
            lines.append(model.line_numbers(k + 1)[m])
        elif model.line_runs:  # runs stay runs (one order's lines at a time)
            runs.append(runs_of_lines(model.line_numbers(k + 1)[m]))
    vocab = [w for w, kp in zip(model.vocab, keep) if kp]
    return ArpaModel(vocab, words, lps, bos, hbs, lines, path=path, line_runs=runs)
