"""Token-level LMs: how model token ids are written as the "words" of an n-gram LM.

An LM for a subword or character model is estimated over *token ids*, so that its vocabulary is
the model's own. :class:`TokenMap` fixes the spelling of each id:

* ``TokenMap.offset(vocab_size, blank_id, offset=100)`` (the default, as NeMo does): id ``i`` is
  the one-character word ``chr(i + offset)``. ``offset >= 33`` keeps every word clear of ASCII
  whitespace and control characters, which is all that KenLM and :func:`~asrdecode.lm.read_arpa`
  split on (they split on ASCII whitespace only, so characters such as U+0085 or U+00A0 are
  ordinary words). Ids must stay below the surrogate range (``vocab_size + offset <= 0xD800``).
* ``TokenMap.from_words(words, blank_id)``: an explicit word per id (e.g. a word-level
  vocabulary); words must be non-empty, distinct, free of ASCII whitespace and not ``<s>``,
  ``</s>``, ``<unk>``.

``encode_line(ids)`` writes one training sentence for :func:`~asrdecode.lm.estimate_arpa` and
``decode_line(text)`` maps it back. The blank is never a word.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..errors import DecodingInputError, check_int
from .arpa import BOS, EOS, UNK

__all__ = ["TokenMap", "write_token_corpus"]

_ASCII_WS = set(" \t\n\r\x0b\x0c")


class TokenMap:
    """Bidirectional map between model token ids and LM words (see the module docstring)."""

    def __init__(self, vocab_size: int, blank_id: int | None, words: Sequence[str | None], offset: int | None = None):
        self.vocab_size = int(vocab_size)
        self.blank_id = None if blank_id is None else int(blank_id)
        self.offset_value = offset
        self._words = list(words)
        self._ids: dict[str, int] = {}
        for i, w in enumerate(self._words):
            if w is None:
                continue
            if w in self._ids:
                raise DecodingInputError(f"words: {w!r} is the word of both id {self._ids[w]} and id {i}")
            self._ids[w] = i

    @classmethod
    def offset(cls, vocab_size: int, blank_id: int | None = None, offset: int = 100) -> "TokenMap":
        """Id ``i`` <-> ``chr(i + offset)`` for every non-blank id ``0 <= i < vocab_size``."""
        _check_vocab(vocab_size, blank_id)
        if not isinstance(offset, int) or offset < 33:
            raise DecodingInputError(f"offset must be an int >= 33 (clear of ASCII whitespace), got {offset!r}")
        if vocab_size + offset > 0xD800:
            raise DecodingInputError(
                f"vocab_size + offset = {vocab_size + offset} reaches the UTF-16 surrogate range (0xD800)"
            )
        words = [None if i == blank_id else chr(i + offset) for i in range(vocab_size)]
        return cls(vocab_size, blank_id, words, offset=offset)

    @classmethod
    def from_words(cls, words: Sequence[str | None], blank_id: int | None = None) -> "TokenMap":
        """Id ``i`` <-> ``words[i]``; ``words[blank_id]`` is ignored (may be ``None``)."""
        _check_vocab(len(words), blank_id)
        out: list[str | None] = []
        for i, w in enumerate(words):
            if i == blank_id:
                out.append(None)
                continue
            if not isinstance(w, str) or not w:
                raise DecodingInputError(f"words[{i}] must be a non-empty str, got {w!r}")
            if any(c in _ASCII_WS for c in w):
                raise DecodingInputError(f"words[{i}] = {w!r} contains ASCII whitespace")
            if w in (BOS, EOS, UNK):
                raise DecodingInputError(f"words[{i}] = {w!r} is a reserved ARPA marker")
            out.append(w)
        return cls(len(words), blank_id, out)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, int], vocab_size: int, blank_id: int | None = None) -> "TokenMap":
        """From ``{word: token id}``; ids without a word are unknown to the LM (scored as ``<unk>``)."""
        _check_vocab(vocab_size, blank_id)
        words: list[str | None] = [None] * vocab_size
        for w, i in mapping.items():
            if not isinstance(i, int) or not 0 <= i < vocab_size:
                raise DecodingInputError(f"token_map[{w!r}] = {i!r} is outside 0..{vocab_size - 1}")
            if i == blank_id:
                raise DecodingInputError(f"token_map[{w!r}] maps to the blank id {blank_id}")
            if words[i] is not None:
                raise DecodingInputError(f"token id {i} has two words: {words[i]!r} and {w!r}")
            if not isinstance(w, str) or not w or any(c in _ASCII_WS for c in w):
                raise DecodingInputError(f"token_map word {w!r} must be a non-empty str without ASCII whitespace")
            words[i] = w
        return cls(vocab_size, blank_id, words)

    def word(self, token_id: int) -> str:
        """The LM word of ``token_id``."""
        i = int(token_id)
        if not 0 <= i < self.vocab_size:
            raise DecodingInputError(f"token id {i} is outside 0..{self.vocab_size - 1}")
        w = self._words[i]
        if w is None:
            raise DecodingInputError(f"token id {i} has no LM word (it is the blank or unmapped)")
        return w

    def token(self, word: str) -> int | None:
        """The token id of ``word``, or ``None`` if it is not a model token."""
        return self._ids.get(word)

    def words(self) -> list[str | None]:
        """The word of every id (``None`` for the blank / unmapped ids)."""
        return list(self._words)

    def encode_line(self, ids: Iterable[int]) -> str:
        """One training sentence: the words of ``ids`` separated by spaces (blank ids are errors)."""
        return " ".join(self.word(i) for i in ids)

    def decode_line(self, line: str) -> list[int]:
        """Token ids of a line written by :meth:`encode_line` (split on ASCII spaces only)."""
        out = []
        for w in line.strip(" \t\r\n").split(" "):
            if not w:
                continue
            i = self._ids.get(w)
            if i is None:
                raise DecodingInputError(f"word {w!r} is not a model token")
            out.append(i)
        return out

    def __repr__(self) -> str:
        kind = f"offset={self.offset_value}" if self.offset_value is not None else "words"
        return f"TokenMap(vocab_size={self.vocab_size}, blank_id={self.blank_id}, {kind})"


def _check_vocab(vocab_size: object, blank_id: object) -> None:
    vocab_size = check_int("vocab_size", vocab_size, low=1)
    if blank_id is not None and (not isinstance(blank_id, int) or not 0 <= blank_id < vocab_size):
        raise DecodingInputError(f"blank_id must be None or in 0..{vocab_size - 1}, got {blank_id!r}")


def write_token_corpus(token_map: TokenMap, sequences: Iterable[Sequence[int]], path: str | os.PathLike) -> Path:
    """Write one line per token-id sequence (lmplz's input format); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for seq in sequences:
            f.write(token_map.encode_line(seq) + "\n")
    return path
