"""The test suite's import folders: tests/ (the shared helpers) and its subfolders (one per package module).

Test files import each other and the helpers by bare module name (``from lockstep import Lockstep``,
``from test_ctc_wfst import LEXICON``), so every folder is on ``sys.path``: conftest.py adds them at
collection; a subprocess or a benchmark that imports test modules gets them from :func:`pythonpath` /
:func:`add_to_sys_path`. Test files have unique basenames (no ``__init__.py`` files)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FOLDERS: list[Path] = [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._")]


def add_to_sys_path() -> None:
    """Put every folder of :data:`FOLDERS` on ``sys.path`` (after the entries already there)."""
    for folder in map(str, FOLDERS):
        if folder not in sys.path:
            sys.path.append(folder)


def pythonpath(existing: str | None = None) -> str:
    """A ``PYTHONPATH`` value: every folder of :data:`FOLDERS`, then ``existing`` (default: the environment's)."""
    rest = os.environ.get("PYTHONPATH", "") if existing is None else existing
    return os.pathsep.join([*map(str, FOLDERS), *([rest] if rest else [])])
