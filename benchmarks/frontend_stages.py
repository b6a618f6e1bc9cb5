"""Where the Kaldi fbank front end and the ONNX encoder call spend their time, stage by stage.

60 clips (data/real + data/synth_test) one at a time, CPU time (``time.process_time``: less moved by other
processes on a shared machine than wall time), fastest of ``--repeats``, one thread. Rows: kaldi-native-fbank's
``OnlineFbank`` (the front end before models/spectral.py, and the C++ class sherpa-onnx runs) and reading its
frames back; spectral.KaldiFbank's stages, timed as cumulative prefixes of the chain per clip (so each clip's
data stays in cache as in real use) and differenced; the encoder (icefall layout of benchmarks/vs_sherpa.py)
per clip, as one padded batch call and in length groups (``onnx_common.encode_in_groups``).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/frontend_stages.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))
from sherpa_models import build_icefall  # noqa: E402
from timing import markdown_table, single_thread  # noqa: E402

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models.frontend import pad_features  # noqa: E402
from asrdecode.models.onnx_transducer import KaldiFbankFrontEnd, load_onnx_transducer  # noqa: E402
from asrdecode.models.spectral import KaldiFbank  # noqa: E402


def cpu_ms(fn: Callable[[], object], repeats: int) -> float:
    """Fastest CPU time of ``repeats`` runs of ``fn``, in ms."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1000


def _knf_rows(opts, waves: list[np.ndarray], repeats: int) -> list[list]:
    import kaldi_native_fbank as knf

    def compute() -> list:
        out = []
        for w in waves:
            f = knf.OnlineFbank(opts)
            f.accept_waveform(16000, w)
            f.input_finished()
            out.append(f)
        return out

    done = compute()
    read = lambda: [np.stack([np.asarray(f.get_frame(i), dtype=np.float32) for i in range(f.num_frames_ready)])  # noqa: E731
                    for f in done]
    return [["kaldi-native-fbank OnlineFbank: accept_waveform + input_finished", cpu_ms(compute, repeats)],
            ["kaldi-native-fbank: get_frame per frame + np.stack", cpu_ms(read, repeats)]]


def _spectral_rows(k: KaldiFbank, waves: list[torch.Tensor], repeats: int) -> list[list]:
    def upto(stage: int) -> Callable[[], None]:
        def run() -> None:
            for x in waves:
                f = k.frames(x)
                y = k.frame_map(f, k.nfft) if stage >= 1 else None
                s = torch.fft.rfft(y) if stage >= 2 and y is not None else None
                m = k.mel(s) if stage >= 3 and s is not None else None
                if stage >= 4 and m is not None:
                    m.clamp_min_(k.eps).log_()
        return run

    cum = [cpu_ms(upto(i), repeats) for i in range(5)]
    names = ["frames (reflected edges, strided view)", "FrameMap (DC, pre-emphasis, window, zero padding)",
             f"rfft {k.nfft}", "MelProduct (power x mel filters in blocks)", "clamp + log"]
    rows = [[f"KaldiFbank: {n}", cum[i] - (cum[i - 1] if i else 0.0)] for i, n in enumerate(names)]
    return rows + [["KaldiFbank whole (checks included)", cpu_ms(lambda: [k(x) for x in waves], repeats)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    single_thread()
    clips = sorted((ROOT / "data/real").glob("*.wav")) + sorted((ROOT / "data/synth_test").glob("*.wav"))
    waves = [read_audio(c) for c in clips]
    model = build_icefall(Path(tempfile.mkdtemp(prefix="frontend-stages-")) / "icefall", dim=512, emb=512)
    b = load_onnx_transducer(str(model))
    opts = KaldiFbankFrontEnd(b.feature_dim).opts
    k = KaldiFbank(__import__("kaldi_native_fbank"), opts)
    rows = _knf_rows(opts, [w.numpy() for w in waves], args.repeats) + _spectral_rows(k, waves, args.repeats)
    one = [pad_features([k(w)], b.feature_dim) for w in waves]
    fb, fl = b.features(waves)
    rows += [["encoder (onnxruntime), one clip each", cpu_ms(lambda: [b.encode_features(*f) for f in one], args.repeats)],
             [f"encoder, batch of {len(waves)} in one call padded to the longest ({fb.shape[0] * fb.shape[1]} frames)",
              cpu_ms(lambda: b._encode(fb, fl), args.repeats)],
             [f"encoder, batch of {len(waves)} in length groups", cpu_ms(lambda: b.encode_features(fb, fl), args.repeats)]]
    print(f"{len(waves)} clips, {int(fl.sum())} feature frames, one thread, CPU ms (fastest of {args.repeats})")
    print(markdown_table(["stage", "CPU ms"], rows))


if __name__ == "__main__":
    main()
