"""Words from a real phone-level CTC model through TLG: hama's phone recogniser (PyPI ``hama``,
trained on real speech; 20 ms frames, 191 classes, ``<wb>`` word boundary, ``<blank>``) decoded with
a lexicon of hama G2P pronunciations and the bundled word 3-gram, vs the bundled demo-ctc model
(subword CTC over log-mel, trained on synthetic speech only) with the sentencepiece-spelled TLG of
the same LM.

Word boundaries: hama emits ``<wb>`` between words. Two ways to read it:

* ``optional <wb>``: every word has two pronunciations, its phones and its phones + ``<wb>``
  (several pronunciations per word, see :func:`asrdecode.ctc.wfst.build_tlg`);
* ``<wb> as blank``: the ``<wb>`` probability is added to the blank's (log-sum-exp) and the lexicon
  holds phones only.

The LM is pruned to the ``--words`` most likely words that G2P can spell (its other unigrams are
dropped before pruning). Pronunciations come from ``--lexicon`` when it has the word (e.g.
``work/lexicon/hama.lex`` from ``recipes/hama_lexicon.py``), else from hama's G2P (cached in
``--cache``).

    OMP_NUM_THREADS=1 python3 benchmarks/wfst_phone.py --words 5000 --out benchmarks/results_wfst_phone.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from asrdecode.audio import read_audio
from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder, build_tlg, lexicon_from_tokenizer
from asrdecode.evaluate import wer
from asrdecode.lm.arpa import ArpaModel, prune_vocabulary, read_arpa
from asrdecode.models import load
from asrdecode.models.demo import ASSETS
from asrdecode.models.frontend import HamaFrontEnd
from asrdecode.streaming.families import pad_frames

SETS = {"synth_test50": Path("data/synth_test/manifest.jsonl"), "real10": Path("data/real/manifest.jsonl")}


def g2p_lexicon(words: list[str], known: Path | None, cache: Path) -> dict[str, list[str]]:
    """Phones of each word: from ``known`` (a ``word phone ...`` file) when listed, else hama's G2P
    (results appended to ``cache``). Words G2P cannot spell in the recogniser's phones are left out."""
    import hama

    symbols = set(hama.ASRModel().decoder_tokens)
    lex: dict[str, list[str]] = {}
    for path in (known, cache):
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                f = line.split()
                if len(f) >= 2 and all(p in symbols for p in f[1:]):
                    lex.setdefault(f[0], f[1:])
    todo = [w for w in words if w not in lex]
    if todo:
        g2p = hama.G2PModel()
        t0 = time.time()
        with cache.open("a", encoding="utf-8") as out:
            for w in todo:
                phones = [a.phoneme for a in g2p.predict(w).alignments]
                phones = [p for p in phones if p in symbols and p.strip()]
                if phones:
                    lex[w] = phones
                    out.write(w + " " + " ".join(phones) + "\n")
        print(f"G2P: {len(todo)} words in {time.time() - t0:.0f} s", flush=True)
    return {w: lex[w] for w in words if w in lex}


