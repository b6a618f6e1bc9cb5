#!/usr/bin/env python3
"""Blank collapse on the native CTC beam search: collapsed vs uncollapsed time, same emissions and LM.

The bundled demo-ctc emissions of ``benchmarks/ctc_beam.py`` (or its ``--emissions`` file) and the token
4-gram; asrdecode's ``ctc.beam_search(engine="native")`` with collapse off, 0.999, 0.99 and weak, at
batch 1 and batch 32 (length-sorted). The configurations are interleaved per batch (in a rotating order), and each batch's
time is its fastest of ``--runs`` (on a shared machine a load burst spoils one batch of one run, not a
whole pass); a configuration's time is the sum over batches. One thread. Prints speed-ups vs off.

Usage: python3 benchmarks/ctc_collapse_native.py [--beam 16] [--batches 1 32] [--runs 10]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ctc_beam as bench  # noqa: E402

from asrdecode import ctc  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emissions", help=".pt file with log_probs, lengths, texts, blank_id")
    ap.add_argument("--beam", type=int, default=16)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    lps, _, blank, _, source, _ = bench.load_emissions(argparse.Namespace(emissions=args.emissions, synthetic=False))
    lps = [x.float() for x in lps]
    vocab = lps[0].shape[1]
    tmp = Path(tempfile.mkdtemp(prefix="ctc_collapse_"))
    arpa = tmp / "token-4gram.arpa"
    with gzip.open(bench.ASSETS / "token-4gram.arpa.gz", "rb") as src, open(arpa, "wb") as dst:
        shutil.copyfileobj(src, dst)
    lm = NGramLM.from_arpa(arpa, vocab_size=vocab, blank_id=blank)
    shutil.rmtree(tmp, ignore_errors=True)
    variants = [None, 0.999, 0.99, "weak"]
    print(f"# {source}; beam {args.beam}, token 4-gram (alpha {args.alpha}), native engine, one thread, "
          f"fastest of {args.runs} runs per batch, {time.strftime('%Y-%m-%d')}")
    print("| batch | " + " | ".join(f"collapse {v or 'off'}" for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for batch in args.batches:
        order = sorted(range(len(lps)), key=lambda i: lps[i].shape[0]) if batch > 1 else list(range(len(lps)))
        chunks = [bench.pad([lps[j] for j in order[i : i + batch]]) for i in range(0, len(order), batch)]
        best = [[float("inf")] * len(chunks) for _ in variants]
        for r in range(args.runs):
            for c, (x, lens) in enumerate(chunks):
                for k in [(r + i) % len(variants) for i in range(len(variants))]:  # rotated: no config always first
                    v = variants[k]
                    t0 = time.perf_counter()
                    ctc.beam_search(x, lens, blank, beam=args.beam, fusion=[(lm, args.alpha)], beta=0.0,
                                    beam_threshold=20.0, blank_collapse=v, engine="native")
                    best[k][c] = min(best[k][c], time.perf_counter() - t0)
        tot = [sum(b) for b in best]
        print(f"| {batch} | " + " | ".join(f"{tot[0] / t:.2f}x ({t:.3f} s)" for t in tot) + " |", flush=True)


if __name__ == "__main__":
    main()
