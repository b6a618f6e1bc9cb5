"""Decoder speed of two git revisions on the same inputs: a regression check for refactors.

Each revision's ``src/`` is exported (``git archive``) to a temporary folder; the decoders then run
in alternating child processes (old, new, old, new, ...) on the same saved encoder outputs of the
bundled demo models, one thread, and the table gives ``new / old`` time per decoder as the median
of the pairs (each child reports the median of its repeats). Only decoders whose call is the same in
both revisions are timed (transducer greedy and ALSD++ / AES++ beam, ALSD++ + the bundled token 4-gram
where both have it, CTC greedy and the tensor-engine CTC beam search), so any revision since the log-mel
demo models (commit 9695f8f) works::

    OMP_NUM_THREADS=1 python benchmarks/compare_revisions.py 0f68ccb HEAD --pairs 5

Also counts the Python function calls of one greedy call in each revision (deterministic, unlike
wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: times the decoders of the revision on its sys.path (argv: inputs file, repeats).
CHILD = r'''
import cProfile, inspect, json, pstats, statistics, sys, time
import torch
torch.set_num_threads(1)
from asrdecode import ctc, models, transducer
data = torch.load(sys.argv[1])
repeats = int(sys.argv[2])
cases, calls = {}, {}
try:  # the LM rows need a revision with the bundled token 4-gram (the same call since)
    from asrdecode import lm
    from asrdecode.models.demo import ASSETS
    assert (ASSETS / "token-4gram.arpa.gz").exists()
except (ImportError, AssertionError):
    lm = None
for name in ("demo-rnnt", "demo-tdt"):
    m = models.load(name).model
    enc, ln = data[name]
    cases[f"{name} greedy b16"] = lambda m=m, enc=enc, ln=ln: transducer.greedy(m, enc, ln)
    cases[f"{name} greedy b1 (x4)"] = lambda m=m, enc=enc, ln=ln: [
        transducer.greedy(m, enc[i:i + 1, :ln[i]], ln[i:i + 1]) for i in range(4)]
    for method in ("alsd", "aes"):
        cases[f"{name} {method} beam 4 b16"] = lambda m=m, enc=enc, ln=ln, method=method: transducer.beam_search(
            m, enc, ln, beam=4, method=method)
    cases[f"{name} alsd beam 4 b1 (x4)"] = lambda m=m, enc=enc, ln=ln: [
        transducer.beam_search(m, enc[i:i + 1, :ln[i]], ln[i:i + 1], beam=4) for i in range(4)]
    if lm is not None:  # the bundled token 4-gram at 0.5 (LM-weighted blank scoring, the default)
        demo = models.load(name)
        tok_lm = lm.NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                                      blank_id=demo.tokenizer.blank_id)
        cases[f"{name} alsd beam 4 + LM b16"] = lambda m=m, enc=enc, ln=ln, t=tok_lm: transducer.beam_search(
            m, enc, ln, beam=4, fusion=[(t, 0.5)])
        cases[f"{name} alsd beam 4 + LM b1 (x4)"] = lambda m=m, enc=enc, ln=ln, t=tok_lm: [
            transducer.beam_search(m, enc[i:i + 1, :ln[i]], ln[i:i + 1], beam=4, fusion=[(t, 0.5)])
            for i in range(4)]
    transducer.greedy(m, enc, ln)
    prof = cProfile.Profile(); prof.enable(); transducer.greedy(m, enc, ln); prof.disable()
    calls[f"{name} greedy b16"] = pstats.Stats(prof).total_calls
lp, ln = data["demo-ctc"]
blank = models.load("demo-ctc").blank_id
torch_engine = {"engine": "torch"} if "engine" in inspect.signature(ctc.beam_search).parameters else {}
cases["demo-ctc greedy b16"] = lambda: ctc.greedy(lp, ln, blank)
cases["demo-ctc beam 16 (tensor engine) b16"] = lambda: ctc.beam_search(lp, ln, blank, beam=16, **torch_engine)
cases["demo-ctc beam 16 token_beam 16 (tensor engine) b16"] = lambda: ctc.beam_search(
    lp, ln, blank, beam=16, token_beam=16, **torch_engine)
times = {}
for name, fn in cases.items():
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); samples.append(time.perf_counter() - t0)
    times[name] = statistics.median(samples)
print(json.dumps({"times": times, "calls": calls}))
'''


def export(rev: str, into: Path) -> Path:
    """``src/`` of ``rev`` under ``into``; returns the folder to put on ``PYTHONPATH``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def make_inputs(path: Path, clips: int) -> None:
    """Encoder outputs (transducers) and log-probs (CTC) of the first ``clips`` synthetic test clips."""
    import torch

    from asrdecode import models
    from asrdecode.audio import read_audio

    wavs = sorted((ROOT / "data" / "synth_test").glob("*.wav"))[:clips]
    audio = [read_audio(w) for w in wavs]
    out = {}
    with torch.inference_mode():
        for name in ("demo-rnnt", "demo-tdt", "demo-ctc"):
            bundle = models.load(name)
            x, lengths = bundle.model.log_probs(audio) if bundle.kind == "ctc" else bundle.encode(audio)
            out[name] = (x.clone(), lengths.clone())
    torch.save(out, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clips", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        inputs = tmp_path / "inputs.pt"
        make_inputs(inputs, args.clips)
        paths = {tag: export(rev, tmp_path / tag) for tag, rev in (("old", args.old), ("new", args.new))}
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        env = dict(os.environ, OMP_NUM_THREADS="1")
        for _ in range(args.pairs):
            for tag in ("old", "new"):
                child = subprocess.run([sys.executable, "-c", CHILD, str(inputs), str(args.repeats)],
                                       env=dict(env, PYTHONPATH=str(paths[tag])), capture_output=True, text=True)
                if child.returncode:
                    sys.exit(f"{tag} ({getattr(args, tag)}) failed:\n{child.stderr[-3000:]}")
                runs[tag].append(json.loads(child.stdout.strip().splitlines()[-1]))
    print(f"new = {args.new}, old = {args.old}; {args.pairs} pairs, one thread\n")
    print("| decoder | new / old time (median of pairs) | each pair |")
    print("|---|---|---|")
    for name in runs["new"][0]["times"]:
        ratios = [n["times"][name] / o["times"][name] for n, o in zip(runs["new"], runs["old"])]
        print(f"| {name} | {statistics.median(ratios):.2f} | {' '.join(f'{r:.2f}' for r in ratios)} |")
    print("\n| Python calls of one greedy call | old | new |\n|---|---|---|")
    for name, old_calls in runs["old"][0]["calls"].items():
        print(f"| {name} | {old_calls} | {runs['new'][0]['calls'][name]} |")


if __name__ == "__main__":
    main()
