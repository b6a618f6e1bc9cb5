#!/usr/bin/env python3
"""Recipe step 2c: a pronunciation lexicon in hama's phone set, made by hama's G2P model.

For every distinct word of the given text files, hama's grapheme-to-phoneme model (PyPI
``hama``, the same phone inventory as its phone recogniser, our front end) gives a phone
sequence. Writes ``word phone1 phone2 ...`` lines (phones are hama's decoder token symbols),
the lexicon format of :func:`asrdecode.ctc.wfst.read_lexicon`. Rerunnable: words already in
the output file are kept and skipped.

Usage: python3 recipes/hama_lexicon.py work/text/train.txt work/text/heldout.txt \
           --out work/lexicon/hama.lex
Run time: ~14 ms per word on one core (52k words: ~12 min).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path


def pronunciations(words: list[str], out: Path, flush_every: int = 500) -> None:
    """Append ``word phones...`` lines for ``words`` to ``out`` (one G2P call per word)."""
    import hama

    g2p = hama.G2PModel()
    symbols = set(hama.ASRModel().decoder_tokens)
    t0 = time.time()
    with out.open("a", encoding="utf-8") as f:
        for i, word in enumerate(words, start=1):
            phones = [a.phoneme for a in g2p.predict(word).alignments]
            phones = [p for p in phones if p in symbols and p.strip()]
            if phones:  # a word G2P cannot spell in hama's phones gets no entry
                f.write(word + " " + " ".join(phones) + "\n")
            if i % flush_every == 0:
                f.flush()
                print(f"{i}/{len(words)} words, {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("texts", nargs="+", help="text files, one sentence per line")
    ap.add_argument("--out", default="work/lexicon/hama.lex")
    ap.add_argument("--min-count", type=int, default=1)
    args = ap.parse_args()
    counts: Counter[str] = Counter(w for t in args.texts for line in open(t, encoding="utf-8") for w in line.split())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {line.split()[0] for line in out.read_text(encoding="utf-8").splitlines() if line.strip()} if out.exists() else set()
    todo = sorted((w for w, n in counts.items() if n >= args.min_count and w not in done), key=lambda w: -counts[w])
    print(f"{len(done)} words already done, {len(todo)} to do")
    pronunciations(todo, out)


if __name__ == "__main__":
    main()