def spellable_lm(model: ArpaModel, n_words: int, spellable: set[str]) -> ArpaModel:
    """The ``n_words`` most likely words of ``model`` among ``spellable`` (n-grams over them only)."""
    lp = [x.copy() for x in model.logprob]
    for i, w in enumerate(model.vocab):
        if w not in spellable and w not in ("<s>", "</s>"):
            lp[0][i] = -99.0  # ranked last by prune_vocabulary, so left out
    trimmed = dataclasses.replace(model, logprob=lp)
    out = prune_vocabulary(trimmed, n_words)
    bad = [w for w in out.vocab if w not in spellable and w not in ("<s>", "</s>")]
    if bad:
        raise SystemExit(f"only {len(out.vocab) - len(bad) - 2} LM words can be spelled; lower --words")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--beam", type=float, default=12.0)
    ap.add_argument("--max-active", type=int, default=2000)
    ap.add_argument("--phone-scales", default="0.5,1.0,1.5,2.0")
    ap.add_argument("--demo-scale", type=float, default=2.0)
    ap.add_argument("--lexicon", default="work/lexicon/hama.lex")
    ap.add_argument("--cache", default="work/cache/wfst-bench")
    ap.add_argument("--out", default="benchmarks/results_wfst_phone.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    import hama

    symbols = list(hama.ASRModel().decoder_tokens)
    wb, blank = symbols.index("<wb>"), symbols.index("<blank>")
    demo = load("demo-ctc")
    phone_front = HamaFrontEnd()
    data = {}
    for name, mpath in SETS.items():
        rows = [json.loads(x) for x in mpath.read_text().splitlines() if x.strip()]
        audio = [read_audio(str(mpath.parent / r["audio_filepath"])) for r in rows]
        phone_x, pn = pad_frames([phone_front.phone_log_probs(a) for a in audio])
        feats, flen = demo.features(audio)
        with torch.no_grad():
            enc, el = demo.encode_features(feats, flen)
            lp = demo.model.log_probs_from_encoder(enc).float()
        data[name] = (phone_x, pn, lp, el, [r["text"] for r in rows])

    full = read_arpa(ASSETS / "word-3gram.arpa.gz")
    ranked = [full.vocab[i] for i in np.argsort(-full.logprob[0], kind="stable") if full.vocab[i] not in ("<s>", "</s>", "<unk>")]
    known = Path(args.lexicon) if args.lexicon else None
    phones = g2p_lexicon(ranked[: int(args.words * 1.1) + 50], known, cache / "g2p-hama.lex")
    model = spellable_lm(full, args.words, set(phones))
    lm_words = [w for w in model.vocab if w not in ("<s>", "</s>")]
    sym_id = {s: i for i, s in enumerate(symbols)}
    ids = {w: [sym_id[p] for p in phones[w]] for w in lm_words}
    report = ["# Words from hama's phone CTC model through TLG\n\n",
              f"LM: bundled word 3-gram pruned to the {args.words} most likely words that hama's G2P can spell "
              f"(counts {model.counts()}). Beam {args.beam}, max_active {args.max_active}, compact topology. "
              "CPU times (process time, one thread) over both sets.\n\n",
              "| decoder | frames | acoustic_scale | " + " | ".join(f"{n} WER" for n in data) + " | graph states / arcs | build s | decode s |\n",
              "|---|---|---|" + "---|" * len(data) + "---|---|---|\n"]

    def graph(tag: str, build) -> tuple[DecodingGraph, float]:
        path, meta = cache / f"{tag}.pt", cache / f"{tag}.json"
        if path.exists() and meta.exists():
            return DecodingGraph.load(path), json.loads(meta.read_text())["build_s"]
        t0 = time.time()
        g = build()
        dt = time.time() - t0
        g.save(path)
        meta.write_text(json.dumps({"build_s": dt}))
        return g, dt

    variants = {
        "hama phones, optional <wb>": (
            f"tlg-phone-wb-{args.words}",
            lambda: build_tlg(symbols, {w: [p, p + [wb]] for w, p in ids.items()}, model, "compact", blank_id=blank),
            False),
        "hama phones, <wb> as blank": (
            f"tlg-phone-nowb-{args.words}",
            lambda: build_tlg(symbols, ids, model, "compact", blank_id=blank),
            True),
    }
    for label, (tag, build, merge) in variants.items():
        g, build_s = graph(tag, build)
        print(label, g.num_states, g.num_arcs, f"{build_s:.0f} s", flush=True)
        for sc in [float(x) for x in args.phone_scales.split(",")]:
            dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=sc)
            cells, t = [], 0.0
            for feats, flen, _, _, refs in data.values():
                x = feats.clone()
                if merge:
                    x[..., blank] = torch.logaddexp(x[..., blank], x[..., wb])
                t0 = time.process_time()
                hyps = sum((dec(x[i:i + 32], flen[i:i + 32]) for i in range(0, x.shape[0], 32)), [])
                t += time.process_time() - t0
                cells.append(f"{wer(refs, [' '.join(w for w, _, _ in h.words) for h in hyps]):.4f}")
            report.append(f"| {label} | 20 ms | {sc} | " + " | ".join(cells) +
                          f" | {g.num_states} / {g.num_arcs} | {build_s:.0f} | {t:.1f} |\n")
            print(label, sc, cells, f"{t:.1f} s", flush=True)

    tok = demo.tokenizer
    lex = lexicon_from_tokenizer(lm_words, tok)
    g, build_s = graph(f"tlg-demo-ctc-spellable-{args.words}-v{tok.vocab_size}",
                       lambda: build_tlg(tok.vocab_size, lex, model, "compact", blank_id=demo.blank_id))
    dec = WFSTDecoder(g, beam=args.beam, max_active=args.max_active, acoustic_scale=args.demo_scale)
    cells, t = [], 0.0
    for _, _, lp, el, refs in data.values():
        t0 = time.process_time()
        hyps = sum((dec(lp[i:i + 32], el[i:i + 32]) for i in range(0, lp.shape[0], 32)), [])
        t += time.process_time() - t0
        cells.append(f"{wer(refs, [' '.join(w for w, _, _ in h.words) for h in hyps]):.4f}")
    report.append(f"| demo-ctc (sentencepiece), same LM words | 80 ms | {args.demo_scale} | " + " | ".join(cells) +
                  f" | {g.num_states} / {g.num_arcs} | {build_s:.0f} | {t:.1f} |\n")
    print("demo-ctc", cells, flush=True)
    oov = {n: sum(w not in ids for r in d[4] for w in r.split()) / sum(len(r.split()) for r in d[4]) for n, d in data.items()}
    report.append("\nOOV rate of the references w.r.t. the graph vocabulary: "
                  + ", ".join(f"{n} {v:.1%}" for n, v in oov.items()) + ".\n")
    Path(args.out).write_text("".join(report))
    print("".join(report))


if __name__ == "__main__":
    main()
