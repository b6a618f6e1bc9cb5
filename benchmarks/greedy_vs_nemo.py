"""Greedy transducer decoding, ours vs NeMo, on the same weights: decoder-only time, one thread.

Decoders compared on the paper-sized model (encoder 512, prediction LSTM 640, joint 640,
1024 labels + blank), encoder output given (the encoder is not timed):

* NeMo ``GreedyBatchedRNNTInfer`` label-looping and frame-looping (CUDA graphs off, CPU);
* ours: ``asrdecode.transducer.greedy`` with ``loop="labels"``, ``loop="frames"`` and WIND
  (``loop="labels", window=8``), on our ``LSTMTransducer`` holding the same weights;
* ours label-looping on the NeMo modules themselves (``asrdecode.models.nemo.NeMoTransducer``);
* TDT (``--tdt``): NeMo ``GreedyBatchedTDTInfer`` (label-looping) vs ours, labels and frames.

All decoders run round-robin, ``--repeats`` times each, in one process; the table shows medians
and the ratio NeMo time / our time (> 1: ours is faster). Outputs (tokens and frame of each token)
are compared utterance by utterance against NeMo label-looping.

Run (NeMo in its own venv, see results_nemo.md)::

    OMP_NUM_THREADS=1 /work/venvs/nemo/bin/python benchmarks/greedy_vs_nemo.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nemo_models import make_nemo_greedy, nemo_modules_from_lstm, run_nemo_greedy, with_blank_last  # noqa: E402
from paper_model import make_encoder_output, make_paper_model  # noqa: E402

from asrdecode.models.nemo import NeMoTransducer  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402

Result = list[tuple[list[int], list[int]]]


def _ours(model: object, **kw: object) -> Callable[[torch.Tensor, torch.Tensor], Result]:
    def run(enc: torch.Tensor, lengths: torch.Tensor) -> Result:
        return [(list(h.tokens), list(h.timestamps)) for h in greedy(model, enc, lengths, **kw)]

    return run


def _nemo(infer: object) -> Callable[[torch.Tensor, torch.Tensor], Result]:
    return lambda enc, lengths: run_nemo_greedy(infer, enc, lengths)


def bench(tdt: bool, batches: list[int], frames: int, repeats: int, max_symbols: int) -> None:
    torch.set_num_threads(1)
    model, _ = with_blank_last(make_paper_model(seed=0, tdt=tdt))  # NeMo's layout (a no-op when blank is last)
    dec, joint = nemo_modules_from_lstm(model)
    adapter = NeMoTransducer(dec, joint, durations=model.durations)
    kind = "TDT" if tdt else "RNN-T"
    print(f"\n### {kind}: model from paper_model.py, T={frames}, max_symbols={max_symbols}, repeats={repeats}, 1 thread")
    decoders: dict[str, Callable[[torch.Tensor, torch.Tensor], Result]] = {
        "NeMo labels": _nemo(
            make_nemo_greedy(dec, joint, loop_labels=True, durations=model.durations, max_symbols=max_symbols)
        )
    }
    if not tdt:
        decoders["NeMo frames"] = _nemo(make_nemo_greedy(dec, joint, loop_labels=False, max_symbols=max_symbols))
    decoders["ours labels"] = _ours(model, loop="labels", max_symbols=max_symbols)
    decoders["ours frames"] = _ours(model, loop="frames", max_symbols=max_symbols)
    if not tdt:
        decoders["ours WIND 8"] = _ours(model, loop="labels", window=8, max_symbols=max_symbols)
    decoders["ours labels on NeMo modules"] = _ours(adapter, loop="labels", max_symbols=max_symbols)

    rows = []
    for b in batches:
        enc, lengths = make_encoder_output(b, frames=frames, seed=1000 + b)
        times: dict[str, list[float]] = {k: [] for k in decoders}
        outputs: dict[str, Result] = {}
        with torch.inference_mode():
            for name, run in decoders.items():  # warm-up, and the outputs to compare
                outputs[name] = run(enc, lengths)
            for _ in range(repeats):
                for name, run in decoders.items():
                    t0 = time.perf_counter()
                    run(enc, lengths)
                    times[name].append(time.perf_counter() - t0)
        ref = outputs["NeMo labels"]
        n_tokens = sum(len(t) for t, _ in ref)
        agree = {k: sum(o == r for o, r in zip(out, ref)) for k, out in outputs.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((b, med, agree, n_tokens / float(lengths.sum())))

    names = list(decoders)
    print("\nMedian decoder time (s):\n")
    print("| B | labels/frame | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for b, med, _, rate in rows:
        print(f"| {b} | {rate:.2f} | " + " | ".join(f"{med[k]:.3f}" for k in names) + " |")

    pairs = [("NeMo labels", "ours labels"), ("NeMo labels", "ours WIND 8")]
    pairs += [("NeMo labels", "ours labels on NeMo modules")]
    if not tdt:
        pairs += [("NeMo frames", "ours frames"), ("NeMo frames", "ours labels")]
    else:
        pairs += [("NeMo labels", "ours frames")]
    pairs = [(a, o) for a, o in pairs if a in decoders and o in decoders]
    print("\nSpeed-up, NeMo time / our time (same run; > 1 means ours is faster):\n")
    print("| B | " + " | ".join(f"{a} / {o}" for a, o in pairs) + " |")
    print("|---|" + "---|" * len(pairs))
    for b, med, _, _ in rows:
        print(f"| {b} | " + " | ".join(f"{med[a] / med[o]:.2f}" for a, o in pairs) + " |")

    print("\nUtterances identical to NeMo label-looping (tokens and frames):\n")
    print("| B | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for b, _, agree, _ in rows:
        print(f"| {b} | " + " | ".join(f"{agree[k]}/{b}" for k in names) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-symbols", type=int, default=10)
    ap.add_argument("--tdt", action="store_true", help="also run TDT (NeMo TDT label-looping vs ours)")
    ap.add_argument("--tdt-only", action="store_true", help="run TDT only")
    args = ap.parse_args()
    if not args.tdt_only:
        bench(False, args.batches, args.frames, args.repeats, args.max_symbols)
    if args.tdt or args.tdt_only:
        bench(True, args.batches, args.frames, args.repeats, args.max_symbols)


if __name__ == "__main__":
    main()
