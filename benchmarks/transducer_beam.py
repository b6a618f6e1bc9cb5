"""Transducer beam search (ALSD++ / AES++) vs greedy label-looping: decoder-only speed and WER.

Speed: decoder-only time (encoder output given) of greedy label-looping and of ALSD++ / AES++
beam 4 (with and without the bundled n-gram LM where one fits the vocabulary), one thread,
batch 1 and 16, timed interleaved in one run (median of repeats), reported as ratios to greedy.
Models: the paper-sized random RNN-T / TDT of benchmarks/paper_model.py, and the bundled
demo-rnnt / demo-tdt on the encoder output of the committed synthetic test set.

WER: greedy vs beam vs beam + LM for demo-rnnt / demo-tdt on data/synth_test (50 held-out
synthetic sentences) and data/real (10 recordings), as recipes/evaluate_models.py computes it.

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py [--frames 150] [--repeats 3] [--skip-wer]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "recipes"))
from paper_model import make_encoder_output, make_paper_model  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.transducer import greedy  # noqa: E402
from asrdecode.transducer.beam import beam_search  # noqa: E402

MAX_SYMBOLS = 10


def speed_rows(label: str, model, enc: torch.Tensor, lengths: torch.Tensor, repeats: int, lm=None,
               lm_weight: float = 0.5) -> list[list[object]]:
    """One row per decoder: time per batch (ms), ratio to greedy, labels emitted."""
    fns = {
        "greedy (label-looping)": lambda: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4": lambda: beam_search(model, enc, lengths, beam=4, method="alsd", max_symbols_per_frame=MAX_SYMBOLS),
        "AES++ beam 4": lambda: beam_search(model, enc, lengths, beam=4, method="aes", max_symbols_per_frame=MAX_SYMBOLS),
    }
    if lm is not None:
        fns["ALSD++ beam 4 + LM (late)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="alsd", fusion=[(lm, lm_weight)], max_symbols_per_frame=MAX_SYMBOLS)
        fns["ALSD++ beam 4 + LM (early)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="alsd", fusion=[(lm, lm_weight)], pruning="early",
            max_symbols_per_frame=MAX_SYMBOLS)
        fns["AES++ beam 4 + LM (late)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="aes", fusion=[(lm, lm_weight)], max_symbols_per_frame=MAX_SYMBOLS)
    times = time_many(fns, repeats=repeats, warmup=1)
    base = times["greedy (label-looping)"]
    labels = {name: sum(len(h.tokens) for h in fn()) for name, fn in fns.items()}
    audio_s = float(lengths.sum()) * 0.08  # 80 ms encoder frames (paper model and demo models)
    return [[label, int(enc.shape[0]), name, t * 1e3, t / base, audio_s / t, labels[name]] for name, t in times.items()]


def demo_inputs(name: str):
    from evaluate_models import features, manifest  # recipes/evaluate_models.py
    from asrdecode.models import load

    demo = load(name)
    rows = manifest(ROOT / "data/synth_test/manifest.jsonl")
    x, n = features(demo, rows, ROOT / "work/eval_cache")
    with torch.inference_mode():
        enc, el = demo.encode_features(x, n)
    return demo, rows, enc, el


def bundled_lm(demo):
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS

    return NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                             blank_id=demo.tokenizer.blank_id)


def wer_rows(name: str, lm_settings: list[tuple[float, float]]) -> list[list[object]]:
    from evaluate_models import features, manifest
    from simple_decode import wer

    demo = __import__("asrdecode.models", fromlist=["load"]).load(name)
    lm = bundled_lm(demo)
    out = []
    for sname, mpath in (("synth_test50", ROOT / "data/synth_test/manifest.jsonl"), ("real10", ROOT / "data/real/manifest.jsonl")):
        rows = manifest(mpath)
        x, n = features(demo, rows, ROOT / "work/eval_cache")
        with torch.inference_mode():
            enc, el = demo.encode_features(x, n)
        refs = [r["text"] for r in rows]
        decoders = {
            "greedy": lambda: greedy(demo.model, enc, el, max_symbols=MAX_SYMBOLS, tokenizer=demo.tokenizer),
            "ALSD++ beam 4": lambda: beam_search(demo.model, enc, el, beam=4, tokenizer=demo.tokenizer),
            "AES++ beam 4": lambda: beam_search(demo.model, enc, el, beam=4, method="aes", tokenizer=demo.tokenizer),
        }
        for w, beta in lm_settings:
            for scoring in ("lm_weighted", "none"):
                decoders[f"ALSD++ beam 4 + LM w={w} beta={beta} {scoring}"] = (
                    lambda w=w, beta=beta, scoring=scoring: beam_search(
                        demo.model, enc, el, beam=4, fusion=[(lm, w)], beta=beta, blank_scoring=scoring,
                        tokenizer=demo.tokenizer))
        for dname, fn in decoders.items():
            hyps = fn()
            out.append([name, sname, dname, wer(refs, [h.text or "" for h in hyps])])
            print(out[-1], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-wer", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    args = ap.parse_args()
    single_thread()
    rows: list[list[object]] = []
    for tdt in (False, True):
        model = make_paper_model(tdt=tdt)
        for batch in (1, 16):
            enc, lengths = make_encoder_output(batch, args.frames, seed=7)
            rows += speed_rows(f"paper {'TDT' if tdt else 'RNN-T'}", model, enc, lengths, args.repeats)
            print(rows[-3:], flush=True)
    if not args.skip_demo:
        for name in ("demo-rnnt", "demo-tdt"):
            try:
                demo, _, enc, el = demo_inputs(name)
            except Exception as err:  # a missing model or feature cache is reported, not fatal
                print(f"{name}: not loaded ({err})", flush=True)
                continue
            lm = bundled_lm(demo)
            for batch in (1, 16):
                order = torch.argsort(el, descending=True)[:batch]
                e, n = enc[order, : int(el[order].max())], el[order]
                rows += speed_rows(name, demo.model, e, n, args.repeats, lm=lm)
                print(rows[-6:], flush=True)
    print(markdown_table(["model", "batch", "decoder", "ms / batch", "x greedy time", "RTFx (decoder)", "labels"], rows))
    if not args.skip_wer:
        wrows = []
        for name in ("demo-rnnt", "demo-tdt"):
            wrows += wer_rows(name, [(0.3, 0.0), (0.7, 2.0)])
        print(markdown_table(["model", "test set", "decoder", "WER"], wrows))


if __name__ == "__main__":
    main()
