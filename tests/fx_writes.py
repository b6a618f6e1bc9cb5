"""Which graph inputs a traced (Dynamo) graph writes: the property that keeps a compiled round clear of
Inductor's in-place paths (a kernel writing a buffer it also gathers from, synthetic bases of aliased
inputs). Used by tests/app/test_compile_exact.py with a recording ``torch.compile`` backend."""

from __future__ import annotations

import operator
from typing import Any

import torch.fx

#: ops whose result may share its input's memory (a write to it writes the input)
_VIEWS = frozenset({
    "view", "view_as", "reshape", "unbind", "select", "expand", "expand_as", "permute", "narrow", "unsqueeze",
    "squeeze", "transpose", "t", "getitem", "__getitem__", "as_strided", "diagonal", "unflatten", "flatten",
    "split", "chunk", "movedim", "contiguous", "detach", "alias",
})  # fmt: skip


def _name(node: torch.fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def _nodes(value: Any) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (tuple, list)):
        return [n for v in value for n in _nodes(v)]
    return []


def input_writes(gm: torch.fx.GraphModule) -> list[str]:
    """The nodes of ``gm`` that write (in place, ``out=``, item assignment) a graph input or a view of one."""
    derived: set[torch.fx.Node] = set()
    writes: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            derived.add(node)
            continue
        if node.op not in ("call_function", "call_method"):
            continue
        name = _name(node)
        first = node.args[0] if node.args else None
        if (name in _VIEWS or node.target is operator.getitem) and first in derived:
            derived.add(node)
            continue
        targets = _nodes(node.kwargs.get("out"))
        if node.target is operator.setitem or (name.endswith("_") and not name.startswith("__")):
            targets += _nodes(first)
        if any(t in derived for t in targets):
            writes.append(node.format_node())
    return writes


class RecordingBackend:
    """A ``torch.compile`` backend that keeps every graph Dynamo traced and runs it uncompiled."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        self.graphs.append(gm)
        return gm.forward
