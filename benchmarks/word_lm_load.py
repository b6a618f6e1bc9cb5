#!/usr/bin/env python3
"""Word LM load time: asrdecode's pyctcdecode facade vs pyctcdecode (KenLM) on one large ARPA file.

The ARPA file is synthetic and reproducible (:func:`synthetic_arpa`, seed fixed): 47k words and
1.1M n-grams in a 3-gram model, every n-gram's context and suffix present (KenLM loads it without
a warning), about 35 MB of text. Measured in one run, one thread, interleaved, each the fastest of
``--runs``:

* ``pyctcdecode``: ``pyctcdecode.build_ctcdecoder(labels, path)`` (KenLM parses the ARPA; pyctcdecode
  reads its unigrams);
* ``asrdecode first``: ``asrdecode.compat.build_ctcdecoder(labels, path)`` with an empty cache folder
  (the ARPA is parsed and the parsed arrays are written to the cache);
* ``asrdecode cached``: the same call again (the parsed arrays are memory-mapped from the cache).

Usage: OMP_NUM_THREADS=1 python3 benchmarks/word_lm_load.py [--runs 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"
LABELS = [""] + list(LETTERS) + ["'", " "]


def synthetic_arpa(path: str | os.PathLike, n_words: int = 47_000, n_bigrams: int = 600_000,
                   n_trigrams: int = 500_000, seed: int = 0) -> Path:
    """Write a deterministic word 3-gram ARPA file (lower-case letter words, Zipf-like unigrams)."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n_words:
        n = int(rng.integers(2, 11))
        w = "".join(LETTERS[i] for i in rng.integers(0, 26, n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    vocab = ["<unk>", "<s>", "</s>"] + words
    V = len(vocab)
    rank = np.arange(1, V + 1, dtype=np.float64)
    p = 1.0 / rank
    p /= p.sum()
    uni_lp = np.log10(p)
    uni_lp[1] = -99.0  # <s>
    uni_bo = -rng.uniform(0.05, 1.0, V)
    uni_bo[2] = 0.0
    # bigrams: w1 from {<s>} + words, w2 from words + {</s>}, Zipf-like, unique
    zipf = p[3:] / p[3:].sum()

    def draw(n: int, ids: np.ndarray, probs: np.ndarray) -> np.ndarray:
        return rng.choice(ids, size=n, p=probs)

    starts = np.concatenate([[1], np.arange(3, V)])
    sp = np.concatenate([[0.05], zipf * 0.95])
    ends = np.concatenate([np.arange(3, V), [2]])
    ep = np.concatenate([zipf * 0.95, [0.05]])
    key = np.unique(draw(n_bigrams * 2, starts, sp) * V + draw(n_bigrams * 2, ends, ep))  # rows sorted, unique
    big = np.stack([key // V, key % V], 1)
    big = big[np.sort(rng.choice(len(big), size=min(n_bigrams, len(big)), replace=False))]
    # every word and </s> must be reachable as a bigram end, <s> and words as a start: fine either way
    # trigrams (w1 w2 w3): (w1, w2) and (w2, w3) both bigrams, w2 not </s>
    order = np.argsort(big[:, 0], kind="stable")
    nxt_word = big[order, 1]
    count = np.bincount(big[:, 0], minlength=V)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    j = rng.integers(0, len(big), n_trigrams * 2)
    w1, w2 = big[j, 0], big[j, 1]
    ok = count[w2] > 0
    w1, w2 = w1[ok], w2[ok]
    w3 = nxt_word[first[w2] + (rng.random(len(w2)) * count[w2]).astype(np.int64)]
    key = np.unique((w1 * V + w2) * V + w3)
    tri_a = np.stack([key // (V * V), (key // V) % V, key % V], 1)
    tri_a = tri_a[np.sort(rng.choice(len(tri_a), size=min(n_trigrams, len(tri_a)), replace=False))]
    # trigram contexts need a backoff: give every bigram one except those ending in </s>
    big_lp = -rng.uniform(0.1, 3.0, len(big))
    big_bo = -rng.uniform(0.05, 1.0, len(big))
    tri_lp = -rng.uniform(0.05, 2.5, len(tri_a))
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"\\data\\\nngram 1={V}\nngram 2={len(big)}\nngram 3={len(tri_a)}\n\n\\1-grams:\n")
        for i, w in enumerate(vocab):
            f.write(f"{uni_lp[i]:.6f}\t{w}\n" if i == 2 else f"{uni_lp[i]:.6f}\t{w}\t{uni_bo[i]:.6f}\n")
        f.write("\n\\2-grams:\n")
        f.writelines(f"{lp:.6f}\t{vocab[a]} {vocab[b]}\t{bo:.6f}\n" if b != 2 else f"{lp:.6f}\t{vocab[a]} {vocab[b]}\n"
                     for (a, b), lp, bo in zip(big.tolist(), big_lp.tolist(), big_bo.tolist()))
        f.write("\n\\3-grams:\n")
        f.writelines(f"{lp:.6f}\t{vocab[a]} {vocab[b]} {vocab[c]}\n" for (a, b, c), lp in zip(tri_a.tolist(), tri_lp.tolist()))
        f.write("\n\\end\\\n")
    return path


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--arpa", help="an existing ARPA file (default: the synthetic one, written to a temp folder)")
    ap.add_argument("--no-peer", action="store_true", help="skip pyctcdecode (not installed)")
    ap.add_argument("--out", help="append the table to this markdown file")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="word_lm_load_"))
    try:
        if args.arpa:
            arpa = Path(args.arpa)
        else:
            t0 = time.perf_counter()
            arpa = synthetic_arpa(tmp / "synthetic.arpa")
            print(f"# wrote {arpa} ({arpa.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        from asrdecode.compat import build_ctcdecoder as ours

        cache = tmp / "cache"
        os.environ["ASRDECODE_CACHE"] = str(cache)

        def first() -> None:
            shutil.rmtree(cache, ignore_errors=True)
            ours(LABELS, str(arpa))

        def cached() -> None:
            ours(LABELS, str(arpa))

        peer = None
        if not args.no_peer:
            import logging

            import pyctcdecode

            logging.getLogger("pyctcdecode").setLevel(logging.ERROR)

            def peer() -> None:
                pyctcdecode.build_ctcdecoder(LABELS, str(arpa))

        best: dict[str, float] = {}
        times: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for name, fn in (("pyctcdecode (KenLM)", peer), ("asrdecode, first load", first),
                             ("asrdecode, cached", cached)):
                if fn is None:
                    continue
                dt = _time(fn)
                best[name] = min(best.get(name, float("inf")), dt)
                times.setdefault(name, []).append(dt)
                print(f"# {name}: {dt:.2f} s", file=sys.stderr, flush=True)
        base = best.get("pyctcdecode (KenLM)")
        med = {k: float(np.median(v)) for k, v in times.items()}
        mbase = med.get("pyctcdecode (KenLM)")
        size = arpa.stat().st_size / 1e6
        lines = [f"### Word LM load time ({time.strftime('%Y-%m-%d')})", "",
                 f"`OMP_NUM_THREADS=1 python3 benchmarks/word_lm_load.py` — `build_ctcdecoder(labels, arpa)` on the "
                 f"synthetic {size:.0f} MB ARPA (47k words, 1.1M n-grams), {args.runs} interleaved runs, one thread.",
                 "", "| loader | fastest s | / pyctcdecode | median s | / pyctcdecode |", "|---|---|---|---|---|"]
        for name, s in best.items():
            m = med[name]
            lines.append(f"| {name} | {s:.2f} | {s / base:.2f} | {m:.2f} | {m / mbase:.2f} |" if base
                         else f"| {name} | {s:.2f} | - | {m:.2f} | - |")
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write("\n" + text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
