"""Kernels per call of transducer greedy decoding on the CPU: the proxy of its CUDA-graph replay time.

For the paper-sized model (benchmarks/paper_model.py) at ``B`` x ``T`` (the inputs of benchmarks/gpu.py's
greedy section: every third utterance 2/3 long), counts the ATen ops that launch a kernel (view ops and
``empty`` excluded) of one warm ``GreedyDecoder.decode`` call on the static path CUDA graphs replay (the
CPU twin of capture, :class:`~asrdecode.accel.EmulatedGraphRunner`: the in-place copies a graph holds are
counted), the rounds it ran, and the same count for the one-graph network floor of benchmarks/gpu.py
(projection, ``U`` prediction steps, ``T + U`` joints and their argmax). A small kernel costs about the same
on a GPU whatever it does at this batch, so ``kernels / floor kernels`` projects the time ratio to the floor.
Also the eager ``engine="torch"`` time (one thread).

    OMP_NUM_THREADS=1 python benchmarks/greedy_kernels.py [--batch 32] [--frames 150] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.utils._python_dispatch
from contextlib import contextmanager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu import label_matrix, network_floor  # noqa: E402
from paper_model import make_encoder_output, make_paper_model  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.accel import EmulatedGraphRunner  # noqa: E402
from asrdecode.transducer import GreedyDecoder  # noqa: E402

greedy_module = sys.modules["asrdecode.transducer.greedy"]

SETTINGS = {  # name -> (TDT model?, decoder options)
    "label-looping": (False, {"loop": "labels"}),
    "label-looping TDT": (True, {"loop": "labels"}),
    "WIND w=8": (False, {"loop": "labels", "window": 8}),
    "frame-looping": (False, {"loop": "frames"}),
    "frame-looping TDT": (True, {"loop": "frames"}),
}

_NO_KERNEL = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::lift_fresh"}
#: kernels a GPU runs for one call of an op that the CPU counts once: ATen's logsumexp is amax, abs, eq,
#: masked_fill, sub, exp, sum, log, add
_GPU_KERNELS = {"aten::logsumexp": 9}
_SOFTMAX = {"aten::log_softmax", "aten::_log_softmax", "aten::softmax", "aten::_softmax"}


class KernelCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts ATen ops that launch a kernel: not views, not bare allocations (``by_op`` per op name);
    ``gpu`` estimates the kernels a GPU launches for them (an op the CPU counts once may be several there:
    ``logsumexp``; a softmax copies a non-contiguous input first)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()
        self.gpu = 0

    @property
    def kernels(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func._schema.name
        if not func.is_view and name not in _NO_KERNEL:
            self.by_op[name] += 1
            self.gpu += _GPU_KERNELS.get(name, 1)
            if name in _SOFTMAX and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
                self.gpu += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def count_kernels() -> Iterator[KernelCounter]:
    counter = KernelCounter()
    with counter:
        yield counter


@contextmanager
def graphs_on_cpu() -> Iterator[None]:
    """``acceleration="graphs-on-cpu"`` takes the CUDA-graph path with the CPU twin of capture."""
    real_mode, real_runner = greedy_module.resolve_mode, greedy_module.StepRunner
    greedy_module.resolve_mode = lambda m, d: "cuda_graphs" if m == "graphs-on-cpu" else real_mode(m, d)
    greedy_module.StepRunner = EmulatedGraphRunner
    try:
        yield
    finally:
        greedy_module.resolve_mode, greedy_module.StepRunner = real_mode, real_runner


def rounds_counter() -> tuple[Callable[[], int], Callable[[], None]]:
    """Wrap ``run_until_done`` in the greedy module to record the rounds of the last loop."""
    real = greedy_module.run_until_done
    seen = [0]

    def wrapped(*args: Any, **kwargs: Any) -> int:
        seen[0] = real(*args, **kwargs)
        return seen[0]

    greedy_module.run_until_done = wrapped
    return (lambda: seen[0]), (lambda: setattr(greedy_module, "run_until_done", real))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-time", action="store_true", help="counts only")
    p.add_argument("--ops", action="store_true", help="print the kernels per op of each graph-path call")
    args = p.parse_args()
    single_thread()
    B, T = args.batch, args.frames
    nets = {tdt: make_paper_model(seed=0, tdt=tdt) for tdt in (False, True)}
    enc, lengths = make_encoder_output(B, T, seed=3)
    lengths[::3] = (lengths[::3] * 2) // 3
    floors: dict[bool, int] = {}
    with torch.inference_mode():
        for tdt, model in nets.items():
            ref = GreedyDecoder(model, engine="torch", acceleration="eager").decode(enc, lengths)
            work = network_floor(model, enc, label_matrix(ref, model.blank_id, torch.device("cpu")), torch.device("cpu"))
            work()  # the model's cached step weights
            with count_kernels() as k:
                work()
            floors[tdt] = k.gpu
    rounds, restore = rounds_counter()
    rows = []
    try:
        for name, (tdt, opts) in SETTINGS.items():
            model = nets[tdt]
            with graphs_on_cpu(), torch.inference_mode():
                dec = GreedyDecoder(model, engine="torch", acceleration="graphs-on-cpu", **opts)
                dec.decode(enc, lengths)  # cold: capture, storage growth, loop statistics
                with count_kernels() as k:
                    dec.decode(enc, lengths)
            n = rounds()
            if args.ops:
                print(name, n, "rounds", k.by_op.most_common())
            ms = float("nan")
            if not args.no_time:
                eager = GreedyDecoder(model, engine="torch", acceleration="eager", **opts)

                def call(d: GreedyDecoder = eager) -> Any:
                    with torch.inference_mode():
                        return d.decode(enc, lengths)

                ms = time_many({name: call}, repeats=args.repeats, stat="min")[name] * 1e3
            rows.append([name, k.kernels, k.gpu, n, round(k.gpu / max(n, 1), 1), floors[tdt],
                         round(k.gpu / floors[tdt], 2), ms])
    finally:
        restore()
    print(f"paper model, B={B}, T={T} (every third utterance 2/3 long), one warm graph-path call")
    print(markdown_table(["decoder", "ATen ops / call", "GPU kernels (est.) / call", "rounds", "GPU kernels / round",
                          "floor GPU kernels", "x floor (kernels)", "eager ms (1 thread)"], rows))


if __name__ == "__main__":
    main()
