"""A foreign model's vocabulary (a list of token strings) as an asrdecode tokenizer.

Hugging Face CTC vocabularies (``<pad>`` as blank, ``|`` as word delimiter, ``<s>`` / ``</s>`` /
``<unk>`` specials) and sherpa-onnx ``tokens.txt`` files (sentencepiece pieces with ``▁`` word
starts, ``<blk>``) both become a :class:`PieceTokenizer`: ``decode`` (ids -> text),
``id_to_piece`` (the delimiter as ``"▁"``, so word times and word LMs see a word boundary),
``encode`` (text -> ids, for boosting phrases) and ``vocab_size``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import DecodingInputError, FileFormatError

__all__ = ["PieceTokenizer", "read_tokens_txt", "WORD_START"]

WORD_START = "\u2581"  # sentencepiece's word-start mark
#: blank spellings in tokens.txt files (sherpa-onnx / icefall / NeMo exports)
BLANK_PIECES = ("<blk>", "<blank>", "<b>")


class PieceTokenizer:
    """Token strings by id -> text.

    Args:
        pieces: the string of every id (``None`` for ids the vocabulary file does not name; they
            spell nothing).
        blank_id: the blank's id (never part of a hypothesis).
        delimiter: the word-delimiter token (HF's ``|``), or ``None``; it spells a space.
        specials: tokens that spell nothing (``<s>``, ``</s>``, ``<pad>``, ...).

    ``decode`` joins the pieces, turns the delimiter and ``▁`` into spaces and collapses
    whitespace. ``encode`` spells each word by greedy longest match over the pieces (a ``▁``-piece
    vocabulary: the word with ``▁`` in front; a delimiter vocabulary: the delimiter between words),
    which is a valid spelling, not necessarily the one the model's own tokenizer would choose.
    """

    def __init__(self, pieces: Sequence[Optional[str]], blank_id: int, delimiter: Optional[str] = None,
                 specials: Iterable[str] = ()) -> None:
        self.pieces = list(pieces)
        if not 0 <= int(blank_id) < len(self.pieces):
            raise DecodingInputError(f"blank_id {blank_id} outside 0..{len(self.pieces) - 1}")
        self.blank_id = int(blank_id)
        if delimiter is not None and delimiter not in self.pieces:
            raise DecodingInputError(f"delimiter {delimiter!r} is not a token of the vocabulary")
        self.delimiter = delimiter
        self.specials = frozenset(specials) - {delimiter}
        self._index: dict[str, int] = {}
        for i, p in enumerate(self.pieces):
            if p and i != self.blank_id and p not in self.specials and p not in self._index:
                self._index[p] = i
        self._longest = max((len(p) for p in self._index), default=1)
        self._prefix_style = delimiter is None and any(p.startswith(WORD_START) for p in self._index)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < len(self.pieces) or i == self.blank_id:
            raise DecodingInputError(f"token id {i} is not a non-blank id of this tokenizer")
        return i

    def id_to_piece(self, i: int) -> str:
        p = self.pieces[self._check(i)]
        if p is None or p in self.specials:
            return ""
        return WORD_START if p == self.delimiter else p

    def decode(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            p = self.pieces[self._check(i)]
            if p is None or p in self.specials:
                continue
            out.append(" " if p == self.delimiter else p.replace(WORD_START, " "))
        return " ".join("".join(out).split())

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for k, word in enumerate(text.split()):
            if self.delimiter is not None and k:
                ids.append(self._index[self.delimiter])
            ids.extend(self._spell(WORD_START + word if self._prefix_style else word))
        return ids

    def _spell(self, s: str) -> list[int]:
        ids, pos = [], 0
        while pos < len(s):
            for n in range(min(self._longest, len(s) - pos), 0, -1):
                i = self._index.get(s[pos:pos + n])
                if i is not None:
                    ids.append(i)
                    pos += n
                    break
            else:
                if s[pos] == WORD_START and self._prefix_style:  # no lone ▁ piece: the next piece starts the word
                    pos += 1
                    continue
                raise DecodingInputError(f"character {s[pos]!r} is not in the tokenizer's symbols")
        return ids


def read_tokens_txt(path: str | Path) -> list[str]:
    """A sherpa-onnx ``tokens.txt`` (``<piece> <id>`` per line, ids 0..V-1 each once) -> pieces by id."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise FileFormatError(path, None, f"cannot read tokens ({err})") from None
    by_id: dict[int, str] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        piece, sep, num = line.rstrip("\n").rpartition(" ")
        if not sep or not num.isdigit():
            raise FileFormatError(path, n, f"expected '<token> <id>', got {line!r}")
        i = int(num)
        if i in by_id:
            raise FileFormatError(path, n, f"id {i} appears twice")
        by_id[i] = piece if piece else " "
    if not by_id:
        raise FileFormatError(path, None, "no tokens")
    if sorted(by_id) != list(range(len(by_id))):
        raise FileFormatError(path, None, f"ids must be 0..{len(by_id) - 1}, each once")
    return [by_id[i] for i in range(len(by_id))]
