#!/usr/bin/env python3
"""CTC prefix beam search with a token-level n-gram LM: asrdecode vs pyctcdecode vs flashlight-text.

All decoders see the same emissions and the same ARPA LM (the bundled token-level 4-gram, whose
"words" are the model's token ids spelled ``chr(id + 100)``), with the same LM weight; each
runs with one thread, and all timings come from this one run, reported as ratios.

* asrdecode: ``asrdecode.ctc.beam_search`` with ``NGramLM`` fusion, batch 1 and batch 32 (batches of
  utterances sorted by length), on the native engine (``engine="native"``, the CPU default) and, at
  the beams of ``--torch-beams``, on the tensor engine (``engine="torch"``).
* pyctcdecode (+ kenlm): every token is its own LM "word" (labels ``"▁" + chr(id + 100)``), so
  kenlm scores each token, exactly the token-level LM; pyctcdecode decodes one utterance at a
  time (its batch API only adds a process pool), so its time is the same for both batch sizes.
  It runs with its default pruning (``token_min_logp=-5``) unless ``--pyctc-no-token-pruning``.
* flashlight-text: ``LexiconFreeDecoder`` (CTC criterion, log-add merging) with its ``KenLM``
  on the same ARPA, the blank doubling as the silence token (score 0). It has no per-token
  bonus, so every decoder runs with ``beta = 0``: the three search the same objective
  ``log p_ctc + alpha * log p_LM``.

Emissions: ``--emissions FILE.pt`` (a dict with ``log_probs`` (list of ``[T, V]`` or padded
``[N, T, V]``), ``lengths``, ``texts``, ``blank_id``), else the bundled ``demo-ctc`` model on the
committed test sets (``data/synth_test``, ``data/real``) when it loads, else synthetic peaky
emissions of the test-set sentences (the output says which).

The second table is blank collapse (asrdecode, batch 32): frames removed, speed ratio and WER
change at thresholds 0.999, 0.99 and weak.

Usage: python3 benchmarks/ctc_beam.py [--beams 4 16 64] [--batches 1 32] [--alpha 0.5] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from asrdecode import ctc, evaluate  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402
from asrdecode.tokenizers import SentencePieceTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "src" / "asrdecode" / "models" / "assets"
OFFSET = 100
FRAME_SECONDS_DEFAULT = 0.08


# ----------------------------------------------------------------------------- data
def read_manifests() -> list[tuple[Path, str]]:
    items = []
    for d in (ROOT / "data" / "synth_test", ROOT / "data" / "real"):
        m = d / "manifest.jsonl"
        if m.exists():
            for line in m.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    items.append((d / r["audio_filepath"], r["text"]))
    return items


def emissions_from_model(items):
    from asrdecode.audio import read_audio
    from asrdecode.models import load

    demo = load("demo-ctc")
    out = []
    for i in range(0, len(items), 16):
        chunk = items[i : i + 16]
        waves = [read_audio(p) for p, _ in chunk]
        lp, lens = demo.model.log_probs(waves)
        out += [lp[j, : int(lens[j])].clone() for j in range(len(chunk))]
    return out, demo.blank_id, demo.tokenizer, getattr(demo, "frame_seconds", FRAME_SECONDS_DEFAULT)


def synthetic_emissions(texts, tokenizer, blank: int, seed: int = 0):
    """Peaky CTC-like emissions of the reference token sequences, with confusions and insertions."""
    g = torch.Generator().manual_seed(seed)
    V = tokenizer.vocab_size
    out = []
    for text in texts:
        ids = tokenizer.encode(text)
        path = [blank] * int(torch.randint(0, 4, (1,), generator=g))
        for j, t in enumerate(ids):
            path += [t] * (1 + int(torch.rand(1, generator=g) < 0.3))
            n_blank = int(torch.randint(0, 3, (1,), generator=g))
            if j + 1 < len(ids) and ids[j + 1] == t:
                n_blank = max(n_blank, 1)
            path += [blank] * n_blank
        path += [blank] * int(torch.randint(0, 4, (1,), generator=g))
        T = len(path)
        logits = torch.randn(T, V, generator=g)
        tgt = torch.tensor(path)
        boost = torch.where(tgt == blank, 5.0 + 4.0 * torch.rand(T, generator=g), 4.0 + 4.0 * torch.rand(T, generator=g))
        logits[torch.arange(T), tgt] += boost
        confuse = (torch.rand(T, generator=g) < 0.2) & (tgt != blank)
        other = torch.randint(0, V - 1, (T,), generator=g)
        other = torch.where(other >= blank, other + 1, other)
        logits[torch.arange(T), other] += torch.where(confuse, boost + torch.empty(T).uniform_(-1.5, 0.7, generator=g), 0.0)
        out.append(torch.log_softmax(logits, -1))
    return out


def load_emissions(args):
    items = read_manifests()
    texts = [t for _, t in items]
    tok_path = ASSETS / "tokenizer.model"
    if args.emissions:
        d = torch.load(args.emissions, map_location="cpu")
        lp = d["log_probs"]
        lens = d.get("lengths")
        if isinstance(lp, torch.Tensor):
            lens = lens if lens is not None else torch.full((lp.shape[0],), lp.shape[1])
            lp = [lp[i, : int(lens[i])] for i in range(lp.shape[0])]
        tokenizer = SentencePieceTokenizer(d.get("tokenizer", tok_path), blank_id=d["blank_id"])
        return lp, d["texts"], int(d["blank_id"]), tokenizer, f"emissions file {args.emissions}", d.get("frame_seconds", FRAME_SECONDS_DEFAULT)
    if not args.synthetic:
        try:
            lp, blank, tokenizer, fs = emissions_from_model(items)
            return lp, texts, blank, tokenizer, f"bundled demo-ctc model on {len(items)} test clips (data/synth_test + data/real)", fs
        except Exception as err:  # the model is optional: fall back to synthetic emissions, and say so
            print(f"# demo-ctc not usable ({type(err).__name__}: {err}); using synthetic emissions", file=sys.stderr)
    tokenizer = SentencePieceTokenizer(tok_path)
    blank = tokenizer.blank_id
    return synthetic_emissions(texts, tokenizer, blank), texts, blank, tokenizer, (
        f"SYNTHETIC peaky emissions of the {len(texts)} test-set sentences (no trained model available)"), FRAME_SECONDS_DEFAULT


# ----------------------------------------------------------------------------- metrics
def wer(hyps: list[str], refs: list[str]) -> float:
    """Corpus WER in percent on the texts as given (asrdecode.evaluate, jiwer; no normalisation)."""
    return 100.0 * evaluate.wer(refs, hyps, normalize=False)


# ----------------------------------------------------------------------------- decoders
def pad(lps: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([x.shape[0] for x in lps])
    out = torch.zeros(len(lps), max(1, int(lens.max())), lps[0].shape[1])
    for i, x in enumerate(lps):
        out[i, : x.shape[0]] = x
    return out, lens


def best_of(n, fn, *a, **k):
    """Run ``fn`` ``n`` times; return the first run's output and the smallest time (least disturbed by load)."""
    out, best = None, math.inf
    for _ in range(max(1, n)):
        res, dt = fn(*a, **k)
        out = res if out is None else out
        best = min(best, dt)
    return out, best


