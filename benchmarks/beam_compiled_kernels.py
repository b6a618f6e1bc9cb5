#!/usr/bin/env python3
"""The compiled transducer beam round's CPU proxy of a GPU's launch cost: Inductor kernels per round.

ALSD++, AES++ and WIND rounds compiled by torch.compile, against the eager round's ATen ops
(``benchmarks/beam_ops.py``), and the cold compile time.

On demo-rnnt's encoder output of the bundled clips (``benchmarks/gpu.py``'s beam inputs: ``--batch``
utterances, beam 4, the bundled token 4-gram), each search runs its cached static loop in "compile" mode
on the CPU. Per search: the graphs Dynamo made (one: the round traces whole), the kernels Inductor generated
for it (``torch._inductor.metrics.generated_kernel_count``: the fused loop nests; on a GPU each is a Triton
kernel, so this is the proxy of a compiled round's launches there), the calls one compiled round makes (read
from the generated code: Inductor's kernels, which on the CPU join several loop nests, plus the library
calls it keeps: matrix products, top-k), the eager round's ATen ops (the same cached loop, eager), the first call's extra time (Dynamo + Inductor + the C++ build, cold: an empty Inductor cache), and the best hypotheses identical to the
native engine's.

    python benchmarks/beam_compiled_kernels.py                   # every search of beam_ops.py
    python benchmarks/beam_compiled_kernels.py --only alsd+lm    # one search
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch._inductor import metrics
from torch._inductor.utils import run_and_get_code

sys.path.insert(0, str(Path(__file__).resolve().parent))

import beam_ops  # noqa: E402 (the searches and the comparison)
import gpu  # noqa: E402 (the benchmark's demo inputs)

from asrdecode.accel import count_device_syncs  # noqa: E402
from asrdecode.transducer import beam as beam_mod  # noqa: E402


def eager_round_ops(dec: Any) -> int:
    """ATen ops of one eager round of ``dec``'s (only) cached loop."""
    (loop, run), = dec._loops._entries.values()
    step = run.bound(beam_mod._round, loop)
    with torch.inference_mode(), count_device_syncs() as one:
        step()
    return one.ops


def compiled_launches(dec: Any) -> tuple[int, int]:
    """One round of ``dec``'s (only) cached loop compiled again (fullgraph) as the runner compiles it (its pure
    twin, ``_round.pure``: the write-back copies run eagerly, outside): the calls its generated code makes per
    round (Inductor's kernels, then the library kernels and ATen fallbacks it calls)."""
    (loop, _), = dec._loops._entries.values()
    torch._dynamo.reset()
    fn = torch.compile(beam_mod._round.pure.body, dynamic=False, fullgraph=True)
    with torch.inference_mode():
        _, codes = run_and_get_code(fn, loop)
    body = "\n".join(code.split("def call(", 1)[1].split("\ndef ", 1)[0] for code in codes)
    kernels = len(re.findall(r"^\s+cpp_fused_\w+\(", body, re.M)) + len(re.findall(r"^\s+triton_\w+\.run\(", body, re.M))
    library = len(re.findall(r"(?:extern_kernels|aten|torch\.ops\.\w+)\.\w+(?:\.\w+)?\(", body))
    return kernels, library


def measure(model: Any, enc: torch.Tensor, lengths: torch.Tensor, options: dict) -> dict:
    """Graphs, Inductor kernels, ATen ops per compiled and eager round, cold compile seconds, identical results."""
    reference = beam_mod.BeamSearchDecoder(model, beam=4, engine="native", **options).decode(enc, lengths)
    eager = beam_mod.BeamSearchDecoder(model, beam=4, acceleration="compile", engine="torch", **options)
    real = beam_mod.StepRunner
    beam_mod.StepRunner = lambda mode, names: real("eager", names)  # type: ignore[assignment,misc]
    try:  # the same cached static loop, its round run eagerly
        with torch.inference_mode():
            eager.decode(enc, lengths)
    finally:
        beam_mod.StepRunner = real  # type: ignore[misc]
    dec = beam_mod.BeamSearchDecoder(model, beam=4, acceleration="compile", engine="torch", **options)
    torch._dynamo.reset()
    counters.clear()
    metrics.reset()
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = dec.decode(enc, lengths)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        dec.decode(enc, lengths)
        warm = time.perf_counter() - t0
    graphs, breaks, generated = int(counters["stats"]["unique_graphs"]), sum(counters["graph_break"].values()), \
        metrics.generated_kernel_count
    kernels, library = compiled_launches(dec)
    return dict(same=beam_ops.same_best(out, reference), graphs=graphs, breaks=breaks, generated=generated,
                kernels=kernels, library=library, eager_ops=eager_round_ops(eager), compile_s=cold - warm)


def main(argv: Sequence[str] | None = None) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", default="", help="comma-separated search names (default: all)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch._inductor.config.fx_graph_cache = False  # cold: no compiled graph read back from disk,
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")  # no C++ kernel built before
    demo, enc_all, len_all = gpu.demo_outputs("demo-rnnt", None, False)
    enc, lengths = gpu._tile(enc_all, len_all, args.batch)
    enc = enc[:, : int(lengths.max())].contiguous()
    weight, beta = LM_TUNED["demo-rnnt"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                           blank_id=demo.tokenizer.blank_id)
    only = set(filter(None, args.only.split(",")))
    print(f"demo-rnnt, B={args.batch}, {int(lengths.max())} frames max, beam 4 (CPU, torch.compile'd round)")
    print("| search | identical | graphs | graph breaks | kernels generated | calls / compiled round: Inductor "
          "kernels + library / ATen | ATen ops / eager round | cold compile s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, options in beam_ops.searches(lm, weight, beta):
        if only and name not in only:
            continue
        r = measure(demo.model, enc, lengths, options)
        print(f"| {name} | {r['same']}/{args.batch} | {r['graphs']} | {r['breaks']} | {r['generated']} | "
              f"{r['kernels']} + {r['library']} = {r['kernels'] + r['library']} | {r['eager_ops']} | "
              f"{r['compile_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
