"""Transducer beam search (ALSD++ / AES++) vs greedy label-looping: decoder-only speed and WER.

Speed: decoder-only time (encoder output given) of greedy label-looping and of ALSD++ / AES++
beam 4 (with and without the bundled n-gram LM where one fits the vocabulary), one thread,
batch 1 and 16, timed interleaved in one run (median of repeats), reported as ratios to greedy.
Models: the paper-sized random RNN-T / TDT of benchmarks/paper_model.py, and the bundled
demo-rnnt / demo-tdt on the encoder output of the committed synthetic test set.

WER: greedy vs beam vs beam + LM for demo-rnnt / demo-tdt on data/synth_test (50 held-out
synthetic sentences) and data/real (10 recordings), as recipes/evaluate_models.py computes it.

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py [--frames 150] [--repeats 3] [--skip-wer]

WIND beam search (method="wind", window 8) vs ALSD++ at beams 2, 4, 8 (speed on demo-rnnt, on the
paper RNN-T as calibrated and with its joint logits sharpened x16, WER of demo-rnnt), one run:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --wind [--frames 150] [--repeats 3]

LM weight / beta / blank scoring of ALSD++ and WIND beam 4 with the bundled token 4-gram, tuned on a
dev split (the first 25 of the 50 synthetic test utterances) and reported on the other 25 and on
the 10 real recordings:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --tune-lm

Peer comparison (NeMo's batched malsd_batch / maes_batch on the same paper-model weights, CUDA
graphs off), run with NeMo's interpreter (see results_nemo.md):

    OMP_NUM_THREADS=1 /work/venvs/nemo/bin/python benchmarks/transducer_beam.py --nemo
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


def encoded_test_sets(demo):
    """(set name, encoder output [B, T, D], lengths [B], reference texts) of the bundled test sets."""
    from evaluate_models import features, manifest

    for sname, mpath in (("synth_test50", ROOT / "data/synth_test/manifest.jsonl"), ("real10", ROOT / "data/real/manifest.jsonl")):
        rows = manifest(mpath)
        x, n = features(demo, rows, ROOT / "work/eval_cache")
        with torch.inference_mode():
            enc, el = demo.encode_features(x, n)
        yield sname, enc, el, [r["text"] for r in rows]


def wer_rows(name: str, lm_settings: list[tuple[float, float]]) -> list[list[object]]:
    from simple_decode import wer

    demo = __import__("asrdecode.models", fromlist=["load"]).load(name)
    lm = bundled_lm(demo)
    out = []
    for sname, enc, el, refs in encoded_test_sets(demo):
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


def nemo_rows(frames: int, repeats: int) -> list[list[object]]:
    """Ours vs NeMo's batched beam search (malsd_batch / maes_batch, CUDA graphs off) on the same weights."""
    from nemo_models import nemo_modules_from_lstm, with_blank_last
    from nemo.collections.asr.parts.submodules.rnnt_beam_decoding import BeamBatchedRNNTInfer
    from nemo.collections.asr.parts.submodules.tdt_beam_decoding import BeamBatchedTDTInfer

    rows = []
    for tdt in (False, True):
        model, _ = with_blank_last(make_paper_model(seed=0, tdt=tdt))
        dec, joint = nemo_modules_from_lstm(model)
        blank = model.blank_id

        def nemo(search: str):
            common = dict(blank_index=blank, beam_size=4, search_type=search, score_norm=False,
                          max_symbols_per_step=MAX_SYMBOLS, allow_cuda_graphs=False)
            if tdt:
                return BeamBatchedTDTInfer(dec, joint, durations=list(model.durations), **common)
            return BeamBatchedRNNTInfer(dec, joint, **common)

        infers = {"NeMo malsd_batch beam 4": nemo("malsd_batch")}
        if not tdt:
            infers["NeMo maes_batch beam 4"] = nemo("maes_batch")
        for batch in (1, 16):
            enc, lengths = make_encoder_output(batch, frames, seed=7)
            fns = {
                "ours greedy (label-looping)": lambda: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS),
                "ours ALSD++ beam 4": lambda: beam_search(model, enc, lengths, beam=4, max_symbols_per_frame=MAX_SYMBOLS),
                "ours AES++ beam 4": lambda: beam_search(model, enc, lengths, beam=4, method="aes",
                                                         max_symbols_per_frame=MAX_SYMBOLS),
            }
            for name, inf in infers.items():
                fns[name] = (lambda inf=inf: inf(encoder_output=enc.transpose(1, 2), encoded_lengths=lengths)[0])
            with torch.inference_mode():
                times = time_many(fns, repeats=repeats, warmup=1)
                ours = fns["ours ALSD++ beam 4"]()
                theirs = fns["NeMo malsd_batch beam 4"]()
            same = sum(list(h.tokens) == [int(x) for x in torch.as_tensor(n.y_sequence).tolist()]
                       for h, n in zip(ours, theirs))
            dscore = max(abs(h.score - float(n.score)) for h, n in zip(ours, theirs))
            base = times["ours greedy (label-looping)"]
            for name, t in times.items():
                note = f"best = ours ALSD++ on {same}/{batch}, max abs score diff {dscore:.3g}" if "malsd" in name else ""
                rows.append([f"paper {'TDT' if tdt else 'RNN-T'}", batch, name, t * 1e3, t / base, note])
            print(rows[-len(times):], flush=True)
    return rows