class Timed(float):
    """A run's total seconds that also carries its per-item times (``.items``: per utterance, or per batch)."""

    items: list

    def __new__(cls, items: list) -> "Timed":
        obj = super().__new__(cls, sum(items))
        obj.items = list(items)
        return obj


PER_ITEM = True  # --timing per-item (default): sum over items of each item's fastest time; whole: fastest run


def interleaved(jobs, runs):
    """Run every job ``runs`` times, round-robin (so load changes hit all alike); keep each job's fastest time.

    ``jobs``: ``[(key, fn)]`` with ``fn() -> (output, seconds)``. Returns ``{key: (first output, best seconds)}``.
    With per-item timing (``PER_ITEM``) and ``Timed`` seconds, the best time is the sum over items (utterances,
    or batches) of each item's fastest time over the runs: on a shared machine a load burst then spoils one
    item of one run instead of a whole run. Every decoder is timed the same way.
    """
    out: dict = {}
    for _ in range(max(1, runs)):
        for key, fn in jobs:
            res, dt = fn()
            if key not in out:
                out[key] = (res, dt)
            elif PER_ITEM and isinstance(dt, Timed) and isinstance(out[key][1], Timed):
                out[key] = (out[key][0], Timed([min(a, b) for a, b in zip(out[key][1].items, dt.items)]))
            else:
                out[key] = (out[key][0], min(out[key][1], dt))
    return out


