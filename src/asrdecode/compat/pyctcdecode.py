"""pyctcdecode's API over asrdecode's CTC prefix beam search: change the import, keep the script.

``from asrdecode.compat import build_ctcdecoder`` in place of ``from pyctcdecode import
build_ctcdecoder``: the same arguments and return shapes, decoded by :func:`asrdecode.ctc.beam_search`
with a :class:`~asrdecode.lm.WordNGramLM` (and a :class:`~asrdecode.lm.BoostingTree` for hotwords).
The facade only translates arguments:

* labels: pyctcdecode's normalisation (``""``, ``<pad>``/``[pad]`` or ``_`` is the blank, else a
  blank is appended; ``|`` is the space when there is no ``" "``; ``<unk>`` becomes ``⁇``; ``▁`` or
  ``##`` pieces make a BPE alphabet, ``##`` pieces turned into ``▁`` style);
* ``alpha`` -> the word LM's fusion weight, ``beta`` -> a bonus per word, ``unk_score_offset``
  (log10 units, as pyctcdecode) -> the word LM's ``unk_offset``; ``unigrams`` -> LM words outside
  them are out of vocabulary (scored as ``<unk>`` plus the offset); ``reset_params`` as pyctcdecode's;
* ``beam_width`` -> ``beam``, ``beam_prune_logp`` -> ``beam_threshold = -beam_prune_logp``, default
  -20 (asrdecode's one default, that of :func:`asrdecode.ctc.beam_search`, which its tests and tuned
  settings use; pyctcdecode's is -10): with the word LM, 10 and 20 gave the same WER and time on the
  two workloads measured (docs/decoders.md); pass ``beam_prune_logp=-10`` for pyctcdecode's own value;
  ``hotwords`` -> a phrase-boosting tree: each word of each hotword earns ``hotword_weight`` once
  spelled completely (credit grows token by token, as pyctcdecode's partial-word credit);
* ``save_to_dir`` / ``load_from_dir``: pyctcdecode's folder layout (``alphabet.json``,
  ``language_model/attrs.json``, the LM file, ``unigrams.txt``); the LM file is a copy of the ARPA;
* logits: pyctcdecode's input rule (rows summing to 1 are probabilities, else log-softmax; clipped at
  ``log(1e-15)``).

Differences, by design: ``kenlm_model_path`` must be an ARPA file (``.arpa`` / ``.arpa.gz``; a KenLM
binary raises :class:`~asrdecode.errors.FileFormatError` naming the fix: pass the ARPA it was built
from); ``token_min_logp`` and ``prune_history`` are accepted and checked but asrdecode scores every
token (exact; ``token_beam`` is its own pruning); a hotword is boosted wherever its tokens occur,
not only as a whole word; ``lm_start_state`` and ``lm_score_boundary=False`` are refused; the
returned LM state is ``None``. ``decode_batch`` / ``decode_beams_batch`` ignore ``pool``: they decode
batches of utterances in one batched search instead of one process per utterance.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, cast

import torch

from .. import ctc
from ..ctc._checks import check_emission_values
from ..errors import DecodingInputError, FileFormatError
from ..lm.arpa import ArpaModel, drop_words, read_arpa
from ..lm.boosting import BoostingTree
from ..lm.word import LN10, WordBoundaries, WordNGramLM, detect_boundaries
from ..lm.word_cache import cached_word_lm
from ..results import Hypothesis
from ._common import BATCH_SIZE, as_float_matrix, check_number, flat_arpa, pad_batch, spell_greedy, word_spans

__all__ = ["build_ctcdecoder", "BeamSearchDecoderCTC", "normalize_labels"]

SP = "\u2581"
UNK_CHAR = "\u2047"  # pyctcdecode's "⁇"
_BLANK_PTN = re.compile(r"^[<\[]pad[>\]]$", re.IGNORECASE)
_UNK_PTN = re.compile(r"^[<\[]unk[>\]]$", re.IGNORECASE)
_SPECIAL_PTN = re.compile(r"^[<\[].+[>\]]$")
MIN_P = 1e-15  # pyctcdecode's probability floor
WordFrames = list[tuple[str, tuple[int, int]]]  # [(word, (start_frame, end_frame)), ...]
# save_to_dir's layout (pyctcdecode's names)
ALPHABET_FILE, LM_DIR, LM_ATTRS_FILE, UNIGRAMS_FILE = "alphabet.json", "language_model", "attrs.json", "unigrams.txt"

# pyctcdecode's defaults
DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_UNK_OFFSET = 0.5, 1.5, -10.0
DEFAULT_BEAM_WIDTH, DEFAULT_MIN_TOKEN_LOGP, DEFAULT_HOTWORD_WEIGHT = 100, -5.0, 10.0
#: asrdecode's beam_threshold (ctc.beam_search's 20), not pyctcdecode's -10: see the module docstring
DEFAULT_PRUNE_LOGP = -20.0


def normalize_labels(labels: Sequence[str]) -> tuple[list[str], bool]:
    """pyctcdecode's label normalisation: ``(labels, is_bpe)`` with the blank as ``""`` (appended if absent).

    Raises:
        DecodingInputError: not a list of strings, duplicates, or a space inside a BPE vocabulary.
    """
    if isinstance(labels, str) or not isinstance(labels, Sequence) or not all(isinstance(x, str) for x in labels):
        raise DecodingInputError("labels must be a list of strings, one per logit column")
    out = list(labels)
    if len(set(out)) != len(out):
        raise DecodingInputError("labels contains duplicate entries")
    is_bpe = any(x.startswith("##") or x.startswith(SP) for x in out)
    if is_bpe:
        if any(" " in x for x in out):
            raise DecodingInputError("labels look like BPE (▁ or ## pieces) but contain a space")
        if any(x.startswith("##") for x in out):
            out = [x[2:] if x.startswith("##") else
                   x if (_SPECIAL_PTN.match(x) or x in ("", SP, SP + UNK_CHAR + SP)) else SP + x for x in out]
        unk = SP + UNK_CHAR + SP
    else:
        if "|" in out and " " not in out:
            out[out.index("|")] = " "
        unk = UNK_CHAR
    out = ["" if _BLANK_PTN.match(x) else x for x in out]
    if not is_bpe and "_" in out and "" not in out:
        out[out.index("_")] = ""
    if "" not in out:
        out.append("")
    out = [unk if _UNK_PTN.match(x) else x for x in out]
    return out, is_bpe


class BeamSearchDecoderCTC:
    """The object :func:`build_ctcdecoder` returns: pyctcdecode's decoding methods and return shapes.

    Attributes:
        labels: the normalised labels (one per logit column; the blank is ``""``).
        is_bpe: whether the labels are word pieces.
        blank_id: the blank's column.
        word_lm: the :class:`~asrdecode.lm.WordNGramLM` in use (``None`` without an LM) and
        lm_weight: its fusion weight.
    """

    def __init__(self, labels: list[str], is_bpe: bool, word_lm: Optional[WordNGramLM], lm_weight: float) -> None:
        self.labels = labels
        self.is_bpe = is_bpe
        self.blank_id = labels.index("")
        self.pieces: list[str | None] = [None if i == self.blank_id else x for i, x in enumerate(labels)]
        self.word_lm = word_lm
        self.lm_weight = lm_weight
        self.boundaries: WordBoundaries = (word_lm.boundaries if word_lm is not None
                                           else _boundaries(self.pieces, is_bpe))
        self._hotword_trees: dict[tuple[tuple[str, ...], float], BoostingTree] = {}
        self._arpa: Optional[ArpaModel] = None  # the LM's n-grams (read when reset_params needs a rebuild)
        self._lm_path: Optional[str] = None
        self._unigrams: Optional[list[str]] = None
        self._params: dict[str, float] = {}

    # ------------------------------------------------------------------ pyctcdecode's methods
    def decode(self, logits: Any, beam_width: int = DEFAULT_BEAM_WIDTH, beam_prune_logp: float = DEFAULT_PRUNE_LOGP,
               token_min_logp: float = DEFAULT_MIN_TOKEN_LOGP, hotwords: Optional[Iterable[str]] = None,
               hotword_weight: float = DEFAULT_HOTWORD_WEIGHT, lm_start_state: Any = None) -> str:
        """The best transcript of ``logits [T, V]``."""
        _no_start_state(lm_start_state)
        hyps = self._search([logits], beam_width, beam_prune_logp, token_min_logp, hotwords, hotword_weight, 1)
        return self._text(hyps[0][0].tokens) if hyps[0] else ""

    def decode_beams(self, logits: Any, beam_width: int = DEFAULT_BEAM_WIDTH,
                     beam_prune_logp: float = DEFAULT_PRUNE_LOGP, token_min_logp: float = DEFAULT_MIN_TOKEN_LOGP,
                     prune_history: bool = False, hotwords: Optional[Iterable[str]] = None,
                     hotword_weight: float = DEFAULT_HOTWORD_WEIGHT,
                     lm_start_state: Any = None) -> list[tuple[str, None, WordFrames, float, float]]:
        """Beams best first: ``(text, None, [(word, (start_frame, end_frame)), ...], logit_score, lm_score)``.

        ``logit_score`` is the acoustic log-probability of the prefix, ``lm_score`` the total score
        (acoustic + weighted LM, word bonuses and hotwords), as pyctcdecode's; a word's frames are
        its first token's frame and one past its last token's frame. Hypotheses with the same text
        (extra spaces) are one beam, the best (as pyctcdecode merges them).
        """
        _no_start_state(lm_start_state)
        _check_flag("prune_history", prune_history)
        hyps = self._search([logits], beam_width, beam_prune_logp, token_min_logp, hotwords, hotword_weight,
                            beam_width)
        fusion = self._fusion(hotwords, hotword_weight)
        return [(t, None, f, a, s) for t, f, a, s in self._beams(hyps[0], fusion)]

    def decode_batch(self, pool: Any, logits_list: Sequence[Any], beam_width: int = DEFAULT_BEAM_WIDTH,
                     beam_prune_logp: float = DEFAULT_PRUNE_LOGP, token_min_logp: float = DEFAULT_MIN_TOKEN_LOGP,
                     hotwords: Optional[Iterable[str]] = None,
                     hotword_weight: float = DEFAULT_HOTWORD_WEIGHT) -> list[str]:
        """The best transcript of each ``[T_i, V]`` matrix (``pool`` is not used: batched search instead)."""
        hyps = self._search(logits_list, beam_width, beam_prune_logp, token_min_logp, hotwords, hotword_weight, 1)
        return [self._text(h[0].tokens) if h else "" for h in hyps]

    def decode_beams_batch(self, pool: Any, logits_list: Sequence[Any], beam_width: int = DEFAULT_BEAM_WIDTH,
                           beam_prune_logp: float = DEFAULT_PRUNE_LOGP,
                           token_min_logp: float = DEFAULT_MIN_TOKEN_LOGP, prune_history: bool = False,
                           hotwords: Optional[Iterable[str]] = None, hotword_weight: float = DEFAULT_HOTWORD_WEIGHT,
                           ) -> list[list[tuple[str, WordFrames, float, float]]]:
        """Per matrix, beams best first: ``(text, word frames, logit_score, lm_score)`` (no LM state)."""
        _check_flag("prune_history", prune_history)
        hyps = self._search(logits_list, beam_width, beam_prune_logp, token_min_logp, hotwords, hotword_weight,
                            beam_width)
        fusion = self._fusion(hotwords, hotword_weight)
        return [self._beams(h, fusion) for h in hyps]

    def reset_params(self, alpha: Optional[float] = None, beta: Optional[float] = None,
                     unk_score_offset: Optional[float] = None, lm_score_boundary: Optional[bool] = None) -> None:
        """pyctcdecode's ``reset_params``: new LM weight, word bonus or unknown-word offset (``None``: keep).

        A new ``beta`` alone (or ``alpha``, both non-zero) reuses the word LM's tensors; a new
        ``unk_score_offset`` or a change to / from ``alpha=0`` rebuilds it. Without an LM: nothing to do.
        """
        new = {k: check_number(k, v) for k, v in (("alpha", alpha), ("beta", beta),
                                                    ("unk_score_offset", unk_score_offset)) if v is not None}
        if lm_score_boundary is not None:
            _check_flag("lm_score_boundary", lm_score_boundary)
            if not lm_score_boundary:
                raise DecodingInputError("lm_score_boundary=False is not supported: asrdecode's word LM always "
                                         "scores the sentence start and end")
        if self._lm_path is None:
            return
        old = dict(self._params)
        params = {**old, **new}
        a, b = params["alpha"], params["beta"]
        if self.word_lm is not None and params["unk_score_offset"] == old.get("unk_score_offset") and a != 0.0 \
                and old.get("alpha", 0.0) != 0.0:
            self.word_lm, self.lm_weight = self.word_lm.with_unweighted_word_bonus(b / a), a
        elif a != 0.0:  # the built model of (file, labels, unk offset) comes from the cache after the first time
            kw = _lm_options(self.pieces, self.boundaries)
            lm = cached_word_lm(self._lm_path, self.pieces, keep_words=self._unigrams,
                                unk_offset=params["unk_score_offset"] * LN10, **kw)
            self.word_lm, self.lm_weight = lm.with_unweighted_word_bonus(b / a), a
        else:
            self.word_lm, self.lm_weight = _word_lm(self._model(), self.pieces, self.boundaries, a, b,
                                                    params["unk_score_offset"])
        self._params = params

    def _model(self) -> ArpaModel:
        """The LM's n-grams (``unigrams`` applied), read on first use."""
        if self._arpa is None:
            assert self._lm_path is not None  # decoders without an LM never read one
            model = read_arpa(self._lm_path)
            if self._unigrams is not None:
                keep = set(self._unigrams)
                model = drop_words(model, [w for w in model.vocab if w not in keep and w not in ("<s>", "</s>", "<unk>")])
            self._arpa = model
        return self._arpa

    # ------------------------------------------------------------------ saving
    def save_to_dir(self, filepath: str | os.PathLike) -> None:
        """pyctcdecode's ``save_to_dir``: ``alphabet.json`` (labels, is_bpe) and, with an LM,
        ``language_model/`` (``attrs.json``: alpha, beta, unk_score_offset; a copy of the ARPA file;
        ``unigrams.txt`` when ``unigrams`` were given). The folder must exist; an existing
        ``language_model/`` in it is an error (as in pyctcdecode)."""
        folder = Path(os.fspath(filepath))
        if not folder.is_dir():
            raise DecodingInputError(f"save_to_dir: {folder} is not a folder")
        (folder / ALPHABET_FILE).write_text(json.dumps({"labels": self.labels, "is_bpe": self.is_bpe}),
                                            encoding="utf-8")
        if self._lm_path is None:
            return
        lm_dir = folder / LM_DIR
        if lm_dir.exists():
            raise DecodingInputError(f"save_to_dir: {lm_dir} exists already")
        lm_dir.mkdir()
        params = {k: self._params[k] for k in ("alpha", "beta", "unk_score_offset")}
        (lm_dir / LM_ATTRS_FILE).write_text(json.dumps({**params, "score_boundary": True}), encoding="utf-8")
        shutil.copyfile(self._lm_path, lm_dir / Path(self._lm_path).name)
        if self._unigrams is not None:
            (lm_dir / UNIGRAMS_FILE).write_text("".join(w + "\n" for w in self._unigrams), encoding="utf-8")

    @classmethod
    def load_from_dir(cls, filepath: str | os.PathLike, unigram_encoding: Optional[str] = None
                      ) -> "BeamSearchDecoderCTC":
        """pyctcdecode's ``load_from_dir``: a decoder from a folder written by :meth:`save_to_dir` (ours, or
        pyctcdecode's when its language model file is an ARPA file). The word LM comes from the
        per-user cache after the first load.

        Raises:
            FileFormatError: a missing or malformed ``alphabet.json`` / ``attrs.json``, no LM file or
                several in ``language_model/``, a KenLM binary LM.
        """
        folder = Path(os.fspath(filepath))
        alphabet = _read_json(folder / ALPHABET_FILE)
        labels = alphabet.get("labels")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise FileFormatError(str(folder / ALPHABET_FILE), None, "'labels' must be a list of strings")
        lm_dir = folder / LM_DIR
        if not lm_dir.is_dir():
            return build_ctcdecoder(labels)
        attrs = _read_json(lm_dir / LM_ATTRS_FILE)
        missing = [k for k in ("alpha", "beta", "unk_score_offset") if k not in attrs]
        if missing:
            raise FileFormatError(str(lm_dir / LM_ATTRS_FILE), None, f"missing {', '.join(missing)}")
        known = {LM_ATTRS_FILE, UNIGRAMS_FILE}
        models = sorted(x for x in lm_dir.iterdir() if x.is_file() and x.name not in known)
        if len(models) != 1:
            raise FileFormatError(str(lm_dir), None, f"expected one language model file, found {len(models)}")
        unigrams = None
        if (lm_dir / UNIGRAMS_FILE).is_file():
            text = (lm_dir / UNIGRAMS_FILE).read_text(encoding=unigram_encoding or "utf-8")
            unigrams = [w for w in (line.strip() for line in text.splitlines()) if w]
        return build_ctcdecoder(labels, str(models[0]), unigrams=unigrams, alpha=attrs["alpha"], beta=attrs["beta"],
                                unk_score_offset=attrs["unk_score_offset"],
                                lm_score_boundary=bool(attrs.get("score_boundary", True)))

    # ------------------------------------------------------------------ translation
    def _search(self, logits_list: Sequence[Any], beam_width: int, beam_prune_logp: float, token_min_logp: float,
                hotwords: Optional[Iterable[str]], hotword_weight: float, nbest: int) -> list[list[Hypothesis]]:
        if isinstance(beam_width, bool) or not isinstance(beam_width, int) or beam_width < 1:
            raise DecodingInputError(f"beam_width must be a positive int, got {beam_width!r}")
        prune = check_number("beam_prune_logp", beam_prune_logp, finite=False)
        if not prune < 0:
            raise DecodingInputError(f"beam_prune_logp must be < 0 (how far below the best a beam may fall), "
                                     f"got {beam_prune_logp!r}")
        check_number("token_min_logp", token_min_logp, finite=False)
        if isinstance(logits_list, (str, bytes)) or not isinstance(logits_list, Sequence):
            logits_list = list(logits_list) if hasattr(logits_list, "__iter__") else logits_list
        if not isinstance(logits_list, Sequence):
            raise DecodingInputError("logits_list must be a list of [time, vocabulary] matrices")
        xs = [self._log_probs(f"logits_list[{i}]" if len(logits_list) > 1 else "logits", x)
              for i, x in enumerate(logits_list)]
        fusion = self._fusion(hotwords, hotword_weight)
        out: list[list[Hypothesis]] = [[] for _ in xs]
        order = sorted(range(len(xs)), key=lambda i: xs[i].shape[0])
        for s in range(0, len(order), BATCH_SIZE):
            idx = order[s: s + BATCH_SIZE]
            x, lengths = pad_batch([xs[i] for i in idx])
            res = cast(list[list[Hypothesis]], ctc.beam_search(x, lengths, self.blank_id, beam=beam_width,
                                                               fusion=fusion, beam_threshold=-prune,
                                                               nbest=min(nbest, beam_width)))
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def _log_probs(self, name: str, logits: Any) -> torch.Tensor:
        """pyctcdecode's input rule: probabilities -> log, else log-softmax; floored at ``log(1e-15)``."""
        x = as_float_matrix(name, logits).float()
        if x.shape[1] != len(self.labels):
            raise DecodingInputError(f"{name} has shape {tuple(x.shape)} but the vocabulary has {len(self.labels)} "
                                     "labels: need (time, vocabulary)")
        check_emission_values(name, x[None], None)  # -inf (a masked class) passes, as in pyctcdecode: floored
        if x.shape[0] and math.isclose(float(x.sum(1).mean()), 1.0):
            return torch.log(x.clamp(MIN_P, 1.0))
        return torch.log_softmax(x, dim=1).clamp_min(math.log(MIN_P))

    def _fusion(self, hotwords: Optional[Iterable[str]], hotword_weight: float) -> list[tuple[Any, float]]:
        fusion: list[tuple[Any, float]] = [] if self.word_lm is None else [(self.word_lm, self.lm_weight)]
        if hotwords is None:
            return fusion
        if isinstance(hotwords, str):
            raise DecodingInputError("hotwords must be a list of strings, got a string")
        words = tuple(w for h in hotwords for w in _check_hotword(h).split())
        if not words:
            return fusion
        weight = check_number("hotword_weight", hotword_weight)
        key = (words, weight)
        tree = self._hotword_trees.get(key)
        if tree is None:
            seqs = []
            for w in dict.fromkeys(words):
                ids = spell_greedy(SP + w if self.is_bpe else w, self.pieces, "hotword")
                seqs.append((ids, weight / len(ids)))
            tree = BoostingTree.from_token_sequences(seqs, vocab_size=len(self.labels), blank_id=self.blank_id)
            self._hotword_trees[key] = tree
        return fusion + [(tree, 1.0)]

    def _text(self, tokens: Sequence[int]) -> str:
        text = "".join(self.labels[t] for t in tokens)
        if self.is_bpe:
            text = text.replace(SP, " ")
        return " ".join(text.split())

    def _beams(self, hyps: list[Hypothesis], fusion: list[tuple[Any, float]]
               ) -> list[tuple[str, WordFrames, float, float]]:
        out, seen = [], set()
        fused_all = _fused_scores(fusion, [h.tokens for h in hyps], self.blank_id)
        for h, fused in zip(hyps, fused_all):  # best first; pyctcdecode keeps one beam per text
            text = self._text(h.tokens)
            if text in seen:
                continue
            seen.add(text)
            frames = [(w, (s, e)) for w, s, e in word_spans(h.tokens, h.timestamps, self.boundaries)]
            out.append((text, frames, float(h.score - fused), float(h.score)))
        return out


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileFormatError(str(path), None, "no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise FileFormatError(str(path), None, f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise FileFormatError(str(path), None, "expected a JSON object")
    return data


def _fused_scores(fusion: list[tuple[Any, float]], sequences: list[list[int]], blank: int) -> list[float]:
    """``sum_i w_i * (model_i's score of the tokens + its end score)`` of every sequence, all sequences
    stepped together (padding with the blank, which scores 0 and keeps the state)."""
    n = len(sequences)
    if not fusion or n == 0:
        return [0.0] * n
    length = max(len(q) for q in sequences)
    tokens = torch.full((n, max(1, length)), blank, dtype=torch.long)
    for i, q in enumerate(sequences):
        tokens[i, : len(q)] = torch.tensor(q, dtype=torch.long)
    total = torch.zeros(n, dtype=torch.float64)
    for model, weight in fusion:
        states = model.initial_states(n)
        acc = torch.zeros(n, dtype=torch.float64)
        for t in range(length):
            sc, nxt = model.score_tokens(states, tokens[:, t: t + 1].to(states.device))
            acc += sc[:, 0].double().cpu()
            states = nxt[:, 0]
        total += weight * (acc + model.final(states).double().cpu())
    return total.tolist()


def _boundaries(pieces: list[str | None], is_bpe: bool) -> WordBoundaries:
    if is_bpe:
        return detect_boundaries(pieces, "prefix")
    if " " in pieces:
        return detect_boundaries(pieces, "delimiter", [" "])
    return WordBoundaries("delimiter", tuple(False for _ in pieces), tuple(p or "" for p in pieces))


def _check_hotword(h: object) -> str:
    if not isinstance(h, str):
        raise DecodingInputError(f"hotwords must be strings, got {h!r}")
    return h


def _check_flag(name: str, v: object) -> None:
    if not isinstance(v, bool):
        raise DecodingInputError(f"{name} must be a bool, got {v!r}")


def _no_start_state(state: Any) -> None:
    if state is not None:
        raise DecodingInputError("lm_start_state is not supported by asrdecode.compat (decode a stream with "
                                 "asrdecode.ctc.beam_search(state=..., final=False) instead)")


def build_ctcdecoder(labels: Sequence[str], kenlm_model_path: Optional[str | os.PathLike] = None,
                     unigrams: Optional[Iterable[str]] = None, alpha: float = DEFAULT_ALPHA,
                     beta: float = DEFAULT_BETA, unk_score_offset: float = DEFAULT_UNK_OFFSET,
                     lm_score_boundary: bool = True) -> BeamSearchDecoderCTC:
    """pyctcdecode's ``build_ctcdecoder``: a decoder over ``labels`` with an optional word n-gram LM.

    Args:
        labels: the text of every logit column (see :func:`normalize_labels`).
        kenlm_model_path: a word ARPA file (``.arpa`` or ``.arpa.gz``), or ``None`` (no LM).
        unigrams: the known words (default: the LM's); other LM words count as out of vocabulary.
        alpha: LM weight; beta: bonus per word; unk_score_offset: log10 offset of an unknown word.
        lm_score_boundary: must be ``True`` (sentence start and end are always scored).

    Raises:
        DecodingInputError: bad labels or numbers, ``lm_score_boundary=False``, a vocabulary without
            word boundaries for the LM. FileFormatError: a missing, malformed or KenLM-binary LM file.
    """
    norm, is_bpe = normalize_labels(labels)
    alpha = check_number("alpha", alpha)
    beta = check_number("beta", beta)
    unk = check_number("unk_score_offset", unk_score_offset)
    _check_flag("lm_score_boundary", lm_score_boundary)
    if not lm_score_boundary:
        raise DecodingInputError("lm_score_boundary=False is not supported: asrdecode's word LM always scores "
                                 "the sentence start and end")
    if kenlm_model_path is None:
        return BeamSearchDecoderCTC(norm, is_bpe, None, 0.0)
    path = os.fspath(kenlm_model_path)
    if not os.path.isfile(path):
        raise FileFormatError(path, None, "kenlm_model_path: no such file")
    if unigrams is not None:
        if isinstance(unigrams, str):
            raise DecodingInputError("unigrams must be a collection of words, got a string")
        unigrams = list(unigrams)
        if not all(isinstance(w, str) for w in unigrams):
            raise DecodingInputError("unigrams must be strings")
    blank = norm.index("")
    pieces = [None if i == blank else x for i, x in enumerate(norm)]
    bounds = _boundaries(pieces, is_bpe)
    if not any(bounds.starts_word):
        raise DecodingInputError("labels have no word delimiter (' ' or '|') and no ▁ pieces: a word LM needs "
                                 "word boundaries")
    dec = BeamSearchDecoderCTC(norm, is_bpe, None, 0.0)
    dec._lm_path, dec._unigrams = path, unigrams
    dec.reset_params(alpha=alpha, beta=beta, unk_score_offset=unk)
    return dec


def _lm_options(pieces: list[str | None], bounds: WordBoundaries) -> dict[str, Any]:
    return dict(blank_id=pieces.index(None), boundary=bounds.style,
                delimiters=[" "] if bounds.style == "delimiter" else None)


def _word_lm(model: ArpaModel, pieces: list[str | None], bounds: WordBoundaries, alpha: float, beta: float,
             unk: float) -> tuple[WordNGramLM, float]:
    """The word LM and its fusion weight for pyctcdecode's ``alpha``, ``beta`` and ``unk_score_offset``."""
    kw = _lm_options(pieces, bounds)
    if alpha == 0.0:  # pyctcdecode: the LM and unknown-word offsets weigh nothing; beta stays per word
        return WordNGramLM.from_arpa_model(flat_arpa(model.vocab), pieces, unk_offset=0.0, unk_char_offset=0.0,
                                           unweighted_word_bonus=beta, **kw), 1.0
    return WordNGramLM.from_arpa_model(model, pieces, unk_offset=unk * LN10, unweighted_word_bonus=beta / alpha,
                                       **kw), alpha