def nemo_agreement() -> list[list[object]]:
    """Best hypotheses of ours vs NeMo's batched beam search on the bundled models (50 synthetic utterances)."""
    from nemo_models import nemo_modules_from_lstm, with_blank_last
    from nemo.collections.asr.parts.submodules.rnnt_beam_decoding import BeamBatchedRNNTInfer
    from nemo.collections.asr.parts.submodules.tdt_beam_decoding import BeamBatchedTDTInfer

    rows = []
    for name in ("demo-rnnt", "demo-tdt"):
        demo, _, enc, el = demo_inputs(name)
        model, _ = with_blank_last(demo.model)
        dec, joint = nemo_modules_from_lstm(model)
        searches = [("malsd_batch", "alsd")] + ([] if model.durations else [("maes_batch", "aes")])
        for search, method in searches:
            for beam in (1, 4):
                common = dict(blank_index=model.blank_id, beam_size=beam, search_type=search, score_norm=False,
                              max_symbols_per_step=MAX_SYMBOLS, allow_cuda_graphs=False)
                if model.durations:
                    inf = BeamBatchedTDTInfer(dec, joint, durations=list(model.durations), **common)
                else:
                    inf = BeamBatchedRNNTInfer(dec, joint, **common)
                with torch.inference_mode():
                    theirs = inf(encoder_output=enc.transpose(1, 2), encoded_lengths=el)[0]
                    ours = beam_search(model, enc, el, beam=beam, method=method, max_symbols_per_frame=MAX_SYMBOLS)
                same = sum(list(h.tokens) == [int(x) for x in n.y_sequence] for h, n in zip(ours, theirs))
                diff = max(abs(h.score - float(n.score)) for h, n in zip(ours, theirs))
                rows.append([name, beam, f"ours {method} vs NeMo {search}", f"{same}/{len(ours)}", diff])
                print(rows[-1], flush=True)
    return rows


WIND_WINDOW = 8
WIND_BEAMS = (2, 4, 8)


def wind_decoders(model, enc, lengths, tokenizer=None) -> dict[str, object]:
    """Greedy, then ALSD++ and WIND beam (window 8) at beams 2, 4, 8, no LM."""
    fns = {"greedy (label-looping)": lambda: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS, tokenizer=tokenizer)}
    for beam in WIND_BEAMS:
        fns[f"ALSD++ beam {beam}"] = lambda beam=beam: beam_search(
            model, enc, lengths, beam=beam, method="alsd", max_symbols_per_frame=MAX_SYMBOLS, tokenizer=tokenizer)
        fns[f"WIND beam {beam} (window {WIND_WINDOW})"] = lambda beam=beam: beam_search(
            model, enc, lengths, beam=beam, method="wind", window=WIND_WINDOW, max_symbols_per_frame=MAX_SYMBOLS,
            tokenizer=tokenizer)
    return fns


def wind_speed_rows(label: str, model, enc: torch.Tensor, lengths: torch.Tensor, repeats: int) -> list[list[object]]:
    """Time per batch, ratio to greedy and to ALSD++ of the same beam, labels and best score sum."""
    fns = wind_decoders(model, enc, lengths)
    times = time_many(fns, repeats=repeats, warmup=1)
    base = times["greedy (label-looping)"]
    rows = []
    for name, t in times.items():
        hyps = fns[name]()
        beam = name.split(" beam ")[1].split()[0] if " beam " in name else None
        vs_alsd = t / times[f"ALSD++ beam {beam}"] if beam else ""
        rows.append([label, int(enc.shape[0]), name, t * 1e3, t / base, vs_alsd,
                     sum(len(h.tokens) for h in hyps), sum(h.score for h in hyps)])
    return rows


def wind_wer_rows() -> list[list[object]]:
    from simple_decode import wer

    demo = __import__("asrdecode.models", fromlist=["load"]).load("demo-rnnt")
    out = []
    for sname, enc, el, refs in encoded_test_sets(demo):
        for dname, fn in wind_decoders(demo.model, enc, el, demo.tokenizer).items():
            hyps = fn()
            out.append(["demo-rnnt", sname, dname, wer(refs, [h.text or "" for h in hyps]),
                        sum(h.score for h in hyps) / len(hyps)])
            print(out[-1], flush=True)
    return out


SHARPEN = 16.0


def sharpened_paper_model():
    """The paper RNN-T with its joint output layer scaled by ``SHARPEN``: the same greedy decisions
    (argmax unchanged, ~0.3 labels per frame), but confident distributions like a trained model's
    (median blank probability ~0.997 instead of ~0.003 on the calibrated random weights)."""
    model = make_paper_model(tdt=False)
    with torch.no_grad():
        model.joint_out.weight.mul_(SHARPEN)
        model.joint_out.bias.mul_(SHARPEN)
    return model


