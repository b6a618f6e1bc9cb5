"""A word-level n-gram LM as a fusion model over the acoustic model's token ids.

:class:`WordNGramLM` reads a *word* ARPA file and the acoustic model's vocabulary (the text of
every token) and scores token sequences as word sequences, so that a character or word-piece
model can use a word LM in every beam search (``fusion=[(word_lm, weight), ...]``).

Word boundaries come from the vocabulary (:func:`detect_boundaries`; ``boundary=`` overrides):

* ``"delimiter"``: a delimiter token (``|``, a space, or a lone ``▁`` in a character vocabulary)
  ends the current word; every other token appends its text;
* ``"prefix"`` (SentencePiece): a piece starting with ``▁`` ends the current word and starts a
  new one with the rest of its text; other pieces append;
* ``"wordpiece"``: a piece starting with ``##`` appends the rest of its text; other pieces end
  the current word and start a new one.

Scoring of a hypothesis whose words are ``w_1 .. w_n`` (natural logs, before the fusion weight)::

    sum_i [ln p(w_i | w_<i) + unweighted_word_bonus + oov(w_i)] + ln p(</s> | w_<=n)
    oov(w) = 0 for an LM word, else unk_offset + unk_char_offset * len(w)

The search multiplies this by the fusion weight ``alpha``: a bonus of ``beta`` per word in the fused
score (pyctcdecode's ``beta``, torchaudio's ``word_score``) is ``unweighted_word_bonus = beta / alpha``;
:meth:`WordNGramLM.weighted` and :func:`word_lm_fusion` take ``beta`` and do that division.

``ln p(w | h)`` is the ARPA back-off probability; a word the LM does not know is scored as
``<unk>`` (KenLM's rule; a file without ``<unk>`` gets log10 p = -100) and the LM history then
holds ``<unk>``. A word's score is applied when the word ends: at the token that ends it
(delimiter, or the first piece of the next word) and, for the last word, in ``final``. Empty
words (two delimiters in a row, a lone ``▁``) score nothing.

Inside a word the partial text follows a character trie of the LM's words (every token is a walk
of its characters, so any spelling of a word reaches the same node):

* with ``lookahead=True`` a partial word that can still become an LM word carries the best
  unigram score of its completions (``max ln p(w)``), applied as differences token by token; the
  word's end replaces it with the real score, so the total at a word's end is exactly the formula
  above;
* a partial word that can no longer become an LM word takes ``unk_offset`` at once (pyctcdecode's
  convention for partial out-of-vocabulary words) plus ``unk_char_offset`` per character so far,
  then ``unk_char_offset`` per character it grows by (without that length term one long
  out-of-vocabulary "word" pays a single ``unk_offset`` and can absorb a whole noisy utterance;
  pyctcdecode scales its offset with the length of long partial words for the same reason);
* ``lexicon=True`` allows only LM words (flashlight's lexicon decoding): a token that leaves the
  trie, and a word that ends on a trie node that is not a word, score ``-inf``.

States are one int64 each: ``(word-LM state << node_bits) | trie node``. ``advance`` is one
batched call for ``[N]`` states: one back-off lookup of the word that would end (the word LM's
``score_tokens``), the trie automaton's whole-vocabulary row, and elementwise selects; no host
synchronisation. Both the word LM and the trie are
:class:`~asrdecode.lm._automaton.BackoffAutomaton` instances (the trie's nodes back off to one
out-of-vocabulary node).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from ._automaton import BackoffAutomaton
from ._word_checks import ensure_word_lm_valid, validate_word_lm
from .arpa import BOS, EOS, UNK, ArpaModel, read_arpa
from .ngram import NGramLM
from .tokens import TokenMap

__all__ = [
    "BOUNDARY_STYLES",
    "WordBoundaries",
    "WordNGramLM",
    "detect_boundaries",
    "token_pieces",
    "word_lm_fusion",
]

LN10 = math.log(10.0)
BOUNDARY_STYLES = ("delimiter", "prefix", "wordpiece")
SP_MARK = "\u2581"  # SentencePiece's word-start mark
WP_MARK = "##"  # WordPiece's continuation mark
DEFAULT_DELIMITERS = ("|", " ")
#: pyctcdecode's default offset for unknown words (-10 in log10 units), here in natural-log units.
DEFAULT_UNK_OFFSET = -10.0 * LN10
#: offset per character of an unknown word (natural log): one log10 unit.
DEFAULT_UNK_CHAR_OFFSET = -LN10


# ---------------------------------------------------------------------------------- vocabulary
def token_pieces(tokenizer: Any, vocab_size: int | None = None, blank_id: int | None = None) -> list[str | None]:
    """The text of every token id (``None`` for the blank), from a tokenizer or a list.

    Accepts a sequence of strings (one per id, the blank's entry ignored), a tokenizer with
    ``symbols`` (:class:`~asrdecode.tokenizers.CharTokenizer`) or one with ``id_to_piece``
    (:class:`~asrdecode.tokenizers.SentencePieceTokenizer`).

    Raises:
        DecodingInputError: unknown tokenizer type, or ``vocab_size`` / ``blank_id`` that disagree
            with the tokenizer's.
    """
    tok_blank = getattr(tokenizer, "blank_id", None)
    if blank_id is None:
        blank_id = tok_blank
    elif tok_blank is not None and int(tok_blank) != int(blank_id):
        raise DecodingInputError(f"blank_id {blank_id} disagrees with the tokenizer's blank_id {tok_blank}")
    if isinstance(tokenizer, (list, tuple)):
        pieces = list(tokenizer)
    elif hasattr(tokenizer, "symbols"):
        pieces = list(tokenizer.symbols)
    elif callable(getattr(tokenizer, "id_to_piece", None)) and hasattr(tokenizer, "vocab_size"):
        pieces = [None if i == blank_id else tokenizer.id_to_piece(i) for i in range(int(tokenizer.vocab_size))]
    else:
        raise DecodingInputError(
            f"tokenizer must be a list of token strings, or have `symbols` or `id_to_piece`; got {type(tokenizer).__name__}"
        )
    if vocab_size is not None and int(vocab_size) != len(pieces):
        raise DecodingInputError(
            f"vocab mismatch: the acoustic model has vocab_size {vocab_size} but the tokenizer has {len(pieces)} tokens"
        )
    if blank_id is not None and not 0 <= int(blank_id) < len(pieces):
        raise DecodingInputError(f"blank_id must be in 0..{len(pieces) - 1}, got {blank_id}")
    out: list[str | None] = []
    for i, p in enumerate(pieces):
        if blank_id is not None and i == int(blank_id):
            out.append(None)
        elif not isinstance(p, str):
            raise DecodingInputError(f"token {i} must be a str, got {p!r}")
        else:
            out.append(p)
    return out


@dataclass(frozen=True)
class WordBoundaries:
    """How tokens make words: per token id, whether it ends the current word and starts a new one
    (``starts_word``) and the text it adds (``text``, marks stripped; ``""`` for a delimiter)."""

    style: str
    starts_word: tuple[bool, ...]
    text: tuple[str, ...]

    def words(self, tokens: Sequence[int]) -> list[str]:
        """The non-empty words of a token sequence (blank-free) under these boundaries."""
        out, cur = [], ""
        for t in tokens:
            if self.starts_word[t]:
                if cur:
                    out.append(cur)
                cur = ""
            cur += self.text[t]
        if cur:
            out.append(cur)
        return out


def detect_boundaries(
    pieces: Sequence[str | None], style: str | None = None, delimiters: Sequence[str] | None = None
) -> WordBoundaries:
    """Word boundary rules of a vocabulary (``None`` entries, the blank, are neither).

    Auto-detection (``style=None``), first match wins: pieces that start with ``▁`` and have more
    text -> ``"prefix"``; a ``|`` or space token -> ``"delimiter"``; a lone ``▁`` token ->
    ``"delimiter"`` on it; pieces that start with ``##`` -> ``"wordpiece"``.

    Args:
        pieces: the text of every token id.
        style: ``"delimiter"``, ``"prefix"``, ``"wordpiece"`` or ``None`` (detect).
        delimiters: delimiter token texts for ``"delimiter"`` (default: those of ``|``, `` ``, ``▁``
            present in the vocabulary).

    Raises:
        DecodingInputError: no style detectable, an unknown style, or delimiters not in the vocabulary.
    """
    present = [p for p in pieces if p is not None]
    if style is None:
        if any(p.startswith(SP_MARK) and len(p) > 1 for p in present):
            style = "prefix"
        elif any(p in DEFAULT_DELIMITERS for p in present) or SP_MARK in present:
            style = "delimiter"
        elif any(p.startswith(WP_MARK) and len(p) > 2 for p in present):
            style = "wordpiece"
        else:
            raise DecodingInputError(
                "cannot detect word boundaries from the vocabulary: no '▁'-prefixed piece, no '|' or ' ' "
                "delimiter token and no '##' continuation piece; pass boundary='delimiter' with delimiters=[...], "
                "'prefix' or 'wordpiece'"
            )
    if style not in BOUNDARY_STYLES:
        raise DecodingInputError(f"boundary must be one of {BOUNDARY_STYLES} or None, got {style!r}")
    starts: list[bool] = []
    text: list[str] = []
    if style == "delimiter":
        if delimiters is None:
            delims = {p for p in present if p in DEFAULT_DELIMITERS + (SP_MARK,)}
        else:
            delims = set(delimiters)
            missing = sorted(delims - set(present))
            if missing:
                raise DecodingInputError(f"delimiters {missing} are not tokens of the vocabulary")
        if not delims:
            raise DecodingInputError("boundary='delimiter' needs a delimiter token ('|', ' ' or '▁', or delimiters=[...])")
        for p in pieces:
            is_d = p is not None and p in delims
            starts.append(is_d)
            text.append("" if p is None or is_d else p)
    elif style == "prefix":
        for p in pieces:
            s = p is not None and p.startswith(SP_MARK)
            starts.append(s)
            text.append("" if p is None else (p[len(SP_MARK):] if s else p))
    else:
        for p in pieces:
            cont = p is not None and p.startswith(WP_MARK)
            starts.append(p is not None and not cont)
            text.append("" if p is None else (p[len(WP_MARK):] if cont else p))
    return WordBoundaries(style, tuple(starts), tuple(text))


# ---------------------------------------------------------------------------------- the model
class WordNGramLM:
    """Word n-gram LM over the acoustic model's token ids: a :class:`~asrdecode.fusion.FusionModel`.

    Build it with :meth:`from_arpa`; see the module docstring for the scoring rules.

    Attributes:
        vocab_size, blank_id: the acoustic model's vocabulary size and blank id.
        boundaries: the :class:`WordBoundaries` in use.
        words: the LM's words (label ``i`` of the word LM is ``words[i]``; ``len(words)`` is ``<unk>``).
        word_lm: the :class:`NGramLM` over word labels.
        lookahead, lexicon, unk_offset, unweighted_word_bonus: the scoring options (``word_bonus``:
            the old name of ``unweighted_word_bonus``, deprecated).
    """

    #: its score tables are checked when built (no NaN or +inf): searches need not watch its scores
    scores_checked = True

    def __init__(self, *, word_lm: NGramLM, trie: BackoffAutomaton, words: list[str], boundaries: WordBoundaries,
                 node_bits: int, end_label: torch.Tensor, end_const: torch.Tensor, is_start: torch.Tensor,
                 start_node: torch.Tensor, start_score: torch.Tensor, lookahead: bool, lexicon: bool,
                 unk_offset: float, unk_char_offset: float, unweighted_word_bonus: float, num_nodes: int) -> None:
        self.word_lm = word_lm
        self.trie = trie
        self.words = words
        self.boundaries = boundaries
        self.vocab_size = trie.vocab_size
        self.blank_id = trie.blank_id
        self.node_bits = int(node_bits)
        self._mask = (1 << self.node_bits) - 1
        self.end_label = end_label
        self.end_const = end_const
        self.is_start = is_start
        self.start_node = start_node
        self.start_score = start_score
        self.lookahead = bool(lookahead)
        self.lexicon = bool(lexicon)
        self.unk_offset = float(unk_offset)
        self.unk_char_offset = float(unk_char_offset)
        self.unweighted_word_bonus = float(unweighted_word_bonus)
        self.num_nodes = int(num_nodes)
        self.validate()

    def validate(self) -> None:
        """Check every array the engines read and mark the LM validated (:mod:`asrdecode._validation`)."""
        validate_word_lm(self)

    def ensure_valid(self) -> None:
        """Validate again when an array changed since :meth:`validate` (cheap otherwise)."""
        ensure_word_lm_valid(self)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arpa(cls, path: str | os.PathLike, tokenizer: Any, **kwargs: Any) -> "WordNGramLM":
        """Read a word ARPA file (``.gz`` allowed) and build the model; ``kwargs`` as :meth:`from_arpa_model`.
        (:func:`asrdecode.lm.word_cache.cached_word_lm` builds once and memory-maps the model afterwards.)

        Raises:
            FileFormatError: a malformed ARPA file or a KenLM binary file (with the file and line).
        """
        return cls.from_arpa_model(read_arpa(path), tokenizer, **kwargs)

    @classmethod
    def from_arpa_model(
        cls,
        model: ArpaModel,
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        blank_id: int | None = None,
        boundary: str | None = None,
        delimiters: Sequence[str] | None = None,
        lookahead: bool = True,
        lexicon: bool = False,
        unk_offset: float = DEFAULT_UNK_OFFSET,
        unk_char_offset: float = DEFAULT_UNK_CHAR_OFFSET,
        unweighted_word_bonus: float = 0.0,
        dense_memory_mb: float = 32.0,
        word_bonus: float | None = None,
        device: torch.device | str | None = None,
    ) -> "WordNGramLM":
        """Build from an in-memory :class:`ArpaModel` and the acoustic model's vocabulary.

        Args:
            model: the word-level ARPA model (must have ``<s>`` and ``</s>``).
            tokenizer: the text of every token id: a list, a ``CharTokenizer`` or a
                ``SentencePieceTokenizer`` (see :func:`token_pieces`).
            vocab_size, blank_id: the acoustic model's (checked against the tokenizer's).
            boundary, delimiters: word boundary style (see :func:`detect_boundaries`).
            lookahead: apply the best unigram completion score inside words.
            lexicon: allow only the LM's words (others score ``-inf``).
            unk_offset: natural-log offset added to a word that is not an LM word (default:
                pyctcdecode's -10 in log10 units); also applied to a partial word as soon as it
                can no longer become an LM word.
            unk_char_offset: natural-log offset per character of a word that is not an LM word.
            unweighted_word_bonus: added per word to this model's score, which the fusion weight then
                multiplies (a bonus ``beta`` per word in the fused score is ``beta / weight``; see
                :meth:`weighted`).
            word_bonus: deprecated name of ``unweighted_word_bonus`` (same scale; a DeprecationWarning).
            dense_memory_mb: memory budget of the trie automaton's dense rows (speed/memory).
            device: where the tensors live.
        """
        if word_bonus is not None:
            warnings.warn("WordNGramLM: word_bonus= is renamed unweighted_word_bonus= (the same value: added before "
                          "the fusion weight; pyctcdecode's beta is unweighted_word_bonus * alpha)",
                          DeprecationWarning, stacklevel=2)
            unweighted_word_bonus = word_bonus
        word_bonus = unweighted_word_bonus
        for name, v in (("unk_offset", unk_offset), ("unk_char_offset", unk_char_offset),
                        ("unweighted_word_bonus", word_bonus)):
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise DecodingInputError(f"{name} must be a finite number, got {v!r}")
        pieces = token_pieces(tokenizer, vocab_size, blank_id)
        if blank_id is None:
            blank_id = getattr(tokenizer, "blank_id", None)
        V = len(pieces)
        bounds = detect_boundaries(pieces, boundary, delimiters)
        words = _lm_words(model)
        _warn_case_mismatch(words, [t for t, p in zip(bounds.text, pieces) if p is not None])
        word_lm = _word_label_lm(model, words, device)
        chars = _char_trie(model, words, lookahead)
        word_label, look = chars.word_label, chars.look
        oov = chars.size  # the out-of-vocabulary node: every partial word that no LM word starts with
        partial_oov = -math.inf if lexicon else float(unk_offset)
        per_char = 0.0 if lexicon else float(unk_char_offset)
        depth = chars.depth.astype(np.float64)
        trie = _trie_automaton(chars, look, depth, bounds, pieces, blank_id, partial_oov,
                               per_char, dense_memory_mb, device)
        S = oov + 1
        end_label, end_const, applied = _word_ends(word_label, look, depth, len(words), oov, partial_oov, per_char, lexicon,
                                                   word_bonus, unk_offset)
        is_start, start_node, start_score = _word_starts(bounds, chars, oov, applied, per_char, V)
        node_bits = max(1, int(S - 1).bit_length())
        if word_lm.num_states.bit_length() + node_bits > 62:
            raise DecodingInputError(f"the word LM ({word_lm.num_states} states) and trie ({S} nodes) "
                                     "do not fit one int64 state")
        return cls(
            word_lm=word_lm, trie=trie, words=words, boundaries=bounds, node_bits=node_bits,
            end_label=_tensor(end_label, torch.int64, device), end_const=_tensor(end_const, torch.float32, device),
            is_start=_tensor(is_start, torch.bool, device), start_node=_tensor(start_node, torch.int64, device),
            start_score=_tensor(start_score, torch.float32, device), lookahead=lookahead, lexicon=lexicon,
            unk_offset=float(unk_offset), unk_char_offset=per_char, unweighted_word_bonus=float(word_bonus), num_nodes=S,
        )

    # ------------------------------------------------------------------ FusionModel
    @property
    def device(self) -> torch.device:
        return self.end_label.device

    @property
    def order(self) -> int:
        return self.word_lm.order

    def initial_states(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """States ``[n]`` (int64) of the sentence start: the ``<s>`` history and the empty word."""
        return torch.full((int(n),), self.word_lm.bos_state << self.node_bits, dtype=torch.int64,
                          device=device or self.device)

    def _split(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return states >> self.node_bits, states & self._mask

    def state_error(self, states: torch.Tensor) -> str | None:
        """Why ``states [N]`` (int64) are not all states of this model (a word-LM state out of range, or a
        trie node past the trie), or ``None`` (a host read: for states that come from outside)."""
        if states.numel() == 0:
            return None
        if bool((states < 0).any()):
            return "must be >= 0"
        lm, node = self._split(states)
        if int(lm.max()) >= self.word_lm.num_states:
            return f"hold word-LM states in [0, {self.word_lm.num_states})"
        if int(node.max()) >= self.num_nodes:
            return f"hold trie nodes in [0, {self.num_nodes})"
        return None

    def _word_score(self, lm: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``ln p(label | lm)`` and the next word-LM state, ``[N]`` each: the back-off chain walked on arcs only.

        Every word label (and ``<unk>``) has a 1-gram arc at the root, so ``order`` arc lookups
        (binary search on the sorted ``state * labels + label`` keys) always find one.
        """
        a = self.word_lm.automaton
        cur, acc = lm, torch.zeros(lm.shape, dtype=torch.float32, device=lm.device)
        score, nxt = torch.full_like(acc, a.root_fill), lm
        done = torch.zeros(lm.shape, dtype=torch.bool, device=lm.device)
        last = a.arc_key.numel() - 1
        for _ in range(a.max_depth + 1):
            key = cur * a.vocab_size + label
            pos = torch.searchsorted(a.arc_key, key).clamp_max_(last)
            hit = (a.arc_key[pos] == key) & ~done
            score = torch.where(hit, acc + a.arc_weight[pos], score)
            nxt = torch.where(hit, a.arc_dest[pos], nxt)
            done = done | hit
            acc = torch.where(done, acc, acc + a.backoff_weight[cur])
            cur = torch.where(done, cur, a.backoff_state[cur])
        return score, nxt

    def _word_end(self, lm: torch.Tensor, node: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Score ``[N]`` of ending the current word (minus what it already received) and the LM state after it."""
        sc, nx = self._word_score(lm, self.end_label[node])
        empty = node == 0
        score = torch.where(empty, 0.0, sc + self.end_const[node])
        return score, torch.where(empty, lm, nx)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (float32, natural log) and next states ``[N, V]`` (int64) from ``states [N]``."""
        self.ensure_valid()
        lm, node = self._split(states)
        tsc, tnx = self.trie.advance(node)
        end, lm_after = self._word_end(lm, node)
        start = self.is_start[None, :]
        scores = torch.where(start, end[:, None] + self.start_score[None, :], tsc)
        nxt = torch.where(start, (lm_after[:, None] << self.node_bits) | self.start_node[None, :],
                          (lm[:, None] << self.node_bits) | tnx)
        return scores, nxt

    def score_tokens(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and next states ``[N, K]`` of ``tokens [N, K]`` from ``states [N]`` (early pruning)."""
        self.ensure_valid()
        lm, node = self._split(states)
        tsc, tnx = self.trie.score_tokens(node, tokens)
        end, lm_after = self._word_end(lm, node)
        start = self.is_start[tokens]
        scores = torch.where(start, end[:, None] + self.start_score[tokens], tsc)
        nxt = torch.where(start, (lm_after[:, None] << self.node_bits) | self.start_node[tokens],
                          (lm[:, None] << self.node_bits) | tnx)
        return scores, nxt

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """End-of-sentence scores ``[N]``: the last word's score (if one is open) plus ``ln p(</s> | history)``."""
        self.ensure_valid()
        lm, node = self._split(states)
        end, lm_after = self._word_end(lm, node)
        return end + self.word_lm.final(lm_after)

    def score_sequence(self, tokens: Sequence[int] | torch.Tensor, *, eos: bool = True) -> float:
        """Total natural-log score of ``tokens`` from the sentence start (blank ids score 0)."""
        ids = [int(t) for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)]
        for i, t in enumerate(ids):
            if not 0 <= t < self.vocab_size:
                raise DecodingInputError(f"tokens[{i}] = {t} is outside the vocabulary 0..{self.vocab_size - 1}")
        state = self.initial_states(1)
        total = 0.0
        for t in ids:
            s, n = self.score_tokens(state, torch.tensor([[t]], dtype=torch.int64, device=self.device))
            total += float(s[0, 0])
            state = n[:, 0]
        if eos:
            total += float(self.final(state)[0])
        return total

    def with_unweighted_word_bonus(self, bonus: float) -> "WordNGramLM":
        """A copy with another ``unweighted_word_bonus`` (shares every other tensor; no rebuild)."""
        if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or not math.isfinite(float(bonus)):
            raise DecodingInputError(f"unweighted_word_bonus must be a finite number, got {bonus!r}")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.end_const = self.end_const + (float(bonus) - self.unweighted_word_bonus)  # the empty word is masked anyway
        new.unweighted_word_bonus = float(bonus)
        return new

    def weighted(self, weight: float, word_bonus: float = 0.0) -> tuple["WordNGramLM", float]:
        """``(model, weight)`` for a ``fusion=`` list with ``word_bonus`` per word in the *fused* score
        (pyctcdecode's ``beta``, torchaudio's ``word_score``): the model gets ``word_bonus / weight``."""
        for name, v in (("weight", weight), ("word_bonus", word_bonus)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise DecodingInputError(f"{name} must be a finite number, got {v!r}")
        if word_bonus and weight == 0.0:
            raise DecodingInputError("a word bonus needs a non-zero word LM weight")
        return self.with_unweighted_word_bonus(float(word_bonus) / float(weight) if word_bonus else 0.0), float(weight)

    def with_word_bonus(self, word_bonus: float) -> "WordNGramLM":
        """Deprecated name of :meth:`with_unweighted_word_bonus` (same scale)."""
        warnings.warn("WordNGramLM.with_word_bonus is renamed with_unweighted_word_bonus (same value)",
                      DeprecationWarning, stacklevel=2)
        return self.with_unweighted_word_bonus(word_bonus)

    @property
    def word_bonus(self) -> float:
        """Deprecated name of ``unweighted_word_bonus``."""
        warnings.warn("WordNGramLM.word_bonus is renamed unweighted_word_bonus (same value)", DeprecationWarning,
                      stacklevel=2)
        return self.unweighted_word_bonus

    def to(self, device: torch.device | str) -> "WordNGramLM":
        """A copy with every tensor on ``device``."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.word_lm = self.word_lm.to(device)
        new.trie = self.trie.to(device)
        for k in ("end_label", "end_const", "is_start", "start_node", "start_score"):
            setattr(new, k, getattr(self, k).to(device))
        return new

    def __repr__(self) -> str:
        return (f"WordNGramLM(order={self.order}, words={len(self.words)}, vocab_size={self.vocab_size}, "
                f"boundary={self.boundaries.style!r}, trie_nodes={self.num_nodes}, lookahead={self.lookahead}, "
                f"lexicon={self.lexicon})")


def _tensor(a: Any, dt: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    """A contiguous copy of the array ``a`` as a tensor of ``dt`` on ``device``."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dt, device=device)


def _lm_words(model: ArpaModel) -> list[str]:
    """:meth:`WordNGramLM.from_arpa_model`'s step 1: the LM's words (all but ``<s>``, ``</s>``, ``<unk>``;
    the 1-grams must have ``<s>`` and ``</s>``)."""
    index = model.word_index()
    for marker in (BOS, EOS):
        if marker not in index:
            raise FileFormatError(model.path, None, f"the 1-grams have no {marker}")
    return [w for w in model.vocab if w not in (BOS, EOS, UNK)]


def _word_label_lm(model: ArpaModel, words: list[str], device: torch.device | str | None) -> NGramLM:
    """Step 1b: the word LM over labels: the LM words, then ``<unk>`` (every word outside the LM)."""
    Wn = len(words)
    wmap = TokenMap(Wn + 1, None, words + [None])
    # only the root gets a dense row: word ends are looked up on arcs (_word_score)
    return NGramLM.from_arpa_model(model, token_map=wmap, dense_memory_mb=0.0, device=device)


_CODES = 0x110000  # code points: a node's key is parent * _CODES + its last character


class _CharTrie:
    """The character trie of the LM's words (node 0: the empty word; every prefix of every word numbered
    in order of first appearance, words in order, prefixes by length) as arrays ``[T]``: each node's
    parent, last character (code point; node 0: -1) and depth (characters), the label of the word ending
    there (``<unk>``'s where none) and its lookahead (best unigram completion, ln)."""

    def __init__(self, parent: np.ndarray, char: np.ndarray, depth: np.ndarray, word_label: np.ndarray,
                 look: np.ndarray) -> None:
        self.parent, self.char, self.depth, self.word_label, self.look = parent, char, depth, word_label, look
        self.size = int(parent.shape[0])
        self._keys = parent[1:] * _CODES + char[1:]
        self._key_order = np.argsort(self._keys, kind="stable")
        self._texts: list[str] | None = None

    def texts(self) -> list[str]:
        """The text of every node (a parent comes before its children)."""
        if self._texts is None:
            out = [""] * self.size
            for n, (p, c) in enumerate(zip(self.parent.tolist(), self.char.tolist())):
                if n:
                    out[n] = out[p] + chr(c)
            self._texts = out
        return self._texts

    def find(self, texts: Sequence[str]) -> np.ndarray:
        """The node ``[len(texts)]`` of each text, -1 where it is no prefix of an LM word."""
        n = len(texts)
        node = np.zeros(n, dtype=np.int64)
        lens = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
        if n == 0 or int(lens.max()) == 0 or self.size == 1:
            return np.where(lens == 0, 0, -1)
        codes = _code_points(texts)
        start = np.cumsum(lens) - lens
        sorted_keys = self._keys[self._key_order]
        for d in range(1, int(lens.max()) + 1):
            idx = np.flatnonzero((lens >= d) & (node >= 0))
            key = node[idx] * _CODES + codes[start[idx] + d - 1]
            at = np.minimum(np.searchsorted(sorted_keys, key), sorted_keys.shape[0] - 1)
            node[idx] = np.where(sorted_keys[at] == key, self._key_order[at] + 1, -1)
        return node


def _code_points(texts: Sequence[str]) -> np.ndarray:
    """The code points of ``texts`` one after another ``[sum of lengths]`` (int64)."""
    return np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).astype(np.int64)


def _char_trie(model: ArpaModel, words: list[str], lookahead: bool) -> _CharTrie:
    """Step 2: the :class:`_CharTrie` of the LM's words, built depth by depth with numpy (no Python object
    per prefix): the prefixes of depth ``d`` are the distinct (depth ``d - 1`` node, character) pairs of the
    words that long, each numbered by where it first appears."""
    Wn = len(words)
    lens = np.fromiter((len(w) for w in words), dtype=np.int64, count=Wn)
    codes = _code_points(words)
    start = np.cumsum(lens) - lens  # where each word's characters (and its prefixes) come in the order
    canon = np.zeros(Wn, dtype=np.int64)  # each word's node at the current depth, numbered depth by depth
    firsts, parents, chars, depths = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], [np.full(1, -1)], [np.zeros(1, np.int64)]
    count = 1
    for d in range(1, int(lens.max()) + 1 if Wn else 1):
        idx = np.flatnonzero(lens >= d)
        pos = start[idx] + d - 1
        uniq, first, inv = np.unique(canon[idx] * _CODES + codes[pos], return_index=True, return_inverse=True)
        canon[idx] = count + inv.reshape(-1)
        firsts.append(pos[first] + 1)  # + 1: after the root
        parents.append(uniq // _CODES)
        chars.append(uniq % _CODES)
        depths.append(np.full(uniq.shape[0], d, dtype=np.int64))
        count += uniq.shape[0]
    order = np.argsort(np.concatenate(firsts), kind="stable")  # canonical ids by first appearance
    node = np.empty(count, dtype=np.int64)
    node[order] = np.arange(count)
    parent = node[np.concatenate(parents)][order]
    char, depth = np.concatenate(chars)[order], np.concatenate(depths)[order]
    T = count
    word_label = np.full(T, Wn, dtype=np.int64)  # label of the word ending at each node (<unk>: none)
    uni = np.full(T, -np.inf, dtype=np.float64)  # unigram ln p of the word at each node
    uni_lp = _unigram_logprobs(model) * LN10
    at = node[canon]  # each word's own node
    word_label[at] = np.arange(Wn)
    uni[at] = uni_lp[[i for i, w in enumerate(model.vocab) if w not in (BOS, EOS, UNK)]]
    look = np.zeros(T, dtype=np.float64)
    if lookahead and T > 1:
        best = uni.copy()
        for d in range(int(depth.max()), 0, -1):
            nodes = np.flatnonzero(depth == d)
            np.maximum.at(best, parent[nodes], best[nodes])
        look = np.where(np.isfinite(best), best, 0.0)
        look[0] = 0.0
    return _CharTrie(parent, char, depth, word_label, look)


def _trie_arcs(trie: _CharTrie, bounds: WordBoundaries,
               pieces: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 3a: the trie automaton's arcs (source node, continuation token, destination node), unsorted;
    the OOV node (``trie.size``) loops on every continuation token."""
    T = trie.size
    oov = T
    cont: dict[str, list[int]] = {}
    for t, (starts, txt) in enumerate(zip(bounds.starts_word, bounds.text)):
        if pieces[t] is not None and not starts and txt:
            cont.setdefault(txt, []).append(t)
    max_len = max((len(k) for k in cont), default=0)
    src_l: list[int] = []
    lab_l: list[int] = []
    dst_l: list[int] = []
    # one-character tokens, all nodes at once: node n is reached from its parent by its last character
    src_a, lab_a, dst_a = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    if T > 1:
        last = trie.char[1:]
        par_a = trie.parent
        for txt, toks in cont.items():
            if len(txt) != 1:
                continue
            nodes = np.flatnonzero(last == ord(txt)) + 1
            for t in toks:
                src_a.append(par_a[nodes])
                lab_a.append(np.full(len(nodes), t, dtype=np.int64))
                dst_a.append(nodes)
    if max_len > 1:  # longer tokens: the node's suffixes of 2..max_len characters
        node_text = trie.texts()
        node_of = {t: i for i, t in enumerate(node_text)}
        for n in range(1, T):
            s = node_text[n]
            for ln in range(2, min(max_len, len(s)) + 1):
                piece_toks = cont.get(s[-ln:])
                if piece_toks:
                    a = node_of[s[:-ln]]
                    for t in piece_toks:
                        src_l.append(a)
                        lab_l.append(t)
                        dst_l.append(n)
    for toks in cont.values():  # the OOV node's self-loops: the per-character offset
        for t in toks:
            src_l.append(oov)
            lab_l.append(t)
            dst_l.append(oov)
    src = np.concatenate(src_a + [np.asarray(src_l, dtype=np.int64)])
    lab = np.concatenate(lab_a + [np.asarray(lab_l, dtype=np.int64)])
    dst = np.concatenate(dst_a + [np.asarray(dst_l, dtype=np.int64)])
    return src, lab, dst


def _trie_automaton(trie: _CharTrie, look: np.ndarray,
                    depth: np.ndarray, bounds: WordBoundaries, pieces: Sequence[str | None], blank_id: int | None,
                    partial_oov: float, per_char: float, dense_memory_mb: float,
                    device: torch.device | str | None) -> BackoffAutomaton:
    """Step 3: the trie automaton: arcs (node, continuation token) -> node, backoff to the OOV node."""
    # ---- trie automaton: arcs (node, continuation token) -> node, backoff to the OOV node
    T = trie.size
    oov = T
    V = len(pieces)
    src, lab, dst = _trie_arcs(trie, bounds, pieces)
    perm = np.argsort(src * V + lab, kind="stable")
    src, lab, dst = src[perm], lab[perm], dst[perm]
    look_oov = np.concatenate([look, [0.0]])
    wts = look_oov[dst] - look_oov[src]
    wts[src == oov] = per_char * np.array([len(bounds.text[t]) for t in lab[src == oov]], dtype=np.float64)
    S = T + 1
    offsets = np.zeros(S + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=S), out=offsets[1:])
    backoff_w = np.zeros(S, dtype=np.float64)
    backoff_w[:T] = partial_oov - look + per_char * depth  # + the OOV node's arc: per_char * len(token)
    terminal = np.zeros(S, dtype=bool)
    terminal[oov] = True
    return BackoffAutomaton(
        vocab_size=V, blank_id=blank_id,
        arc_offsets=_tensor(offsets, torch.int64, device), arc_label=_tensor(lab, torch.int64, device),
        arc_weight=_tensor(wts, torch.float32, device), arc_dest=_tensor(dst, torch.int64, device),
        backoff_state=_tensor(np.full(S, oov), torch.int64, device),
        backoff_weight=_tensor(backoff_w, torch.float32, device),
        final_weight=_tensor(np.zeros(S), torch.float32, device), terminal=_tensor(terminal, torch.bool, device),
        root_fill=0.0, dense_memory_mb=dense_memory_mb,
    )


def _word_ends(word_label: np.ndarray, look: np.ndarray, depth: np.ndarray, Wn: int, oov: int, partial_oov: float,
               per_char: float, lexicon: bool, word_bonus: float,
               unk_offset: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 4: the label that ends at each node, the constant added to its LM score, and what a partial
    word at each node has already received."""
    # ---- word ends: the label that ends at each node and the constant added to its LM score
    end_label = np.concatenate([word_label, [Wn]])
    is_word = np.concatenate([word_label < Wn, [False]])
    applied = np.concatenate([look, [partial_oov]])  # what the partial word has already received
    if lexicon:
        end_const = np.where(is_word, word_bonus - applied, -np.inf)
        end_const[oov] = 0.0  # already -inf since it left the trie
    else:
        unk = np.where(is_word, 0.0, float(unk_offset) + per_char * np.concatenate([depth, [0.0]]))
        end_const = word_bonus + unk - applied
        end_const[oov] = word_bonus  # its offsets were all applied on the way
    end_const[0] = 0.0  # the empty word: no score (masked in _word_end as well)
    return end_label, end_const, applied


def _word_starts(bounds: WordBoundaries, trie: _CharTrie, oov: int, applied: np.ndarray, per_char: float,
                 V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 5: the word-starting tokens, the node each opens and the score each adds there."""
    # ---- word-starting tokens: the node they open and the score they add there
    is_start = np.array(bounds.starts_word, dtype=bool)
    start_node = np.zeros(V, dtype=np.int64)
    start_score = np.zeros(V, dtype=np.float64)
    starts = np.flatnonzero(is_start).tolist()
    found = trie.find([bounds.text[t] for t in starts])
    for t, node in zip(starts, np.where(found >= 0, found, oov).tolist()):
        start_node[t] = node
        start_score[t] = applied[node] + (per_char * len(bounds.text[t]) if node == oov else 0.0)
    return is_start, start_node, start_score


def _warn_case_mismatch(words: Sequence[str], texts: Sequence[str]) -> None:
    """Warn when the tokens spell letters of one case only and the LM's words use only the other
    (upper-case labels with a lower-case ARPA: every word would be out of vocabulary)."""
    tok = "".join(texts)
    lm = "".join(words[:20000])
    tok_up, tok_low = any(c.isupper() for c in tok), any(c.islower() for c in tok)
    lm_up, lm_low = any(c.isupper() for c in lm), any(c.islower() for c in lm)
    if tok_up != tok_low and lm_up != lm_low and tok_up != lm_up:
        case, other = ("upper", "lower") if tok_up else ("lower", "upper")
        warnings.warn(f"the tokens spell {case}-case letters only but the LM's words are {other}-case: every word "
                      f"would be out of the LM's vocabulary; convert the labels (or the ARPA) to {other} case",
                      UserWarning, stacklevel=3)


def _unigram_logprobs(model: ArpaModel) -> np.ndarray:
    """log10 p of every vocabulary word from the 1-grams ``[len(vocab)]`` (-inf where absent)."""
    out = np.full(len(model.vocab), -np.inf, dtype=np.float64)
    out[model.words[0][:, 0].astype(np.int64)] = model.logprob[0]
    return out


# ---------------------------------------------------------------------------------- CLI helper
def word_lm_fusion(path: str | os.PathLike, tokenizer: Any, *, vocab_size: int, blank_id: int | None,
                   weight: float, word_bonus: float = 0.0, **kwargs: Any) -> tuple[WordNGramLM, float]:
    """``(WordNGramLM, weight)`` for a ``fusion=`` list, as the CLI's ``--word-lm`` builds it.

    ``word_bonus`` here is per word in the *fused* score (pyctcdecode's ``beta``), so the model's
    ``unweighted_word_bonus`` is ``word_bonus / weight``. Raises :class:`FileFormatError` for a missing or
    malformed file. (:func:`asrdecode.lm.word_cache.cached_word_lm_fusion`: the same, cached.)
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileFormatError(p, None, "no such word LM file")
    weight = float(weight)
    if word_bonus and weight == 0.0:
        raise DecodingInputError("a word bonus needs a non-zero word LM weight")
    bonus = float(word_bonus) / weight if word_bonus else 0.0
    lm = WordNGramLM.from_arpa(p, tokenizer, vocab_size=vocab_size, blank_id=blank_id, **kwargs)
    return lm.with_unweighted_word_bonus(bonus), weight
