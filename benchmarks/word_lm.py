#!/usr/bin/env python3
"""Word-level n-gram LM fusion (asrdecode.lm.WordNGramLM) against the token-level LM.

Part ``demo`` (default): the bundled demo-ctc (CTC prefix beam search) and demo-rnnt (ALSD++) on
the committed test sets (data/synth_test 50 clips + data/real 10 clips), one thread:

* no LM; the bundled token 4-gram at the weights ``recipes/tune_lm.py`` chose on dev (CTC 0.7 /
  bonus 2.0 per token, RNN-T 0.5 / 1.0); the bundled word 3-gram (``word-3gram.arpa.gz``, 52k
  words, training text only) at a weight and per-word bonus chosen here on a grid over the first
  ``--tune`` synthetic test clips (no dev set ships with the repository), WER reported on the
  other clips (``held-out``) and on all 60;
* decode time of each LM setting as a ratio to the token LM, measured in one run (interleaved,
  fastest of ``--runs``), batch 32 (utterances sorted by length) and batch 1.

Part ``chars``: a character-level CTC workload for the issue's peer comparison (see ``--help``).

Usage: OMP_NUM_THREADS=1 python3 benchmarks/word_lm.py [--part demo|chars|all] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from asrdecode import ctc, evaluate  # noqa: E402
from asrdecode import transducer as tr  # noqa: E402
from asrdecode.lm import NGramLM, WordNGramLM  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "src" / "asrdecode" / "models" / "assets"
WORD_ARPA = ASSETS / "word-3gram.arpa.gz"
TOKEN_ARPA = ASSETS / "token-4gram.arpa.gz"
TOKEN_LM_DEV = {"demo-ctc": (0.7, 2.0), "demo-rnnt": (0.5, 1.0)}  # recipes/README.md (tune_lm.py on dev)


def wer(refs: list[str], hyps: list[str]) -> float:
    return 100.0 * evaluate.wer(refs, hyps, normalize=False)


def read_sets() -> list[tuple[str, Path, str]]:
    out = []
    for name in ("synth_test", "real"):
        d = ROOT / "data" / name
        for line in (d / "manifest.jsonl").read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out.append((name, d / r["audio_filepath"], r["text"]))
    return out


def encode_all(demo, items) -> list[torch.Tensor]:
    """Per utterance: CTC log-probs ``[T, V]`` (demo-ctc) or encoder output ``[T, D]`` (transducers)."""
    from asrdecode.audio import read_audio

    out = []
    with torch.inference_mode():
        for i in range(0, len(items), 16):
            chunk = items[i : i + 16]
            feats, flen = demo.features([read_audio(p) for _, p, _ in chunk])
            enc, elen = demo.encode_features(feats, flen)
            if demo.kind == "ctc":
                enc = demo.model.log_probs_from_encoder(enc)
            out += [enc[j, : int(elen[j])].clone() for j in range(len(chunk))]
    return out


def pad(xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([x.shape[0] for x in xs])
    out = torch.zeros(len(xs), max(1, int(lens.max())), xs[0].shape[1], dtype=xs[0].dtype)
    for i, x in enumerate(xs):
        out[i, : x.shape[0]] = x
    return out, lens


def decode(demo, xs: list[torch.Tensor], fusion, beta: float, beam: int, batch: int) -> tuple[list[str], float]:
    """Texts of every utterance and the decode time (batches of utterances sorted by length)."""
    order = sorted(range(len(xs)), key=lambda i: xs[i].shape[0])
    texts = [""] * len(xs)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            x, n = pad([xs[j] for j in idx])
            if demo.kind == "ctc":
                res = ctc.beam_search(x, n, demo.blank_id, beam=beam, fusion=fusion, beta=beta, tokenizer=demo.tokenizer)
                hyps = [r[0] for r in res]
            else:
                hyps = [r[0] for r in tr.beam_search(demo.model, x, n, beam=beam, fusion=fusion, beta=beta,
                                                       tokenizer=demo.tokenizer)]
            for j, h in zip(idx, hyps):
                texts[j] = h.text or ""
    return texts, time.perf_counter() - t0


def demo_part(args) -> list[str]:
    from asrdecode.models import load

    items = read_sets()
    refs = [t for _, _, t in items]
    tune = list(range(args.tune))
    held = list(range(args.tune, len(items)))
    lines = [f"### Bundled models, word 3-gram vs token 4-gram ({time.strftime('%Y-%m-%d')})", "",
             f"`OMP_NUM_THREADS=1 python3 benchmarks/word_lm.py --part demo` ({len(items)} clips: data/synth_test + "
             f"data/real; word LM weight and bonus chosen on the first {args.tune} synthetic clips, WER on the other "
             f"{len(held)} (held-out) and on all; token LM at its dev-tuned weights; one thread).", ""]
    for name, beam in (("demo-ctc", args.ctc_beam), ("demo-rnnt", args.rnnt_beam)):
        if name not in args.models:
            continue
        demo = load(name)
        tok = demo.tokenizer
        xs = encode_all(demo, items)
        t0 = time.perf_counter()
        word = WordNGramLM.from_arpa(WORD_ARPA, tok, vocab_size=tok.vocab_size, blank_id=demo.blank_id)
        build_s = time.perf_counter() - t0
        token = NGramLM.from_arpa(TOKEN_ARPA, vocab_size=tok.vocab_size, blank_id=demo.blank_id)
        # grid on the tuning clips
        best = None
        for alpha in args.alphas:
            for bonus in args.bonuses:
                wl = word.with_unweighted_word_bonus(bonus / alpha)
                texts, _ = decode(demo, [xs[i] for i in tune], [(wl, alpha)], 0.0, beam, 32)
                w = wer([refs[i] for i in tune], texts)
                print(f"# {name} tune alpha={alpha} bonus={bonus}: {w:.2f}", file=sys.stderr, flush=True)
                if best is None or w < best[0] - 1e-9:
                    best = (w, alpha, bonus)
        _, alpha, bonus = best
        ta, tb = TOKEN_LM_DEV[name]
        wl = word.with_unweighted_word_bonus(bonus / alpha)
        settings = {
            "no LM": ([], 0.0),
            f"token 4-gram (w {ta}, token bonus {tb})": ([(token, ta)], tb),
            f"word 3-gram (w {alpha}, word bonus {bonus})": ([(wl, alpha)], 0.0),
            f"word 3-gram + token 4-gram (w {alpha} / {ta / 2})": ([(wl, alpha), (token, ta / 2)], tb / 2),
        }
        results: dict[str, dict] = {k: {} for k in settings}
        decode(demo, xs[:4], settings[next(iter(settings))][0], 0.0, beam, 4)  # warm-up
        for batch in args.batches:
            for _ in range(args.runs):
                for key, (fusion, beta) in settings.items():
                    texts, dt = decode(demo, xs, fusion, beta, beam, batch)
                    r = results[key]
                    r.setdefault("texts", texts)
                    r[batch] = min(r.get(batch, math.inf), dt)
        token_key = list(settings)[1]
        search = "CTC prefix beam search" if demo.kind == "ctc" else "ALSD++"
        lines += [f"**{name}**, {search} beam {beam}; word LM built in {build_s:.1f} s "
                  f"({len(word.words)} words, {word.num_nodes} trie nodes); tuning grid WER {best[0]:.2f}%.", "",
                  "| LM | WER % held-out | WER % all 60 | "
                  + " | ".join(f"time / token LM, batch {b}" for b in args.batches) + " |",
                  "|---|---|---|" + "---|" * len(args.batches)]
        for key, r in results.items():
            h = wer([refs[i] for i in held], [r["texts"][i] for i in held])
            a = wer(refs, r["texts"])
            ratios = " | ".join(f"{r[b] / results[token_key][b]:.2f}" for b in args.batches)
            lines.append(f"| {key} | {h:.2f} | {a:.2f} | {ratios} |")
        lines.append("")
        print("\n".join(lines), file=sys.stderr, flush=True)
    return lines


# ----------------------------------------------------------------------------- character workload
LETTERS = "abcdefghijklmnopqrstuvwxyz'"


def char_vocab() -> tuple[list[str], int]:
    """Blank (id 0), '|' word delimiter, letters and apostrophe (wav2vec2-style character CTC)."""
    return ["<blank>", "|"] + list(LETTERS), 0


def char_emissions(texts: list[str], seed: int, noise: float) -> list[torch.Tensor]:
    """Peaky character CTC emissions of ``texts`` with acoustic confusions (no trained char model ships).

    Each character gets 1-3 frames; blanks between; a frame's true class gets a boost, and with
    probability ``noise`` a confusable class (a random letter) gets a boost of similar size, so that
    greedy decoding makes spelling errors an LM can fix.
    """
    symbols, blank = char_vocab()
    idx = {s: i for i, s in enumerate(symbols)}
    g = torch.Generator().manual_seed(seed)
    out = []
    for text in texts:
        ids = [idx["|" if c == " " else c] for c in text if c == " " or c in idx]
        path = [blank] * int(torch.randint(1, 4, (1,), generator=g))
        for j, t in enumerate(ids):
            path += [t] * int(torch.randint(1, 3, (1,), generator=g))
            nb = int(torch.randint(0, 3, (1,), generator=g))
            if j + 1 < len(ids) and ids[j + 1] == t:
                nb = max(nb, 1)
            path += [blank] * nb
        path += [blank] * int(torch.randint(1, 4, (1,), generator=g))
        T, V = len(path), len(symbols)
        tgt = torch.tensor(path)
        logits = torch.randn(T, V, generator=g) * 1.0
        boost = 3.0 + 3.0 * torch.rand(T, generator=g)
        logits[torch.arange(T), tgt] += boost
        confuse = (torch.rand(T, generator=g) < noise) & (tgt != blank) & (tgt != idx["|"])
        other = torch.randint(2, V, (T,), generator=g)
        logits[torch.arange(T), other] += torch.where(confuse, boost + torch.empty(T).uniform_(-1.0, 1.0, generator=g), 0.0)
        out.append(torch.log_softmax(logits, -1))
    return out


def char_part(args) -> list[str]:
    from asrdecode.lm import read_arpa

    items = read_sets()
    refs = [t for _, _, t in items]
    symbols, blank = char_vocab()
    lps = char_emissions(refs, args.seed, args.char_noise) * args.repeat
    refs = refs * args.repeat
    tmp = Path(tempfile.mkdtemp(prefix="word_lm_bench_"))
    arpa = tmp / "words.arpa"
    with gzip.open(WORD_ARPA, "rb") as src, open(arpa, "wb") as dst:
        shutil.copyfileobj(src, dst)
    words = [w for w in read_arpa(arpa).vocab if w not in ("<s>", "</s>", "<unk>")]
    alpha, bonus = args.char_alpha, args.char_bonus
    t0 = time.perf_counter()
    lm = WordNGramLM.from_arpa(arpa, symbols, blank_id=blank, unweighted_word_bonus=bonus / alpha)
    build_s = time.perf_counter() - t0
    lexicon_lm = WordNGramLM.from_arpa(arpa, symbols, blank_id=blank, unweighted_word_bonus=bonus / alpha, lexicon=True)
    n_frames = sum(x.shape[0] for x in lps)
    greedy = ctc.greedy(*pad(lps), blank)
    text_of = lambda toks: "".join(symbols[t] for t in toks).replace("|", " ").split()  # noqa: E731
    lines = [f"### Character CTC with a word 3-gram: asrdecode vs pyctcdecode vs flashlight-text ({time.strftime('%Y-%m-%d')})",
             "",
             f"`OMP_NUM_THREADS=1 python3 benchmarks/word_lm.py --part chars` — SYNTHETIC peaky character emissions "
             f"(seed {args.seed}, confusion rate {args.char_noise}) of the {len(items)} test sentences x {args.repeat} "
             f"({n_frames} frames; vocabulary blank, '|', a-z, '); LM: the bundled word 3-gram ({len(words)} words, "
             f"lmplz on the training text, test sentences excluded), the same ARPA for all three decoders; LM weight "
             f"{alpha}, word bonus {bonus}, unk offset -10 (log10) for asrdecode and pyctcdecode; one thread. "
             f"asrdecode WordNGramLM build {build_s:.1f} s.", "",
             f"Greedy WER {wer(refs, [' '.join(text_of(h.tokens)) for h in greedy]):.2f}%.", "",
             "| decoder | beam | batch | WER % | time / flashlight beam 16 |", "|---|---|---|---|---|"]
    rows = []

    def ours(beam: int, batch: int, model=lm, token_beam=None):
        def run():
            order = sorted(range(len(lps)), key=lambda i: lps[i].shape[0])
            out = [""] * len(lps)
            t0 = time.perf_counter()
            for i in range(0, len(order), batch):
                idx = order[i : i + batch]
                x, n = pad([lps[j] for j in idx])
                res = ctc.beam_search(x, n, blank, beam=beam, fusion=[(model, alpha)], token_beam=token_beam)
                for j, r in zip(idx, res):
                    out[j] = " ".join(text_of(r[0].tokens))
            return out, time.perf_counter() - t0
        return run

    def pyctc(beam: int):
        import logging

        from pyctcdecode import build_ctcdecoder

        logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
        labels = ["", " "] + list(LETTERS)
        dec = build_ctcdecoder(labels, kenlm_model_path=str(arpa), unigrams=words, alpha=alpha, beta=bonus)

        def run():
            t0 = time.perf_counter()
            out = [" ".join(dec.decode(x.numpy(), beam_width=beam).split()) for x in lps]
            return out, time.perf_counter() - t0
        return run

    def flashlight(beam: int):
        from flashlight.lib.text.decoder import (CriterionType, KenLM, LexiconDecoder, LexiconDecoderOptions, Trie,
                                                 SmearingMode)
        from flashlight.lib.text.dictionary import Dictionary

        tokens = Dictionary(["<blank>", "|"] + list(LETTERS))
        lexicon = {w: [list(w) + ["|"]] for w in words if all(c in LETTERS for c in w)}
        word_dict = Dictionary(list(lexicon) + ["<unk>"])
        word_dict.set_default_index(word_dict.get_index("<unk>"))
        flm = KenLM(str(arpa), word_dict)
        sil, blank_i, unk = tokens.get_index("|"), tokens.get_index("<blank>"), word_dict.get_index("<unk>")
        trie = Trie(len(symbols), sil)
        start = flm.start(False)
        for w, spellings in lexicon.items():
            wid = word_dict.get_index(w)
            _, score = flm.score(start, wid)
            for sp in spellings:
                trie.insert([tokens.get_index(c) for c in sp], wid, score)
        trie.smear(SmearingMode.MAX)
        opts = LexiconDecoderOptions(beam_size=beam, beam_size_token=len(symbols), beam_threshold=25.0,
                                     lm_weight=alpha, word_score=bonus, unk_score=-math.inf, sil_score=0.0,
                                     log_add=True, criterion_type=CriterionType.CTC)
        dec = LexiconDecoder(opts, trie, flm, sil, blank_i, unk, [], False)

        def run():
            out = []
            t0 = time.perf_counter()
            for x in lps:
                x = x.contiguous()
                res = dec.decode(x.data_ptr(), x.shape[0], x.shape[1])
                out.append(" ".join(word_dict.get_entry(w) for w in res[0].words if w >= 0))
            return out, time.perf_counter() - t0
        return run

    jobs = []
    for beam in args.char_beams:
        for batch in args.batches:
            jobs.append((("asrdecode WordNGramLM", beam, batch), ours(beam, batch)))
            jobs.append((("asrdecode WordNGramLM, lexicon=True", beam, batch), ours(beam, batch, lexicon_lm)))
    for beam in args.pyctc_beams:
        try:
            jobs.append((("pyctcdecode", beam, 1), pyctc(beam)))
        except Exception as err:  # noqa: BLE001 - peers are optional
            lines.append(f"(pyctcdecode unavailable: {type(err).__name__}: {err})")
    try:
        jobs.append((("flashlight-text LexiconDecoder", 16, 1), flashlight(16)))
    except Exception as err:  # noqa: BLE001
        lines.append(f"(flashlight-text unavailable: {type(err).__name__}: {err})")
    results: dict = {}
    for _ in range(args.runs):
        for key, fn in jobs:
            out, dt = fn()
            prev = results.get(key)
            results[key] = (out if prev is None else prev[0], dt if prev is None else min(prev[1], dt))
            print(f"# {key}: {dt:.2f} s", file=sys.stderr, flush=True)
    base = results.get(("flashlight-text LexiconDecoder", 16, 1))
    for key, (out, dt) in results.items():
        ratio = f"{dt / base[1]:.2f}" if base else "-"
        rows.append(f"| {key[0]} | {key[1]} | {key[2]} | {wer(refs, out):.2f} | {ratio} |")
    lines += rows + [""]
    print("\n".join(lines), file=sys.stderr, flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("demo", "chars", "all"), default="demo")
    ap.add_argument("--models", nargs="+", default=["demo-ctc", "demo-rnnt"])
    ap.add_argument("--ctc-beam", type=int, default=8)
    ap.add_argument("--rnnt-beam", type=int, default=4)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--tune", type=int, default=25, help="synthetic clips used to choose the word LM weight/bonus")
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.3, 0.5, 0.7, 1.0])
    ap.add_argument("--bonuses", type=float, nargs="+", default=[0.0, 1.0, 2.0, 4.0])
    ap.add_argument("--runs", type=int, default=2, help="timing runs (interleaved), fastest kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--char-noise", type=float, default=0.25)
    ap.add_argument("--char-alpha", type=float, default=0.5)
    ap.add_argument("--char-bonus", type=float, default=1.0)
    ap.add_argument("--char-beams", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--pyctc-beams", type=int, nargs="+", default=[64])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    random.seed(args.seed)
    lines: list[str] = []
    if args.part in ("demo", "all"):
        lines += demo_part(args)
    if args.part in ("chars", "all"):
        lines += char_part(args)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