def run_ours(lps, blank, lm, alpha, beam, batch, thr, collapse=None, token_beam=None, engine="native"):
    """Decode every utterance; batches are formed from utterances sorted by length (less padding)."""
    order = sorted(range(len(lps)), key=lambda i: lps[i].shape[0]) if batch > 1 else list(range(len(lps)))
    ids: list[list[int]] = [[] for _ in lps]
    times = []
    for i in range(0, len(order), batch):
        t0 = time.perf_counter()
        chunk = order[i : i + batch]
        x, lens = pad([lps[j] for j in chunk])
        res = ctc.beam_search(x, lens, blank, beam=beam, fusion=[(lm, alpha)], beta=0.0, beam_threshold=thr,
                              blank_collapse=collapse, token_beam=token_beam, engine=engine)
        for j, r in zip(chunk, res):
            ids[j] = r[0].tokens
        times.append(time.perf_counter() - t0)
    return ids, Timed(times)


class PyCtc:
    def __init__(self, arpa: Path, vocab: int, blank: int, alpha: float, token_pruning: bool):
        from pyctcdecode import build_ctcdecoder

        labels = ["" if i == blank else "\u2581" + chr(i + OFFSET) for i in range(vocab)]
        import logging

        logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
        self.dec = build_ctcdecoder(labels, kenlm_model_path=str(arpa), alpha=alpha, beta=0.0)
        self.token_min_logp = -5.0 if token_pruning else -1e9

    def run(self, lps, beam, thr):
        ids = []
        times = []
        for x in lps:
            t0 = time.perf_counter()
            text = self.dec.decode(x.numpy(), beam_width=beam, beam_prune_logp=-thr, token_min_logp=self.token_min_logp)
            ids.append([ord(w) - OFFSET for w in text.split()])
            times.append(time.perf_counter() - t0)
        return ids, Timed(times)


class Flashlight:
    def __init__(self, arpa: Path, vocab: int, blank: int, alpha: float):
        from flashlight.lib.text.decoder import KenLM
        from flashlight.lib.text.dictionary import Dictionary

        words = ["<blank>" if i == blank else chr(i + OFFSET) for i in range(vocab)]
        self.dictionary = Dictionary(words)
        self.lm = KenLM(str(arpa), self.dictionary)
        self.blank, self.vocab, self.alpha = blank, vocab, alpha

    def run(self, lps, beam, thr, token_beam=None):
        from flashlight.lib.text.decoder import CriterionType, LexiconFreeDecoder, LexiconFreeDecoderOptions

        opts = LexiconFreeDecoderOptions(beam_size=beam, beam_size_token=token_beam or self.vocab, beam_threshold=thr,
                                         lm_weight=self.alpha, sil_score=0.0, log_add=True,
                                         criterion_type=CriterionType.CTC)
        dec = LexiconFreeDecoder(opts, self.lm, self.blank, self.blank, [])
        ids = []
        times = []
        for x in lps:
            t0 = time.perf_counter()
            x = x.contiguous()
            res = dec.decode(x.data_ptr(), x.shape[0], x.shape[1])
            path = list(res[0].tokens)
            toks, prev = [], None
            for t in path:
                if t != prev and t != self.blank and t >= 0:
                    toks.append(t)
                prev = t
            ids.append(toks)
            times.append(time.perf_counter() - t0)
        return ids, Timed(times)