def wind_main(frames: int, repeats: int) -> None:
    rows: list[list[object]] = []
    demo, _, enc, el = demo_inputs("demo-rnnt")
    for batch in (1, 16):
        order = torch.argsort(el, descending=True)[:batch]
        e, n = enc[order, : int(el[order].max())], el[order]
        rows += wind_speed_rows("demo-rnnt", demo.model, e, n, repeats)
        print(rows[-7:], flush=True)
    wer = wind_wer_rows()
    sharp = sharpened_paper_model()
    for batch in (1, 4):
        enc, lengths = make_encoder_output(batch, frames, seed=7)
        rows += wind_speed_rows(f"paper RNN-T, joint x{SHARPEN:g}", sharp, enc, lengths, repeats)
        print(rows[-7:], flush=True)
    del sharp
    # the paper model as calibrated: batch 1 only (WIND emits up to the symbol cap on its flat
    # random distributions: slow)
    enc, lengths = make_encoder_output(1, frames, seed=7)
    rows += wind_speed_rows("paper RNN-T", make_paper_model(tdt=False), enc, lengths, repeats)
    print(markdown_table(["model", "batch", "decoder", "ms / batch", "x greedy time", "x ALSD++ same beam",
                          "labels", "sum of best scores"], rows))
    print(markdown_table(["model", "test set", "decoder", "WER", "mean best score"], wer))


TUNE_WEIGHTS = (0.2, 0.4, 0.6, 0.8)
TUNE_BETAS = (0.0, 1.0, 2.0, 3.0)


def tune_lm_main() -> None:
    """Grid of (LM weight, beta, blank scoring) for ALSD++ and WIND beam 4 on demo-rnnt: chosen by WER
    on the dev half of synth_test50, then reported on the test half and real10 (never tuned on)."""
    from simple_decode import wer

    demo = __import__("asrdecode.models", fromlist=["load"]).load("demo-rnnt")
    lm = bundled_lm(demo)
    sets = {name: (enc, el, refs) for name, enc, el, refs in encoded_test_sets(demo)}
    enc, el, refs = sets["synth_test50"]
    split = {"dev25": (enc[:25], el[:25], refs[:25]), "test25": (enc[25:], el[25:], refs[25:]),
             "real10": sets["real10"]}

    def decode(part: str, method: str, w: float, beta: float, scoring: str) -> float:
        e, n, r = split[part]
        e = e[:, : int(n.max())]
        fusion = [(lm, w)] if w else []
        hyps = beam_search(demo.model, e, n, beam=4, method=method, window=WIND_WINDOW, fusion=fusion, beta=beta,
                           blank_scoring=scoring, max_symbols_per_frame=MAX_SYMBOLS, tokenizer=demo.tokenizer)
        return wer(r, [h.text or "" for h in hyps])

    rows, grid = [], []
    for method in ("alsd", "wind"):
        results = {}
        for scoring in ("lm_weighted", "none"):
            for w in TUNE_WEIGHTS:
                for beta in TUNE_BETAS:
                    results[(w, beta, scoring)] = decode("dev25", method, w, beta, scoring)
                    grid.append([method, w, beta, scoring, results[(w, beta, scoring)]])
        best = min(results, key=lambda k: (results[k], k[0], k[1]))  # ties: the smaller weight / beta
        print(method, "best on dev25", best, results[best], flush=True)
        for label, (w, beta, scoring) in (("no LM", (0.0, 0.0, "lm_weighted")), ("LM tuned on dev25", best)):
            rows.append([f"{'ALSD++' if method == 'alsd' else 'WIND'} beam 4", label, w, beta, scoring,
                         *(decode(part, method, w, beta, scoring) for part in ("dev25", "test25", "real10"))])
            print(rows[-1], flush=True)
    print(markdown_table(["decoder", "LM", "weight", "beta", "blank scoring", "WER dev25", "WER test25",
                          "WER real10"], rows))
    print(markdown_table(["method", "weight", "beta", "blank scoring", "WER dev25"], grid))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-wer", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--nemo", action="store_true", help="only ours vs NeMo (run with NeMo's python)")
    ap.add_argument("--wind", action="store_true", help="only WIND beam vs ALSD++ (beams 2, 4, 8)")
    ap.add_argument("--tune-lm", action="store_true", help="only the LM weight / beta / blank scoring tuning")
    args = ap.parse_args()
    single_thread()
    if args.tune_lm:
        tune_lm_main()
        return
    if args.wind:
        wind_main(args.frames, args.repeats)
        return
    if args.nemo:
        rows = nemo_rows(args.frames, args.repeats)
        print(markdown_table(["model", "batch", "decoder", "ms / batch", "x our greedy time", "outputs"], rows))
        print(markdown_table(["model", "beam", "search", "same best tokens", "max abs score diff"], nemo_agreement()))
        return
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
