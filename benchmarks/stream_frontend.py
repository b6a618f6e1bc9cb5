"""WER cost of the streaming block front end vs whole-utterance encoding (bundled demo models).

The bundled encoder is a BiLSTM over the whole utterance; ``asrdecode.streaming`` encodes audio in
blocks of ``N`` encoder frames (80 ms) with ``C`` frames of left context and ``R`` of lookahead
(see ``src/asrdecode/streaming/frontend.py``). This script encodes data/real and data/synth_test
both ways and reports the greedy WER of demo-rnnt, demo-tdt and demo-ctc (all three share the
encoder, so one encoding per configuration serves the three heads). Latency = (N + R) x 80 ms.

    OMP_NUM_THREADS=1 python3 benchmarks/stream_frontend.py [--configs 16,8,0 8,8,0 ...] [--limit N]

``--speed``: CPU time (one thread) of a StreamDecoder serving 16 synth_test streams in 0.32 s chunks
(default front end), end to end, and of its decoder part alone: one batched call per step for the
16 streams vs one call per stream (encoder output given, 16-frame chunks), per decoder.

    OMP_NUM_THREADS=1 python3 benchmarks/stream_frontend.py --speed
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

from asrdecode import ctc  # noqa: E402
from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.evaluate import read_manifest, wer  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.streaming import BlockFrontEnd, StreamDecoder  # noqa: E402
from asrdecode.streaming.families import make_family  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402

SETS = {"real": ROOT / "data/real/manifest.jsonl", "synth_test": ROOT / "data/synth_test/manifest.jsonl"}
DEFAULT_CONFIGS = ["8,8,0", "8,8,2", "8,16,4", "16,0,0", "16,8,0", "16,8,4", "16,16,4", "16,8,8", "32,8,0", "32,8,4"]


def encodings(demo, waves: list[torch.Tensor], config: tuple[int, int, int] | None) -> list[torch.Tensor]:
    """Encoder output ``[T, D]`` per waveform: whole-utterance (``config`` None) or block-wise."""
    if config is None:
        out = []
        for w in waves:
            enc, n = demo.encode([w])
            out.append(enc[0, : int(n[0])])
        return out
    front = BlockFrontEnd(demo, None, *config)
    return [front.encode_utterance(w) for w in waves]


def texts(demos: dict, encs: list[torch.Tensor]) -> dict[str, list[str]]:
    """Greedy transcripts of the three heads."""
    out = {}
    with torch.inference_mode():
        for name, demo in demos.items():
            hyps = []
            for e in encs:
                n = torch.tensor([e.shape[0]])
                if demo.kind == "ctc":
                    hyps.append(ctc.greedy(demo.model.log_probs_from_encoder(e[None]), n, demo.blank_id)[0])
                else:
                    hyps.append(greedy(demo.model, e[None], n)[0])
            out[name] = [demo.tokenizer.decode(h.tokens) for h in hyps]
    return out


SPEED_DECODERS = [("demo-rnnt", "greedy", {}), ("demo-tdt", "greedy", {}), ("demo-rnnt", "beam", {"beam": 4}),
                  ("demo-ctc", "greedy", {}), ("demo-ctc", "beam", {"beam": 8})]


def end_to_end(demo, decoder: str, options: dict, waves: list[torch.Tensor], chunk: int = 5120) -> float:
    """CPU seconds of a StreamDecoder decoding ``waves`` as parallel streams in ``chunk``-sample steps."""
    dec = StreamDecoder(demo, decoder, **options)
    for i in range(len(waves)):
        dec.open(i)
    pos, t0 = 0, time.process_time()
    while len(dec):
        chunks = {i: waves[i][pos : pos + chunk] for i in dec.streams}
        dec.step(chunks, final={i for i in chunks if pos + chunk >= waves[i].numel()})
        pos += chunk
    return time.process_time() - t0


def decoder_only(demo, decoder: str, options: dict, frames: list[torch.Tensor], batched: bool,
                 chunk: int = 16) -> tuple[float, list]:
    """CPU seconds of the decoder part alone (batched call per step, or one call per stream), and the results."""
    fam = make_family(demo, decoder, dict(options))
    states = [fam.open(None) for _ in frames]
    t0 = time.process_time()
    for start in range(0, max(f.shape[0] for f in frames), chunk):
        live = [i for i, f in enumerate(frames) if start < f.shape[0]]
        parts = [frames[i][start : start + chunk] for i in live]
        ends = [start + chunk >= frames[i].shape[0] for i in live]
        groups = [live] if batched else [[i] for i in live]
        for g in groups:
            fam.advance([states[i] for i in g], [parts[live.index(i)] for i in g], [ends[live.index(i)] for i in g])
        for i, e in zip(live, ends):
            fam.result(states[i], e)
    return time.process_time() - t0, [fam.result(s, True).tokens for s in states]


def speed(streams: int = 16) -> None:
    entries = read_manifest(SETS["synth_test"])[:streams]
    waves = [read_audio(e.audio_filepath) for e in entries]
    audio_s = sum(w.numel() for w in waves) / 16000
    print(f"{streams} streams, {audio_s:.1f} s of audio (synth_test), one thread, CPU seconds\n")
    print("| model | decoder | end to end (RTFx) | decoder: one call per stream | decoder: batched | speedup |")
    print("|---|---|---|---|---|---|")
    demos: dict = {}
    for name, decoder, options in SPEED_DECODERS:
        demo = demos.setdefault(name, load(name))
        front = BlockFrontEnd(demo, demo.model.log_probs_from_encoder if demo.kind == "ctc" else None)
        frames = [front.encode_utterance(w) for w in waves]
        e2e = end_to_end(demo, decoder, options, waves)
        t_one, r_one = decoder_only(demo, decoder, options, frames, batched=False)
        t_batch, r_batch = decoder_only(demo, decoder, options, frames, batched=True)
        assert r_one == r_batch, "batched and per-stream decoding differ"
        label = decoder + "".join(f" {k}={v}" for k, v in options.items())
        print(f"| {name} | {label} | {e2e:.2f} ({audio_s / e2e:.1f}) | {t_one:.3f} | {t_batch:.3f} "
              f"| {t_one / t_batch:.1f}x |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS, help="N,C,R triples (block, left, right)")
    ap.add_argument("--limit", type=int, default=None, help="first utterances of each set only")
    ap.add_argument("--speed", action="store_true", help="CPU time of 16 streams, batched vs one call per stream")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.speed:
        with torch.inference_mode():
            speed()
        return 0
    configs: list[tuple[int, int, int] | None] = [None]
    configs += [tuple(int(x) for x in c.split(",")) for c in args.configs]  # type: ignore[misc]
    demos = {name: load(name) for name in ("demo-rnnt", "demo-tdt", "demo-ctc")}
    front_demo = demos["demo-rnnt"]
    data = {}
    for sname, path in SETS.items():
        entries = read_manifest(path)[: args.limit]
        data[sname] = ([read_audio(e.audio_filepath) for e in entries], [e.text for e in entries])
    rows = []
    for config in configs:
        t0 = time.perf_counter()
        cells = {}
        for sname, (waves, refs) in data.items():
            hyps = texts(demos, encodings(front_demo, waves, config))
            for name in demos:
                cells[(sname, name)] = 100 * wer(refs, hyps[name])
        label = "whole utterance" if config is None else "N=%d C=%d R=%d" % config
        latency = "-" if config is None else f"{(config[0] + config[2]) * 0.08:.2f} s"
        rows.append((label, latency, cells))
        print(f"{label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    heads = [(s, n) for s in data for n in demos]
    print("| front end | latency | " + " | ".join(f"{s} {n.split('-')[1]}" for s, n in heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for label, latency, cells in rows:
        print(f"| {label} | {latency} | " + " | ".join(f"{cells[h]:.1f}" for h in heads) + " |")
    print(f"\nWER % (greedy decoding; {', '.join(f'{s}: {len(d[0])} utterances' for s, d in data.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
