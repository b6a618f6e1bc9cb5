#!/usr/bin/env python3
"""What the first-call check of a compiled round costs (accel.run_until_done, round_check.py).

A loop's first call in a compiling mode also runs every round eagerly on a copy of the state and compares.
Here, on the CPU in ``acceleration="compile"`` (Inductor's C++), each search is called until its round is
verified, then timed warm (compiled, unchecked) and with the check forced again (the verdicts forgotten),
in the same run, the two interleaved (``timing.time_many``). Medians of ``--repeats`` calls.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/round_check_cost.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asrdecode import accel, ctc  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402
from asrdecode.models.demo import ASSETS  # noqa: E402
from asrdecode.transducer import BeamSearchDecoder  # noqa: E402
from test_ctc_helpers import peaky_log_probs, random_lengths  # noqa: E402
from timing import time_many  # noqa: E402
from transducer_models import random_model  # noqa: E402

V, BLANK = 257, 256


def searches(lm: NGramLM) -> dict[str, tuple[Callable[[], Any], Callable[[], list[accel.StepRunner]]]]:
    """name -> (a call in compile mode, the runners whose verdicts it keeps)."""
    from asrdecode.ctc import beam_loop

    B, T = 16, 40
    lp = peaky_log_probs(5, B, T, V, BLANK, peak=6.0, dtype=torch.float32)
    lens = random_lengths(5, B, T)

    def ctc_call() -> Any:
        return ctc.beam_search(lp, lens, BLANK, engine="torch", acceleration="compile", beam=16, beta=2.0,
                               fusion=[(lm, 0.7)])

    model = random_model(6, V, BLANK, None, blank_bias=1.0).float()
    enc = 2 * torch.randn(8, 30, 5, generator=torch.Generator().manual_seed(6))
    enc_lens = torch.tensor([30, 25, 20, 14, 9, 30, 1, 0])
    dec = BeamSearchDecoder(model, beam=4, method="alsd", max_symbols=3, engine="torch", fusion=[(lm, 0.6)],
                            beta=0.5, acceleration="compile")

    return {
        "CTC prefix beam 16 + token LM, B=16, T=40": (ctc_call, lambda: [e.runner for e in beam_loop.LOOPS._entries.values()]),
        "ALSD++ beam 4 + token LM, B=8, T=30": (lambda: dec.decode(enc, enc_lens),
                                                lambda: [run for _, run in dec._loops._entries.values()]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=BLANK)
    print("| search (CPU, acceleration=\"compile\") | warm, verified (ms) | checked call (ms) | checked / verified |")
    print("|---|---|---|---|")
    cases = searches(lm)  # (the model made outside inference mode: its weights' versions key its loops)
    with torch.inference_mode():
        for name, (call, runners) in cases.items():
            call()  # compiles and checks
            assert accel.ROUND_CHECKS and all(accel.ROUND_CHECKS.values()), accel.ROUND_CHECKS

            def forget(runners: Callable[[], list[accel.StepRunner]] = runners) -> None:
                accel.ROUND_CHECKS.clear()
                for run in runners():
                    run.verified.clear()

            def checked(call: Callable[[], Any] = call, forget: Callable[[], None] = forget) -> Any:
                forget()  # (a dict and a set cleared: microseconds)
                return call()

            times = time_many({"warm": call, "checked": checked}, repeats=args.repeats)  # interleaved
            warm, checked_s = times["warm"], times["checked"]
            print(f"| {name} | {warm * 1e3:.0f} | {checked_s * 1e3:.0f} | {checked_s / warm:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
