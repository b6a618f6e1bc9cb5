"""WER and peak memory of the long-file path (``transcribe --long-audio-seconds``) vs whole-file decoding.

Three measurements with the default model (phone-ctc + TLG, its tuned options) or ``--model``:

1. data/real decoded whole, clip by clip (what ``asrdecode transcribe`` / ``eval`` give);
2. data/real forced through the long path (``--long-audio-seconds 0.001``), with the default windows and
   with small windows (``--small-window``, default 2 s: most clips are then cut at their own pauses or,
   where none is found, in overlapping windows), so that the cutting and joining are exercised;
3. long recordings made by joining data/real clips (in a shuffled cycle) with short silences of low
   noise between them (0.3 - 0.9 s), ``--minutes`` long each (default: 1 and 10), decoded through the
   long path; the reference is the clips' texts in order. Peak memory: the process's peak RSS after
   each file (the graph and model are loaded before, so growth between the 1- and 10-minute files is
   what the file's length costs).

    OMP_NUM_THREADS=1 python3 benchmarks/long_audio.py [--minutes 1 10] [--model phone-ctc]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from asrdecode.audio import SAMPLE_RATE, read_audio  # noqa: E402
from asrdecode.cli import decode_waves  # noqa: E402
from asrdecode.evaluate import read_manifest, wer  # noqa: E402
from asrdecode.long_audio import WindowConfig, plan_windows  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.registry import resolve_options  # noqa: E402


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def joined_recording(clips: list[tuple[torch.Tensor, str]], seconds: float, seed: int) -> tuple[torch.Tensor, str]:
    """Clips (shuffled cycles) with 0.3 - 0.9 s of low noise between them until ``seconds`` long."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    parts, texts, total = [], [], 0
    while total < seconds * SAMPLE_RATE:
        order = list(range(len(clips)))
        rng.shuffle(order)
        for i in order:
            gap = int(rng.uniform(0.3, 0.9) * SAMPLE_RATE)
            parts += [clips[i][0], torch.randn(gap, generator=gen) * 1e-3]
            texts.append(clips[i][1])
            total += clips[i][0].numel() + gap
            if total >= seconds * SAMPLE_RATE:
                break
    return torch.cat(parts), " ".join(texts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="phone-ctc")
    ap.add_argument("--minutes", type=float, nargs="*", default=[1.0, 10.0])
    ap.add_argument("--small-window", type=float, default=2.0, help="max window (s) of the forced small-window run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    entries = read_manifest(ROOT / "data/real/manifest.jsonl")
    clips = [(read_audio(e.audio_filepath), e.text) for e in entries]
    bundle = load_bundle(args.model)
    opts = resolve_options(bundle, {})
    refs = [t for _, t in clips]
    waves = [w for w, _ in clips]
    print(f"model {args.model}, decoder {opts.decoder} {opts.changed()}")
    print(f"peak RSS after loading: {peak_rss_mb():.0f} MB")
    print("| path | audio | windows | WER | wall s | peak RSS MB |")
    print("|---|---|---|---|---|---|")

    def row(name: str, audio_s: float, n_windows: int, err: float, wall: float) -> None:
        print(f"| {name} | {audio_s:.1f} s | {n_windows} | {100 * err:.2f} % | {wall:.1f} | {peak_rss_mb():.0f} |",
              flush=True)

    audio_s = sum(w.numel() for w in waves) / SAMPLE_RATE
    t0 = time.perf_counter()
    whole = [h.text or "" for h in decode_waves(bundle, opts, waves)]
    row("data/real, whole files", audio_s, len(waves), wer(refs, whole), time.perf_counter() - t0)
    small = WindowConfig(max_window_seconds=args.small_window, min_window_seconds=args.small_window / 2,
                         overlap_seconds=args.small_window / 4)
    for name, cfg in (("data/real, long path (default windows)", WindowConfig()),
                      (f"data/real, long path ({args.small_window:g} s windows)", small)):
        from asrdecode.cli import decode_waves_nbest

        t0 = time.perf_counter()
        got = [h[0].text or "" for h in decode_waves_nbest(bundle, opts, waves, long_audio_seconds=0.001, window=cfg)]
        n_win = sum(len(plan_windows(w, cfg, align=round(bundle.frame_seconds * SAMPLE_RATE))) for w in waves)
        row(name, audio_s, n_win, wer(refs, got), time.perf_counter() - t0)
    for minutes in args.minutes:
        wave, ref = joined_recording(clips, 60 * minutes, args.seed)
        t0 = time.perf_counter()
        (hyp,) = decode_waves(bundle, opts, [wave], long_audio_seconds=60.0)
        n_win = len(plan_windows(wave, WindowConfig(), align=round(bundle.frame_seconds * SAMPLE_RATE)))
        row(f"joined data/real clips, {minutes:g} min", wave.numel() / SAMPLE_RATE, n_win, wer([ref], [hyp.text or ""]),
            time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
