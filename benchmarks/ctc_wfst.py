"""TLG (WFST) decoding of the bundled demo-ctc model: WER of compact vs normal topology vs greedy,
and our batched token-passing decoder vs kaldi-decoder's FasterDecoder (agreement, speed).

The word LM is the bundled word 3-gram, pruned for a quick build: the ``--words`` most likely
words (by unigram probability) and the n-grams made of them only (back-off weights as in the
file, not renormalised). The lexicon spells each kept word with the bundled sentencepiece model.

    OMP_NUM_THREADS=1 python benchmarks/ctc_wfst.py --words 5000 --out benchmarks/results_wfst.md
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from asrdecode import ctc
from asrdecode.audio import read_audio
from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder, build_tlg, lexicon_from_tokenizer
from asrdecode.evaluate import wer
from asrdecode.lm.arpa import prune_vocabulary, read_arpa
from asrdecode.models import load
from asrdecode.models.demo import ASSETS

SETS = {"synth_test50": Path("data/synth_test/manifest.jsonl"), "real10": Path("data/real/manifest.jsonl")}


def log_probs(demo, rows):
    audio = [read_audio(str(r)) for r in rows]
    x, n = demo.features(audio)
    with torch.no_grad():
        enc, el = demo.encode_features(x, n)
        lp = demo.model.log_probs_from_encoder(enc)
    return lp.float(), el


def kaldi_fst(g: DecodingGraph):
    """Our graph as a kaldifst FST with input label token + 1 (what kaldi-decoder's DecodableCtc reads)."""
    import kaldifst

    lines = []
    order = [g.start] + [s for s in range(g.num_states) if s != g.start]
    ren = {s: i for i, s in enumerate(order)}
    e = [t.tolist() for t in (g.e_src, g.e_dst, g.e_ilabel, g.e_olabel, g.e_score)]
    p = [t.tolist() for t in (g.p_src, g.p_dst, g.p_olabel, g.p_score)]
    for s, d, i, o, w in zip(*e):
        lines.append(f"{ren[s]} {ren[d]} {i + 1} {o} {-w}")
    for s, d, o, w in zip(*p):
        lines.append(f"{ren[s]} {ren[d]} 0 {o} {-w}")
    lines.sort(key=lambda x: int(x.split()[0]) != 0)  # the start state's arcs first
    fin = g.final_score.tolist()
    lines += [f"{ren[s]} {-c}" for s, c in enumerate(fin) if c != float("-inf")]
    return kaldifst.compile("\n".join(lines) + "\n")


def kaldi_decode(fst, lp, lens, beam, max_active, scale, words):
    import kaldi_decoder

    opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active)
    dec = kaldi_decoder.FasterDecoder(fst, opts)
    out = []
    for b in range(lp.shape[0]):
        d = kaldi_decoder.DecodableCtc((lp[b, : lens[b]] * scale).numpy())
        dec.decode(d)
        best = dec.get_best_path()
        import kaldifst

        ok, lat = best
        _, _, olabels, _ = kaldifst.get_linear_symbol_sequence(lat)
        out.append([words[o] for o in olabels if o > 0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--beam", type=float, default=12.0)
    ap.add_argument("--max-active", type=int, default=2000)
    ap.add_argument("--scales", default="1.0,1.5,2.0,3.0")
    ap.add_argument("--peer-scale", type=float, default=2.0, help="acoustic scale of the kaldi-decoder comparison")
    ap.add_argument("--out", default="benchmarks/results_wfst.md")
    ap.add_argument("--cache", default="/tmp/wfst_helper/bench")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    demo = load("demo-ctc")
    tok = demo.tokenizer
    data = {}
    for name, mpath in SETS.items():
        rows = [json.loads(x) for x in mpath.read_text().splitlines() if x.strip()]
        lp, el = log_probs(demo, [mpath.parent / r["audio_filepath"] for r in rows])
        data[name] = (lp, el, [r["text"] for r in rows])
    report = ["# WFST (TLG) decoding of demo-ctc\n",
              f"LM: bundled word 3-gram pruned to the {args.words} most likely words (n-grams over them only; "
              f"back-off weights not renormalised). Lexicon: each word spelled by the bundled sentencepiece model "
              f"(blank id {demo.blank_id}). Beam {args.beam}, max_active {args.max_active}. One CPU thread.\n"]
    t0 = time.time()
    model = prune_vocabulary(read_arpa(ASSETS / "word-3gram.arpa.gz"), args.words)
    t_read = time.time() - t0
    lex = lexicon_from_tokenizer([w for w in model.vocab if w not in ("<s>", "</s>")], tok)
    graphs = {}
    report.append("\n## Graphs\n\n| topology | build s | states | arcs |\n|---|---|---|---|\n")
    for top in ("compact", "normal"):
        t0 = time.time()
        g = build_tlg(tok.vocab_size, lex, model, topology=top, blank_id=demo.blank_id)
        dt = time.time() - t0
        graphs[top] = g
        report.append(f"| {top} | {dt:.1f} | {g.num_states} | {g.num_arcs} |\n")
        print(top, dt, g.num_states, g.num_arcs, flush=True)
    report.append(f"\n(ARPA read + prune: {t_read:.1f} s; counts after pruning: {model.counts()})\n")

    # WER: greedy vs compact vs normal, a few acoustic scales
    scales = [float(s) for s in args.scales.split(",")]
    report.append("\n## WER\n\n| decoder | " + " | ".join(SETS) + " |\n|---|" + "---|" * len(SETS) + "\n")
    row = []
    for name, (lp, el, refs) in data.items():
        hyps = ctc.greedy(lp, el, demo.blank_id, tok)
        row.append(f"{wer(refs, [h.text or '' for h in hyps]):.4f}")
    report.append("| CTC greedy | " + " | ".join(row) + " |\n")
    for top, g in graphs.items():
        for sc in scales:
            dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=sc)
            row = []
            for name, (lp, el, refs) in data.items():
                hyps = dec(lp, el)
                row.append(f"{wer(refs, [' '.join(w for w, _, _ in h.words) for h in hyps]):.4f}")
            report.append(f"| TLG {top}, acoustic_scale {sc} | " + " | ".join(row) + " |\n")
            print(top, sc, row, flush=True)

    # vs kaldi-decoder
    try:
        import kaldi_decoder  # noqa: F401
    except ImportError:
        report.append("\nkaldi-decoder is not installed: no peer comparison.\n")
    else:
        sc = args.peer_scale
        report.append(f"\n## vs kaldi-decoder FasterDecoder (compact and normal TLG, acoustic_scale {sc}, same beam/max_active)\n\n"
                      "Decoder-only wall time over all utterances of both sets; ours batched, kaldi one utterance at a time "
                      "(it has no batch). Agreement = identical word sequences.\n\n"
                      "| graph | ours batch 1 s | ours batch 32 s | kaldi s | kaldi/ours b1 | kaldi/ours b32 | agreement |\n"
                      "|---|---|---|---|---|---|---|\n")
        lp = [d[0] for d in data.values()]
        el = [d[1] for d in data.values()]
        T = max(x.shape[1] for x in lp)
        all_lp = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, T - x.shape[1])) for x in lp])
        all_el = torch.cat(el)
        for top, g in graphs.items():
            dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=sc)
            t0 = time.time()
            ours1 = [dec(all_lp[i : i + 1, : all_el[i]], all_el[i : i + 1])[0] for i in range(all_lp.shape[0])]
            t1 = time.time() - t0
            t0 = time.time()
            ours32 = []
            for i in range(0, all_lp.shape[0], 32):
                ours32 += dec(all_lp[i : i + 32], all_el[i : i + 32])
            t32 = time.time() - t0
            fst = kaldi_fst(g)
            t0 = time.time()
            kal = kaldi_decode(fst, all_lp, all_el.tolist(), args.beam, args.max_active, sc, g.words)
            tk = time.time() - t0
            ours_w = [[w for w, _, _ in h.words] for h in ours1]
            assert ours_w == [[w for w, _, _ in h.words] for h in ours32]
            agree = sum(a == b for a, b in zip(ours_w, kal))
            report.append(f"| {top} | {t1:.2f} | {t32:.2f} | {tk:.2f} | {tk / t1:.2f} | {tk / t32:.2f} | "
                          f"{agree}/{len(kal)} |\n")
            print(top, t1, t32, tk, agree, len(kal), flush=True)
    Path(args.out).write_text("".join(report))
    print("".join(report))


if __name__ == "__main__":
    main()
