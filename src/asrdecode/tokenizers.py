"""Tokenizers that turn token ids into text: characters and sentencepiece.

Token ids are the model's ids; the blank id is never part of a hypothesis, so a tokenizer only
needs to know the non-blank symbols.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import DecodingInputError

__all__ = ["CharTokenizer", "SentencePieceTokenizer", "spell", "UNKNOWN_POLICIES"]

UNKNOWN_POLICIES = ("error", "skip")


def spell(tokenizer: Any, text: str) -> tuple[list[int], list[str]]:
    """Token ids of ``text`` and the characters the tokenizer cannot spell (empty when all can).

    ``tokenizer`` has ``encode(text) -> ids`` (or is that callable). A tokenizer with an
    ``unk_id`` (sentencepiece) maps characters outside its vocabulary to that id, silently and
    several in a row to one (``"word1"`` and ``"word2"`` both become ``▁wor d <unk>``): the
    characters of ``text`` whose own spelling holds ``unk_id`` are reported. A tokenizer that
    raises :class:`DecodingInputError` on an unknown character (:class:`CharTokenizer`) reports
    the characters it cannot encode one by one.
    """
    encode: Callable[[str], Sequence[int]] = tokenizer.encode if hasattr(tokenizer, "encode") else tokenizer
    unk = getattr(tokenizer, "unk_id", None)
    try:
        ids = [int(t) for t in encode(text)]
    except DecodingInputError:
        ids = None
    if ids is not None and (unk is None or int(unk) not in ids):
        return ids, []
    unknown: list[str] = []
    for ch in dict.fromkeys(text):  # distinct characters, in order
        if ch.isspace():
            continue
        try:
            own = [int(t) for t in encode(ch)]
        except DecodingInputError:
            unknown.append(ch)
            continue
        if unk is not None and int(unk) in own:
            unknown.append(ch)
    if not unknown:  # the unknown id without an unknown character alone (context-dependent): the text
        unknown = [text]
    return ids or [], unknown


class CharTokenizer:
    """One symbol per id; ``space`` (default ``"▁"`` or ``" "``) marks word boundaries.

    Args:
        symbols: the symbol of every id, blank included (its entry is never printed).
        blank_id: index of the blank symbol in ``symbols``.
    """

    def __init__(self, symbols: Sequence[str], blank_id: int, space: str = " ") -> None:
        if not 0 <= blank_id < len(symbols):
            raise DecodingInputError(f"blank_id {blank_id} outside 0..{len(symbols) - 1}")
        self.symbols = list(symbols)
        self.blank_id = blank_id
        self.space = space
        self._index = {s: i for i, s in enumerate(self.symbols) if i != blank_id}

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def decode(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            if not 0 <= int(i) < len(self.symbols) or int(i) == self.blank_id:
                raise DecodingInputError(f"token id {int(i)} is not a non-blank symbol of this tokenizer")
            out.append(self.symbols[int(i)])
        return "".join(out).replace(self.space, " ").strip()

    def encode(self, text: str) -> list[int]:
        ids = []
        for ch in text.replace(" ", self.space):
            if ch not in self._index:
                raise DecodingInputError(f"character {ch!r} is not in the tokenizer's symbols")
            ids.append(self._index[ch])
        return ids


class SentencePieceTokenizer:
    """A sentencepiece model whose piece ids are shifted to make room for the blank.

    Model ids are sentencepiece ids, except that ``blank_id`` is inserted: ids ``>= blank_id``
    map to piece ``id - 1``. With ``blank_id = vocab_size_of_sp`` (blank last, as NeMo does) the
    ids are unchanged.
    """

    def __init__(self, model_path: str | Path, blank_id: int | None = None) -> None:
        try:
            import sentencepiece as spm
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("SentencePieceTokenizer needs `pip install sentencepiece`") from err
        self.sp = spm.SentencePieceProcessor(model_file=str(model_path))
        n = self.sp.get_piece_size()
        self.blank_id = n if blank_id is None else int(blank_id)
        if not 0 <= self.blank_id <= n:
            raise DecodingInputError(f"blank_id {self.blank_id} outside 0..{n}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size() + 1

    @property
    def unk_id(self) -> int | None:
        """Model id of sentencepiece's unknown piece (what characters outside the vocabulary become)."""
        u = int(self.sp.unk_id())
        if u < 0:
            return None
        return u + 1 if u >= self.blank_id else u

    def _to_piece(self, i: int) -> int:
        if i == self.blank_id or not 0 <= i < self.vocab_size:
            raise DecodingInputError(f"token id {i} is not a non-blank id of this tokenizer")
        return i - 1 if i > self.blank_id else i

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([self._to_piece(int(i)) for i in ids])

    def encode(self, text: str) -> list[int]:
        return [p + 1 if p >= self.blank_id else p for p in self.sp.encode(text)]

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(self._to_piece(i))
