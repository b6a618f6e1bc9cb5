"""Hypotheses as JSON-ready records and output formats (text, JSON, CTM, SRT / WebVTT subtitles),
written atomically.

Used by the CLI, the server's ``final`` messages and Ray corpus decoding, so a transcript has
the same fields wherever it comes from.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from .errors import DecodingInputError
from .results import Hypothesis

__all__ = ["hypothesis_record", "word_spans", "format_records", "subtitle_cues", "write_atomic", "FORMATS",
           "SUBTITLE_FORMATS"]

#: subtitle formats: one audio file's cues each (a file of several would not be valid)
SUBTITLE_FORMATS = ("srt", "vtt")
#: output formats of :func:`format_records`
FORMATS = ("text", "json", "ctm", *SUBTITLE_FORMATS)
#: the usual subtitle limits (broadcast style guides): lines of at most 42 characters, two lines a cue, a cue
#: shown at most 7 s; a pause of a second or more between words starts a new cue
CUE_CHARS, CUE_LINES, CUE_SECONDS, CUE_PAUSE = 42, 2, 7.0, 1.0
#: the shortest time a cue is shown when its words end sooner (it never runs into the next cue)
CUE_MIN_SECONDS = 0.5


def word_spans(hyp: Hypothesis, tokenizer: Any) -> Optional[list[tuple[str, int, int]]]:
    """Words as ``(text, first_frame, end_frame_exclusive)`` from sentencepiece ``▁`` boundaries.

    ``None`` when the tokenizer cannot spell pieces (word boundaries are not derivable).
    """
    if tokenizer is None or not hasattr(tokenizer, "id_to_piece"):
        return None
    groups: list[list[int]] = []
    for k, t in enumerate(hyp.tokens):
        if tokenizer.id_to_piece(t).startswith("\u2581") or not groups:
            groups.append([k])
        else:
            groups[-1].append(k)
    words = []
    for g in groups:
        text = tokenizer.decode([hyp.tokens[k] for k in g]).strip()
        if not text:
            continue
        last = g[-1]
        dur = hyp.durations[last] if hyp.durations is not None else 1
        words.append((text, hyp.timestamps[g[0]], hyp.timestamps[last] + max(1, int(dur))))
    return words


def hypothesis_record(hyp: Hypothesis, tokenizer: Any, frame_seconds: float, name: str) -> dict[str, Any]:
    """A JSON-ready record: text, score, tokens with start times, words with start/end times (s).

    A token's time is its frame index x ``frame_seconds``; a word ends one frame (TDT: the
    predicted duration) after its last token's frame.
    """
    tokens = []
    for k, (t, f) in enumerate(zip(hyp.tokens, hyp.timestamps)):
        rec: dict[str, Any] = {"id": int(t), "frame": int(f), "start": round(f * frame_seconds, 3)}
        if tokenizer is not None and hasattr(tokenizer, "id_to_piece"):
            rec["piece"] = tokenizer.id_to_piece(int(t))
        if hyp.durations is not None:
            rec["duration"] = round(int(hyp.durations[k]) * frame_seconds, 3)
        tokens.append(rec)
    out: dict[str, Any] = {"audio": name, "text": hyp.text if hyp.text is not None else "",
                           "score": float(hyp.score), "tokens": tokens}
    if hyp.words is not None:  # decoders that know words (WFST): last frame inclusive -> exclusive end
        words: Optional[list[tuple[str, int, int]]] = [(w, s, e + 1) for w, s, e in hyp.words]
    else:
        words = word_spans(hyp, tokenizer)
    if words is not None:
        out["words"] = [{"word": w, "start": round(s * frame_seconds, 3), "end": round(e * frame_seconds, 3)}
                        for w, s, e in words]
    return out


def _wrap(words: list[str], width: int) -> list[str]:
    """``words`` in lines of at most ``width`` characters (a longer word alone on its line)."""
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + 1 + len(w) <= width:
            lines[-1] += " " + w
        else:
            lines.append(w)
    return lines


def _timed_words(record: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(word, start_ms, end_ms)`` of a record: its ``words``; without them (a tokenizer that cannot spell
    pieces), the words of its text with times spread over its tokens' starts (approximate)."""
    words = record.get("words")
    if words is not None:
        out = []
        for w in words:
            start = round(float(w["start"]) * 1000)
            out.append((str(w["word"]).strip(), start, max(start, round(float(w["end"]) * 1000))))
        return out
    starts = [round(float(t["start"]) * 1000) for t in record.get("tokens", [])]
    texts = str(record.get("text") or "").split()
    if not starts or not texts:
        return []
    at = [starts[k * len(starts) // len(texts)] for k in range(len(texts))]
    return [(w, a, b) for w, a, b in zip(texts, at, [*at[1:], starts[-1]])]


def subtitle_cues(record: dict[str, Any]) -> list[tuple[float, float, str]]:
    """A record's subtitle cues ``(start_s, end_s, text)``, in time order, not overlapping.

    Words (``record["words"]``) are grouped in reading order; a cue ends before a word that would make it
    more than :data:`CUE_LINES` lines of :data:`CUE_CHARS` characters or longer than :data:`CUE_SECONDS`,
    or that follows a pause of :data:`CUE_PAUSE` s or more (times compared in whole milliseconds). A cue
    lasts from its first word's start to its last word's end, at least :data:`CUE_MIN_SECONDS`, cut at the
    next cue's start. A record without word times (a tokenizer that cannot spell pieces) gets the same rules
    over the words of its text, their times spread over its tokens' times; an empty one has no cue.
    """
    longest, pause, shortest = round(CUE_SECONDS * 1000), round(CUE_PAUSE * 1000), round(CUE_MIN_SECONDS * 1000)
    spans: list[tuple[int, int, list[str]]] = []
    for text, start, end in _timed_words(record):
        if not text:
            continue
        if spans:
            s0, e0, ws = spans[-1]
            fits = len(_wrap([*ws, text], CUE_CHARS)) <= CUE_LINES and end - s0 <= longest
            if fits and start - e0 < pause:
                spans[-1] = (s0, max(e0, end), [*ws, text])
                continue
        spans.append((start, end, [text]))
    cues = []
    for k, (start, end, ws) in enumerate(spans):
        room = spans[k + 1][0] if k + 1 < len(spans) else end + shortest
        end = max(start, min(max(end, start + shortest), room))  # never into the next cue
        cues.append((start / 1000, end / 1000, "\n".join(_wrap(ws, CUE_CHARS))))
    return cues


def _clock(seconds: float, sep: str) -> str:
    """``HH:MM:SS<sep>mmm`` (SRT: ``,``; WebVTT: ``.``)."""
    ms = max(0, round(seconds * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"


def _subtitles(record: dict[str, Any], fmt: str) -> str:
    cues = subtitle_cues(record)
    if fmt == "vtt":  # cue text may not hold a bare & < > (WebVTT's escapes)
        def esc(t: str) -> str:
            return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

        return "WEBVTT\n" + "".join(f"\n{_clock(s, '.')} --> {_clock(e, '.')}\n{esc(t)}\n" for s, e, t in cues)
    return "\n".join(f"{k}\n{_clock(s, ',')} --> {_clock(e, ',')}\n{t}\n" for k, (s, e, t) in enumerate(cues, 1))


def format_records(records: list[dict[str, Any]], fmt: str) -> str:
    """``records`` (from :func:`hypothesis_record`) as ``"text"`` (audio TAB text), ``"json"``, ``"ctm"``, or one
    record as ``"srt"`` / ``"vtt"`` subtitles (:func:`subtitle_cues`)."""
    if fmt not in FORMATS:
        raise DecodingInputError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt in SUBTITLE_FORMATS:
        if len(records) != 1:
            raise DecodingInputError(f"the {fmt} format holds one audio file's subtitles, got {len(records)} records")
        return _subtitles(records[0], fmt)
    if fmt == "json":
        return json.dumps(records if len(records) != 1 else records[0], indent=1, ensure_ascii=False) + "\n"
    if fmt == "ctm":
        lines = []
        for r in records:
            utt = Path(r["audio"]).stem or "utt"
            for w in r.get("words") or [{"word": t.get("piece", str(t["id"])), "start": t["start"],
                                         "end": t["start"]} for t in r["tokens"]]:
                lines.append(f"{utt} 1 {w['start']:.3f} {max(0.0, w['end'] - w['start']):.3f} {w['word']}")
        return "\n".join(lines) + ("\n" if lines else "")
    return "".join(f"{r['audio']}\t{r['text']}\n" for r in records)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    Raises:
        DecodingInputError: the output folder does not exist.
    """
    p = Path(path)
    if not p.parent.is_dir():
        raise DecodingInputError(f"{p}: the output folder {p.parent} does not exist")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
