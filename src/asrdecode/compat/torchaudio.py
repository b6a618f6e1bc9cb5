"""torchaudio's ``ctc_decoder`` (flashlight-text) API over asrdecode's CTC prefix beam search.

``from asrdecode.compat import ctc_decoder`` in place of ``from torchaudio.models.decoder import
ctc_decoder``: the same arguments, a callable ``decoder(emissions [B, T, N], lengths [B])`` that
returns ``List[List[CTCHypothesis]]`` (``tokens``, ``words``, ``score``, ``timesteps``). The facade only
translates arguments to :func:`asrdecode.ctc.beam_search`:

* ``lexicon`` given: lexicon decoding with the lexicon-constrained word LM
  (:class:`~asrdecode.lm.WordNGramLM` with ``lexicon=True``) over the lexicon's words; ``lm`` is a
  word ARPA file (a lexicon word the LM lacks gets the LM's ``<unk>`` score, as in KenLM; LM words
  outside the lexicon cannot be decoded) or ``None`` (no LM: every lexicon
  word scores 0); ``word_score`` -> bonus per word; ``unk_score`` finite -> words outside the
  lexicon allowed (``lexicon=False``) with that offset;
* ``lexicon=None``: lexicon-free decoding; ``lm`` is a *token* ARPA file whose words are the token
  strings (an :class:`~asrdecode.lm.NGramLM`), as flashlight's lexicon-free decoder queries its LM per
  token; ``word_score`` and ``unk_score`` are unused there (as in flashlight);
* ``lm_dict`` (a file, one word per line, the word first): the LM's words. With a lexicon, every entry
  must be a lexicon word (as torchaudio requires); LM words outside it are dropped and lexicon words
  outside it score as ``<unk>``. Without a lexicon, its entries are tokens and the token LM keeps
  only those (other tokens score as ``<unk>``);
* ``lm`` may also be any asrdecode :class:`~asrdecode.fusion.FusionModel` over the token ids (the
  place of torchaudio's custom ``CTCDecoderLM``);
* ``beam_size`` -> ``beam``, ``beam_size_token`` -> ``token_beam``, ``beam_threshold``, ``lm_weight`` ->
  the fusion weight, ``sil_score`` -> a bonus per ``sil_token`` (a one-token boosting phrase), ``nbest``.

Differences, by design: hypotheses are prefixes with their CTC paths summed (``log_add=True``
behaviour) whatever ``log_add`` says; ``tokens`` are the emitted tokens (no added leading/trailing
silence); ``words`` are filled in lexicon-free mode too (tokens split at ``sil_token``); ``score`` is
on the emissions' own scale (raw logits are fine: each frame's log-normaliser is added back);
an utterance whose every hypothesis left the lexicon gets one empty hypothesis with score
``-inf``; ``unk_word`` is checked but the ARPA's unknown word is always
``<unk>``; the lexicon's spelling must be the word's own text (a pronunciation lexicon needs
:mod:`asrdecode.ctc.wfst`); LM files are ARPA (a KenLM binary raises
:class:`~asrdecode.errors.FileFormatError`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, Union, cast

import torch

from .. import ctc
from ..errors import DecodingInputError, FileFormatError
from ..fusion import FusionModel
from ..lm.arpa import BOS, EOS, UNK, drop_words, read_arpa
from ..lm.boosting import BoostingTree
from ..lm.ngram import NGramLM
from ..lm.tokens import TokenMap
from ..lm.word import WordBoundaries, WordNGramLM, detect_boundaries
from ..results import Hypothesis
from ._common import check_number, flat_arpa, with_unigrams

__all__ = ["ctc_decoder", "CTCDecoder", "CTCHypothesis", "read_lexicon", "read_lm_dict"]

SP = "\u2581"


class CTCHypothesis(NamedTuple):
    """One hypothesis, as torchaudio's: token ids ``[L]``, words, score, frame of each token ``[L]``."""

    tokens: torch.Tensor  # int64 (torch.LongTensor in torchaudio's annotation)
    words: list[str]
    score: float
    timesteps: torch.Tensor  # int32 (torch.IntTensor in torchaudio's annotation)


def _read_tokens(tokens: Union[str, os.PathLike, Sequence[str]]) -> list[str]:
    if isinstance(tokens, (str, os.PathLike)):
        p = Path(tokens)
        if not p.is_file():
            raise FileFormatError(str(p), None, "tokens: no such file")
        out = [line.strip() for line in p.read_text(encoding="utf-8").splitlines()]
        out = [t for t in out if t]
    elif isinstance(tokens, Sequence) and all(isinstance(t, str) for t in tokens):
        out = list(tokens)
    else:
        raise DecodingInputError("tokens must be a token file path or a list of token strings")
    if not out:
        raise DecodingInputError("tokens is empty")
    if len(set(out)) != len(out):
        raise DecodingInputError("tokens contains duplicate entries")
    return out


