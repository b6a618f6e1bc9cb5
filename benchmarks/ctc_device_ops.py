#!/usr/bin/env python3
"""Ops per frame of the CTC prefix beam search's device round, on the CPU (the GPU's launch count, a proxy).

The round that CUDA captures as a graph (ctc/beam_loop.py) runs here under
:class:`asrdecode.accel.EmulatedGraphRunner` (the same in-place wrapper a capture uses); every ATen op
of every replayed round is counted (each is a kernel launch on a GPU; views are counted too) and
divided by the frames. Sizes as benchmarks/gpu.py's CTC section: B=128, beam 16, V=257 (demo-ctc's
vocabulary, blank 256), the bundled token 4-gram; peaky random emissions. Each case's best hypotheses
are also compared with the native engine's.

Usage: PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/ctc_device_ops.py [--batch 128] [--frames 64]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from asrdecode import ctc  # noqa: E402
from asrdecode.accel import EmulatedGraphRunner, count_device_syncs  # noqa: E402
from asrdecode.ctc import beam_loop  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402
from asrdecode.models.demo import ASSETS, LM_TUNED  # noqa: E402
from test_ctc_helpers import peaky_log_probs  # noqa: E402

V, BLANK, BEAM = 257, 256, 16


class CountingRunner(EmulatedGraphRunner):
    """The emulated graph runner, counting the ATen ops of every replayed round (class-wide totals)."""

    ops = 0
    rounds = 0

    def _graph(self, fn: Any, state: Any) -> Any:
        graph = super()._graph(fn, state)

        class Counted:
            def replay(self) -> None:
                with count_device_syncs() as syncs:
                    graph.replay()
                CountingRunner.ops += syncs.ops
                CountingRunner.rounds += 1

        return Counted()


def cases(lm: NGramLM) -> dict[str, dict]:
    """The searches measured: keyword arguments of ``ctc.beam_search``."""
    w, beta = LM_TUNED["demo-ctc"]
    return {"beam 16": {},
            "beam 16 + token LM": dict(fusion=[(lm, w)], beta=beta),
            "beam 16 + token LM with dense rows": dict(fusion=[(lm.with_dense_rows(), w)], beta=beta),
            "beam 16 + token LM, weak blank collapse": dict(fusion=[(lm, w)], beta=beta, blank_collapse="weak"),
            "beam 16 + token LM, token_beam 32": dict(fusion=[(lm, w)], beta=beta, token_beam=32)}


def ops_per_frame(lp: torch.Tensor, lens: torch.Tensor, kw: dict) -> tuple[float, list]:
    """Ops per frame of the device round for one search of ``lp [B, T, V]``, and its n-best lists."""
    beam_loop.LOOPS.clear()
    saved = beam_loop.resolve_mode, beam_loop.StepRunner
    beam_loop.resolve_mode = lambda mode, device: "cuda_graphs"  # type: ignore[assignment]
    beam_loop.StepRunner = CountingRunner  # type: ignore[misc]
    try:
        CountingRunner.ops = CountingRunner.rounds = 0
        out = ctc.beam_search(lp, lens, BLANK, beam=BEAM, engine="torch", **kw)
    finally:
        beam_loop.resolve_mode, beam_loop.StepRunner = saved
        beam_loop.LOOPS.clear()
    return CountingRunner.ops / max(1, CountingRunner.rounds * beam_loop.UNROLL), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--frames", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=BLANK)
    lp = peaky_log_probs(0, args.batch, args.frames, V, BLANK, peak=6.0).float()
    lens = torch.full((args.batch,), args.frames)
    print(f"| search (B={args.batch}, T={args.frames}, V={V}) | ATen ops per frame | best = native |")
    print("|---|---|---|")
    for name, kw in cases(lm).items():
        per_frame, out = ops_per_frame(lp, lens, kw)
        native = ctc.beam_search(lp, lens, BLANK, beam=BEAM, engine="native", **kw)
        same = sum(a[0].tokens == b[0].tokens for a, b in zip(out, native))
        print(f"| {name} | {per_frame:.1f} | {same}/{args.batch} |")


if __name__ == "__main__":
    main()
