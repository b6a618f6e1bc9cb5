"""Every ```python block of the user documentation (docs/*.md guides and README.md) runs.

Each file's blocks run in order in one namespace (a later block may use names of an earlier one),
from the repository root, so that examples can name bundled files by their paths in the source
tree. A failing block is reported with its file and first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["docs/decoders.md", "docs/lm_and_graphs.md", "docs/streaming.md", "docs/serving.md", "README.md"]
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of every fenced ```python block of a markdown text."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def test_block_extraction() -> None:
    md = "a\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(md) == [(3, "x = 1\n"), (10, "y = x + 1\n")]


@pytest.mark.parametrize("doc", DOCS)
def test_doc_examples_run(doc: str, monkeypatch) -> None:
    path = ROOT / doc
    assert path.is_file(), f"{doc} is missing"
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    assert blocks, f"{doc} has no python examples"
    monkeypatch.chdir(ROOT)
    torch.manual_seed(0)
    namespace: dict = {"__name__": f"docs_example_{path.stem}"}
    for line, code in blocks:
        try:
            exec(compile(code, f"{doc}:{line}", "exec"), namespace)
        except Exception as err:  # report the block, keep the traceback
            raise AssertionError(f"{doc}, example at line {line} failed: {type(err).__name__}: {err}") from err