def read_lexicon(path: Union[str, os.PathLike], tokens: Sequence[str]) -> dict[str, list[list[str]]]:
    """A flashlight lexicon file (``word tok1 tok2 ...`` per line) -> ``{word: [spelling, ...]}``.

    Raises:
        FileFormatError: missing file, a line without a spelling, a token not in ``tokens`` (file:line).
    """
    p = Path(path)
    if not p.is_file():
        raise FileFormatError(str(p), None, "lexicon: no such file")
    known = set(tokens)
    out: dict[str, list[list[str]]] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2:
            raise FileFormatError(str(p), n, f"lexicon entry {parts[0]!r} has no spelling "
                                              "(expected: word tok1 tok2 ...)")
        bad = [t for t in parts[1:] if t not in known]
        if bad:
            raise FileFormatError(str(p), n, f"lexicon entry {parts[0]!r} uses tokens not in tokens: {bad}")
        out.setdefault(parts[0], []).append(parts[1:])
    if not out:
        raise FileFormatError(str(p), None, "lexicon has no entries")
    return out


def read_lm_dict(path: Union[str, os.PathLike]) -> list[str]:
    """The words of an ``lm_dict`` file (the first field of each non-empty line).

    Raises:
        FileFormatError: missing file, not UTF-8, no entries, a word listed twice (file:line).
    """
    p = Path(path) if isinstance(path, (str, os.PathLike)) else None
    if p is None:
        raise DecodingInputError(f"lm_dict must be a file path or None, got {type(path).__name__}")
    if not p.is_file():
        raise FileFormatError(str(p), None, "lm_dict: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(str(p), None, "lm_dict is not UTF-8 text") from None
    out: list[str] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if parts[0] in seen:
            raise FileFormatError(str(p), n, f"lm_dict lists {parts[0]!r} twice")
        seen.add(parts[0])
        out.append(parts[0])
    if not out:
        raise FileFormatError(str(p), None, "lm_dict has no entries")
    return out


#: what an utterance gets when no hypothesis survived (every prefix left the lexicon): flashlight
#: always returns at least one hypothesis, so scripts index ``hyps[0]``; its score says "none".
_NO_HYPOTHESIS = CTCHypothesis(torch.zeros(0, dtype=torch.long), [], -math.inf, torch.zeros(0, dtype=torch.int32))


class CTCDecoder:
    """The decoder :func:`ctc_decoder` returns; call it with ``(emissions [B, T, N], lengths [B] or None)``."""

    def __init__(self, tokens: list[str], blank_id: int, sil_id: int, boundaries: WordBoundaries,
                 fusion: list[tuple[FusionModel, float]], nbest: int, beam_size: int, beam_size_token: Optional[int],
                 beam_threshold: float) -> None:
        self.tokens = tokens
        self.blank_id = blank_id
        self.sil_id = sil_id
        self.boundaries = boundaries
        self.fusion = fusion
        self.nbest = nbest
        self.beam_size = beam_size
        self.beam_size_token = beam_size_token
        self.beam_threshold = beam_threshold

    def __call__(self, emissions: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> list[list[CTCHypothesis]]:
        """Decode ``emissions [B, T, N]`` (float32, CPU; log-probs or logits) -> per utterance, ``nbest`` hypotheses."""
        if not isinstance(emissions, torch.Tensor) or emissions.dim() != 3:
            got = (f"shape {tuple(emissions.shape)}" if isinstance(emissions, torch.Tensor)
                   else type(emissions).__name__)
            raise DecodingInputError(f"emissions must be a [batch, frames, tokens] tensor, got {got}")
        if emissions.dtype != torch.float32:
            raise DecodingInputError(f"emissions must be float32, got {emissions.dtype}")
        if emissions.shape[2] != len(self.tokens):
            raise DecodingInputError(f"emissions have {emissions.shape[2]} classes but tokens has {len(self.tokens)}")
        res = cast(list[list[Hypothesis]], ctc.beam_search(emissions, lengths, self.blank_id, beam=self.beam_size,
                                                           fusion=self.fusion, beam_threshold=self.beam_threshold,
                                                           token_beam=self.beam_size_token, nbest=self.nbest,
                                                           log_softmax=True))
        lse = torch.logsumexp(emissions, dim=-1)  # each frame's normaliser: scores on the emissions' scale
        T = emissions.shape[1]
        lens = (torch.full((emissions.shape[0],), T) if lengths is None
                else torch.as_tensor(lengths).to("cpu", torch.long))
        out = []
        for b, hyps in enumerate(res):
            shift = float(lse[b, : int(lens[b])].double().sum())
            out.append([CTCHypothesis(tokens=torch.tensor(h.tokens, dtype=torch.long),
                                      words=self.boundaries.words(h.tokens), score=float(h.score) + shift,
                                      timesteps=torch.tensor(h.timestamps, dtype=torch.int32)) for h in hyps]
                       or [_NO_HYPOTHESIS])
        return out

    def idxs_to_tokens(self, idxs: torch.LongTensor) -> list[str]:
        """Token strings of token ids."""
        return [self.tokens[int(i)] for i in idxs]


def ctc_decoder(lexicon: Optional[Union[str, os.PathLike]], tokens: Union[str, os.PathLike, Sequence[str]],
                lm: Union[str, os.PathLike, FusionModel, None] = None, lm_dict: Optional[str] = None, nbest: int = 1,
                beam_size: int = 50, beam_size_token: Optional[int] = None, beam_threshold: float = 50,
                lm_weight: float = 2, word_score: float = 0, unk_score: float = -math.inf, sil_score: float = 0,
                log_add: bool = False, blank_token: str = "-", sil_token: str = "|",
                unk_word: str = "<unk>") -> CTCDecoder:
    """torchaudio's ``ctc_decoder``: see the module docstring for how each argument is translated.

    Raises:
        DecodingInputError: bad numbers, ``blank_token`` / ``sil_token`` not in ``tokens``, ``lm_dict`` entries
            outside the lexicon (or the tokens), an ``lm`` of another type, a lexicon spelling that is not its
            word's text.
        FileFormatError: a missing or malformed tokens, lexicon or ARPA file.
    """
    toks = _read_tokens(tokens)
    for name, t in (("blank_token", blank_token), ("sil_token", sil_token)):
        if t not in toks:
            raise DecodingInputError(f"{name} {t!r} is not in tokens")
    lm_words = None if lm_dict is None else read_lm_dict(lm_dict)
    lm_weight, word_score, sil_score, thr, unk = _check_options(nbest, beam_size, lm_weight, word_score, sil_score,
                                                               beam_threshold, unk_score, unk_word, log_add)
    blank, sil = toks.index(blank_token), toks.index(sil_token)
    pieces, bounds = _pieces_and_boundaries(toks, blank, sil_token)
    fusion = _lm_fusion(lm, lexicon, toks, lm_words, pieces, bounds, blank, sil_token, lm_weight, word_score, unk)
    if sil_score != 0.0:
        fusion.append((BoostingTree.from_token_sequences([([sil], sil_score)], vocab_size=len(toks), blank_id=blank),
                       1.0))
    if beam_size_token is not None and (isinstance(beam_size_token, bool) or not isinstance(beam_size_token, int)
                                        or beam_size_token < 1):
        raise DecodingInputError(f"beam_size_token must be a positive int or None, got {beam_size_token!r}")
    token_beam = None if beam_size_token is None or beam_size_token >= len(toks) - 1 else beam_size_token
    if not thr > 0:
        raise DecodingInputError(f"beam_threshold must be > 0, got {beam_threshold!r}")
    return CTCDecoder(toks, blank, sil, bounds, fusion, nbest, beam_size, token_beam, thr)


def _check_options(nbest: int, beam_size: int, lm_weight: float, word_score: float, sil_score: float,
                   beam_threshold: float, unk_score: float, unk_word: str,
                   log_add: bool) -> tuple[float, float, float, float, float]:
    """:func:`ctc_decoder`'s option checks: (lm_weight, word_score, sil_score, beam_threshold, unk_score) as floats."""
    if isinstance(nbest, bool) or not isinstance(nbest, int) or nbest < 1:
        raise DecodingInputError(f"nbest must be a positive int, got {nbest!r}")
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise DecodingInputError(f"beam_size must be a positive int, got {beam_size!r}")
    if nbest > beam_size:
        raise DecodingInputError(f"nbest ({nbest}) must be <= beam_size ({beam_size})")
    lm_weight = check_number("lm_weight", lm_weight)
    word_score = check_number("word_score", word_score)
    sil_score = check_number("sil_score", sil_score)
    thr = check_number("beam_threshold", beam_threshold, finite=False)
    unk = check_number("unk_score", unk_score, finite=False)
    if not isinstance(unk_word, str):
        raise DecodingInputError(f"unk_word must be a str, got {unk_word!r}")
    if not isinstance(log_add, bool):
        raise DecodingInputError(f"log_add must be a bool, got {log_add!r}")
    return lm_weight, word_score, sil_score, thr, unk


def _pieces_and_boundaries(toks: list[str], blank: int, sil_token: str) -> tuple[list[str | None], WordBoundaries]:
    """The tokens as word pieces (blank -> None) and their word boundaries (``\u2581`` prefixes, else ``sil_token``)."""
    pieces: list[str | None] = [None if i == blank else t for i, t in enumerate(toks)]
    if any(p and p.startswith(SP) and len(p) > 1 for p in pieces):
        bounds = detect_boundaries(pieces, "prefix")
    else:
        bounds = detect_boundaries(pieces, "delimiter", [sil_token])
    return pieces, bounds


def _lm_fusion(lm: Union[str, os.PathLike, FusionModel, None], lexicon: Optional[Union[str, os.PathLike]],
               toks: list[str], lm_words: Optional[list[str]], pieces: list[str | None], bounds: WordBoundaries,
               blank: int, sil_token: str, lm_weight: float, word_score: float,
               unk: float) -> list[tuple[Any, float]]:
    """The (model, weight) pairs that ``lm`` / ``lexicon`` / ``lm_dict`` give :func:`ctc_decoder`."""
    fusion: list[tuple[Any, float]] = []
    if isinstance(lm, (str, os.PathLike)) or lm is None:
        path = None if lm is None else os.fspath(lm)
        if path is not None and not os.path.isfile(path):
            raise FileFormatError(path, None, "lm: no such file")
        if lexicon is not None:
            fusion.append(_lexicon_word_lm(lexicon, toks, lm_words, pieces, bounds, blank, sil_token, path,
                                           lm_weight, word_score, unk))
        elif path is not None and lm_weight != 0.0:
            tmap = TokenMap.from_words(pieces, blank)
            if lm_words is None:
                fusion.append((NGramLM.from_arpa(path, token_map=tmap), lm_weight))
            else:
                bad = [w for w in lm_words if w not in toks]
                if bad:
                    raise DecodingInputError(f"lm_dict has entries that are not tokens (no lexicon given): {bad[:5]}")
                model = read_arpa(path)
                keep = set(lm_words)
                model = drop_words(model, [w for w in model.vocab if w not in keep and w not in (BOS, EOS, UNK)])
                fusion.append((NGramLM.from_arpa_model(model, token_map=tmap), lm_weight))
    elif all(callable(getattr(lm, a, None)) for a in ("advance", "initial_states", "final")):
        if lm_words is not None:
            raise DecodingInputError("lm_dict applies to an ARPA file lm, not to a FusionModel")
        if lexicon is not None:
            raise DecodingInputError("a FusionModel lm is used without a lexicon (lexicon=None)")
        fusion.append((lm, lm_weight))
    else:
        raise DecodingInputError(f"lm must be an ARPA file path, an asrdecode FusionModel or None, "
                                 f"got {type(lm).__name__}")
    return fusion


def _lexicon_word_lm(lexicon: Union[str, os.PathLike], toks: list[str], lm_words: Optional[list[str]],
                     pieces: list[str | None], bounds: WordBoundaries, blank: int, sil_token: str,
                     path: Optional[str], lm_weight: float, word_score: float,
                     unk: float) -> tuple[WordNGramLM, float]:
    """The word LM (and its weight) of a lexicon decoder: the ARPA ``path`` (or a flat LM over the lexicon's
    words) restricted to the lexicon / ``lm_dict`` words."""
    words = read_lexicon(lexicon, toks)
    if lm_words is not None:
        outside = [w for w in lm_words if w not in words]
        if outside:
            raise DecodingInputError(f"lm_dict has words that are not in the lexicon: {outside[:5]}")
    for w, spellings in words.items():
        for sp in spellings:
            text = "".join(bounds.text[toks.index(t)] for t in sp)
            if text != w:
                raise DecodingInputError(
                    f"lexicon spells {w!r} as {' '.join(sp)!r} ({text!r}): asrdecode.compat decodes lexicons "
                    "whose spellings are the words' own text; a pronunciation lexicon needs asrdecode.ctc.wfst")
    lexicon_only = not math.isfinite(unk)
    if path is None or lm_weight == 0.0:
        model, weight = flat_arpa(list(words)), 1.0
        unk_offset = 0.0 if lexicon_only else unk
        bonus = word_score
    else:
        model = read_arpa(path)
        known = words if lm_words is None else set(lm_words)
        model = drop_words(model, [w for w in model.vocab if w not in known and w not in (BOS, EOS, UNK)])
        model = with_unigrams(model, list(words))
        weight = lm_weight
        unk_offset = 0.0 if lexicon_only else unk / lm_weight
        bonus = word_score / lm_weight
    word_lm = WordNGramLM.from_arpa_model(model, pieces, blank_id=blank, boundary=bounds.style,
                                          delimiters=[sil_token] if bounds.style == "delimiter" else None,
                                          lexicon=lexicon_only, unk_offset=unk_offset, unk_char_offset=0.0,
                                          unweighted_word_bonus=bonus)
    return word_lm, weight
