"""Hypotheses as JSON-ready records and output formats (text, JSON, CTM), written atomically.

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

__all__ = ["hypothesis_record", "word_spans", "format_records", "write_atomic", "FORMATS"]

#: output formats of :func:`format_records`
FORMATS = ("text", "json", "ctm")


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


def format_records(records: list[dict[str, Any]], fmt: str) -> str:
    """``records`` (from :func:`hypothesis_record`) as ``"text"`` (audio TAB text), ``"json"`` or ``"ctm"``."""
    if fmt not in FORMATS:
        raise DecodingInputError(f"format must be one of {FORMATS}, got {fmt!r}")
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
