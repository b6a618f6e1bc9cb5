#!/usr/bin/env python3
"""Recipe step 6: write the small committed test sets under ``data/``.

* ``data/real``: the 10 real recordings of Debian's ``pocketsphinx-testdata`` (5 LibriVox
  clips of *Sense and Sensibility*, public domain, and 5 "cards" clips), 16 kHz mono wav, with
  their reference transcripts.
* ``data/synth_test``: the first ``--num`` utterances of the synthetic test corpus
  (held-out sentences spoken by held-out voices, ``work/synth/test``).

Each folder gets a NeMo-style ``manifest.jsonl`` (``audio_filepath`` relative to the manifest,
``duration`` in seconds, ``text``; plus ``voice`` or ``source``).

Usage: python3 recipes/make_test_sets.py [--num 50]
Run time: about 2 s.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import wave
from pathlib import Path

PS = Path("/usr/share/pocketsphinx/test/data")


def _duration(path: Path) -> float:
    with wave.open(str(path), "rb") as f:
        if f.getframerate() != 16000 or f.getnchannels() != 1 or f.getsampwidth() != 2:
            raise SystemExit(f"{path}: expected 16 kHz mono 16-bit wav")
        return round(f.getnframes() / f.getframerate(), 3)


def real(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for sub, tfile in (("librivox", "transcription"), ("cards", "cards.transcription")):
        for line in (PS / sub / tfile).read_text().splitlines():
            m = re.match(r"\s*<s>(.*)</s>\s*\((.+)\)\s*$", line)
            if not m:
                continue
            text, utt = " ".join(m.group(1).split()), m.group(2)
            src = PS / sub / f"{utt}.wav"
            name = f"{sub}-{utt}.wav"
            shutil.copyfile(src, out / name)
            rows.append({"audio_filepath": name, "duration": _duration(out / name), "text": text, "source": sub})
    with open(out / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{out}: {len(rows)} utterances, {sum(r['duration'] for r in rows):.1f} s")


def synth(src: Path, out: Path, num: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in (src / "manifest.jsonl").read_text().splitlines()][:num]
    for r in rows:
        shutil.copyfile(src / r["audio_filepath"], out / r["audio_filepath"])
    with open(out / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{out}: {len(rows)} utterances, {sum(r['duration'] for r in rows):.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num", type=int, default=50)
    ap.add_argument("--synth", default="work/synth/test")
    ap.add_argument("--out", default="data")
    args = ap.parse_args()
    real(Path(args.out) / "real")
    synth(Path(args.synth), Path(args.out) / "synth_test", args.num)


if __name__ == "__main__":
    main()