def texts_of(tokenizer, ids_list):
    out = []
    for ids in ids_list:
        try:
            out.append(tokenizer.decode(ids))
        except Exception:
            out.append("")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emissions", help=".pt file with log_probs, lengths, texts, blank_id")
    ap.add_argument("--synthetic", action="store_true", help="use synthetic emissions even if the model loads")
    ap.add_argument("--arpa", default=str(ASSETS / "token-4gram.arpa.gz"))
    ap.add_argument("--beams", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--alpha", type=float, default=0.5, help="LM weight (same for every decoder)")
    ap.add_argument("--beam-threshold", type=float, default=20.0)
    ap.add_argument("--collapse-beam", type=int, default=16)
    ap.add_argument("--collapse-batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--peers", nargs="*", default=["pyctcdecode", "flashlight"])
    ap.add_argument("--torch-beams", type=int, nargs="*", default=[16],
                    help="beams at which asrdecode's tensor engine (engine='torch') is timed too")
    ap.add_argument("--pyctc-no-token-pruning", action="store_true")
    ap.add_argument("--token-beam", type=int, default=16, help="also run asrdecode and flashlight with this many "
                    "candidate tokens per frame (0: skip)")
    ap.add_argument("--repeat", type=int, default=1, help="times to repeat the emission set (longer timings)")
    ap.add_argument("--timing-runs", type=int, default=3, help="time each decoder this many times, keep the fastest")
    ap.add_argument("--timing", choices=["per-item", "whole"], default="per-item",
                    help="per-item: sum over utterances (batches) of each one's fastest time over the runs; "
                         "whole: the fastest whole run")
    ap.add_argument("--save-emissions", help="write the emissions used (with texts) to this .pt file")
    ap.add_argument("--out", help="also write the markdown tables here")
    args = ap.parse_args()
    global PER_ITEM
    PER_ITEM = args.timing == "per-item"
    torch.set_num_threads(1)

    lps, refs, blank, tokenizer, source, frame_s = load_emissions(args)
    if args.save_emissions:
        torch.save({"log_probs": lps, "texts": refs, "blank_id": blank, "source": source, "frame_seconds": frame_s},
                   args.save_emissions)
    lps = [x.float() for x in lps] * args.repeat
    refs = refs * args.repeat
    vocab = lps[0].shape[1]
    n_frames = sum(x.shape[0] for x in lps)
    lines = [f"Emissions: {source}; {len(lps)} utterances, {n_frames} frames ({n_frames * frame_s:.0f} s of audio), "
             f"V = {vocab}, blank = {blank}.",
             f"LM: {Path(args.arpa).name}, weight alpha = {args.alpha}, beta = 0, beam_threshold = {args.beam_threshold}; "
             f"one thread; each time is " + (f"the sum over utterances (batches) of each one's fastest of {args.timing_runs} runs"
             if args.timing == "per-item" else f"the fastest of {args.timing_runs} runs") + f"; {time.strftime('%Y-%m-%d')}.", ""]

    tmpdir = Path(tempfile.mkdtemp(prefix="ctc_bench_"))
    arpa = Path(args.arpa)
    if arpa.suffix == ".gz":
        plain = tmpdir / arpa.stem
        with gzip.open(arpa, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        arpa = plain
    lm = NGramLM.from_arpa(arpa, vocab_size=vocab, blank_id=blank)

    greedy = ctc.greedy(pad(lps)[0], pad(lps)[1], blank)
    greedy_wer = wer(texts_of(tokenizer, [h.tokens for h in greedy]), refs)
    lines.append(f"Greedy WER (no LM): {greedy_wer:.2f}%")
    lines.append("")

    peers = {}
    if "pyctcdecode" in args.peers:
        try:
            peers["pyctcdecode"] = PyCtc(arpa, vocab, blank, args.alpha, not args.pyctc_no_token_pruning)
        except Exception as err:
            lines.append(f"(pyctcdecode unavailable: {type(err).__name__}: {err})")
    if "flashlight" in args.peers:
        try:
            peers["flashlight"] = Flashlight(arpa, vocab, blank, args.alpha)
        except Exception as err:
            lines.append(f"(flashlight-text unavailable: {type(err).__name__}: {err})")

    # warm-up (allocations, LM caches) on a few utterances
    run_ours(lps[:4], blank, lm, args.alpha, 4, 4, args.beam_threshold)
    run_ours(lps[:4], blank, lm, args.alpha, 4, 4, args.beam_threshold, engine="torch")

    objective_cache: dict[tuple[int, tuple[int, ...]], float] = {}

    def objective(i: int, ids: list[int]) -> float:
        """The searched objective of a hypothesis: log p_ctc(ids | x) + alpha * log p_LM(ids </s>)."""
        key = (i, tuple(ids))
        if key not in objective_cache:
            x = lps[i]
            if ids:
                ac = -float(torch.nn.functional.ctc_loss(
                    x[:, None, :], torch.tensor([ids]), torch.tensor([x.shape[0]]), torch.tensor([len(ids)]),
                    blank=blank, reduction="sum", zero_infinity=False))
            else:
                ac = float(x[:, blank].sum())
            objective_cache[key] = ac + args.alpha * lm.score_sequence(ids)
        return objective_cache[key]

    def versus(ids_a, ids_b) -> str:
        """'a/b': utterances where hypothesis a (resp. b) scores higher on the objective."""
        wa = wb = 0
        for i, (a, b) in enumerate(zip(ids_a, ids_b)):
            oa, ob = objective(i, a), objective(i, b)
            wa += oa > ob + 1e-3
            wb += ob > oa + 1e-3
        return f"{wa}/{wb}"

    audio_s = n_frames * frame_s
    rows = ["| beam | decoder | WER % | decode s | RTFx | " + " | ".join(f"time / asrdecode native batch {b}" for b in args.batches)
            + " | objective: asrdecode better / peer better |",
            "|---|---|---|---|---|" + "---|" * len(args.batches) + "---|"]
    tb = args.token_beam
    for beam in args.beams:
        engines = ["native"] + (["torch"] if beam in args.torch_beams else [])
        token_beams = [None] + ([tb] if tb else [])
        jobs = []
        for t in token_beams:
            jobs += [(("ours", e, b, t), lambda b=b, e=e, t=t, beam=beam: run_ours(lps, blank, lm, args.alpha, beam, b,
                                                                                   args.beam_threshold, token_beam=t, engine=e))
                     for e in engines for b in args.batches]
            if t is None:
                jobs += [((name, "", 0, None), lambda peer=peer, beam=beam: peer.run(lps, beam, args.beam_threshold))
                         for name, peer in peers.items()]
            elif "flashlight" in peers:
                jobs.append((("flashlight", "", 0, t), lambda t=t, beam=beam: peers["flashlight"].run(
                                lps, beam, args.beam_threshold, token_beam=t)))
        res = interleaved(jobs, args.timing_runs)
        ref_ids = res[("ours", "native", args.batches[-1], None)][0]
        for (name, e, b, t), (ids, dt) in res.items():
            w = wer(texts_of(tokenizer, ids), refs)
            base = {c: res[("ours", "native", c, t)][1] for c in args.batches}
            if name == "ours":
                ratios = " | ".join(f"{dt / base[c]:.2f}" for c in args.batches)
                label = f"asrdecode {e} batch {b}" + (f", token_beam {t}" if t else "")
                vs = "-" if not t else versus(ref_ids, ids) + " (vs all tokens)"
                if e == "torch":
                    same = ids == res[("ours", "native", b, t)][0]
                    vs = "same hypotheses as native" if same else "DIFFERENT hypotheses from native"
            else:
                ratios = " | ".join(f"**{dt / base[c]:.1f}x**" for c in args.batches)
                label = {"pyctcdecode": "pyctcdecode (token_min_logp -5)" if not args.pyctc_no_token_pruning
                         else "pyctcdecode (no token pruning)"}.get(name, f"flashlight ({'beam_size_token ' + str(t) if t else 'all tokens'})")
                vs = versus(res[("ours", "native", args.batches[-1], t)][0], ids)
            rows.append(f"| {beam} | {label} | {w:.2f} | {dt:.3f} | {audio_s / dt:.0f} | {ratios} | {vs} |")
            print(rows[-1], flush=True)
    lines += ["### Beam search with the token 4-gram LM", "", *rows, ""]

    # Blank collapse: frames removed, WER change and speed-up, at batch 1 and batch 32.
    x_all, len_all = pad(lps)
    cb = args.collapse_batches
    crow = ["| blank collapse | frames removed % | WER % | WER change | " + " | ".join(f"speed-up batch {b}" for b in cb) + " |",
            "|---|---|---|---|" + "---|" * len(cb)]
    variants = [None, 0.999, 0.99, "weak"]
    jobs = [((th, b), lambda th=th, b=b: run_ours(lps, blank, lm, args.alpha, args.collapse_beam, b, args.beam_threshold,
                                                  collapse=th)) for th in variants for b in cb]
    res = interleaved(jobs, args.timing_runs)
    base_w = wer(texts_of(tokenizer, res[(None, cb[0])][0]), refs)
    for th in variants:
        if th is None:
            removed = 0.0
        else:
            _, new_len, _ = ctc.blank_collapse(x_all, len_all, blank, None if th == "weak" else th)
            removed = 100.0 * (1 - float(new_len.sum()) / float(len_all.sum()))
        w = wer(texts_of(tokenizer, res[(th, cb[0])][0]), refs)
        sp = " | ".join(f"{res[(None, b)][1] / res[(th, b)][1]:.2f}x ({res[(th, b)][1]:.3f} s)" for b in cb)
        change = "-" if th is None else f"{w - base_w:+.2f}"
        crow.append(f"| {'off' if th is None else th} | {removed:.1f} | {w:.2f} | {change} | {sp} |")
        print(crow[-1], flush=True)
    lines += [f"### Blank collapse (asrdecode native engine, beam {args.collapse_beam}, same LM)", "", *crow, ""]
    lines += ["Command: `OMP_NUM_THREADS=1 python3 benchmarks/ctc_beam.py " + " ".join(sys.argv[1:]) + "`", ""]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
