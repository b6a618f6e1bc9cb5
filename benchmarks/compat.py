#!/usr/bin/env python3
"""asrdecode.compat facades against the libraries they stand in for, on the same inputs, one run.

* pyctcdecode: the same script (``build_ctcdecoder(labels, kenlm_model_path=ARPA, alpha, beta)`` then
  ``decode`` per utterance, and ``decode_batch``) with the real pyctcdecode (+ kenlm) and with
  ``asrdecode.compat.build_ctcdecoder``;
* torchaudio's ``ctc_decoder``: torchaudio is not installed here, so the peer is what it runs,
  flashlight-text's ``LexiconDecoder`` built as torchaudio builds it (lexicon trie with the LM's
  unigram scores, max smearing, KenLM, CTC criterion), called per utterance as torchaudio's
  ``CTCDecoder.__call__`` does; against ``asrdecode.compat.ctc_decoder(lexicon=..., tokens=...,
  lm=...)`` called with batches of 32 and of 1.

Workload: benchmarks/word_lm.py's character CTC emissions (SYNTHETIC peaky emissions with
confusions, of the 60 committed test sentences; no trained character model ships) and the
bundled word 3-gram (52k words), one thread. Times: fastest of ``--runs`` interleaved runs;
ratios are peer time / facade time (> 1: the facade is faster). Build times are reported apart.

Usage: OMP_NUM_THREADS=1 python3 benchmarks/compat.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from word_lm import LETTERS, WORD_ARPA, char_emissions, read_sets, wer  # noqa: E402

from asrdecode import compat  # noqa: E402
from asrdecode.lm import read_arpa  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--pyctc-beam", type=int, default=64)
    ap.add_argument("--ta-beam", type=int, default=50, help="torchaudio's default beam_size")
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("pyctcdecode").setLevel(logging.ERROR)

    refs = [t for _, _, t in read_sets()]
    lps = char_emissions(refs, args.seed, args.noise)  # [T, 28]: blank, '|', a-z, '
    frames = sum(x.shape[0] for x in lps)
    tmp = Path(tempfile.mkdtemp(prefix="compat_bench_"))
    arpa = tmp / "words.arpa"
    with gzip.open(WORD_ARPA, "rb") as src, open(arpa, "wb") as dst:
        shutil.copyfileobj(src, dst)
    words = [w for w in read_arpa(arpa).vocab if w not in ("<s>", "</s>", "<unk>") and all(c in LETTERS for c in w)]
    labels = ["", " "] + list(LETTERS)  # pyctcdecode style
    tokens = ["-", "|"] + list(LETTERS)  # torchaudio style
    lexicon = tmp / "lexicon.txt"
    lexicon.write_text("".join(f"{w} {' '.join(w)} |\n" for w in words))
    np_lps = [x.numpy() for x in lps]
    alpha, beta = args.alpha, args.beta
    lines = [f"### asrdecode.compat vs pyctcdecode and flashlight-text ({time.strftime('%Y-%m-%d')})", "",
             f"`OMP_NUM_THREADS=1 python3 benchmarks/compat.py` — SYNTHETIC character CTC emissions of the "
             f"{len(refs)} test sentences ({frames} frames, confusion rate {args.noise}), the bundled word 3-gram "
             f"({len(words)} words) as ARPA for every decoder, LM weight {alpha}, word bonus {beta}; one thread; "
             f"fastest of {args.runs} interleaved runs; ratio = peer time / facade time (> 1: facade faster).", ""]

    # ---- builds (not timed against each other)
    builds = {}
    jobs = {}
    import pyctcdecode

    (real, builds["pyctcdecode build_ctcdecoder"]) = timed(lambda: pyctcdecode.build_ctcdecoder(
        labels, kenlm_model_path=str(arpa), alpha=alpha, beta=beta))
    (ours, builds["compat build_ctcdecoder"]) = timed(lambda: compat.build_ctcdecoder(
        labels, kenlm_model_path=str(arpa), alpha=alpha, beta=beta))
    bw = args.pyctc_beam
    jobs["pyctcdecode decode (per utterance)"] = lambda: [real.decode(x, beam_width=bw) for x in np_lps]
    jobs["compat decode (per utterance)"] = lambda: [ours.decode(x, beam_width=bw) for x in np_lps]
    jobs["compat decode_batch"] = lambda: ours.decode_batch(None, np_lps, beam_width=bw)

    from flashlight.lib.text.decoder import (CriterionType, LexiconDecoder, LexiconDecoderOptions,
                                             SmearingMode, Trie)
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary, create_word_dict, load_words

    def build_flashlight():  # as torchaudio.models.decoder.ctc_decoder builds it
        tok_dict = Dictionary(tokens)
        lex = load_words(str(lexicon))
        word_dict = create_word_dict(lex)
        flm = KenLM(str(arpa), word_dict)
        sil, blank, unk = tok_dict.get_index("|"), tok_dict.get_index("-"), word_dict.get_index("<unk>")
        trie = Trie(len(tokens), sil)
        start = flm.start(False)
        for word, spellings in lex.items():
            wid = word_dict.get_index(word)
            _, score = flm.score(start, wid)
            for sp in spellings:
                trie.insert([tok_dict.get_index(t) for t in sp], wid, score)
        trie.smear(SmearingMode.MAX)
        opts = LexiconDecoderOptions(beam_size=args.ta_beam, beam_size_token=len(tokens), beam_threshold=50.0,
                                     lm_weight=alpha, word_score=beta, unk_score=-math.inf, sil_score=0.0,
                                     log_add=False, criterion_type=CriterionType.CTC)
        return LexiconDecoder(opts, trie, flm, sil, blank, unk, [], False), word_dict

    ((fl, fl_words), builds["flashlight-text LexiconDecoder (torchaudio's build)"]) = timed(build_flashlight)
    (ta, builds["compat ctc_decoder"]) = timed(lambda: compat.ctc_decoder(
        lexicon=str(lexicon), tokens=tokens, lm=str(arpa), beam_size=args.ta_beam, beam_threshold=50.0,
        lm_weight=alpha, word_score=beta))

    def flashlight_run():
        out = []
        for x in lps:
            x = x.contiguous()
            res = fl.decode(x.data_ptr(), x.shape[0], x.shape[1])
            out.append(" ".join(fl_words.get_entry(w) for w in res[0].words if w >= 0))
        return out

    order = sorted(range(len(lps)), key=lambda i: lps[i].shape[0])

    def ta_run(batch: int):
        def run():
            out = [""] * len(lps)
            for s in range(0, len(order), batch):
                idx = order[s: s + batch]
                lens = torch.tensor([lps[i].shape[0] for i in idx])
                em = torch.zeros(len(idx), int(lens.max()), len(tokens))
                for j, i in enumerate(idx):
                    em[j, : lps[i].shape[0]] = lps[i]
                for i, hyps in zip(idx, ta(em, lens)):
                    out[i] = " ".join(hyps[0].words)
            return out
        return run

    from asrdecode import ctc

    def direct(batch: int, fusion, beam: int, thr: float, log_softmax: bool):
        """asrdecode's own call with the facade's fusion models: what the facade adds is the difference."""
        def run():
            out = [""] * len(lps)
            for s in range(0, len(order), batch):
                idx = order[s: s + batch]
                lens = torch.tensor([lps[i].shape[0] for i in idx])
                em = torch.zeros(len(idx), int(lens.max()), len(tokens))
                for j, i in enumerate(idx):
                    em[j, : lps[i].shape[0]] = lps[i]
                res = ctc.beam_search(em, lens, 0, beam=beam, fusion=fusion, beam_threshold=thr,
                                      log_softmax=log_softmax)
                for i, hyps in zip(idx, res):
                    out[i] = " ".join("".join(tokens[t] for t in hyps[0].tokens).replace("|", " ").split())
            return out
        return run

    jobs["asrdecode ctc.beam_search (per utterance), pyctcdecode facade's LM"] = direct(
        1, [(ours.word_lm, ours.lm_weight)], bw, 10.0, False)
    jobs["flashlight-text LexiconDecoder (per utterance)"] = flashlight_run
    jobs["asrdecode ctc.beam_search, batch 32, ctc_decoder facade's LM"] = direct(32, ta.fusion, args.ta_beam, 50.0,
                                                                                 True)
    jobs["compat ctc_decoder, batch 32"] = ta_run(32)
    jobs["compat ctc_decoder, batch 1"] = ta_run(1)

    results: dict[str, tuple[list[str], float]] = {}
    for _ in range(args.runs):
        for name, fn in jobs.items():
            out, dt = timed(fn)
            prev = results.get(name)
            results[name] = (out, dt if prev is None else min(prev[1], dt))
            print(f"# {name}: {dt:.2f} s", file=sys.stderr, flush=True)

    def table(peer: str, facade: list[str], beam: int) -> list[str]:
        p_out, p_t = results[peer]
        rows = ["| decoder | beam | WER % | same transcript as the peer | speed-up vs the peer |",
                "|---|---|---|---|---|",
                f"| {peer} | {beam} | {wer(refs, p_out):.2f} | - | 1.00 |"]
        for name in facade:
            out, t = results[name]
            same = np.mean([a == b for a, b in zip(out, p_out)]) * 100
            rows.append(f"| {name} | {beam} | {wer(refs, out):.2f} | {same:.0f}% | {p_t / t:.2f}x |")
        return rows + [""]

    lines += ["**pyctcdecode script** (`decode` per utterance; `decode_batch`)", ""]
    lines += table("pyctcdecode decode (per utterance)", ["compat decode (per utterance)", "compat decode_batch",
                   "asrdecode ctc.beam_search (per utterance), pyctcdecode facade's LM"], bw)
    lines += ["**torchaudio `ctc_decoder` script** (lexicon decoding; peer: flashlight-text, what torchaudio runs)", ""]
    lines += table("flashlight-text LexiconDecoder (per utterance)",
                   ["compat ctc_decoder, batch 32", "compat ctc_decoder, batch 1",
                    "asrdecode ctc.beam_search, batch 32, ctc_decoder facade's LM"], args.ta_beam)
    for facade, own in (("compat decode (per utterance)", "asrdecode ctc.beam_search (per utterance), pyctcdecode "
                         "facade's LM"), ("compat ctc_decoder, batch 32", "asrdecode ctc.beam_search, batch 32, "
                                          "ctc_decoder facade's LM")):
        same = results[facade][0] == results[own][0]
        lines.append(f"- {facade}: time / asrdecode's own call {results[facade][1] / results[own][1]:.2f}, "
                     f"transcripts {'identical' if same else 'DIFFERENT'}.")
    lines.append("")
    lines += ["Build times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in builds.items()) + ".", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
