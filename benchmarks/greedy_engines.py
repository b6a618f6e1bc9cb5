"""Transducer greedy, native (C++) vs torch engine, decode-only, per utterance, one thread, one run.

demo-rnnt (an ``LSTMTransducer``) on the clips of data/real: each clip's encoder output is computed
once; then ``transducer.greedy(engine=...)`` is timed on one clip at a time (interleaved repeats,
medians of the total over the clips). Both engines' tokens are checked equal first.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/greedy_engines.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.pipeline import make_pipeline, resolve_options  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    single_thread()
    bundle = load_bundle("demo-rnnt")
    encode = make_pipeline(bundle, resolve_options(bundle)).encode
    clips = sorted((ROOT / "data/real").glob("*.wav"))
    with torch.inference_mode():
        encoded = [encode([read_audio(c)]) for c in clips]
    model = bundle.model

    def run(engine: str) -> list:
        with torch.inference_mode():
            return [greedy(model, e, n, engine=engine)[0] for e, n in encoded]

    native, tensor = run("native"), run("torch")
    assert [h.tokens for h in native] == [h.tokens for h in tensor]
    assert [h.timestamps for h in native] == [h.timestamps for h in tensor]
    times = time_many({"native": lambda: run("native"), "torch": lambda: run("torch")}, repeats=args.repeats)
    n = len(clips)
    frames = sum(int(length) for _, length in encoded)
    rows = [[name, times[name] / n * 1e3, frames / n] for name in ("native", "torch")]
    print(f"demo-rnnt greedy, {n} clips of data/real, decode-only, per utterance, 1 thread, "
          f"{sum(len(h.tokens) for h in native)} tokens")
    print(markdown_table(["engine", "ms / utterance", "encoder frames / utterance"], rows))
    print(f"torch / native = {times['torch'] / times['native']:.1f}x")


if __name__ == "__main__":
    main()
