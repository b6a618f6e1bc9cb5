#!/usr/bin/env python3
"""Recipe step 5: build the bundled n-gram LMs from the TRAINING text only.

* ``word-3gram.arpa.gz``: word 3-gram (modified Kneser-Ney, KenLM lmplz), singleton bigrams
  and trigrams pruned, over ``work/text/train.txt``.
* ``token-4gram.arpa.gz``: token-level 4-gram (bigrams seen < 3 times and higher n-grams seen
  < 4 times pruned) in the demo models' vocabulary: each training
  sentence is tokenized with the bundled sentencepiece model and each token id ``i`` written
  as the word ``chr(i + 100)`` (:meth:`asrdecode.lm.TokenMap.offset`, NeMo's convention), so
  ``NGramLM.from_arpa(path, vocab_size=257, blank_id=256)`` reads it directly.

Usage: python3 recipes/build_lms.py [--text work/text/train.txt] [--out src/asrdecode/models/assets]
Needs KenLM's lmplz (``recipes/build_kenlm.sh``). Run time: about 30 s.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import time
from pathlib import Path

from asrdecode.lm import TokenMap, estimate_arpa
from asrdecode.tokenizers import SentencePieceTokenizer


def _gzip(path: Path) -> Path:
    out = path.with_suffix(path.suffix + ".gz")
    with open(path, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", default="work/text/train.txt")
    ap.add_argument("--out", default="src/asrdecode/models/assets")
    ap.add_argument("--token-order", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    lines = [s for s in Path(args.text).read_text().splitlines() if s.strip()]

    t0 = time.time()
    w = _gzip(estimate_arpa(lines, 3, out / "word-3gram.arpa", prune=[0, 1, 1]))
    print(f"{w}: {w.stat().st_size / 1e6:.2f} MB, {time.time() - t0:.0f} s")

    t0 = time.time()
    tok = SentencePieceTokenizer(out / "tokenizer.model")
    tmap = TokenMap.offset(tok.vocab_size, tok.blank_id)
    tlines = [tmap.encode_line(tok.encode(s)) for s in lines]
    prune = [0, 2] + [3] * (args.token_order - 2)
    t = _gzip(estimate_arpa(tlines, args.token_order, out / f"token-{args.token_order}gram.arpa", prune=prune))
    print(f"{t}: {t.stat().st_size / 1e6:.2f} MB, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
