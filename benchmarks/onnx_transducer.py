"""demo-rnnt / demo-tdt exported to ONNX (sherpa-onnx layout, onnxruntime) vs the torch models.

Same audio (data/synth_test, 50 utterances), one thread, interleaved repeats, medians, in one run:
exactness (utterances whose tokens and timestamps are equal, largest score difference) and time
ratios ONNX / torch for the encoder (features excluded) and for decoding alone (greedy, beam 4),
in batches of ``--batch``.

    OMP_NUM_THREADS=1 python benchmarks/onnx_transducer.py [--model demo-rnnt] [--batch 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models import load, load_bundle  # noqa: E402
from asrdecode.models.onnx_export import export_onnx  # noqa: E402
from asrdecode.pipeline import DecodeOptions, make_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="demo-rnnt", choices=("demo-rnnt", "demo-tdt"))
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    single_thread()
    waves = [read_audio(p) for p in sorted((ROOT / "data/synth_test").glob("*.wav"))]
    batches = [waves[i:i + args.batch] for i in range(0, len(waves), args.batch)]
    torch_b = load(args.model)
    onnx_b = load_bundle(export_onnx(torch_b, tempfile.mkdtemp())[0].parent.as_posix())
    bundles = {"torch": torch_b, "onnx": onnx_b}
    feats = [torch_b.features(b) for b in batches]  # the same log-mel front end for both
    with torch.inference_mode():
        enc = {k: [b.encode_features(*f) for f in feats] for k, b in bundles.items()}
    rows = []
    enc_t = time_many({k: (lambda b=b: [b.encode_features(*f) for f in feats]) for k, b in bundles.items()},
                      repeats=args.repeats)
    rows.append(["encoder", "-", "-", enc_t["onnx"] / enc_t["torch"]])
    for name, opts in (("greedy", DecodeOptions(decoder="greedy")), ("beam 4", DecodeOptions(decoder="beam", beam=4))):
        decode = {k: torch.inference_mode()(make_pipeline(b, opts)[1]) for k, b in bundles.items()}
        out = {k: [h for e in enc[k] for h in decode[k](*e)] for k in bundles}
        same = sum(a.tokens == b.tokens and a.timestamps == b.timestamps for a, b in zip(out["torch"], out["onnx"]))
        diff = max(abs(a.score - b.score) for a, b in zip(out["torch"], out["onnx"]))
        t = time_many({k: (lambda k=k, decode=decode: [decode[k](*e) for e in enc[k]]) for k in bundles}, repeats=args.repeats)
        rows.append([name, f"{same}/{len(waves)}", f"{diff:.2g}", t["onnx"] / t["torch"]])
    print(f"{args.model}, {len(waves)} utterances of data/synth_test, batch {args.batch}, 1 thread, "
          f"median of {args.repeats}")
    print(markdown_table(["step", "same tokens + times", "max |score diff|", "time ONNX / torch"], rows))


if __name__ == "__main__":
    main()
