"""TLG (WFST) decoding of the bundled demo-ctc model: WER of compact vs normal topology vs greedy,
our batched token-passing decoder vs kaldi-decoder's FasterDecoder (agreement, speed), n-best
lists (time, oracle WER) and per-utterance word boosting of rare words.

The word LM is the bundled word 3-gram, pruned for a quick build: the ``--words`` most likely
words (by unigram probability) and the n-grams made of them only (back-off weights as in the
file, not renormalised). The lexicon spells each kept word with the bundled sentencepiece model.

    OMP_NUM_THREADS=1 python benchmarks/ctc_wfst.py --words 5000 --out benchmarks/results_wfst.md

Times are process CPU time (``time.process_time``, one thread for both decoders): the shared
machine is oversubscribed, and wall time then measures the other jobs as much as ours.
Graphs are cached in ``--cache`` (build times are those of the first build).
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
from asrdecode.lm.arpa import ArpaModel
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


def kaldi_decode(fst, lp, lens, beam, max_active, scale, words, min_active=None):
    """FasterDecoder's best path of each utterance: (words, total score). ``min_active``: kaldi's
    (default 20: below that many tokens the beam is not applied); 0 turns that rule off."""
    import kaldi_decoder

    opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active)
    if min_active is not None:
        opts.min_active = min_active
    dec = kaldi_decoder.FasterDecoder(fst, opts)
    out = []
    for b in range(lp.shape[0]):
        d = kaldi_decoder.DecodableCtc((lp[b, : lens[b]] * scale).numpy())
        dec.decode(d)
        best = dec.get_best_path()
        import kaldifst

        ok, lat = best
        _, _, olabels, weight = kaldifst.get_linear_symbol_sequence(lat)
        out.append(([words[o] for o in olabels if o > 0], -(weight.value1 + weight.value2)))
    return out


def disagreements(ours, kal) -> tuple[int, list[str]]:
    """Agreement count and, per differing utterance, who has the better path score (natural log;
    a difference means the other decoder's pruning lost that path)."""
    agree, rows = 0, []
    for i, (h, (kw, ks)) in enumerate(zip(ours, kal)):
        ow = [w for w, _, _ in h.words]
        if ow == kw:
            agree += 1
            continue
        d = h.score - ks
        who = "ours better (kaldi pruned it)" if d > 1e-3 else "kaldi better (ours pruned it)" if d < -1e-3 else "tie"
        rows.append(f"{i}: ours {h.score:.3f} kaldi {ks:.3f} ({who})")
    return agree, rows


def cpu() -> float:
    return time.process_time()


def best_of_three(fn) -> tuple[float, object]:
    """Smallest CPU time of three runs (and the last result)."""
    times, out = [], None
    for _ in range(3):
        t0 = cpu()
        out = fn()
        times.append(cpu() - t0)
    return min(times), out


def graph_for(model: ArpaModel, lex, top: str, demo, cache: Path, words: int) -> tuple[DecodingGraph, float]:
    tag = f"tlg-{top}-{words}-v{demo.tokenizer.vocab_size}"  # the vocabulary changes with the bundled models
    path = cache / f"{tag}.pt"
    meta = cache / f"{tag}.json"
    if path.exists() and meta.exists():
        return DecodingGraph.load(path), json.loads(meta.read_text())["build_s"]
    t0 = time.time()
    g = build_tlg(demo.tokenizer.vocab_size, lex, model, topology=top, blank_id=demo.blank_id)
    dt = time.time() - t0
    g.save(path)
    meta.write_text(json.dumps({"build_s": dt}))
    return g, dt


def words_of(h) -> str:
    return " ".join(w for w, _, _ in h.words)


def boosting(report: list[str], graphs, data, args, unigram: dict[str, float]) -> None:
    """Per-utterance boosts of the rare words (graph words outside the `--common` most likely) of the
    reference (an oracle biasing list, as a user's contact names would be), vs the same number of rare
    words taken from other utterances (distractors only)."""
    import random

    g = graphs["compact"] if "compact" in graphs else next(iter(graphs.values()))
    index = g.word_index()
    ranked = sorted(unigram, key=lambda w: -unigram[w])
    common = set(ranked[: args.common])
    rare_vocab = [w for w in ranked[args.common:] if w in index]
    rng = random.Random(0)
    report.append(f"\n## Word boosting (compact TLG, acoustic_scale {args.peer_scale})\n\n"
                  f"Rare word = a graph word outside the {args.common} most likely unigrams. Own: each utterance "
                  "boosts the rare words of its reference (an oracle biasing list). Distractors: as many rare words "
                  "drawn from the rest of the graph vocabulary, none in the reference. Rare recall = rare reference "
                  "words found in the hypothesis / rare reference words.\n\n"
                  "| boost list | weight | " + " | ".join(f"{n} WER | {n} rare recall" for n in data) + " |\n"
                  "|---|---|" + "---|---|" * len(data) + "\n")
    dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=args.peer_scale)
    for kind, weights in (("none", [0.0]), ("own", [2.0, 4.0, 6.0]), ("distractors", [4.0])):
        for wgt in weights:
            cells = []
            for lp, el, refs in data.values():
                lists = []
                for r in refs:
                    rare = sorted({w for w in r.split() if w in index and w not in common})
                    if kind == "own":
                        lists.append({w: wgt for w in rare})
                    elif kind == "distractors":
                        pool = [w for w in rng.sample(rare_vocab, len(rare) + 20) if w not in r.split()]
                        lists.append({w: wgt for w in pool[: len(rare)]})
                    else:
                        lists.append(None)
                hyps = dec(lp, el, boosts=lists)
                hit = tot = 0
                for r, h in zip(refs, hyps):
                    hw = words_of(h).split()
                    for w in r.split():
                        if w in index and w not in common:
                            tot += 1
                            hit += w in hw
                cells.append(f"{wer(refs, [words_of(h) for h in hyps]):.4f} | {hit}/{tot}")
            report.append(f"| {kind} | {wgt:g} | " + " | ".join(cells) + " |\n")
            print("boost", kind, wgt, cells, flush=True)


