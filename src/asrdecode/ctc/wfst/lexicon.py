"""Lexicons: word -> token-id sequence, read from a file or derived from a tokenizer."""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Sequence

from ...errors import DecodingInputError, FileFormatError
from ...tokenizers import UNKNOWN_POLICIES, spell

__all__ = ["read_lexicon", "lexicon_from_tokenizer", "check_lexicon", "add_disambig", "pronunciations"]

MAX_LINE_BYTES = 1 << 20


def pronunciations(spelling) -> list[tuple[int, ...]]:
    """The distinct pronunciations of a lexicon entry: ``[ids]`` (one) or ``[[ids], [ids], ...]`` (several)."""
    items = list(spelling)
    if items and isinstance(items[0], (list, tuple)):
        out: list[tuple[int, ...]] = []
        for p in items:
            t = tuple(int(x) for x in p)
            if t not in out:
                out.append(t)
        return out
    return [tuple(int(x) for x in items)]


def read_lexicon(path: str | os.PathLike, tokens: Sequence[str], all_pronunciations: bool = False) -> dict:
    """Read a lexicon file: one ``word tok1 tok2 ...`` per line (tokens are symbols of ``tokens``).

    Args:
        path: the lexicon file (UTF-8, whitespace separated; blank lines skipped).
        tokens: token symbols, ``tokens[i]`` is the symbol of model token ``i``.
        all_pronunciations: keep every pronunciation of a word listed several times.
    Returns:
        ``{word: [token ids]}`` (a word listed twice keeps its first pronunciation), or with
        ``all_pronunciations`` ``{word: [[token ids], ...]}`` (distinct ones, in file order).
    Raises:
        FileFormatError: a line with no token, a token not in ``tokens``, a line that is not
            UTF-8 or longer than ``MAX_LINE_BYTES`` (1 MiB), an unreadable file, or no entry at all.
    """
    index = {s: i for i, s in enumerate(tokens)}
    lex: dict = {}
    try:
        f = open(path, "rb")
    except OSError as err:
        raise FileFormatError(path, None, f"cannot open the lexicon: {err.strerror or err}") from None
    with f:
        for ln, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise FileFormatError(path, ln, f"line longer than {MAX_LINE_BYTES} bytes: not a lexicon")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise FileFormatError(path, ln, f"not UTF-8 text ({err.reason} at byte {err.start})") from None
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2:
                raise FileFormatError(path, ln, f"expected 'word token [token ...]', got {line.strip()!r}")
            ids = []
            for s in fields[1:]:
                if s not in index:
                    raise FileFormatError(path, ln, f"token {s!r} of word {fields[0]!r} is not in the model's vocabulary")
                ids.append(index[s])
            if all_pronunciations:
                prons = lex.setdefault(fields[0], [])
                if ids not in prons:
                    prons.append(ids)
            else:
                lex.setdefault(fields[0], ids)
    if not lex:
        raise FileFormatError(path, None, "the lexicon is empty")
    return lex


ARPA_MARKERS = ("<s>", "</s>", "<unk>")


def lexicon_from_tokenizer(words: Iterable[str], tokenizer, on_unknown: str = "error") -> dict[str, list[int]]:
    """Spell every word with ``tokenizer.encode`` (e.g. a sentencepiece BPE model).

    The ARPA markers ``<s>``, ``</s>`` and ``<unk>`` are not words and are left out; so are words
    the tokenizer spells as nothing.

    Args:
        words: the words (e.g. an LM's vocabulary).
        tokenizer: an object with ``encode(text) -> ids``.
        on_unknown: a word holding characters the tokenizer cannot spell (digits, CJK, emoji that
            a sentencepiece model maps to ``<unk>``; ``"word1"`` and ``"word2"`` would share one
            spelling): "error" (default) raises naming the word, "skip" leaves it out.

    Raises:
        DecodingInputError: a word the tokenizer cannot spell (with ``on_unknown="error"``), a
            bad ``on_unknown``, or no word left.
    """
    if on_unknown not in UNKNOWN_POLICIES:
        raise DecodingInputError(f"on_unknown must be one of {UNKNOWN_POLICIES}, got {on_unknown!r}")
    lex: dict[str, list[int]] = {}
    for w in words:
        if w in ARPA_MARKERS:
            continue
        ids, unknown = spell(tokenizer, w)
        if unknown:
            if on_unknown == "skip":
                continue
            raise DecodingInputError(
                f"word {w!r} holds characters the tokenizer cannot spell ({', '.join(map(repr, unknown))}); "
                "the model cannot emit them. Remove it from the LM / word list or skip such words "
                "(on_unknown='skip', build-graph --skip-unknown-words)"
            )
        if ids:
            lex[w] = ids
    if not lex:
        raise DecodingInputError("lexicon_from_tokenizer: no word could be spelled")
    return lex


def check_lexicon(lexicon: Mapping[str, Sequence], vocab_size: int, blank_id: int) -> None:
    """Check a ``{word: [token ids]}`` (or ``{word: [[token ids], ...]}``) lexicon against the model's vocabulary."""
    if not lexicon:
        raise DecodingInputError("lexicon is empty")
    for w, spelling in lexicon.items():
        if not isinstance(w, str) or not w or any(c.isspace() for c in w):
            raise DecodingInputError(f"lexicon: bad word {w!r}")
        for ids in pronunciations(spelling):
            _check_spelling(w, ids, vocab_size, blank_id)


def _check_spelling(w: str, ids: Sequence[int], vocab_size: int, blank_id: int) -> None:
    if len(ids) == 0:
        raise DecodingInputError(f"lexicon: word {w!r} has an empty spelling")
    for t in ids:
        if not 0 <= int(t) < vocab_size or int(t) == blank_id:
            raise DecodingInputError(
                f"lexicon: token {t} of word {w!r} is not a non-blank token of the model (vocab_size {vocab_size}, blank {blank_id})"
            )


def add_disambig(prons: list[tuple[int, ...]]) -> tuple[list[int], int]:
    """Disambiguation symbol index (0 = none, k = #k) of each pronunciation, and the largest used.

    A pronunciation gets one when it is a proper prefix of another, or when several words share
    it (each then gets a different one), so that L composed with G is determinisable.
    """
    prefixes = set()
    counts: dict[tuple[int, ...], int] = {}
    for p in prons:
        counts[p] = counts.get(p, 0) + 1
        for k in range(1, len(p)):
            prefixes.add(p[:k])
    next_id: dict[tuple[int, ...], int] = {}
    out, top = [], 0
    for p in prons:
        if p in prefixes or counts[p] > 1:
            k = next_id.get(p, 0) + 1
            next_id[p] = k
            out.append(k)
            top = max(top, k)
        else:
            out.append(0)
    return out, top
