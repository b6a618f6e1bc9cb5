"""Evaluation helpers: WER/CER, NeMo-style manifests, and an RTFx timing harness.

Text normalisation (:func:`normalize_text`, applied to references and hypotheses before WER/CER):

1. Unicode NFKC, then lower-case;
2. every character that is not a letter, a digit, an apostrophe or whitespace becomes a space
   (so ``"cold-hearted"`` -> ``"cold hearted"``, ``"don't"`` stays ``"don't"``; the typographic
   apostrophe ``’`` is mapped to ``'``);
3. runs of whitespace collapse to one space, leading/trailing spaces are removed.

Manifests are NeMo-style JSON lines: one object per line with ``audio_filepath`` (absolute, or
relative to the manifest's folder), ``duration`` (seconds) and ``text``; other keys are kept in
:attr:`ManifestEntry.extra`. Blank lines are skipped. Anything else raises
:class:`~asrdecode.errors.FileFormatError` naming the file and the line.

Timing: RTFx = seconds of audio / seconds of processing. :func:`run_evaluation` times the front
end (features + encoder, and for CTC the output head) separately from the decoder, and reports
both the total RTFx and the decoder-only RTFx (reading audio files is not timed).
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import torch

from .errors import DecodingInputError, FileFormatError
from .results import Hypothesis

__all__ = [
    "normalize_text",
    "ErrorCounts",
    "word_errors",
    "char_errors",
    "wer",
    "cer",
    "ManifestEntry",
    "read_manifest",
    "Timing",
    "timed",
    "EvalResult",
    "run_evaluation",
    "texts_of",
]

_NOT_KEPT = re.compile(r"[^\w\s']|_")
_SPACES = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Lower-case, strip punctuation except apostrophes, collapse spaces (see the module docstring)."""
    if not isinstance(text, str):
        raise DecodingInputError(f"text must be a str, got {type(text).__name__}")
    s = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    s = _NOT_KEPT.sub(" ", s)
    return _SPACES.sub(" ", s).strip()


@dataclass
class ErrorCounts:
    """Edit-distance counts summed over a corpus; ``rate = (S + D + I) / reference length``."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    reference_length: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        """Error rate; 0 for an empty corpus without errors, ``inf`` for errors on empty references."""
        if self.reference_length == 0:
            return 0.0 if self.errors == 0 else math.inf
        return self.errors / self.reference_length


def _pairs(refs: Sequence[str], hyps: Sequence[str], normalize: bool) -> list[tuple[str, str]]:
    if isinstance(refs, str) or isinstance(hyps, str):
        raise DecodingInputError("refs and hyps must be sequences of strings, not single strings")
    if len(refs) != len(hyps):
        raise DecodingInputError(f"refs has {len(refs)} entries but hyps has {len(hyps)}")
    out = []
    for i, (r, h) in enumerate(zip(refs, hyps)):
        if not isinstance(r, str) or not isinstance(h, str):
            raise DecodingInputError(f"refs[{i}] and hyps[{i}] must be str")
        out.append((normalize_text(r), normalize_text(h)) if normalize else (r, h))
    return out


def _counts(pairs: list[tuple[str, str]], chars: bool) -> ErrorCounts:
    import jiwer

    c = ErrorCounts()
    refs, hyps = [], []
    for r, h in pairs:
        units_r = len(r) if chars else len(r.split())
        if units_r == 0:  # jiwer refuses empty references: every hypothesis unit is an insertion
            c.insertions += len(h) if chars else len(h.split())
            continue
        refs.append(r)
        hyps.append(h)
    if refs:
        # jiwer's default transforms only split (and, for characters, strip); empty hyps are allowed.
        out = jiwer.process_characters(refs, hyps) if chars else jiwer.process_words(refs, hyps)
        c.substitutions += out.substitutions
        c.deletions += out.deletions
        c.insertions += out.insertions
        c.reference_length += out.hits + out.substitutions + out.deletions
    return c


def word_errors(refs: Sequence[str], hyps: Sequence[str], *, normalize: bool = True) -> ErrorCounts:
    """Word edit counts over a corpus (``refs[i]`` against ``hyps[i]``), computed with ``jiwer``."""
    return _counts(_pairs(refs, hyps, normalize), chars=False)


def char_errors(refs: Sequence[str], hyps: Sequence[str], *, normalize: bool = True) -> ErrorCounts:
    """Character edit counts (spaces count as characters, as in ``jiwer.cer``)."""
    return _counts(_pairs(refs, hyps, normalize), chars=True)


def wer(refs: Sequence[str], hyps: Sequence[str], *, normalize: bool = True) -> float:
    """Corpus word error rate: total word edits / total reference words (after normalisation)."""
    return word_errors(refs, hyps, normalize=normalize).rate


def cer(refs: Sequence[str], hyps: Sequence[str], *, normalize: bool = True) -> float:
    """Corpus character error rate: total character edits / total reference characters."""
    return char_errors(refs, hyps, normalize=normalize).rate


# ---------------------------------------------------------------------------------------- manifests
@dataclass
class ManifestEntry:
    """One manifest line: the resolved audio path, its duration (s), the reference and the rest."""

    audio_filepath: Path
    duration: float
    text: str
    line: int
    extra: dict[str, Any] = field(default_factory=dict)


#: the manifest a folder given as a manifest holds
MANIFEST_NAME = "manifest.jsonl"


def read_manifest(path: str | Path, *, check_audio: bool = True) -> list[ManifestEntry]:
    """Read a NeMo-style JSON-lines manifest.

    Args:
        path: the manifest file, or a folder holding one as ``manifest.jsonl`` (as ``data/real``).
        check_audio: also check that every audio file exists (the error names the manifest line).

    Raises:
        FileFormatError: missing/unreadable manifest, a line that is not a JSON object, a missing
            or ill-typed ``audio_filepath`` / ``duration`` / ``text``, a missing audio file, or a
            manifest without entries; the message names the file and line.
    """
    p = Path(path)
    if p.is_dir():
        if not (p / MANIFEST_NAME).is_file():
            raise FileFormatError(p, None, f"is a folder without a {MANIFEST_NAME}; give a manifest file "
                                  "(JSON lines with audio_filepath, duration, text)")
        p = p / MANIFEST_NAME
    if not p.is_file():
        raise FileFormatError(p, None, "no such manifest file")
    try:
        raw = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise FileFormatError(p, None, f"cannot read manifest: {err}") from None
    entries = []
    for no, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise FileFormatError(p, no, f"not valid JSON ({err.msg})") from None
        except RecursionError:  # json recurses per nesting level
            raise FileFormatError(p, no, "not valid JSON (nested too deeply)") from None
        if not isinstance(obj, dict):
            raise FileFormatError(p, no, f"expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("audio_filepath", "duration", "text") if k not in obj]
        if missing:
            raise FileFormatError(p, no, f"missing field(s) {', '.join(missing)}")
        audio, dur, text = obj.pop("audio_filepath"), obj.pop("duration"), obj.pop("text")
        if not isinstance(audio, str) or not audio:
            raise FileFormatError(p, no, "audio_filepath must be a non-empty string")
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
            raise FileFormatError(p, no, f"duration must be a number >= 0, got {dur!r}")
        if not isinstance(text, str):
            raise FileFormatError(p, no, f"text must be a string, got {type(text).__name__}")
        ap = Path(audio)
        if not ap.is_absolute():
            ap = p.parent / ap
        if check_audio and not ap.is_file():
            raise FileFormatError(p, no, f"audio file {ap} does not exist")
        entries.append(ManifestEntry(ap, float(dur), text, no, obj))
    if not entries:
        raise FileFormatError(p, None, "the manifest has no entries")
    return entries


# ------------------------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Seconds of audio and of processing; RTFx = audio seconds / processing seconds."""

    audio_seconds: float = 0.0
    frontend_seconds: float = 0.0
    decoder_seconds: float = 0.0

    @property
    def total_seconds(self) -> float:
        return self.frontend_seconds + self.decoder_seconds

    @property
    def rtfx_total(self) -> float:
        return self.audio_seconds / self.total_seconds if self.total_seconds > 0 else math.inf

    @property
    def rtfx_decoder(self) -> float:
        return self.audio_seconds / self.decoder_seconds if self.decoder_seconds > 0 else math.inf

    def __iadd__(self, other: "Timing") -> "Timing":
        self.audio_seconds += other.audio_seconds
        self.frontend_seconds += other.frontend_seconds
        self.decoder_seconds += other.decoder_seconds
        return self


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float]:
    """Call ``fn()`` ``repeats`` times (under ``torch.inference_mode``); return the last result and
    the fastest wall-clock time in seconds."""
    if repeats < 1:
        raise DecodingInputError(f"repeats must be >= 1, got {repeats}")
    best = math.inf
    out = None
    for _ in range(repeats):
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - t0)
    return out, best


