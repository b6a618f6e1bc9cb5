#!/usr/bin/env python3
"""Recipe step 1: build the normalised English text corpus and its held-out split.

Sources (Debian packages, all offline): ``fortunes`` (+ ``fortunes-min``), ``wordnet-base``
(glosses and quoted examples) and ``jargon-text``. Text is lower-cased, split into sentences,
and kept when it has 3..16 words of letters and apostrophes only (no digits, no symbols), so
every sentence can be spoken by a TTS engine exactly as written.

The split is deterministic: a sentence is held out when a hash of its text falls in the
held-out bucket (``--heldout-percent``), so reruns give the same split. Sentences of the real
test clips (pocketsphinx LibriVox and cards transcripts) are removed from the training text.

Writes ``work/text/train.txt``, ``work/text/heldout.txt`` (one sentence a line) and
``work/text/stats.json``.

Usage: python3 recipes/make_text.py [--out work/text]
Run time: about 15 s on one core.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import time
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
WORDNET = Path("/usr/share/wordnet")
JARGON = Path("/usr/share/doc/jargon-text/jargon.txt.gz")
PS_DATA = Path("/usr/share/pocketsphinx/test/data")

_SENT_SPLIT = re.compile(r"(?<=[.!?;:])\s+|\n\s*\n")
_WORD = re.compile(r"^[a-z]+(?:'[a-z]+)?$")


def normalise(sentence: str) -> str | None:
    """Lower-case ``sentence`` and keep it only if it is 3..16 plain words; else ``None``."""
    s = sentence.replace("\n", " ").lower()
    s = s.replace("\u2019", "'").replace("`", "'")
    if re.search(r"[0-9@#$%&*_=+<>/\\|\[\]{}~^]", s):
        return None
    s = re.sub(r"[\"(),.!?;:\-]+", " ", s)
    words = s.split()
    words = [w.strip("'") for w in words]
    words = [w for w in words if w]
    if not 3 <= len(words) <= 16:
        return None
    if not all(_WORD.match(w) for w in words):
        return None
    if any(len(w) == 1 and w not in ("a", "i") for w in words):
        return None
    return " ".join(words)


def fortune_texts() -> list[str]:
    out = []
    for path in sorted(FORTUNES.glob("*")):
        if path.suffix or not path.is_file():
            continue
        raw = path.read_text(encoding="latin-1", errors="replace")
        for entry in raw.split("\n%\n"):
            # drop attributions ("-- Author") and indented quote markers
            lines = [ln for ln in entry.splitlines() if not ln.strip().startswith("--")]
            out.append("\n".join(lines))
    return out


def wordnet_texts() -> list[str]:
    out = []
    for name in ("data.noun", "data.verb", "data.adj", "data.adv"):
        path = WORDNET / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            gloss = line.split("|", 1)[1]
            examples = re.findall(r'"([^"]+)"', gloss)
            out.extend(examples)
            out.append(re.sub(r'"[^"]*"', "", gloss).split(";")[0])
    return out


def jargon_texts() -> list[str]:
    if not JARGON.exists():
        return []
    with gzip.open(JARGON, "rt", encoding="latin-1") as f:
        return [f.read()]


def test_sentences() -> set[str]:
    out = set()
    for path in (PS_DATA / "librivox" / "transcription", PS_DATA / "cards" / "cards.transcription"):
        if path.exists():
            for line in path.read_text().splitlines():
                text = re.sub(r"<\/?s>|\(.*\)", "", line).strip()
                if text:
                    out.add(" ".join(text.split()))
    return out


def is_heldout(sentence: str, percent: float) -> bool:
    h = int(hashlib.sha1(sentence.encode()).hexdigest()[:8], 16)
    return (h % 10000) < percent * 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="work/text")
    ap.add_argument("--heldout-percent", type=float, default=3.0)
    args = ap.parse_args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    sources = {"fortunes": fortune_texts(), "wordnet": wordnet_texts(), "jargon": jargon_texts()}
    seen: set[str] = set()
    per_source = {}
    for name, texts in sources.items():
        n = 0
        for text in texts:
            for piece in _SENT_SPLIT.split(text):
                s = normalise(piece)
                if s is not None and s not in seen:
                    seen.add(s)
                    n += 1
        per_source[name] = n
    banned = test_sentences()
    sentences = sorted(seen - banned)
    train = [s for s in sentences if not is_heldout(s, args.heldout_percent)]
    heldout = [s for s in sentences if is_heldout(s, args.heldout_percent)]
    (out / "train.txt").write_text("\n".join(train) + "\n")
    (out / "heldout.txt").write_text("\n".join(heldout) + "\n")
    stats = {
        "sentences": len(sentences),
        "train": len(train),
        "heldout": len(heldout),
        "train_words": sum(len(s.split()) for s in train),
        "per_source": per_source,
        "seconds": round(time.time() - t0, 1),
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
