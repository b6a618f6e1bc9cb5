"""phone-ctc's WER on data/real and data/synth_test for one graph vocabulary and several WFST settings.

    OMP_NUM_THREADS=1 python benchmarks/phone_ctc_vocab.py all 1.2/12/2000 1.0/17/10000

Arguments: the vocabulary (N or ``all``), then ``acoustic_scale/beam/max_active`` settings. The
graph is built (and cached) on first use; ``/usr/bin/time -v`` around a first run gives its build
CPU time and peak memory (also in the cache entry's JSON record). Prints WER per set and the
decoding CPU seconds (both sets, process time) per setting.
"""

from __future__ import annotations

import sys
import time

import torch

from asrdecode.audio import read_audio
from asrdecode.evaluate import read_manifest, wer
from asrdecode.models.phone import PhoneCTCBundle
from asrdecode.pipeline import DecodeOptions, make_pipeline


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    words = None if argv[0] == "all" else int(argv[0])
    bundle = PhoneCTCBundle(words=words)
    sets = {}
    for name in ("real", "synth_test"):
        entries = read_manifest(f"data/{name}/manifest.jsonl")
        feats, flen = bundle.features([read_audio(e.audio_filepath) for e in entries])
        sets[name] = (feats, flen, [e.text for e in entries])
    for cfg in argv[1:] or ["1.2/12/2000"]:
        scale, beam, active = cfg.split("/")
        opts = DecodeOptions.for_bundle(bundle, acoustic_scale=float(scale), wfst_beam=float(beam),
                                        max_active=int(active))
        decode = make_pipeline(bundle, opts).decode
        t0, cells = time.process_time(), []
        for name, (feats, flen, refs) in sets.items():
            cells.append(f"{name} WER {wer(refs, [h.text for h in decode(feats, flen)]):.4f}")
        print(f"words {argv[0]}  {cfg}: " + ", ".join(cells) + f"  decode CPU {time.process_time() - t0:.1f} s",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
