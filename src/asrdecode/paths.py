"""Output paths checked before any work: a command that would decode for minutes and then fail
to write its results is refused up front."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import AsrDecodeError

__all__ = ["OutputPathError", "check_output_path"]


class OutputPathError(AsrDecodeError, ValueError):
    """An output path cannot be written (missing or read-only folder, or a folder in its place)."""


def check_output_path(path: str | os.PathLike | None, option: str = "--output") -> None:
    """Raise :class:`OutputPathError` naming ``option`` unless ``path`` (a file to write) can be
    created: its folder exists and is writable, and ``path`` is not a folder. ``None`` (stdout) passes."""
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
