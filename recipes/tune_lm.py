#!/usr/bin/env python3
"""Pick the LM weight and token bonus of beam search + token LM on the DEV set, per model.

Dev = the last ``--dev`` utterances of ``work/synth/train/logmel.pt`` (training voices), the same
dev set as ``train.py``; the test sets are not used. Dev sentences are in the LM's training text,
so the dev gains of the LM are optimistic.

Usage: python3 recipes/tune_lm.py [--model demo-ctc|demo-rnnt|demo-tdt] [--beam 8]
Run time: about 1 minute.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from asrdecode import ctc
from asrdecode.lm import NGramLM
from asrdecode.models import load
from asrdecode.models.demo import ASSETS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simple_decode import wer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beam", type=int, default=8)
    ap.add_argument("--dev", type=int, default=150)
    ap.add_argument("--model", default="demo-ctc")
    ap.add_argument("--data", default="work/synth/train/logmel.pt",
                    help="features of the model's front end (recipes/features.py)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = load(args.model)
    d = torch.load(args.data)
    feats, refs = d["feats"][-args.dev :], d["text"][-args.dev :]
    n = torch.tensor([f.shape[0] for f in feats])
    x = torch.zeros(len(feats), int(n.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = f.float()
    enc, el = demo.encode_features(x, n)
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                           blank_id=demo.tokenizer.blank_id)
    if demo.kind == "ctc":
        lp = demo.model.log_probs_from_encoder(enc)
        greedy = wer(refs, [h.text for h in ctc.greedy(lp, el, demo.blank_id, demo.tokenizer)])

        def search(w: float, beta: float) -> list:
            hyps = ctc.beam_search(lp, el, demo.blank_id, beam=args.beam, fusion=[(lm, w)], beta=beta,
                                   tokenizer=demo.tokenizer)
            return [h[0].text for h in hyps]
    else:
        from asrdecode.transducer import greedy as tr_greedy
        from asrdecode.transducer.beam import beam_search as tr_beam

        greedy = wer(refs, [h.text for h in tr_greedy(demo.model, enc, el, tokenizer=demo.tokenizer)])

        def search(w: float, beta: float) -> list:
            hyps = tr_beam(demo.model, enc, el, beam=args.beam, fusion=[(lm, w)], beta=beta, tokenizer=demo.tokenizer)
            return [h[0].text for h in hyps]
    print(f"greedy dev WER {greedy:.4f}")
    best = None
    for w in (0.3, 0.5, 0.7, 1.0):
        for beta in (0.0, 1.0, 2.0):
            v = wer(refs, search(w, beta))
            print(f"lm_weight {w} beta {beta}: dev WER {v:.4f}", flush=True)
            if best is None or v < best[0]:
                best = (v, w, beta)
    print(f"best: lm_weight {best[1]} beta {best[2]} dev WER {best[0]:.4f}")


if __name__ == "__main__":
    main()
