"""The validation of a :class:`~asrdecode.lm.word.WordNGramLM`'s arrays (see :mod:`asrdecode._validation`):
what the engines read beside its two automata (each validated by itself)."""

from __future__ import annotations

from typing import Any

import torch

from .._validation import Checker, ValidationMark

__all__ = ["validate_word_lm", "ensure_word_lm_valid"]

_ARRAYS = ("end_label", "end_const", "is_start", "start_node", "start_score")


def _parts(w: Any) -> tuple:
    return (w.node_bits, w.vocab_size, w.blank_id, w.word_lm, w.trie, *(getattr(w, n) for n in _ARRAYS))


def validate_word_lm(w: Any) -> None:
    """Check ``w``'s arrays (ranges, lengths, dtypes, no NaN / +inf scores) and mark it validated;
    raises :class:`~asrdecode.errors.DecodingInputError`."""
    c = Checker("WordNGramLM")
    w.word_lm.validate()
    w.trie.ensure_valid()
    nodes, V = w.trie.num_states, w.trie.vocab_size
    if w.vocab_size != V or w.blank_id != w.trie.blank_id:
        c.fail(f"vocab_size / blank_id ({w.vocab_size}, {w.blank_id}) differ from the trie's ({V}, {w.trie.blank_id})")
    bits = c.integer("node_bits", w.node_bits, 1, 63)
    if nodes > (1 << bits) or w.word_lm.num_states.bit_length() + bits > 62:
        c.fail(f"node_bits {bits} does not fit {nodes} trie nodes and {w.word_lm.num_states} LM states in an int64")
    for name, kind, length in (("end_label", "int", nodes), ("end_const", "float", nodes), ("is_start", "bool", V),
                               ("start_node", "int", V), ("start_score", "float", V)):
        t = c.tensor(name, getattr(w, name), ndim=1, length=length, kind=kind)
        want = {"int": torch.int64, "float": torch.float32, "bool": torch.bool}[kind]
        if t.dtype != want:
            c.fail(f"{name} must be {want}, got {t.dtype}")
    c.in_range("end_label", w.end_label, 0, w.word_lm.vocab_size)
    c.in_range("start_node", w.start_node, 0, nodes)
    c.no_nan("end_const", w.end_const)
    c.no_nan("start_score", w.start_score)
    w._valid_mark = ValidationMark(_parts(w))


def ensure_word_lm_valid(w: Any) -> None:
    """Cheap when nothing changed since :func:`validate_word_lm`; else validate again (skipped while
    torch.compile traces)."""
    if torch.compiler.is_compiling():
        return
    mark = w.__dict__.get("_valid_mark")
    if mark is None or not mark.matches(_parts(w)):
        validate_word_lm(w)
    else:
        w.word_lm.automaton.ensure_valid()
        w.trie.ensure_valid()
