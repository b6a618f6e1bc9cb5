"""Pieces shared by the drop-in facades: emissions lists as one padded batch, flat word LMs,
word spans from token timestamps, token spelling, option checks."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError
from ..lm.arpa import BOS, EOS, UNK, ArpaModel
from ..lm.word import WordBoundaries

#: utterances decoded per batched search call by the facades' batch methods (sorted by length).
BATCH_SIZE = 32


def check_number(name: str, value: object, *, finite: bool = True) -> float:
    """``value`` as a float; a clear error naming ``name`` when it is not a (finite) number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise DecodingInputError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v) or (finite and not math.isfinite(v)):
        raise DecodingInputError(f"{name} must be a finite number, got {value!r}")
    return v


def flat_arpa(words: Sequence[str]) -> ArpaModel:
    """A 1-gram model giving every word (and ``<unk>``, ``</s>``) log-prob 0: word bonuses and lexicon
    constraints without an LM (the LM's score is 0 everywhere)."""
    grams: dict[tuple[str, ...], tuple[float, float | None]] = {(BOS,): (-99.0, 0.0), (EOS,): (0.0, None),
                                                                (UNK,): (0.0, None)}
    for w in words:
        if w not in (BOS, EOS, UNK):
            grams[(w,)] = (0.0, 0.0)
    return ArpaModel.from_dict(grams)


def with_unigrams(model: ArpaModel, words: Sequence[str]) -> ArpaModel:
    """``model`` plus the ``words`` it lacks, each a copy of ``<unk>``: its 1-gram and every n-gram that holds
    ``<unk>`` (with the word in its place), so such a word scores exactly as KenLM scores an unknown word,
    history included. Without ``<unk>``, each gets log10 p = -100 and no back-off."""
    known = set(model.vocab)
    extra = [w for w in dict.fromkeys(words) if w not in known]
    if not extra:
        return model
    n = len(model.vocab)
    new_ids = np.arange(n, n + len(extra), dtype=model.words[0].dtype)
    # per n-gram lines where the model has them; else none (its line runs end before the n-grams added)
    lines = list(model.lines) if len(model.lines) == model.order else []
    parts = [list(model.words), list(model.logprob), list(model.backoff), list(model.has_backoff), lines]
    unk = model.word_index().get(UNK)
    if unk is None:
        parts[0][0] = np.concatenate([model.words[0], new_ids[:, None]])
        parts[1][0] = np.concatenate([model.logprob[0], np.full(len(extra), -100.0)])
        parts[2][0] = np.concatenate([model.backoff[0], np.zeros(len(extra))])
        parts[3][0] = np.concatenate([model.has_backoff[0], np.zeros(len(extra), dtype=bool)])
        if lines:
            parts[4][0] = np.concatenate([lines[0], np.zeros(len(extra), dtype=np.int64)])
    else:
        for k in range(model.order):
            rows = np.flatnonzero((model.words[k] == unk).any(axis=1))
            if rows.size == 0:
                continue
            grams = np.repeat(model.words[k][rows][None], len(extra), axis=0)  # [E, R, k+1]
            grams = np.where(grams == unk, new_ids[:, None, None], grams).reshape(-1, k + 1)
            for p, src in zip(parts[:len(parts) if lines else 4],
                              (model.words, model.logprob, model.backoff, model.has_backoff, lines)):
                add = grams if p is parts[0] else np.tile(src[k][rows], len(extra))
                p[k] = np.concatenate([p[k], add.astype(src[k].dtype)])
    return ArpaModel(list(model.vocab) + extra, parts[0], parts[1], parts[2], parts[3], parts[4],
                     path=f"{model.path} (+{len(extra)} lexicon words scored as <unk>)", line_runs=model.line_runs)


def word_spans(tokens: Sequence[int], times: Sequence[int], bounds: WordBoundaries) -> list[tuple[str, int, int]]:
    """``(word, first frame, last frame + 1)`` of each non-empty word of a token sequence."""
    out: list[tuple[str, int, int]] = []
    cur, start, end = "", 0, 0
    for t, f in zip(tokens, times):
        if bounds.starts_word[t]:
            if cur:
                out.append((cur, start, end))
            cur = ""
        if bounds.text[t]:
            if not cur:
                start = int(f)
            cur += bounds.text[t]
            end = int(f) + 1
    if cur:
        out.append((cur, start, end))
    return out


def spell_greedy(text: str, pieces: Sequence[str | None], what: str) -> list[int]:
    """Token ids of ``text`` by greedy longest match over the token texts ``pieces`` (``None``: never matched).

    Raises:
        DecodingInputError: ``text`` holds something no token spells (named with ``what``).
    """
    index: dict[str, int] = {}
    for k, p in enumerate(pieces):
        if p:
            index.setdefault(p, k)
    longest = max((len(p) for p in index), default=0)
    ids, pos = [], 0
    while pos < len(text):
        for n in range(min(longest, len(text) - pos), 0, -1):
            i = index.get(text[pos:pos + n])
            if i is not None:
                ids.append(i)
                pos += n
                break
        else:
            raise DecodingInputError(f"{what} {text!r}: no token spells {text[pos]!r} (position {pos})")
    return ids


def pad_batch(frames: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[T_i, V]`` emissions -> ``([B, T_max, V], lengths [B])``."""
    lengths = torch.tensor([int(x.shape[0]) for x in frames], dtype=torch.long)
    x = torch.zeros(len(frames), int(lengths.max()) if len(frames) else 0, int(frames[0].shape[1]) if frames else 0,
                    dtype=frames[0].dtype if frames else torch.float32)
    for i, f in enumerate(frames):
        x[i, : f.shape[0]] = f
    return x, lengths


def as_float_matrix(name: str, value: Any) -> torch.Tensor:
    """A ``[T, V]`` float tensor from a numpy array or tensor; a clear error otherwise."""
    if isinstance(value, np.ndarray):
        if not np.issubdtype(value.dtype, np.floating):
            raise DecodingInputError(f"{name} must hold floats, got dtype {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise DecodingInputError(f"{name} must be a float numpy array or tensor [time, vocabulary], "
                                 f"got {type(value).__name__}")
    if value.dim() != 2:
        raise DecodingInputError(f"{name} must have 2 dimensions (time, vocabulary), got shape {tuple(value.shape)}")
    return value
