"""A per-user cache of built artefacts (decoding graphs), keyed by a hash of their inputs.

Files live in ``$ASRDECODE_CACHE``, ``$XDG_CACHE_HOME/asrdecode`` or ``~/.cache/asrdecode``. An entry is two files: the artefact
(``NAME-KEY.pt``) and its record (``NAME-KEY.json``: the key, the inputs, the artefact's size,
modification time, SHA-256 and CRC-32, build time and peak memory). Both are written
atomically (temp file + ``os.replace``), the record last, so a crash mid-build leaves no entry; an
entry whose record or artefact does not match (stale key, truncated or altered file) is reported and
rebuilt, never used. An entry that passed the check is vouched for in this process
(:func:`asrdecode._validation.note_verified_file`): a graph loader opening that very file skips the
validation its record says these bytes already passed (``validated_by``: the rules' fingerprint, written
after the first full validation), about 1 s of every use of the default model's graph.

Every use checks the whole artefact: its size and a CRC-32 of all its bytes (zlib, 1 MiB blocks:
~0.15 s for 300 MB here, against 0.45 s for SHA-256 and 0.62 s for BLAKE2b; a sample of blocks missed
bytes altered between them). A record written before the CRC-32 (no ``crc32``) is checked by its
full SHA-256 once and gains the CRC-32.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping

from .._validation import note_verified_file
from ..errors import FileFormatError
from ..paths import user_cache_dir

__all__ = ["cache_dir", "input_key", "file_digest", "file_crc32", "sample_digest", "cached_file", "CacheEntry",
           "CacheError"]

#: bump when the layout of cached artefacts changes: every old entry becomes stale
FORMAT = 2


class CacheError(FileFormatError):
    """The cache cannot be used: a path it needs is the wrong kind of file (``$ASRDECODE_CACHE`` a file,
    a directory where an entry's file belongs) or cannot be written; the message names the path."""


def _check_kinds(folder: Path, files: tuple[Path, ...]) -> None:
    """Raise :class:`CacheError` when ``folder`` or one of its parents is not a directory, or one of
    ``files`` exists but is not a regular file (asrdecode never deletes what it did not write)."""
    for d in (*reversed(folder.parents), folder):
        if d.exists() and not d.is_dir():
            hint = " ($ASRDECODE_CACHE must name a folder)" if os.environ.get("ASRDECODE_CACHE") else ""
            raise CacheError(d, None, f"the cache needs a folder here, found a file{hint}")
    for f in files:
        if f.exists() and not f.is_file():
            raise CacheError(f, None, "the cache keeps a file here, found a directory or another kind of file; "
                                      "remove it")


def cache_dir() -> Path:
    """:func:`asrdecode.paths.user_cache_dir`: ``$ASRDECODE_CACHE``, else ``$XDG_CACHE_HOME/asrdecode``, else
    ``~/.cache/asrdecode`` (created on first use)."""
    return user_cache_dir()


def file_digest(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_crc32(path: str | os.PathLike, chunk: int = 1 << 20) -> int:
    """zlib CRC-32 of a file's bytes, read in ``chunk``-byte blocks (the fast whole-file check)."""
    crc = 0
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
    return crc


def sample_digest(path: str | os.PathLike, blocks: int = 16, block: int = 1 << 16) -> str:
    """SHA-256 of the file's size and ``blocks`` blocks of ``block`` bytes spread evenly over it
    (first and last included; the whole file when it is that small)."""
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode("ascii"))
    with open(path, "rb") as f:
        if size <= blocks * block:
            h.update(f.read())
        else:
            for k in range(blocks):
                f.seek((size - block) * k // (blocks - 1))
                h.update(f.read(block))
    return h.hexdigest()


def input_key(inputs: Mapping[str, Any]) -> str:
    """A hex key of ``inputs`` (JSON-able values: file digests, sizes, option values)."""
    blob = json.dumps({"format": FORMAT, **inputs}, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()[:20]


class CacheEntry:
    """The artefact ``path`` built from ``inputs`` and the record describing it (``info``)."""

    def __init__(self, path: Path, info: dict[str, Any], built: bool) -> None:
        self.path = path
        self.info = info
        self.built = built


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB elsewhere


def _problem(path: Path, record: Path, key: str) -> tuple[str | None, tuple[os.stat_result, dict[str, Any]] | None]:
    """Why the entry cannot be used (``None`` when it can), and, when it can, the artefact's stat taken before
    its bytes were checked and its record (as kept: an older one gains its CRC-32 and new mtime)."""
    if not record.exists():
        return ("missing" if not path.exists() else "it has no record (an interrupted build)"), None
    try:
        info = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"its record {record.name} is unreadable ({err})", None
    if not isinstance(info, dict) or info.get("key") != key:
        return "its record does not match the inputs (stale)", None
    if not path.is_file():
        return f"{path.name} is missing", None
    st = path.stat()
    if st.st_size != info.get("size"):
        return f"{path.name} has {st.st_size} bytes, its record says {info.get('size')} (truncated or altered)", None
    dirty = st.st_mtime_ns != info.get("mtime_ns")  # the same bytes under a new time (copied, touched)
    if "crc32" not in info:  # a record of an older release: the full SHA-256 once, then the CRC-32 kept
        if file_digest(path) != info.get("sha256"):
            return f"{path.name} does not match its record's SHA-256 (corrupt)", None
        info["crc32"], dirty = file_crc32(path), True
    elif file_crc32(path) != info.get("crc32"):
        return f"{path.name} does not match its record's CRC-32 (corrupt: altered after it was built)", None
    if dirty:
        info["mtime_ns"] = st.st_mtime_ns
        try:
            _write_atomic(record, lambda p: p.write_text(json.dumps(info, indent=1), encoding="utf-8"))
        except OSError:  # a read-only cache: checked again next time
            pass
    return None, (st, info)


def cached_file(name: str, inputs: Mapping[str, Any], build: Callable[[Path], None], *, what: str = "",
                log: Callable[[str], None] | None = None) -> CacheEntry:
    """The cached artefact ``name`` for ``inputs``, built by ``build(tmp_path)`` when missing or invalid.

    ``build`` writes the artefact to the path it is given (a temp file, renamed into place when it
    returns). Progress and rebuild messages go to ``log`` (default: :func:`asrdecode.progress.status`:
    stderr, silenced by the CLI's ``--quiet``).

    Raises:
        CacheError: a cache path is the wrong kind of file, or the cache cannot be written.
    """
    key = input_key(inputs)
    folder = cache_dir() / "graphs"
    path, record = folder / f"{name}-{key}.pt", folder / f"{name}-{key}.json"
    try:
        _check_kinds(folder, (path, record))
        return _cached(name, key, inputs, build, path, record, what, log)
    except OSError as err:  # the cache (its folder, a parent, a file) cannot be read or written; others pass
        where = Path(os.fsdecode(err.filename)) if isinstance(err.filename, (str, bytes, os.PathLike)) else None
        if isinstance(err, CacheError) or where is None or not (where in folder.parents or folder in
                                                               (where, *where.parents)):
            raise
        raise CacheError(where, None, f"cannot use the cache folder {folder} ({err.strerror or err}); "
                                      "set ASRDECODE_CACHE to a writable folder") from None


def _cached(name: str, key: str, inputs: Mapping[str, Any], build: Callable[[Path], None], path: Path, record: Path,
            what: str, log: Callable[[str], None] | None) -> CacheEntry:
    """:func:`cached_file`'s work once the paths are known to be of the right kind."""
    from ..progress import status

    say = log or status
    folder = path.parent
    problem, checked = _problem(path, record, key)
    if checked is not None:
        st, kept = checked
        _note(path, record, st, kept)
        return CacheEntry(path, kept, built=False)
    if problem != "missing":
        say(f"asrdecode: cached {what or name} at {path} is not usable: {problem}; rebuilding it")
        record.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    say(f"asrdecode: building {what or name} (once; cached in {folder}) ...")
    t0 = time.perf_counter()
    _write_atomic(path, build)
    seconds = time.perf_counter() - t0
    st = path.stat()
    info: dict[str, Any] = {"key": key, "inputs": dict(inputs), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "sha256": file_digest(path), "crc32": file_crc32(path),
            "build_seconds": round(seconds, 1), "peak_rss_mb": round(_peak_rss_mb())}
    _write_atomic(record, lambda p: p.write_text(json.dumps(info, indent=1), encoding="utf-8"))
    say(f"asrdecode: built {what or name} in {seconds:.0f} s ({info['size'] / 2**20:.0f} MB)")
    _note(path, record, st, info)
    return CacheEntry(path, info, built=True)


def _note(path: Path, record: Path, st: os.stat_result, info: dict[str, Any]) -> None:
    """Vouch for the artefact's bytes in this process (``_validation.note_verified_file``): a loader that
    opens this very file may skip the validation its record says these bytes passed (``validated_by``), and
    records that fingerprint after a full one."""
    def remember(fingerprint: str) -> None:
        try:
            now = json.loads(record.read_text(encoding="utf-8"))
            if not isinstance(now, dict) or any(now.get(k) != info.get(k) for k in ("key", "size", "mtime_ns", "crc32")):
                return  # the entry was rebuilt or changed since it was checked: that record is not ours to edit
            now["validated_by"] = fingerprint
            _write_atomic(record, lambda p: p.write_text(json.dumps(now, indent=1), encoding="utf-8"))
        except (OSError, ValueError):  # a read-only cache, or an unreadable record: validated again next time
            pass

    validated_by = info.get("validated_by")
    note_verified_file(path, st, validated_by if isinstance(validated_by, str) else None, remember)
