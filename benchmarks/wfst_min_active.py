"""kaldi's min_active rule on our decoder: ``WFSTDecoder(min_active=20)`` (native engine) vs kaldi-decoder's
FasterDecoder with its default (min_active 20) on the graphs of ``ctc_wfst.py`` (built there first and
cached in ``--cache``): agreement, path scores, WER and time, all in one run, one thread.

    OMP_NUM_THREADS=1 python benchmarks/wfst_min_active.py --out benchmarks/results_wfst_min_active.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctc_wfst import SETS, best_of_three, disagreements, kaldi_decode, kaldi_fst, log_probs  # noqa: E402

from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder  # noqa: E402
from asrdecode.evaluate import wer  # noqa: E402
from asrdecode.models import load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--beam", type=float, default=12.0)
    ap.add_argument("--max-active", type=int, default=2000)
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--cache", default="work/cache/wfst-bench")
    ap.add_argument("--out", default="benchmarks/results_wfst_min_active.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = load("demo-ctc")
    lps, refs = [], []
    for mpath in SETS.values():
        rows = [json.loads(x) for x in mpath.read_text().splitlines() if x.strip()]
        lp, el = log_probs(demo, [mpath.parent / r["audio_filepath"] for r in rows])
        lps += [lp[i : i + 1, : el[i]] for i in range(lp.shape[0])]
        refs += [r["text"] for r in rows]
    out = [f"# min_active: ours vs kaldi-decoder FasterDecoder (demo-ctc, {args.words} words, beam {args.beam}, "
           f"max_active {args.max_active}, acoustic scale {args.scale})\n\n"
           "Process CPU seconds over the 60 utterances at batch 1 (best of 3, one thread, one run); "
           "kaldi with its default min_active 20. WER over both sets together.\n\n"
           "| graph | ours min_active | ours s | kaldi s | kaldi/ours | agreement | ours WER | kaldi WER | differing (ours vs kaldi score) |\n"
           "|---|---|---|---|---|---|---|---|---|\n"]
    for top in ("compact", "normal"):
        g = DecodingGraph.load(Path(args.cache) / f"tlg-{top}-{args.words}-v{demo.tokenizer.vocab_size}.pt")
        fst = kaldi_fst(g)
        tk, kal = best_of_three(lambda fst=fst, g=g: [kaldi_decode(fst, x, [x.shape[1]], args.beam, args.max_active,
                                                                   args.scale, g.words)[0] for x in lps])
        k_wer = wer(refs, [" ".join(w) for w, _ in kal])
        for m in (0, 20):
            dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=args.scale,
                              min_active=m, engine="native")
            dec(lps[0])
            t, hyps = best_of_three(lambda dec=dec: [dec(x)[0] for x in lps])
            agree, diffs = disagreements(hyps, kal)
            o_wer = wer(refs, [" ".join(w for w, _, _ in h.words) for h in hyps])
            out.append(f"| {top} | {m} | {t:.3f} | {tk:.3f} | {tk / t:.2f} | {agree}/{len(kal)} | {o_wer:.4f} | "
                       f"{k_wer:.4f} | {'; '.join(diffs) or 'none'} |\n")
            print(out[-1], end="", flush=True)
    Path(args.out).write_text("".join(out))


if __name__ == "__main__":
    main()
