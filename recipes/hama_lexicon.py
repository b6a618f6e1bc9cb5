#!/usr/bin/env python3
"""Recipe step 2c: a pronunciation lexicon in hama's phone set, made by hama's G2P model.

Words come from an ARPA LM's unigrams (``--arpa``, most likely first) and/or text files (most
frequent first). hama's grapheme-to-phoneme model (PyPI ``hama``, the same phone inventory as its
phone recogniser) spells each (:func:`asrdecode.models.phone_lexicon.g2p_pronunciations`: a
progress bar, apostrophes dropped). Writes ``word phone1 phone2 ...`` lines (gzip for ``.gz``),
the format of :func:`asrdecode.models.phone_lexicon.read_phone_lexicon`. Rerunnable: words
already in the output are kept and skipped.

The shipped lexicon of the phone-ctc bundle (every word of the bundled word 3-gram, 52k words,
0.54 MB gzipped) is made by:

    OMP_NUM_THREADS=1 python3 recipes/hama_lexicon.py --arpa src/asrdecode/models/assets/word-3gram.arpa.gz \
        --out src/asrdecode/models/assets/hama-lexicon.txt.gz

Run time: ~5 ms a word on one idle core (52k words: a few minutes; ~20 ms a word on a loaded one).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from asrdecode.models.phone_lexicon import g2p_pronunciations, read_phone_lexicon, write_phone_lexicon

SPECIAL = ("<s>", "</s>", "<unk>")


def lm_words(arpa: Path) -> list[str]:
    """The LM's words, most likely unigram first (sentence marks and ``<unk>`` left out)."""
    from asrdecode.lm.arpa import read_arpa

    model = read_arpa(arpa)
    order = np.argsort(-model.logprob[0], kind="stable")
    return [model.vocab[i] for i in order if model.vocab[i] not in SPECIAL]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("texts", nargs="*", help="text files, one sentence per line")
    ap.add_argument("--arpa", type=Path, help="an ARPA LM whose words to spell")
    ap.add_argument("--out", type=Path, default=Path("work/lexicon/hama.lex"))
    ap.add_argument("--min-count", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2000, help="write the output every this many words")
    args = ap.parse_args()
    words: list[str] = lm_words(args.arpa) if args.arpa else []
    counts: Counter[str] = Counter(w for t in args.texts for line in open(t, encoding="utf-8") for w in line.split())
    seen = set(words)
    words += [w for w, n in sorted(counts.items(), key=lambda x: -x[1]) if n >= args.min_count and w not in seen]
    done = read_phone_lexicon(args.out) if args.out.exists() else {}
    todo = [w for w in words if w not in done]
    print(f"{len(done)} words already done, {len(todo)} to do", flush=True)
    lex = dict(done)
    for i in range(0, len(todo), args.chunk):
        lex.update(g2p_pronunciations(todo[i:i + args.chunk]))
        write_phone_lexicon(lex, args.out)  # atomic: an interrupted run resumes from here
    order = {w: i for i, w in enumerate(words)}
    write_phone_lexicon(dict(sorted(lex.items(), key=lambda x: order.get(x[0], len(order)))), args.out)
    print(f"{len(lex)} words in {args.out}", flush=True)


if __name__ == "__main__":
    main()
