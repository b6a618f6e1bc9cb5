#!/usr/bin/env python3
"""ARPA load time and memory: asrdecode's readers and word LM vs KenLM's ``kenlm.Model`` and pyctcdecode.

The ARPA file is synthetic and reproducible (:func:`synthetic_arpa`, seed fixed): by default 47k words
and 1.1M n-grams in a 3-gram model, every n-gram's context and suffix present (KenLM loads it without
a warning), about 38 MB of text; ``--scale 14`` makes one of about 500 MB (14x the n-grams, 3x the
words), written to a temporary folder and deleted afterwards. Every load runs in its own process (the
imports done first, not timed), so that its peak memory is its own: ``peak MB`` is the process's peak
resident set, ``+MB`` its growth over the resident set before the load (the imports' memory, torch's
included, left out), both from ``/proc/self/status`` (``VmHWM``, ``VmRSS``). Wall and CPU seconds
(every thread of the process; the CPU time is the steadier figure on a shared machine). Interleaved
runs, one thread, the fastest and the median of ``--runs``:

* ``kenlm.Model``: KenLM's Python module reading the ARPA (probing hash tables);
* ``pyctcdecode``: ``pyctcdecode.build_ctcdecoder(labels, path)`` (KenLM parses the ARPA; pyctcdecode
  reads its unigrams);
* ``read_arpa native`` / ``read_arpa Python``: :func:`asrdecode.lm.read_arpa` with ``engine="native"``
  (the C++ reader) and ``engine="torch"`` (the numpy block reader);
* ``asrdecode first load``: ``asrdecode.compat.build_ctcdecoder(labels, path)`` with an empty cache
  folder (the ARPA read, the word LM built and written to the cache);
* ``asrdecode cached``: the same call again (the built word LM memory-mapped from the cache).

The peers run in ``--peer-python`` (an interpreter with ``kenlm`` and ``pyctcdecode``; default: this one);
their rows are left out, with a note, where it has neither.

Usage: OMP_NUM_THREADS=1 python3 benchmarks/word_lm_load.py [--runs 3] [--scale 1] [--peer-python PY] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
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


LOADERS = ("kenlm.Model", "pyctcdecode", "read_arpa native", "read_arpa Python", "asrdecode first load",
           "asrdecode cached")
PEERS = ("kenlm.Model", "pyctcdecode")


def _status_mb(field: str) -> float:
    """A memory line of /proc/self/status in MB: ``VmRSS`` (now) or ``VmHWM`` (the peak of this process's
    own memory; ``ru_maxrss`` is not used: Linux carries it over from the parent's memory across fork and
    exec, so a child of a large parent would report the parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _child(name: str, arpa: str, cache: str) -> None:
    """One load of ``name`` in this process; prints ``{"s", "cpu", "peak_mb", "grow_mb"}`` as JSON (wall and
    CPU seconds of every thread of the process)."""
    if name == "kenlm.Model":
        import kenlm

        fn = lambda: kenlm.Model(arpa)  # noqa: E731
    elif name == "pyctcdecode":
        import logging

        import pyctcdecode

        logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
        fn = lambda: pyctcdecode.build_ctcdecoder(LABELS, arpa)  # noqa: E731
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        os.environ["ASRDECODE_CACHE"] = cache
        from asrdecode.compat import build_ctcdecoder
        from asrdecode.lm import read_arpa
        from asrdecode.native import available

        available()  # the engine built and loaded before the clock starts
        fn = {"read_arpa native": lambda: read_arpa(arpa, engine="native"),
              "read_arpa Python": lambda: read_arpa(arpa, engine="torch")}.get(
            name, lambda: build_ctcdecoder(LABELS, arpa))
    before = _status_mb("VmRSS")
    c0, t0 = time.process_time(), time.perf_counter()
    keep = fn()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_mb("VmHWM")
    del keep
    print(json.dumps({"s": dt, "cpu": cpu, "peak_mb": peak, "grow_mb": peak - before}))


def _peer_ok(python: str, name: str) -> bool:
    """Whether ``python`` imports what the peer ``name`` needs (``kenlm``; pyctcdecode's row: both)."""
    modules = "kenlm" if name == "kenlm.Model" else "kenlm, pyctcdecode"
    r = subprocess.run([python, "-c", f"import {modules}"], capture_output=True)
    return r.returncode == 0


def _run(python: str, name: str, arpa: Path, cache: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([python, __file__, "--child", name, "--arpa", str(arpa), "--cache", str(cache)],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="n-grams x scale, words x scale ** 0.4 (14: ~500 MB)")
    ap.add_argument("--arpa", help="an existing ARPA file (default: the synthetic one, written to a temp folder)")
    ap.add_argument("--peer-python", default=sys.executable, help="a Python with kenlm and pyctcdecode")
    ap.add_argument("--only", help="comma-separated loaders (default: all)")
    ap.add_argument("--out", help="append the table to this markdown file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.arpa, args.cache)
        return
    tmp = Path(tempfile.mkdtemp(prefix="word_lm_load_"))
    try:
        if args.arpa:
            arpa = Path(args.arpa)
        else:
            t0 = time.perf_counter()
            f = args.scale
            arpa = synthetic_arpa(tmp / "synthetic.arpa", n_words=int(47_000 * f ** 0.4), n_bigrams=int(600_000 * f),
                                  n_trigrams=int(500_000 * f))
            print(f"# wrote {arpa} ({arpa.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        names = [n for n in LOADERS if not args.only or n in args.only.split(",")]
        note = ""
        missing = [n for n in names if n in PEERS and not _peer_ok(args.peer_python, n)]
        if missing:
            names = [n for n in names if n not in missing]
            note = f"{', '.join(missing)}: not importable in {args.peer_python}, the row is left out."
        cache = tmp / "cache"
        res: dict[str, list[dict]] = {n: [] for n in names}
        for _ in range(args.runs):
            for name in names:
                if name == "asrdecode first load":
                    shutil.rmtree(cache, ignore_errors=True)
                r = _run(args.peer_python if name in PEERS else sys.executable, name, arpa, cache)
                res[name].append(r)
                print(f"# {name}: {r['s']:.2f} s ({r['cpu']:.2f} s CPU), peak {r['peak_mb']:.0f} MB "
                      f"(+{r['grow_mb']:.0f})", file=sys.stderr, flush=True)
        print(_table(res, arpa, args, note))
        if args.out:
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write("\n" + _table(res, arpa, args, note))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _table(res: dict[str, list[dict]], arpa: Path, args: argparse.Namespace, note: str) -> str:
    size = arpa.stat().st_size / 1e6
    best = {k: min(r["s"] for r in v) for k, v in res.items()}
    med = {k: float(np.median([r["s"] for r in v])) for k, v in res.items()}
    cpu = {k: min(r["cpu"] for r in v) for k, v in res.items()}
    peak = {k: max(r["peak_mb"] for r in v) for k, v in res.items()}
    grow = {k: max(r["grow_mb"] for r in v) for k, v in res.items()}
    lines = [f"### ARPA load time and memory ({time.strftime('%Y-%m-%d')}, {size:.0f} MB ARPA)", "",
             f"`OMP_NUM_THREADS=1 python3 benchmarks/word_lm_load.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` — "
             f"the {size:.0f} MB ARPA, each load in its own process, {args.runs} interleaved runs, one thread; "
             "wall seconds (fastest, median), CPU seconds (fewest), peak resident MB and its growth over the "
             "imports (+MB); ratios to each peer: fastest wall, median wall, CPU, +MB.", ""]
    if note:
        lines += [note, ""]
    cols = [c for c in PEERS if c in best]
    head = "| loader | fastest s | median s | CPU s | peak MB | +MB |" + "".join(f" / {c} |" for c in cols)
    lines += [head, "|---|---|---|---|---|---|" + "---|" * len(cols)]
    for name in res:
        row = f"| {name} | {best[name]:.2f} | {med[name]:.2f} | {cpu[name]:.2f} | {peak[name]:.0f} | {grow[name]:.0f} |"
        for c in cols:
            row += (f" {best[name] / best[c]:.2f}, {med[name] / med[c]:.2f}, {cpu[name] / max(cpu[c], 1e-9):.2f}, "
                    f"{grow[name] / max(grow[c], 1):.2f} |")
        lines.append(row)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
