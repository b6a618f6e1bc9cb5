"""Progress on stderr for the steps a user waits on: one policy for every command.

* :func:`progress` gives a tqdm bar on stderr when stderr is a terminal and progress is not
  silenced, else a no-op bar with the same methods (``update``, ``close``, context manager);
* :func:`status` prints a one-line status message (a stage of a graph build, a graph built on
  first use) on stderr unless progress is silenced;
* :func:`set_quiet` silences both (the CLI's ``--quiet``); errors and warnings are not progress
  and always print.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO

from .errors import DecodingInputError

__all__ = ["progress", "status", "set_quiet", "is_quiet", "NoBar", "PeriodicStatus"]

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence (``True``) or allow (``False``) progress bars and status lines in this process."""
    global _quiet
    if not isinstance(quiet, bool):
        raise DecodingInputError(f"quiet must be a bool, got {type(quiet).__name__}")
    _quiet = quiet


def is_quiet() -> bool:
    """Whether :func:`set_quiet` silenced progress."""
    return _quiet


class NoBar:
    """A progress bar that shows nothing (tqdm's ``update`` / ``close`` / ``set_postfix_str``)."""

    def __init__(self, total: Optional[float] = None) -> None:
        self.total = total
        self.n: float = 0

    def update(self, n: float = 1) -> None:
        """Count ``n`` more units done."""
        self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Ignored."""

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> "NoBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PeriodicStatus(NoBar):
    """A progress "bar" for a stderr that is not a terminal (a log file, a pipe): at most one line
    ``DESC: N / TOTAL UNIT`` every ``every_s`` seconds, printed by ``update``."""

    def __init__(self, total: Optional[float], desc: str, unit: str, stream: TextIO, every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(total)
        if not every_s > 0:
            raise DecodingInputError(f"every_s must be > 0, got {every_s!r}")
        self.desc, self.unit, self.stream, self.every_s, self.clock = desc, unit, stream, every_s, clock
        self._last = clock()

    def update(self, n: float = 1) -> None:
        """Count ``n`` more units; print a status line when ``every_s`` passed since the last one."""
        super().update(n)
        now = self.clock()
        if now - self._last >= self.every_s:
            self._last = now
            of = "" if self.total is None else f" / {self.total:.1f}"
            print(f"asrdecode: {self.desc}: {self.n:.1f}{of} {self.unit}", file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(total: Optional[float], desc: str, unit: str = "it", *, file: Optional[TextIO] = None,
             every_s: Optional[float] = None) -> Any:
    """A progress bar on ``file`` (default: stderr) of ``total`` units (``None``: unknown).

    Returns a ``tqdm`` bar when ``file`` is a terminal, progress is not silenced and tqdm is
    installed; otherwise a :class:`NoBar`, or with ``every_s`` (and progress not silenced) a
    :class:`PeriodicStatus` printing one line every ``every_s`` seconds. Fractional units (audio
    seconds) are shown with one decimal.
    """
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float)) or total < 0):
        raise DecodingInputError(f"progress total must be a number >= 0 or None, got {total!r}")
    stream = sys.stderr if file is None else file
    if _quiet:
        return NoBar(total)
    if not _is_terminal(stream):
        return NoBar(total) if every_s is None else PeriodicStatus(total, desc, unit, stream, every_s)
    try:
        from tqdm import tqdm
    except ImportError:
        return NoBar(total)
    fmt = "{l_bar}{bar}| {n:.1f}/{total:.1f} {unit} [{elapsed}<{remaining}]" \
        if isinstance(total, float) and not float(total).is_integer() else None
    return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, mininterval=0.5,
                **({"bar_format": fmt} if fmt else {}))


def status(message: str, *, file: Optional[TextIO] = None) -> None:
    """Print ``message`` as one line on ``file`` (default: stderr) unless progress is silenced."""
    if _quiet:
        return
    stream = sys.stderr if file is None else file
    print(message, file=stream, flush=True)
