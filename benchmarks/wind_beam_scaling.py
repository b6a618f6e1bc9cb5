"""WIND beam search, native vs torch engine, as the beam grows (issue 30: native was super-linear).

``OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/wind_beam_scaling.py [--beams 16 32 64 128]``:
3 utterances x 20 frames, a random float32 LSTM transducer (tests/transducer_models.py) with a
300-token vocabulary; prints one row per beam (seconds per engine, native / torch ratio, same n-best).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from transducer_models import random_model  # noqa: E402

from asrdecode.transducer.beam import beam_search  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--beams", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--vocab", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    m = random_model(0, args.vocab, 0, None, blank_bias=0.5).float()
    enc = torch.randn(3, 20, 5, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([20, 17, 12])
    print("| beam | native s | torch s | native / torch | same best |")
    print("|---|---|---|---|---|")
    for beam in args.beams:
        out, secs = {}, {}
        for engine in ("native", "torch"):
            t0 = time.perf_counter()
            out[engine] = beam_search(m, enc, lengths, beam=beam, method="wind", engine=engine)
            secs[engine] = time.perf_counter() - t0
        same = all(a[0].tokens == b[0].tokens for a, b in zip(out["native"], out["torch"]))
        print(f"| {beam} | {secs['native']:.2f} | {secs['torch']:.2f} | {secs['native'] / secs['torch']:.2f} | {same} |",
              flush=True)


if __name__ == "__main__":
    main()
