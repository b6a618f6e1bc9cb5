#!/usr/bin/env python3
"""Recipe step 7: evaluate the bundled demo models: WER per model, decoder and test set, and
blank statistics.

Test sets (NeMo-style manifests): ``data/synth_test`` (50 held-out sentences, held-out voices,
committed), ``work/synth/test`` (all 300 of them, when the recipes have been run) and
``data/real`` (the 10 real pocketsphinx recordings: LibriVox and cards, reported separately).

Decoders: greedy for every model (``asrdecode.ctc.greedy``, ``asrdecode.transducer.greedy``);
CTC prefix beam search (``asrdecode.ctc.beam_search``) and transducer ALSD++ beam search
(``asrdecode.transducer.beam.beam_search``), each without and with the bundled token-level
4-gram LM (weights per model in ``TUNED``, chosen on dev by ``tune_lm.py``).

Blank statistics (per model, on the synthetic test set): fraction of frames with
p(blank) > 0.999 and > 0.99, and labels per frame of the greedy output. For CTC every frame
counts; for RNN-T / TDT the blank probability is the joint's at the first decision of every
frame the greedy decoder visits (TDT skips frames; the visited fraction is reported too).

Usage: python3 recipes/evaluate_models.py [--beam 8] [--out recipes/results/eval.json]
Run time: about 2-4 minutes (features are cached under work/eval_cache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from asrdecode import ctc
from asrdecode import transducer as tr
from asrdecode.audio import read_audio
from asrdecode.lm import NGramLM
from asrdecode.models import load
from asrdecode.models.demo import ASSETS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simple_decode import transducer_greedy_ids, wer  # noqa: E402


def manifest(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for r in rows:
        r["path"] = str(path.parent / r["audio_filepath"])
    return rows


def features(demo, rows: list[dict], cache_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    key = hashlib.sha1(("|".join(r["path"] for r in rows) + f"|{demo.frontend}").encode()).hexdigest()[:16]
    cache = cache_dir / f"{key}.pt"
    if cache.exists():
        d = torch.load(cache)
        return d["x"], d["n"]
    audio = [read_audio(r["path"]) for r in rows]
    x, n = demo.features(audio)
    cache_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"x": x, "n": n}, cache)
    return x, n


@torch.no_grad()
def transducer_blank_stats(model, enc: torch.Tensor, lengths: torch.Tensor, hyps) -> dict:
    """Blank statistics from an independent per-utterance greedy decode (``simple_decode``).

    Also checks that it emits the same tokens as the library's batched greedy (``hyps``).
    """
    pb: list[float] = []
    seqs = transducer_greedy_ids(model, enc, lengths, max_symbols=10**6, blank_probs=pb)
    p = torch.tensor(pb)
    total = int(lengths.sum())
    return {
        "frac_blank_gt_0.999": round(float((p > 0.999).float().mean()), 4),
        "frac_blank_gt_0.99": round(float((p > 0.99).float().mean()), 4),
        "labels_per_frame": round(sum(len(s) for s in seqs) / max(total, 1), 4),
        "visited_frame_fraction": round(len(pb) / max(total, 1), 4),
        "same_tokens_as_library_greedy": sum(s == h.tokens for s, h in zip(seqs, hyps)) / len(seqs),
    }


# (LM weight, beta) per model, chosen on the dev set by recipes/tune_lm.py (beam 8)
TUNED = {"demo-ctc": (0.7, 2.0), "demo-rnnt": (0.5, 1.0), "demo-tdt": (0.3, 1.0)}

try:  # transducer beam search (ALSD++), when the library has it
    from asrdecode.transducer.beam import beam_search as tr_beam
except ImportError:  # pragma: no cover
    tr_beam = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beam", type=int, default=8)
    ap.add_argument("--lm-weight", type=float, default=None, help="default: per model, tuned on dev (TUNED)")
    ap.add_argument("--beta", type=float, default=None, help="per-token bonus with the LM; default: TUNED")
    ap.add_argument("--sets", default="synth_test50,real,synth_test300")
    ap.add_argument("--models", default="demo-ctc,demo-rnnt,demo-tdt")
    ap.add_argument("--out", default="recipes/results/eval.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = {"synth_test50": Path("data/synth_test/manifest.jsonl"), "real": Path("data/real/manifest.jsonl")}
    if Path("work/synth/test/manifest.jsonl").exists():
        sets["synth_test300"] = Path("work/synth/test/manifest.jsonl")
    sets = {k: v for k, v in sets.items() if k in args.sets.split(",")}
    results: dict = {"settings": vars(args)}
    lm = None
    for name in args.models.split(","):
        demo = load(name)
        if lm is None:
            lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                                   blank_id=demo.tokenizer.blank_id)
        res = results.setdefault(name, {})
        lm_w = args.lm_weight if args.lm_weight is not None else TUNED[name][0]
        beta = args.beta if args.beta is not None else TUNED[name][1]
        res["lm_weight"], res["beta"] = lm_w, beta
        for sname, mpath in sets.items():
            rows = manifest(mpath)
            x, n = features(demo, rows, Path("work/eval_cache"))
            t0 = time.time()
            enc, el = demo.encode_features(x, n)
            refs = [r["text"] for r in rows]
            out: dict = {}
            hyp_sets: dict = {}
            if demo.kind == "ctc":
                lp = demo.model.log_probs_from_encoder(enc)
                hyp_sets["greedy"] = ctc.greedy(lp, el, demo.blank_id, demo.tokenizer)
                hyp_sets[f"beam{args.beam}"] = [h[0] for h in ctc.beam_search(lp, el, demo.blank_id, beam=args.beam,
                                                                               tokenizer=demo.tokenizer)]
                hyp_sets[f"beam{args.beam}+lm"] = [h[0] for h in ctc.beam_search(
                    lp, el, demo.blank_id, beam=args.beam, fusion=[(lm, lm_w)], beta=beta,
                    tokenizer=demo.tokenizer)]
                if sname.startswith("synth_test50"):
                    p = lp.exp()[..., demo.blank_id]
                    mask = torch.arange(p.shape[1]).unsqueeze(0) < el.unsqueeze(1)
                    pv = p[mask]
                    labels = sum(len(h.tokens) for h in hyp_sets["greedy"])
                    res["blank_stats"] = {
                        "frac_blank_gt_0.999": round(float((pv > 0.999).float().mean()), 4),
                        "frac_blank_gt_0.99": round(float((pv > 0.99).float().mean()), 4),
                        "labels_per_frame": round(labels / int(el.sum()), 4),
                    }
            else:
                hyp_sets["greedy"] = tr.greedy(demo.model, enc, el, tokenizer=demo.tokenizer)
                if tr_beam is not None:
                    hyp_sets[f"beam{args.beam}"] = _first(tr_beam(demo.model, enc, el, beam=args.beam,
                                                                  tokenizer=demo.tokenizer))
                    hyp_sets[f"beam{args.beam}+lm"] = _first(tr_beam(
                        demo.model, enc, el, beam=args.beam, fusion=[(lm, lm_w)], beta=beta,
                        tokenizer=demo.tokenizer))
                if sname.startswith("synth_test50"):
                    res["blank_stats"] = transducer_blank_stats(demo.model, enc, el, hyp_sets["greedy"])
            out["decode_seconds"] = round(time.time() - t0, 2)
            for dname, hyps in hyp_sets.items():
                texts = [h.text or "" for h in hyps]
                if sname == "real":
                    for src in ("librivox", "cards"):
                        idx = [i for i, r in enumerate(rows) if r.get("source") == src]
                        out[f"{dname}/{src}"] = round(wer([refs[i] for i in idx], [texts[i] for i in idx]), 4)
                else:
                    out[dname] = round(wer(refs, texts), 4)
                if sname == "real" and dname == "greedy":
                    out["examples"] = [[refs[i], texts[i]] for i in range(0, len(rows), 3)]
            res[sname] = out
            print(name, sname, {k: v for k, v in out.items() if k != "examples"}, flush=True)
        print(name, "blank", res.get("blank_stats"), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


def _first(nbest_lists):
    """The best hypothesis of each utterance (beam searches return n-best lists)."""
    return [h[0] for h in nbest_lists]


if __name__ == "__main__":
    main()