@dataclass
class EvalResult:
    """What :func:`run_evaluation` returns."""

    wer: float
    cer: float
    timing: Timing
    hypotheses: list[Hypothesis]
    references: list[str]


EncodeFn = Callable[[list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
DecodeFn = Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]


def run_evaluation(
    entries: Sequence[ManifestEntry],
    encode: EncodeFn,
    decode: DecodeFn,
    *,
    read: Callable[[Path], torch.Tensor],
    batch_size: int = 16,
    progress: Optional[Callable[[int], None]] = None,
) -> EvalResult:
    """Decode every manifest entry in batches and score it.

    Args:
        entries: from :func:`read_manifest`.
        encode: waveforms -> (model output ``[B, T, ...]``, lengths ``[B]``); timed as the front end.
        decode: (model output, lengths) -> one hypothesis per utterance; timed as the decoder.
        read: path -> 16 kHz waveform ``[N]`` (not timed), e.g. :func:`asrdecode.audio.read_audio`.
        batch_size: utterances per batch.
        progress: called with the number of utterances finished after each batch.

    Returns:
        WER and CER (normalised, see :func:`normalize_text`), the :class:`Timing` (audio seconds
        from the waveforms' lengths at 16 kHz), and the hypotheses in manifest order.
    """
    from .audio import SAMPLE_RATE

    if batch_size < 1:
        raise DecodingInputError(f"batch_size must be >= 1, got {batch_size}")
    timing = Timing()
    hyps: list[Hypothesis] = []
    for start in range(0, len(entries), batch_size):
        batch = entries[start : start + batch_size]
        waves = [read(e.audio_filepath) for e in batch]
        timing.audio_seconds += sum(w.numel() for w in waves) / SAMPLE_RATE
        (out, lengths), t_front = timed(functools.partial(encode, waves))
        res, t_dec = timed(functools.partial(decode, out, lengths))
        if len(res) != len(batch):
            raise DecodingInputError(f"decode returned {len(res)} hypotheses for {len(batch)} utterances")
        timing.frontend_seconds += t_front
        timing.decoder_seconds += t_dec
        hyps.extend(res)
        if progress is not None:
            progress(len(batch))
    refs = [e.text for e in entries]
    texts = [h.text or "" for h in hyps]
    return EvalResult(wer(refs, texts), cer(refs, texts), timing, hyps, refs)


def texts_of(hyps: Iterable[Hypothesis]) -> list[str]:
    """The ``text`` of each hypothesis (``""`` when it has none)."""
    return [h.text or "" for h in hyps]
