#!/usr/bin/env python3
"""Recipe step 2b: compute the front-end features (log-mel or hama phone log-probs) of a manifest.

The bundled models' front end is log-mel (:class:`asrdecode.models.frontend.LogMelFrontEnd`):
computing the features once per corpus makes training fast. Writes ``logmel.pt`` next to the
manifest: a dict with ``feats`` (list of float16 tensors ``[T10, 80]``), ``text`` and ``voice``
lists. With ``--frontend hama`` (the session-1 design) it writes ``features.pt`` instead: hama's
phone log-probs ``[T20, 191]`` at 20 ms frames.

Usage: python3 recipes/features.py work/synth/train/manifest.jsonl [--jobs 2] [--frontend hama]
Run time: log-mel ~1,000x real time (24,000 utterances: ~2 min); hama about 12x real time per
core (3,000 utterances of ~3 s: ~6 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import torch

_FRONT = None


def _feats(job: tuple[str, str]):
    """Features of one file as a float16 numpy array (numpy pickles between processes cheaply)."""
    global _FRONT
    from asrdecode.audio import read_audio
    from asrdecode.models.frontend import HamaFrontEnd, LogMelFrontEnd

    path, frontend = job
    if _FRONT is None:
        _FRONT = LogMelFrontEnd() if frontend == "logmel" else HamaFrontEnd()
    audio = read_audio(path)
    if frontend == "logmel":
        return _FRONT.log_mel(audio).to(torch.float16).numpy()
    return _FRONT.phone_log_probs(audio).to(torch.float16).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N utterances")
    ap.add_argument("--chunk", type=int, default=4000, help="save progress every N utterances")
    ap.add_argument("--frontend", choices=["logmel", "hama"], default="logmel")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.time()
    man = Path(args.manifest)
    rows = [json.loads(line) for line in man.read_text().splitlines() if line.strip()][: args.limit]
    paths = [(str(man.parent / r["audio_filepath"]), args.frontend) for r in rows]
    out = man.parent / ("logmel.pt" if args.frontend == "logmel" else "features.pt")
    feats: list[torch.Tensor] = []
    with Pool(args.jobs) as pool:
        for s in range(0, len(paths), args.chunk):
            feats += [torch.from_numpy(a) for a in pool.map(_feats, paths[s : s + args.chunk], chunksize=16)]
            done = rows[: len(feats)]
            # saved after every chunk (atomically), so a long run can be used while it goes on
            torch.save({"feats": feats, "text": [r["text"] for r in done], "voice": [r.get("voice", "") for r in done]},
                       out.with_suffix(".tmp"))
            out.with_suffix(".tmp").replace(out)
            print(f"{len(feats)}/{len(paths)} utterances, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    audio_s = sum(r["duration"] for r in rows)  # noqa: F841
    print(f"{man}: {len(rows)} utterances, {audio_s:.0f} s audio, {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
