"""Words from ``phone-ctc``'s CTC prefix beam search: a lexicon-constrained word LM over its phones.

Like flashlight-text's lexicon decoder: the bundled word 3-gram is fused into
:func:`asrdecode.ctc.beam_search` as a :class:`~asrdecode.lm.WordNGramLM` in lexicon mode whose
"words" are the pronunciations (phone sequences) of the LM's words, so a hypothesis is a sequence
of lexicon pronunciations separated by hama's word-boundary classes (``<wb>``, ``" "``), scored by
the word LM. Each phone class is spelled by one private-use character; a pronunciation shared by
several words (homophones) keeps the word the LM finds most likely. :class:`PhoneWordTokenizer`
turns the tokens back into words (and word times come from the tokens' timestamps).

The built model is cached per user (:mod:`.graph_cache`, keyed by the LM's and the lexicon's bytes,
the recogniser's symbols and ``words``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import DecodingInputError

__all__ = ["PhoneWordTokenizer", "phone_word_lm", "BOUNDARIES", "BEAM", "LM_WEIGHT", "WORD_BONUS", "BETA"]

#: hama's classes that end a word
BOUNDARIES = ("<wb>", " ")
#: defaults of phone-ctc's "beam" decoder: weight and bonus chosen on data/synth_test (a grid of 14 settings,
#: WER 58.0-67.4 %; flat near the choice), data/real held out (benchmarks/phone_beam.py, results_phone_beam.md)
BEAM, LM_WEIGHT, WORD_BONUS, BETA = 16, 0.8, 0.5, 0.0
_PUA = 0xE000  # phone class i is spelled chr(_PUA + i)
_SPECIAL = ("<s>", "</s>", "<unk>")


def _char(i: int) -> str:
    return chr(_PUA + i)


class PhoneWordTokenizer:
    """Phone ids -> words: the tokens between word boundaries are a pronunciation, looked up in
    ``words_of`` (pronunciation as a tuple of phone ids -> word); a pronunciation it lacks (decoding
    without the lexicon-mode LM) is written as its phones."""

    def __init__(self, symbols: Sequence[str], blank_id: int, words_of: Mapping[tuple[int, ...], str]) -> None:
        self.symbols = list(symbols)
        self.blank_id = int(blank_id)
        self.boundary_ids = {self.symbols.index(b) for b in BOUNDARIES if b in self.symbols}
        self.words_of = dict(words_of)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def id_to_piece(self, i: int) -> str:
        i = int(i)
        if not 0 <= i < len(self.symbols) or i == self.blank_id:
            raise DecodingInputError(f"token id {i} is not a non-blank symbol of this tokenizer")
        return "\u2581" if i in self.boundary_ids else self.symbols[i]

    def words(self, ids: Sequence[int]) -> list[tuple[str, int, int]]:
        """``(word, first token index, end token index)`` of each word of ``ids``."""
        out: list[tuple[str, int, int]] = []
        cur: list[int] = []
        start = 0
        for k, i in enumerate(list(ids) + [None]):
            if i is None or int(i) in self.boundary_ids:
                if cur:
                    key = tuple(cur)
                    out.append((self.words_of.get(key) or "".join(self.symbols[t] for t in key), start, k))
                cur, start = [], k + 1
            else:
                self.id_to_piece(int(i))
                cur.append(int(i))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(w for w, _, _ in self.words(ids))

    def word_times(self, ids: Sequence[int], frames: Sequence[int]) -> list[tuple[str, int, int]]:
        """``(word, first frame, last frame)`` of each word from the tokens' frames."""
        return [(w, int(frames[a]), int(frames[b - 1])) for w, a, b in self.words(ids)]


def _table(model: Any, lexicon: Mapping[str, Sequence[str]], symbols: Sequence[str],
           words: Optional[int]) -> dict[tuple[int, ...], str]:
    """Pronunciation (phone ids) -> word, for the ``words`` most likely LM words the lexicon spells
    (a pronunciation shared by several words keeps the most likely one)."""
    index = {s: i for i, s in enumerate(symbols)}
    uni = np.full(len(model.vocab), -np.inf)
    uni[model.words[0][:, 0]] = model.logprob[0]
    best: dict[tuple[int, ...], str] = {}
    for i in np.argsort(-uni, kind="stable"):
        w = model.vocab[i]
        if w in _SPECIAL or w not in lexicon:
            continue
        best.setdefault(tuple(index[p] for p in lexicon[w]), w)
        if words is not None and len(best) >= words:
            break
    return best


def _build(model: Any, table: Mapping[tuple[int, ...], str], symbols: Sequence[str], blank_id: int) -> Any:
    """The lexicon-mode word LM whose words are the pronunciations of ``table``."""
    from ..lm.arpa import ArpaModel, drop_words
    from ..lm.word import WordNGramLM

    keep = set(table.values())
    model = drop_words(model, [w for w in model.vocab if w not in keep and w not in _SPECIAL])
    spelled = {w: "".join(_char(t) for t in p) for p, w in table.items()}
    renamed = ArpaModel([spelled.get(w, w) for w in model.vocab], model.words, model.logprob, model.backoff,
                        model.has_backoff, model.lines, model.path, line_runs=model.line_runs)
    pieces: list[Optional[str]] = []
    for i, s in enumerate(symbols):
        pieces.append(None if i == blank_id else "|" if s in BOUNDARIES else _char(i))
    return WordNGramLM.from_arpa_model(renamed, pieces, blank_id=blank_id, boundary="delimiter", delimiters=["|"],
                                       lexicon=True)


def phone_word_lm(symbols: Sequence[str], blank_id: int, lm: str | os.PathLike, lexicon: str | os.PathLike,
                  words: Optional[int] = None, log: Optional[Callable[[str], None]] = None) -> tuple[Any, PhoneWordTokenizer]:
    """``(WordNGramLM, PhoneWordTokenizer)`` of the ``words`` most likely LM words (``None``: all the
    lexicon spells), built once and cached (two entries: the model and the word table)."""
    import torch

    from ..lm.arpa import SCORES, read_arpa
    from ..lm.word_cache import load_word_lm, save_word_lm
    from .graph_cache import cached_file, file_digest
    from .phone_lexicon import read_phone_lexicon

    inputs = {"artefact": "phone-word-lm/1", "lm": file_digest(lm), "scores": SCORES, "lexicon": file_digest(lexicon),
              "symbols": list(symbols), "blank": int(blank_id), "words": words, "boundaries": list(BOUNDARIES)}
    tag = f"phone-word-lm-{'all' if words is None else words}"

    def table() -> dict[tuple[int, ...], str]:
        return _table(read_arpa(lm), read_phone_lexicon(lexicon, symbols), symbols, words)

    def build_table(tmp: Path) -> None:
        t = table()
        torch.save({"prons": [list(p) for p in t], "words": list(t.values())}, tmp)

    def build_lm(tmp: Path) -> None:
        save_word_lm(_build(read_arpa(lm), table(), symbols, blank_id), tmp)

    t_entry = cached_file(tag + "-words", inputs, build_table, what="the phone-ctc word table", log=log)
    entry = cached_file(tag, inputs, build_lm, what="the phone-ctc word LM (lexicon mode)", log=log)
    d = torch.load(t_entry.path, weights_only=True)
    words_of = {tuple(p): w for p, w in zip(d["prons"], d["words"])}
    return load_word_lm(entry.path), PhoneWordTokenizer(symbols, blank_id, words_of)