def nbest_rows(report: list[str], graphs, data, args) -> None:
    """n-best lists: CPU time with lattice recording vs 1-best only, and the oracle WER of the list."""
    report.append(f"\n## n-best lists (lattice_beam {args.lattice_beam}, acoustic_scale {args.peer_scale}, batch 32)\n\n"
                  "Oracle WER: the best hypothesis of each list against the reference. Time: CPU seconds over both sets "
                  "(best of 3, after a warm-up call); n = 1 is the plain 1-best call (no lattice).\n\n"
                  "| graph | n | time s | time / 1-best time | " + " | ".join(f"{n} oracle WER" for n in data) + " |\n"
                  "|---|---|---|---|" + "---|" * len(data) + "\n")
    for top, g in graphs.items():
        dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=args.peer_scale,
                          lattice_beam=args.lattice_beam)
        base = None
        warm_lp, warm_el, _ = next(iter(data.values()))
        dec(warm_lp[:1], warm_el[:1])  # warm-up: per-state token rows, packed arcs
        for n in (None, 10, 100):
            dt, outs = best_of_three(lambda dec=dec, n=n: {
                name: sum((dec(lp[i:i + 32], el[i:i + 32], nbest=n) for i in range(0, lp.shape[0], 32)), [])
                for name, (lp, el, _) in data.items()})
            base = dt if n is None else base
            cells = []
            for name, (_, _, refs) in data.items():
                lists = [[h] if n is None else h for h in outs[name]]
                best = [min((words_of(h) for h in hs), key=lambda x, r=r: wer([r], [x])) for hs, r in zip(lists, refs)]
                cells.append(f"{wer(refs, best):.4f}")
            report.append(f"| {top} | {n or 1} | {dt:.2f} | {dt / base:.2f} | " + " | ".join(cells) + " |\n")
            print("nbest", top, n, dt, cells, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--beam", type=float, default=12.0)
    ap.add_argument("--max-active", type=int, default=2000)
    ap.add_argument("--scales", default="1.0,1.5,2.0,3.0")
    ap.add_argument("--peer-scale", type=float, default=2.0, help="acoustic scale of the kaldi-decoder comparison")
    ap.add_argument("--out", default="benchmarks/results_wfst.md")
    ap.add_argument("--cache", default="work/cache/wfst-bench")
    ap.add_argument("--lattice-beam", type=float, default=6.0)
    ap.add_argument("--common", type=int, default=1000, help="words outside the N most likely count as rare")
    ap.add_argument("--topologies", default="compact,normal")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: wer,peer,nbest,boost")
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
              f"(blank id {demo.blank_id}). Beam {args.beam}, max_active {args.max_active}. One CPU thread; "
              "times are process CPU seconds.\n"]
    skip = set(args.skip.split(","))
    t0 = time.time()
    model = prune_vocabulary(read_arpa(ASSETS / "word-3gram.arpa.gz"), args.words)
    t_read = time.time() - t0
    lex = lexicon_from_tokenizer([w for w in model.vocab if w not in ("<s>", "</s>")], tok)
    graphs = {}
    report.append("\n## Graphs\n\n| topology | build s | states | arcs |\n|---|---|---|---|\n")
    for top in args.topologies.split(","):
        g, dt = graph_for(model, lex, top, demo, cache, args.words)
        graphs[top] = g
        report.append(f"| {top} | {dt:.1f} | {g.num_states} | {g.num_arcs} |\n")
        print(top, dt, g.num_states, g.num_arcs, flush=True)
    report.append(f"\n(ARPA read + prune: {t_read:.1f} s; counts after pruning: {model.counts()})\n")

    # WER: greedy vs compact vs normal, a few acoustic scales
    scales = [float(s) for s in args.scales.split(",")] if "wer" not in skip else []
    report.append("\n## WER\n\n| decoder | " + " | ".join(SETS) + " |\n|---|" + "---|" * len(SETS) + "\n")
    row = []
    for lp, el, refs in data.values():
        hyps = ctc.greedy(lp, el, demo.blank_id, tok)
        row.append(f"{wer(refs, [h.text or '' for h in hyps]):.4f}")
    report.append("| CTC greedy | " + " | ".join(row) + " |\n")
    for top, g in graphs.items():
        for sc in scales:
            dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=sc)
            row = []
            for lp, el, refs in data.values():
                hyps = dec(lp, el)
                row.append(f"{wer(refs, [' '.join(w for w, _, _ in h.words) for h in hyps]):.4f}")
            report.append(f"| TLG {top}, acoustic_scale {sc} | " + " | ".join(row) + " |\n")
            print(top, sc, row, flush=True)

    # vs kaldi-decoder
    try:
        import kaldi_decoder  # noqa: F401
        if "peer" in skip:
            raise ImportError
    except ImportError:
        report.append("\nkaldi-decoder is not installed: no peer comparison.\n")
    else:
        sc = args.peer_scale
        report.append(f"\n## vs kaldi-decoder FasterDecoder (compact and normal TLG, acoustic_scale {sc}, same beam/max_active)\n\n"
                      "Decoder-only CPU time over all utterances of both sets (best of 3 runs, all columns of a row "
                      "measured in one run); ours on the native engine (`engine=\"native\"`) and on the tensor engine "
                      "(`engine=\"torch\"`), at batch 1 and 32; kaldi one utterance at a time (it has no batch). "
                      "Agreement = identical word sequences (native vs kaldi; native and torch are asserted equal). "
                      "Ours includes a warm-up call first (per-state token rows, packed arcs, built once per decoder).\n\n"
                      "| graph | kaldi s | native b1 s | native b32 s | torch b1 s | torch b32 s | kaldi/native b1 "
                      "| kaldi/native b32 | kaldi/torch b32 | agreement | agreement, kaldi min_active 0 |\n"
                      "|---|---|---|---|---|---|---|---|---|---|---|\n")
        lp = [d[0] for d in data.values()]
        el = [d[1] for d in data.values()]
        T = max(x.shape[1] for x in lp)
        all_lp = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, T - x.shape[1])) for x in lp])
        all_el = torch.cat(el)
        analysis = []
        for top, g in graphs.items():
            times, outs = {}, {}
            for engine in ("native", "torch"):
                dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=sc, engine=engine)
                dec(all_lp[:1, : all_el[0]], all_el[:1])  # warm-up: per-state token rows, packed arcs
                times[engine, 1], outs[engine, 1] = best_of_three(
                    lambda dec=dec: [dec(all_lp[i : i + 1, : all_el[i]], all_el[i : i + 1])[0] for i in range(all_lp.shape[0])])
                times[engine, 32], outs[engine, 32] = best_of_three(
                    lambda dec=dec: sum((dec(all_lp[i : i + 32], all_el[i : i + 32]) for i in range(0, all_lp.shape[0], 32)), []))
            fst = kaldi_fst(g)
            tk, kal = best_of_three(
                lambda fst=fst, g=g: kaldi_decode(fst, all_lp, all_el.tolist(), args.beam, args.max_active, sc, g.words))
            ours_w = [[w for w, _, _ in h.words] for h in outs["native", 1]]
            for key in outs:
                assert ours_w == [[w for w, _, _ in h.words] for h in outs[key]], key
            agree, diffs = disagreements(outs["native", 1], kal)
            # kaldi without its min_active rule (default 20: with fewer active tokens it skips the beam)
            strict = kaldi_decode(fst, all_lp, all_el.tolist(), args.beam, args.max_active, sc, g.words, min_active=0)
            agree_strict, diffs_strict = disagreements(outs["native", 1], strict)
            analysis.append(f"- {top}, kaldi's default (min_active 20): {agree}/{len(kal)} agree; differing: "
                            + ("; ".join(diffs) or "none") + "\n")
            analysis.append(f"- {top}, kaldi with min_active 0: {agree_strict}/{len(kal)} agree; differing: "
                            + ("; ".join(diffs_strict) or "none") + "\n")
            t = times
            report.append(f"| {top} | {tk:.3f} | {t['native', 1]:.3f} | {t['native', 32]:.3f} | {t['torch', 1]:.2f} | "
                          f"{t['torch', 32]:.2f} | {tk / t['native', 1]:.2f} | {tk / t['native', 32]:.2f} | "
                          f"{tk / t['torch', 32]:.2f} | {agree}/{len(kal)} | {agree_strict}/{len(kal)} |\n")
            print(top, tk, times, agree, agree_strict, len(kal), flush=True)
        report.append("\nDisagreements with kaldi (utterance index: best path scores, natural log, acoustic scale "
                      "included):\n\n" + "".join(analysis))
        print("".join(analysis), flush=True)
    if "nbest" not in skip:
        nbest_rows(report, graphs, data, args)
    if "boost" not in skip:
        unigram = {w: float(lp) for w, lp in zip(model.vocab, model.logprob[0]) if w not in ("<s>", "</s>", "<unk>")}
        boosting(report, graphs, data, args, unigram)
    Path(args.out).write_text("".join(report))
    print("".join(report))


if __name__ == "__main__":
    main()
