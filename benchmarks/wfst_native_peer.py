"""The WFST decoder's engines vs kaldi-decoder's FasterDecoder on the bundled 52k-word graph:
phone-ctc (hama's phone CTC model, real speech) with its cached TLG of every word of the bundled
word 3-gram (the CLI's default model and graph), its decoding settings (beam, max-active, acoustic
scale), the synthetic and real test sets. All columns of a row are measured in one run, one thread.

    OMP_NUM_THREADS=1 python benchmarks/wfst_native_peer.py --out benchmarks/results_wfst_native_peer.md
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctc_wfst import SETS, best_of_three, disagreements, kaldi_decode, kaldi_fst  # noqa: E402

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.models.phone import ACOUSTIC_SCALE, MAX_ACTIVE, WFST_BEAM  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", default="phone-ctc")
    ap.add_argument("--out", default="benchmarks/results_wfst_native_peer.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = load_bundle(args.bundle)
    lps = []
    for mpath in SETS.values():
        rows = [json.loads(x) for x in mpath.read_text().splitlines() if x.strip()]
        audio = [read_audio(str(mpath.parent / r["audio_filepath"])) for r in rows]
        for a in audio:
            x, n = bundle.features([a])
            lps.append(x[0, : int(n[0])])
    T = max(x.shape[0] for x in lps)
    all_lp = torch.stack([torch.nn.functional.pad(x, (0, 0, 0, T - x.shape[0])) for x in lps])
    all_el = torch.tensor([x.shape[0] for x in lps])
    g = DecodingGraph.load(bundle.graph_path())
    beam, max_active, sc = WFST_BEAM, MAX_ACTIVE, ACOUSTIC_SCALE
    times, outs = {}, {}
    for engine in ("native", "torch"):
        dec = WFSTDecoder(g, beam=beam, max_active=max_active, acoustic_scale=sc, engine=engine)
        dec(all_lp[:1, : all_el[0]], all_el[:1])  # warm-up: per-state token rows, packed arcs
        times[engine, 1], outs[engine, 1] = best_of_three(
            lambda dec=dec: [dec(all_lp[i : i + 1, : all_el[i]], all_el[i : i + 1])[0] for i in range(all_lp.shape[0])])
        times[engine, 32], outs[engine, 32] = best_of_three(
            lambda dec=dec: sum((dec(all_lp[i : i + 32], all_el[i : i + 32]) for i in range(0, all_lp.shape[0], 32)), []))
        print(engine, times, flush=True)
    t0 = time.time()
    fst = kaldi_fst(g)
    t_fst = time.time() - t0
    tk, kal = best_of_three(lambda: kaldi_decode(fst, all_lp, all_el.tolist(), beam, max_active, sc, g.words))
    strict = kaldi_decode(fst, all_lp, all_el.tolist(), beam, max_active, sc, g.words, min_active=0)
    ours_w = [[w for w, _, _ in h.words] for h in outs["native", 1]]
    for key in outs:
        assert ours_w == [[w for w, _, _ in h.words] for h in outs[key]], key
    agree, diffs = disagreements(outs["native", 1], kal)
    agree_s, diffs_s = disagreements(outs["native", 1], strict)
    t = times
    n = len(kal)
    report = [
        f"# WFST engines vs kaldi-decoder on the bundled {len(g.words) - 1}-word graph ({args.bundle})\n\n",
        f"Graph: {g.num_states} states, {g.num_arcs} arcs ({g.topology}). Beam {beam}, max_active {max_active}, "
        f"acoustic scale {sc}; {n} utterances ({', '.join(SETS)}), {int(all_el.sum())} frames. Decoder-only process "
        "CPU seconds, best of 3, one thread; ours after a warm-up call; kaldi one utterance at a time "
        f"(our graph converted to a kaldifst FST in {t_fst:.0f} s, not counted). Peak RSS of the run: "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB.\n\n",
        "| kaldi s | native b1 s | native b32 s | torch b1 s | torch b32 s | kaldi/native b1 | kaldi/native b32 "
        "| kaldi/torch b32 | agreement | agreement, kaldi min_active 0 |\n|---|---|---|---|---|---|---|---|---|---|\n",
        f"| {tk:.3f} | {t['native', 1]:.3f} | {t['native', 32]:.3f} | {t['torch', 1]:.2f} | {t['torch', 32]:.2f} | "
        f"{tk / t['native', 1]:.2f} | {tk / t['native', 32]:.2f} | {tk / t['torch', 32]:.2f} | {agree}/{n} | {agree_s}/{n} |\n",
        "\nDisagreements (utterance: best path scores, natural log):\n\n",
        "- kaldi's default (min_active 20): " + ("; ".join(diffs) or "none") + "\n",
        "- kaldi with min_active 0: " + ("; ".join(diffs_s) or "none") + "\n",
    ]
    Path(args.out).write_text("".join(report))
    print("".join(report))


if __name__ == "__main__":
    main()
