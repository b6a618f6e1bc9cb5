"""Where files go: the per-user cache folder (:func:`user_cache_dir`), and output paths checked before
any work (a command that would decode for minutes and then fail to write its results is refused up front).

The check writes: a probe file is created (and removed) in the target folder, the way the results
will be written (a temporary file beside the target, then renamed), so a folder that only *looks*
writable (``/proc``, a read-only mount, a full quota, a permission ``os.access`` misjudges) is
refused before decoding, not after.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import AsrDecodeError

__all__ = ["OutputPathError", "check_output_path", "check_output_dir", "user_cache_dir"]


def user_cache_dir() -> Path:
    """The per-user cache folder (not created here): ``$ASRDECODE_CACHE``; else ``$XDG_CACHE_HOME/asrdecode``
    when that variable holds an absolute path (the XDG rule: a relative one is ignored); else
    ``~/.cache/asrdecode``. Built graphs and LMs live in its ``graphs/`` folder; the native library
    falls back to it when the package folder is read-only."""
    env = os.environ.get("ASRDECODE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "asrdecode"
    return Path.home() / ".cache" / "asrdecode"


class OutputPathError(AsrDecodeError, ValueError):
    """An output path cannot be written (missing or read-only folder, or a folder in its place)."""


def _probe(folder: Path, option: str, target: Path) -> None:
    """Create and remove a small file in ``folder``; any failure -> :class:`OutputPathError`."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name or 'out'}.", suffix=".probe", dir=str(folder))
    except OSError as err:
        raise OutputPathError(f"{option} {target}: cannot write in the output folder {folder} "
                              f"({err.strerror or err})") from None
    try:
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
    except OSError as err:
        raise OutputPathError(f"{option} {target}: cannot write in the output folder {folder} "
                              f"({err.strerror or err})") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def check_output_path(path: str | os.PathLike | None, option: str = "--output") -> None:
    """Raise :class:`OutputPathError` naming ``option`` unless ``path`` (a file to write) can be
    created: its folder exists and a probe file can be written there, and ``path`` is not a
    folder. ``None`` (stdout) passes. The target itself is not created or touched."""
    if path is None:
        return
    p = Path(path)
    folder = p.parent
    if not folder.is_dir():
        raise OutputPathError(f"{option} {p}: the output folder {folder} does not exist")
    if p.is_dir():
        raise OutputPathError(f"{option} {p}: is a folder, expected a file path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{option} {p}: the output folder {folder} is not writable")
    _probe(folder, option, p)


def check_output_dir(path: str | os.PathLike, option: str = "output_dir") -> Path:
    """Create the output folder ``path`` (and its parents) if needed and check that files can be
    written in it (a probe file); return it. Raises :class:`OutputPathError` naming ``option``."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{option} {p}: is a file, expected a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputPathError(f"{option} {p}: cannot create the folder ({err.strerror or err})") from None
    _probe(p, option, p / "out")
    return p
