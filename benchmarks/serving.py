"""Table 4 of the GPU WFST paper for our server: online latency and RTFx under N real-time streams.

    OMP_NUM_THREADS=1 python benchmarks/serving.py                 # the full grid (~30 min)
    OMP_NUM_THREADS=1 python benchmarks/serving.py --quick         # N = 4, 8 only, short runs

For every configuration a server is started in a subprocess (``asrdecode serve`` code: the
Starlette/uvicorn server over :class:`~asrdecode.streaming.StreamDecoder`), the load generator
(:mod:`asrdecode.serving.loadtest`) opens N WebSocket streams on loopback that send the bundled
clips (``data/real``, clip after clip, each a new stream) in chunks of 0.64 s at real-time pace for
``--duration`` seconds, and the server is stopped with SIGTERM. Grid: batching on
(``max_batch`` 32 or 128, ``max_wait_ms`` 10) vs off (``max_batch`` 1); CTC greedy vs CTC prefix
beam (beam 8) vs WFST (TLG of the bundled word 3-gram pruned to 2000 words, beam 12); N = 8, 32,
128; demo-ctc for all three so that only the decoder differs. The stream decoder's block is
8 frames = 0.64 s, so every chunk completes one block.

Two front ends:

- ``live``: the real pipeline. The demo model's acoustic front end (log-mel, then the
  convolutional BiLSTM encoder, every 0.64 s block encoded alone with its contexts) runs on the
  decoding thread. (With session 1's hama front end it cost ~130-170 ms of one core per stream
  per block, so one core served only ~4 real-time streams.)
- ``cached``: the paper's setting, where the acoustic model runs elsewhere (on a GPU) and the
  table compares decoders: the server memoises the front end's output per audio window
  (``BlockFrontEnd.encode``), pre-filled from the clips, so a step costs the decoders, the
  batching and the serving only. The decoded frames are the same as live.

Writes ``benchmarks/results_serving.md`` (with the command) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from asrdecode.demo import demo_graph  # noqa: E402  (the same TLG and cache file as `make demo`)

CHUNK_SECONDS = 0.64
BLOCK_FRAMES = 8
DECODERS = {  # name -> (StreamDecoder decoder, options)
    "greedy": ("greedy", {}),
    "beam": ("beam", {"beam": 8}),
    "wfst": ("wfst", {"beam": 12.0, "max_active": 2000, "acoustic_scale": 2.0}),
}


def memoise_front_end(decoder, clips, chunk_samples: int) -> int:
    """Cache ``decoder.front.encode`` per window (audio bytes + slicing), pre-filled with every window
    the load generator's streams produce: each clip as the server receives it (s16le-quantised),
    whole and cut after each chunk (a run's deadline ends streams mid-clip). The filled cache is
    kept in work/cache/ for the next server process. Returns the cached windows."""
    import numpy as np
    import torch

    from asrdecode.serving.protocol import Limits, decode_chunk, encode_chunk

    front = decoder.front
    encode = front.encode

    def key(window):
        a = window.audio.numpy()
        return hashlib.blake2b(a.tobytes(), digest_size=16).hexdigest(), window.context, window.features, window.keep

    limits = Limits()
    step = int(limits.max_chunk_seconds * 16000)

    def received(audio):  # what the server decodes from s16le messages (samplewise, so any chunking)
        parts = [decode_chunk(encode_chunk(audio[i:i + step]), "s16le", limits) for i in range(0, len(audio), step)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    waves = [received(c.audio) for c in clips]
    tag = hashlib.blake2b(digest_size=8)
    for w in waves:
        tag.update(w.tobytes())
    tag.update(repr((front.block_frames, front.left_context, front.right_context, chunk_samples,
                     decoder.bundle.name)).encode())
    from asrdecode.models.demo import ASSETS

    tag.update((ASSETS / "encoder.pt").read_bytes())  # new weights: new windows
    path = ROOT / "work" / "cache" / f"serving-frontend-{tag.hexdigest()}.pt"
    cache: dict = torch.load(path) if path.is_file() else {}
    filled = len(cache)

    def cached(window):
        k = key(window)
        out = cache.get(k)
        if out is None:
            out = cache[k] = encode(window)
        return out

    front.encode = cached
    for w in waves:
        front.encode_utterance(torch.from_numpy(w))
        for cut in range(chunk_samples, len(w), chunk_samples):
            front.encode_utterance(torch.from_numpy(w[:cut]))
    if len(cache) != filled:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(cache, path)
    return len(cache)


def child(args: argparse.Namespace) -> int:
    """A server process: ``asrdecode serve`` with the benchmark's decoder and front end."""
    import torch

    from asrdecode.models import load
    from asrdecode.serving.loadtest import load_clips
    from asrdecode.serving.server import STREAM_PATH, Server, ServerConfig, StreamingService, bind_socket
    from asrdecode.streaming import StreamDecoder

    torch.set_num_threads(1)
    demo = load("demo-ctc")
    name, options = DECODERS[args.decoder]
    options = dict(options)
    if name == "wfst":
        options["graph"] = demo_graph(demo)
    dec = StreamDecoder(demo, decoder=name, block_frames=BLOCK_FRAMES, **options)
    if args.front_end == "cached":
        n = memoise_front_end(dec, load_clips([ROOT / "data" / "real"]), int(CHUNK_SECONDS * 16000))
        print(f"cached {n} front-end windows", file=sys.stderr, flush=True)
    config = ServerConfig(model="demo-ctc", decoder=name, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                          max_streams=1024, drain_timeout_s=120)
    service = StreamingService(dec, config, tokenizer=demo.tokenizer, frame_seconds=demo.frame_seconds)
    sock = bind_socket("127.0.0.1", 0)
    host, port = sock.getsockname()[:2]
    url = f"ws://{host}:{port}{STREAM_PATH}"
    Server(service, host=host, port=port, on_ready=lambda: print(f"listening on {url}", flush=True)).run(sockets=[sock])
    return 0


def run_one(front_end: str, decoder: str, max_batch: int, streams: int, duration: float, max_wait_ms: float,
            clips) -> dict:
    from asrdecode.serving.loadtest import run_load, spawn_server

    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--front-end", front_end, "--decoder", decoder,
           "--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms)]
    with spawn_server([], command=cmd, timeout=300) as url:
        report = asyncio.run(run_load(url, clips, streams, chunk_seconds=CHUNK_SECONDS, duration=duration, seed=1))
        health_url = url.replace("ws://", "http://").rsplit("/v1/", 1)[0] + "/health"
        with urllib.request.urlopen(health_url, timeout=30) as resp:
            health = json.loads(resp.read())
    s = report.summary()
    s.update(front_end=front_end, decoder=decoder, max_batch=max_batch, server_mean_batch=health["mean_batch"],
             server_errors=health["errors"])
    return s


def fmt(v: float, digits: int = 1) -> str:
    return "n/a" if v != v else f"{v:.{digits}f}"


def table(rows: list[dict]) -> str:
    head = ("| front end | decoder | batching | N | compute mean | queue mean | total mean | total p99 | "
            "final mean | final p99 | RTFx (max N) | mean batch | max send lag | streams ok/failed |")
    out = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        batching = "off (1)" if r["max_batch"] == 1 else f"on ({r['max_batch']})"
        out.append(f"| {r['front_end']} | {r['decoder']} | {batching} | {r['streams']} | "
                   f"{fmt(r['compute_ms']['mean'])} | {fmt(r['queue_ms']['mean'])} | {fmt(r['total_ms']['mean'])} | "
                   f"{fmt(r['total_ms']['p99'])} | {fmt(r['final_ms']['mean'])} | {fmt(r['final_ms']['p99'])} | "
                   f"{fmt(r['rtfx'])} | {fmt(r['mean_batch'], 2)} | {r['max_send_lag_ms']:.0f} | "
                   f"{r['finished']}/{r['failed']} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--front-end", choices=("live", "cached"), default="cached", help=argparse.SUPPRESS)
    ap.add_argument("--decoder", choices=tuple(DECODERS), default="greedy", help=argparse.SUPPRESS)
    ap.add_argument("--max-batch", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--max-wait-ms", type=float, default=10.0, help="batching on: max wait (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="N = 4 and 8 only, 10 s runs")
    ap.add_argument("--duration", type=float, help="seconds of streaming per configuration (default: 20; quick: 10)")
    ap.add_argument("--streams", type=int, nargs="+", help="N values for the cached front end (default: 8 32 128)")
    ap.add_argument("--live-streams", type=int, nargs="*",
                    help="N values for the live front end (default: 4 8; none: skip it)")
    ap.add_argument("--decoders", nargs="+", choices=tuple(DECODERS), default=list(DECODERS))
    ap.add_argument("--out", type=Path, default=HERE / "results_serving.md")
    ap.add_argument("--json", type=Path, help="also write the rows (every statistic) as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.child:
        return child(args)

    from asrdecode.serving.loadtest import load_clips

    clips = load_clips([ROOT / "data" / "real"])
    duration = args.duration or (10.0 if args.quick else 20.0)
    cached_n = args.streams or ([4, 8] if args.quick else [8, 32, 128])
    live_n = args.live_streams if args.live_streams is not None else ([4] if args.quick else [4, 8])
    grid = [("live", d, n) for n in live_n for d in args.decoders] + \
           [("cached", d, n) for n in cached_n for d in args.decoders]
    rows = []
    t0 = time.time()
    for front_end, decoder, n in grid:
        for max_batch in (max(32, n), 1):
            print(f"[{time.time() - t0:6.0f} s] {front_end} {decoder} N={n} max_batch={max_batch} ...",
                  file=sys.stderr, flush=True)
            r = run_one(front_end, decoder, max_batch, n, duration, args.max_wait_ms, clips)
            rows.append(r)
            print(table([r]).splitlines()[-1], file=sys.stderr, flush=True)
    cmd = "OMP_NUM_THREADS=1 python benchmarks/serving.py " + " ".join(sys.argv[1:])
    text = [
        "# Serving: online latency and throughput (table 4 of the GPU WFST paper, our decoders)",
        "",
        f"Command: `{cmd.strip()}` ({time.time() - t0:.0f} s). Machine: {platform.machine()}, "
        f"{os.cpu_count()} shared CPU cores, no GPU, torch single-threaded (OMP_NUM_THREADS=1); the load "
        "generator and the server (one decoding thread) share the cores with other jobs, so every "
        "number is noisy: compare rows of one run, not runs.",
        "",
        f"N WebSocket streams on loopback, each sending `data/real` clips (1.1-7.1 s) clip after clip "
        f"in {CHUNK_SECONDS} s chunks at real-time pace for {duration:g} s (start offsets spread over one "
        f"chunk); model demo-ctc, StreamDecoder blocks of {BLOCK_FRAMES} frames ({CHUNK_SECONDS} s). "
        f"Batching on: `max_batch` = max(32, N), `max_wait_ms` = {args.max_wait_ms:g}; off: `max_batch` = 1. "
        "Beam: CTC prefix beam 8; WFST: TLG of the bundled word 3-gram pruned to 2000 words, beam 12, "
        "max_active 2000.",
        "",
        "All latencies in ms. compute = the decoder step of the chunk's batch; queue = arrival at the "
        "server -> start of its batch; total = queue + compute (the paper's total latency); final = "
        "`end` sent -> final transcript received (client side). RTFx = audio seconds of the finished "
        "streams / wall seconds (at most about N: N streams arrive in real time). mean batch = chunks per "
        "decoder step seen by the chunks; max send lag = how far the clients fell behind the real-time "
        "schedule because the server stopped reading them (back-pressure: the server is overloaded).",
        "",
        "Front end `live`: the real pipeline (log-mel + convolutional BiLSTM per 0.64 s block, encoded "
        "alone with its contexts). `cached`: the acoustic front end memoised "
        "per audio window (as if the acoustic model ran on an accelerator, the paper's setting), so the "
        "step time is decoding + batching + serving.",
        "",
        table(rows),
    ]
    args.out.write_text("\n".join(text))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
