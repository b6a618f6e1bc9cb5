"""Transducer beam search (ALSD++ / AES++) vs greedy label-looping: decoder-only speed and WER.

Speed: decoder-only time (encoder output given) of greedy label-looping and of ALSD++ / AES++
beam 4 (with and without the bundled n-gram LM where one fits the vocabulary), one thread,
batch 1 and 16, timed interleaved in one run (median of repeats), reported as ratios to greedy.
Models: the paper-sized random RNN-T / TDT of benchmarks/paper_model.py, and the bundled
demo-rnnt / demo-tdt on the encoder output of the committed synthetic test set.

WER: greedy vs beam vs beam + LM for demo-rnnt / demo-tdt on data/synth_test (50 held-out
synthetic sentences) and data/real (10 recordings), as recipes/evaluate_models.py computes it.

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py [--frames 150] [--repeats 3] [--skip-wer]

WIND beam search (method="wind", window 8) vs ALSD++ at beams 2, 4, 8, and WIND beam 4 with the
expansion thresholds of WIND_GAMMAS (speed on demo-rnnt, on the paper RNN-T as calibrated and with
its joint logits sharpened x16, WER of demo-rnnt; then batch 1 utterance by utterance over the 50
synthetic test utterances and over 5 paper-model utterances), one run:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --wind [--frames 150] [--repeats 3]

LM weight / beta / blank scoring of ALSD++ and WIND beam 4 with the bundled token 4-gram, tuned on a
dev split (the first 25 of the 50 synthetic test utterances) and reported on the other 25 and on
the 10 real recordings:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --tune-lm

The whole search in one engine call with the networks in C++ (issue 38): ALSD++ / AES++ / WIND beam 4 + the token
4-gram vs the default greedy on demo-rnnt's 60 bundled clips, batch 1 and 16, one run:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --native-search [--repeats 3]

The same search streamed (demo-rnnt's 60 clips in 0.5 s chunks of encoder output, batch 1 and 16): one engine
call per chunk vs the per-step path vs whole utterances in one call, against the default greedy, one run:

    OMP_NUM_THREADS=1 python3 benchmarks/transducer_beam.py --streaming [--chunk 0.5] [--repeats 5]

Peer comparison, run with NeMo's interpreter (see results_nemo.md): NeMo's batched malsd_batch /
maes_batch (CUDA graphs off) and its per-utterance BeamRNNTInfer alsd / maes and BeamTDTInfer
default / maes (a Python loop over the batch), beam 4, on the same weights, interleaved with ours:
speed on the paper-sized RNN-T / TDT and on demo-rnnt / demo-tdt (batch 1 and 16), best-hypothesis
agreement, and WER of every decoder on the 50 synthetic test utterances. The per-utterance searches
are timed ``--slow-repeats`` times on the paper model (default 1), ``--repeats`` times elsewhere:

    OMP_NUM_THREADS=1 /work/venvs/nemo/bin/python benchmarks/transducer_beam.py --nemo [--repeats 3] [--slow-repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# NeMo's per-utterance beam searches draw a tqdm bar per call: off in this benchmark (tqdm reads its
# TQDM_* settings when it is first imported, hence before torch)
os.environ.setdefault("TQDM_DISABLE", "1")

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "recipes"))
from paper_model import make_encoder_output, make_paper_model  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.transducer import greedy  # noqa: E402
from asrdecode.transducer.beam import beam_search as nbest_search  # noqa: E402


def beam_search(*args, **kwargs):
    """The best hypothesis per utterance (asrdecode's beam_search returns n-best lists)."""
    return [row[0] for row in nbest_search(*args, **kwargs)]

MAX_SYMBOLS = 10


def speed_rows(label: str, model, enc: torch.Tensor, lengths: torch.Tensor, repeats: int, lm=None,
               lm_weight: float = 0.5, plain: bool = True) -> list[list[object]]:
    """One row per decoder: time per batch (ms), ratio to greedy, labels emitted (``plain``: also the
    searches without LM)."""
    fns = {"greedy (label-looping)": lambda: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS)}
    if plain:
        fns["ALSD++ beam 4"] = lambda: beam_search(model, enc, lengths, beam=4, method="alsd", max_symbols=MAX_SYMBOLS)
        fns["AES++ beam 4"] = lambda: beam_search(model, enc, lengths, beam=4, method="aes", max_symbols=MAX_SYMBOLS)
    if lm is not None:
        fns["ALSD++ beam 4 + LM (late)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="alsd", fusion=[(lm, lm_weight)], max_symbols=MAX_SYMBOLS)
        fns["ALSD++ beam 4 + LM (early)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="alsd", fusion=[(lm, lm_weight)], pruning="early",
            max_symbols=MAX_SYMBOLS)
        fns["AES++ beam 4 + LM (late)"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="aes", fusion=[(lm, lm_weight)], max_symbols=MAX_SYMBOLS)
        fns["ALSD++ beam 4 + LM (late), tensor engine"] = lambda: beam_search(
            model, enc, lengths, beam=4, method="alsd", fusion=[(lm, lm_weight)], max_symbols=MAX_SYMBOLS,
            engine="torch")
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


PAPER_LM_WEIGHT = 0.3


def paper_lm(sentences: int = 20000, order: int = 4):
    """A token 4-gram over the paper model's 1024 labels (KenLM ``lmplz`` on text from a random sparse
    Markov chain with Zipf-like preferences, cached in ``work/bench_cache``), or ``None`` without lmplz."""
    from asrdecode.lm import NGramLM, TokenMap, estimate_arpa
    from asrdecode.lm.arpa import find_kenlm_tool
    from paper_model import VOCAB

    path = ROOT / "work/bench_cache" / f"paper-token-{order}gram-{sentences}.arpa"
    tmap = TokenMap.offset(VOCAB, VOCAB - 1)
    if not path.exists():
        try:
            find_kenlm_tool()
        except FileNotFoundError as err:
            print(f"paper model LM rows skipped: {err}", flush=True)
            return None
        g = torch.Generator().manual_seed(11)
        labels = VOCAB - 1
        successors = torch.randint(0, labels, (labels, 8), generator=g)  # 8 likely next labels per label
        lines = []
        for _ in range(sentences):
            n = int(torch.randint(8, 30, (1,), generator=g))
            tok = int(torch.randint(0, labels, (1,), generator=g))
            ids = [tok]
            for _ in range(n - 1):
                if float(torch.rand(1, generator=g)) < 0.8:
                    tok = int(successors[tok, int(torch.randint(0, 8, (1,), generator=g) ** 2 % 8)])
                else:
                    tok = int(torch.randint(0, labels, (1,), generator=g))
                ids.append(tok)
            lines.append(tmap.encode_line(ids))
        path.parent.mkdir(parents=True, exist_ok=True)
        estimate_arpa(lines, order, path, discount_fallback=True)
    return NGramLM.from_arpa(path, vocab_size=VOCAB, blank_id=VOCAB - 1)


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
            "greedy": lambda el=el, enc=enc: greedy(demo.model, enc, el, max_symbols=MAX_SYMBOLS,
                                                    tokenizer=demo.tokenizer),
            "ALSD++ beam 4": lambda el=el, enc=enc: beam_search(demo.model, enc, el, beam=4, tokenizer=demo.tokenizer),
            "AES++ beam 4": lambda el=el, enc=enc: beam_search(demo.model, enc, el, beam=4, method="aes",
                                                                tokenizer=demo.tokenizer),
        }
        for w, beta in lm_settings:
            for scoring in ("lm_weighted", "none"):
                decoders[f"ALSD++ beam 4 + LM w={w} beta={beta} {scoring}"] = (
                    lambda w=w, beta=beta, scoring=scoring, el=el, enc=enc: beam_search(
                        demo.model, enc, el, beam=4, fusion=[(lm, w)], beta=beta, blank_scoring=scoring,
                        tokenizer=demo.tokenizer))
        for dname, fn in decoders.items():
            hyps = fn()
            out.append([name, sname, dname, wer(refs, [h.text or "" for h in hyps])])
            print(out[-1], flush=True)
    return out


NEMO_BEAM = 4


def nemo_decoders(model, beam: int = NEMO_BEAM, per_utterance: bool = True) -> dict[str, tuple[str, object]]:
    """NeMo's beam searches on ``model``'s weights (blank last), each as
    name -> (the search of ours it corresponds to, fn(enc [B, T, D], lengths) -> list of NeMo hypotheses).

    Batched: ``malsd_batch`` (RNN-T, TDT), ``maes_batch`` (RNN-T only in NeMo 3.0), CUDA graphs off,
    ``max_symbols_per_step`` as ours. Per-utterance (``BeamRNNTInfer`` / ``BeamTDTInfer``, a Python
    loop over the batch): RNN-T ``alsd`` and ``maes``, TDT ``default`` and ``maes`` (NeMo 3.0 has no
    per-utterance TDT ``alsd``). These take no symbol cap and run with NeMo's defaults:
    ``alsd_max_target_len=1.0`` (u_max = T), mAES ``maes_num_steps=2``, ``maes_prefix_alpha=1``,
    ``maes_expansion_gamma=2.3``, ``maes_expansion_beta=2``. ``score_norm=False`` everywhere (ours
    ranks by the unnormalised score too).
    """
    from nemo_models import nemo_modules_from_lstm
    from nemo.collections.asr.parts.submodules.rnnt_beam_decoding import BeamBatchedRNNTInfer, BeamRNNTInfer
    from nemo.collections.asr.parts.submodules.tdt_beam_decoding import BeamBatchedTDTInfer, BeamTDTInfer

    dec, joint = nemo_modules_from_lstm(model)
    tdt = model.durations is not None
    extra = dict(durations=list(model.durations)) if tdt else {}

    def batched(search: str):
        cls = BeamBatchedTDTInfer if tdt else BeamBatchedRNNTInfer
        return cls(dec, joint, blank_index=model.blank_id, beam_size=beam, search_type=search, score_norm=False,
                   max_symbols_per_step=MAX_SYMBOLS, allow_cuda_graphs=False, **extra)

    def single(search: str):
        cls = BeamTDTInfer if tdt else BeamRNNTInfer
        return cls(dec, joint, beam_size=beam, search_type=search, score_norm=False, **extra)

    def call(inf):
        return lambda enc, lengths: inf(encoder_output=enc.transpose(1, 2), encoded_lengths=lengths)[0]

    out = {f"NeMo malsd_batch beam {beam}": ("alsd", call(batched("malsd_batch")))}
    if not tdt:
        out[f"NeMo maes_batch beam {beam}"] = ("aes", call(batched("maes_batch")))
    if per_utterance:
        for search, ours in ((("default", "alsd"), ("maes", "aes")) if tdt else (("alsd", "alsd"), ("maes", "aes"))):
            out[f"NeMo {search} beam {beam} (per utt.)"] = (ours, call(single(search)))
    return out


def nemo_tokens(h) -> list[int]:
    return [int(x) for x in torch.as_tensor(h.y_sequence).tolist()]


def our_decoders(model, beam: int = NEMO_BEAM) -> dict[str, tuple[str | None, object]]:
    return {
        "ours greedy (label-looping)": (None, lambda enc, lengths: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS)),
        f"ours ALSD++ beam {beam}": ("alsd", lambda enc, lengths: beam_search(
            model, enc, lengths, beam=beam, method="alsd", max_symbols=MAX_SYMBOLS)),
        f"ours AES++ beam {beam}": ("aes", lambda enc, lengths: beam_search(
            model, enc, lengths, beam=beam, method="aes", max_symbols=MAX_SYMBOLS)),
    }


def time_mixed(fns: dict[str, object], enc: torch.Tensor, lengths: torch.Tensor, repeats: int,
               slow: set[str], slow_repeats: int) -> tuple[dict[str, float], dict[str, int], dict[str, list]]:
    """Median wall time of each ``fn(enc, lengths)``, repeats interleaved in rounds as in ``time_many``;
    the ``slow`` ones (NeMo's per-utterance loops) run only in the first ``slow_repeats`` rounds and are
    warmed up on one 16-frame utterance instead of the whole batch. Also returns the run counts and
    each decoder's last output."""
    with torch.inference_mode():
        for name, fn in fns.items():
            if name in slow:
                fn(enc[:1, :16].contiguous(), lengths[:1].clamp(max=16))
            else:
                fn(enc, lengths)
        samples: dict[str, list[float]] = {name: [] for name in fns}
        last: dict[str, list] = {}
        for r in range(max(repeats, slow_repeats)):
            for name, fn in fns.items():
                if r >= (slow_repeats if name in slow else repeats):
                    continue
                start = time.perf_counter()
                last[name] = fn(enc, lengths)
                samples[name].append(time.perf_counter() - start)
    return ({n: statistics.median(s) for n, s in samples.items()}, {n: len(s) for n, s in samples.items()}, last)


def agreement(ours: list, theirs: list) -> tuple[int, float, float, float]:
    """Utterances whose best tokens are identical, max |score diff| there (float32 rounding when the
    searches are the same), and the mean best score of ours / of NeMo's (higher = the search found a
    likelier path under the same model)."""
    same = [list(h.tokens) == nemo_tokens(n) for h, n in zip(ours, theirs)]
    diff = max((abs(h.score - float(n.score)) for h, n, s in zip(ours, theirs, same) if s), default=float("nan"))
    return (sum(same), diff, statistics.fmean(h.score for h in ours), statistics.fmean(float(n.score) for n in theirs))


def unfinished_alsd(theirs: list, lengths: torch.Tensor) -> int:
    """NeMo's per-utterance ``alsd`` returns its last beam when no hypothesis reached the last frame within
    T + u_max steps; ``length`` is the alignment step i = t + u of the hypothesis."""
    return sum(int(n.length) - len(nemo_tokens(n)) < int(t) - 1 for n, t in zip(theirs, lengths))


def nemo_speed_rows(label: str, model, enc: torch.Tensor, lengths: torch.Tensor, repeats: int,
                    slow_repeats: int) -> list[list[object]]:
    """Ours vs NeMo's batched and per-utterance beam searches, one interleaved group on one input."""
    ours = our_decoders(model)
    theirs = nemo_decoders(model)
    fns = {name: fn for name, (_, fn) in {**ours, **theirs}.items()}
    slow = {name for name in theirs if "per utt." in name}
    times, runs, last = time_mixed(fns, enc, lengths, repeats, slow, slow_repeats)
    base = times["ours greedy (label-looping)"]
    ref = {method: last[name] for name, (method, _) in ours.items() if method}
    ref_name = {method: name.removeprefix("ours ") for name, (method, _) in ours.items() if method}
    rows = []
    for name, t in times.items():
        note = ""
        if name in theirs:
            method = theirs[name][0]
            same, diff, s_ours, s_nemo = agreement(ref[method], last[name])
            note = (f"best = ours {ref_name[method]} on {same}/{len(lengths)}; mean best score "
                    f"ours {s_ours:.1f} / NeMo {s_nemo:.1f}")
            if name.startswith("NeMo alsd"):
                note += f"; {unfinished_alsd(last[name], lengths)} unfinished"
        rows.append([label, int(enc.shape[0]), name, t * 1e3, t / base, runs[name], note])
    print(rows, flush=True)
    return rows


def nemo_rows(frames: int, repeats: int, slow_repeats: int) -> list[list[object]]:
    """Paper-sized RNN-T / TDT, random encoder output: batch 1 and 16."""
    from nemo_models import with_blank_last

    rows = []
    for tdt in (False, True):
        model, _ = with_blank_last(make_paper_model(seed=0, tdt=tdt))
        for batch in (1, 16):
            enc, lengths = make_encoder_output(batch, frames, seed=7)
            rows += nemo_speed_rows(f"paper {'TDT' if tdt else 'RNN-T'}", model, enc, lengths, repeats, slow_repeats)
    return rows


def nemo_demo(repeats: int) -> tuple[list[list[object]], list[list[object]], list[list[object]]]:
    """The bundled demo-rnnt / demo-tdt on the 50 synthetic test utterances: speed (the longest 1 and 16
    utterances), best-hypothesis agreement (beam 1 batched, beam 4 all) and WER of every decoder."""
    from nemo_models import with_blank_last
    from asrdecode.evaluate import wer

    speed, agree, wers = [], [], []
    for name in ("demo-rnnt", "demo-tdt"):
        demo, rows, enc, el = demo_inputs(name)
        refs = [r["text"] for r in rows]
        model, _ = with_blank_last(demo.model)
        assert model is demo.model  # the bundled models put blank last: token ids need no mapping
        for batch in (1, 16):
            idx = torch.argsort(el, descending=True)[:batch]
            e, n = enc[idx, : int(el[idx].max())].contiguous(), el[idx]
            speed += nemo_speed_rows(name, model, e, n, repeats, slow_repeats=repeats)
        # all 50 utterances, once each
        ours = our_decoders(model)
        theirs = {**nemo_decoders(model, beam=1, per_utterance=False), **nemo_decoders(model)}
        with torch.inference_mode():
            out = {dname: fn(enc, el) for dname, (_, fn) in {**ours, **theirs}.items()}
            ours1 = {m: beam_search(model, enc, el, beam=1, method=m, max_symbols=MAX_SYMBOLS)
                     for m in ("alsd", "aes")}
        ref4 = {m: out[dname] for dname, (m, _) in ours.items() if m}
        for dname, (method, _) in theirs.items():
            beam = 1 if " beam 1" in dname else NEMO_BEAM
            ref = ours1[method] if beam == 1 else ref4[method]
            same, diff, s_ours, s_nemo = agreement(ref, out[dname])
            note = f"{unfinished_alsd(out[dname], el)} unfinished" if dname.startswith("NeMo alsd") else ""
            agree.append([name, beam, f"ours {'ALSD++' if method == 'alsd' else 'AES++'} vs {dname}",
                          f"{same}/{len(el)}", diff, s_ours, s_nemo, note])
            print(agree[-1], flush=True)
        for dname, hyps in out.items():
            if " beam 1" in dname:
                continue
            toks = [list(h.tokens) if dname.startswith("ours") else nemo_tokens(h) for h in hyps]
            wers.append([name, dname, wer(refs, [demo.tokenizer.decode(t) for t in toks]), sum(map(len, toks))])
            print(wers[-1], flush=True)
    return speed, agree, wers


def nemo_main(frames: int, repeats: int, slow_repeats: int) -> None:
    start = time.perf_counter()
    header = ["model", "batch", "decoder", "ms / batch", "x our greedy time", "timed runs", "outputs"]
    paper = nemo_rows(frames, repeats, slow_repeats)
    speed, agree, wers = nemo_demo(repeats)
    print(markdown_table(header, paper))
    print(markdown_table(header, speed))
    print(markdown_table(["model", "beam", "search", "same best tokens", "max abs score diff (same tokens)",
                          "mean best score ours", "mean best score NeMo", "notes"], agree))
    print(markdown_table(["model", "decoder", "WER synth_test50", "labels"], wers))
    print(f"total {time.perf_counter() - start:.0f} s")


WIND_WINDOW = 8
WIND_BEAMS = (2, 4, 8)
#: expansion thresholds (``expansion_gamma``, mAES's) timed with WIND beam 4
WIND_GAMMAS = (1.5, 2.0, 2.3)


def wind_decoders(model, enc, lengths, tokenizer=None) -> dict[str, object]:
    """Greedy, then ALSD++ and WIND beam (window 8) at beams 2, 4, 8, and WIND beam 4 with each
    expansion threshold of ``WIND_GAMMAS``; no LM."""
    fns = {"greedy (label-looping)": lambda: greedy(model, enc, lengths, max_symbols=MAX_SYMBOLS, tokenizer=tokenizer)}
    for beam in WIND_BEAMS:
        fns[f"ALSD++ beam {beam}"] = lambda beam=beam: beam_search(
            model, enc, lengths, beam=beam, method="alsd", max_symbols=MAX_SYMBOLS, tokenizer=tokenizer)
        fns[f"WIND beam {beam} (window {WIND_WINDOW})"] = lambda beam=beam: beam_search(
            model, enc, lengths, beam=beam, method="wind", window=WIND_WINDOW, max_symbols=MAX_SYMBOLS,
            tokenizer=tokenizer)
    for gamma in WIND_GAMMAS:
        fns[f"WIND beam 4 (window {WIND_WINDOW}, gamma {gamma:g})"] = lambda gamma=gamma: beam_search(
            model, enc, lengths, beam=4, method="wind", window=WIND_WINDOW, expansion_gamma=gamma,
            max_symbols=MAX_SYMBOLS, tokenizer=tokenizer)
    return fns


def wind_per_utterance_rows(label: str, model, enc: torch.Tensor, lengths: torch.Tensor,
                            repeats: int) -> list[list[object]]:
    """Batch 1 over every utterance of a set, one after another (what a batch-1 user runs): ALSD++
    beam 4 and WIND beam 4 (window 8) with each expansion threshold; time of the set, ratio to
    ALSD++, labels and the sum of the best scores (the search objective)."""
    utts = [(enc[i : i + 1, : int(lengths[i])], lengths[i : i + 1]) for i in range(enc.shape[0])]

    def over_set(**kw):
        return lambda: [beam_search(model, e, n, beam=4, max_symbols=MAX_SYMBOLS, **kw)[0] for e, n in utts]

    fns = {"ALSD++ beam 4": over_set(method="alsd")}
    for gamma in (None, *WIND_GAMMAS):
        name = f"WIND beam 4 (window {WIND_WINDOW}{'' if gamma is None else f', gamma {gamma:g}'})"
        fns[name] = over_set(method="wind", window=WIND_WINDOW, expansion_gamma=gamma)
    times = time_many(fns, repeats=repeats, warmup=1)
    base = times["ALSD++ beam 4"]
    rows = []
    for name, t in times.items():
        hyps = fns[name]()
        rows.append([label, len(utts), name, t * 1e3, t / base, sum(len(h.tokens) for h in hyps),
                     sum(h.score for h in hyps)])
    return rows


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
WIND_PAPER_UTTERANCES = 5  # paper-model utterances decoded one by one (random encoder output)


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
    per_utt = wind_per_utterance_rows("demo-rnnt, synth_test50", demo.model, enc, el, repeats)
    print(per_utt, flush=True)
    wer = wind_wer_rows()
    sharp = sharpened_paper_model()
    for batch in (1, 4):
        enc, lengths = make_encoder_output(batch, frames, seed=7)
        rows += wind_speed_rows(f"paper RNN-T, joint x{SHARPEN:g}", sharp, enc, lengths, repeats)
        print(rows[-7:], flush=True)
    enc, lengths = make_encoder_output(WIND_PAPER_UTTERANCES, frames, seed=11)
    per_utt += wind_per_utterance_rows(f"paper RNN-T, joint x{SHARPEN:g}", sharp, enc, lengths, repeats)
    del sharp
    # the paper model as calibrated: batch 1 only (WIND emits up to the symbol cap on its flat
    # random distributions: slow)
    enc, lengths = make_encoder_output(1, frames, seed=7)
    rows += wind_speed_rows("paper RNN-T", make_paper_model(tdt=False), enc, lengths, repeats)
    print(markdown_table(["model", "batch", "decoder", "ms / batch", "x greedy time", "x ALSD++ same beam",
                          "labels", "sum of best scores"], rows))
    print(markdown_table(["model", "test set", "decoder", "WER", "mean best score"], wer))
    print(markdown_table(["model (batch 1, utterance by utterance)", "utterances", "decoder", "ms / set",
                          "x ALSD++ beam 4 time", "labels", "sum of best scores"], per_utt))


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
                           blank_scoring=scoring, max_symbols=MAX_SYMBOLS, tokenizer=demo.tokenizer)
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


def demo_rnnt_clips() -> tuple:
    """demo-rnnt's model, its bundled token LM, and the encoder output of its 60 bundled clips (synth_test50 +
    real10) as one batch ``[60, T, D]`` with ``lengths [60]``."""
    from asrdecode.models import load

    demo = load("demo-rnnt")
    encs = list(encoded_test_sets(demo))
    width = max(e.shape[1] for _, e, _, _ in encs)
    enc = torch.cat([torch.nn.functional.pad(e, (0, 0, 0, width - e.shape[1])) for _, e, _, _ in encs])
    return demo.model, bundled_lm(demo), enc, torch.cat([n for _, _, n, _ in encs])


def clip_batches(enc: torch.Tensor, lengths: torch.Tensor, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``enc [N, T, D]`` / ``lengths [N]`` in batches of ``batch`` clips in order, each cut to its longest clip."""
    out = []
    for i in range(0, enc.shape[0], batch):
        n = lengths[i : i + batch]
        out.append((enc[i : i + batch, : int(n.max())].contiguous(), n))
    return out


def native_search_main(repeats: int) -> None:
    """Issue 38 item 1: ALSD++ beam 4 + the bundled token 4-gram (and AES++ / WIND) on demo-rnnt over the 60 clips
    (synth_test50 + real10), batch 1 (clip by clip) and batch 16, one thread, against the default greedy
    (the C++ greedy), interleaved in one run: the whole search in one engine call (the default), the
    per-step native engine (networks in torch, the one-call path switched off) and the tensor engine."""
    from unittest import mock

    from asrdecode.native import transducer_search
    from asrdecode.transducer.beam import BeamSearchDecoder

    model, lm, enc, lengths = demo_rnnt_clips()
    fusion = [(lm, 0.5)]

    def per_step(**kw):
        def run(e, n):
            with mock.patch.object(BeamSearchDecoder, "_native_search", return_value=None):
                return beam_search(model, e, n, **kw)
        return run

    def full_window(**kw):  # the engine reads every window frame (its lazy window off)
        def run(e, n):
            with mock.patch.dict(os.environ, {transducer_search.FULL_WINDOW_ENV: "1"}):
                return beam_search(model, e, n, **kw)
        return run

    decoders = {
        "default greedy (C++)": lambda e, n: greedy(model, e, n, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4 + token LM (one engine call)": lambda e, n: beam_search(
            model, e, n, beam=4, fusion=fusion, max_symbols=MAX_SYMBOLS),
        "AES++ beam 4 + token LM (one engine call)": lambda e, n: beam_search(
            model, e, n, beam=4, method="aes", fusion=fusion, max_symbols=MAX_SYMBOLS),
        "WIND beam 4 + token LM (one engine call)": lambda e, n: beam_search(
            model, e, n, beam=4, method="wind", fusion=fusion, max_symbols=MAX_SYMBOLS),
        "WIND beam 4 + token LM (one engine call, full window)": full_window(
            beam=4, method="wind", fusion=fusion, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4 (one engine call)": lambda e, n: beam_search(model, e, n, beam=4, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4 + token LM (per-step native)": per_step(beam=4, fusion=fusion, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4 + token LM (tensor engine)": lambda e, n: beam_search(
            model, e, n, beam=4, fusion=fusion, max_symbols=MAX_SYMBOLS, engine="torch"),
    }
    rows: list[list[object]] = []
    wind_notes: list[str] = []
    for batch in (1, 16):
        parts = clip_batches(enc, lengths, batch)
        fns = {name: (lambda fn=fn, parts=parts: [fn(e, n) for e, n in parts]) for name, fn in decoders.items()}
        times = time_many(fns, repeats=repeats, warmup=1)
        base = times["default greedy (C++)"]
        same = beam_search(model, enc, lengths, beam=4, fusion=fusion, max_symbols=MAX_SYMBOLS)
        want = beam_search(model, enc, lengths, beam=4, fusion=fusion, max_symbols=MAX_SYMBOLS, engine="torch")
        agree = sum(a.tokens == b.tokens and a.timestamps == b.timestamps for a, b in zip(same, want))
        wind_notes.append(f"batch {batch}: " + wind_window_note(decoders, parts, transducer_search.last_counts))
        for name, t in times.items():
            rows.append([batch, name, t * 1e3, t / base, float(lengths.sum()) * 0.08 / t,
                         f"{agree}/{len(same)}" if "one engine call" in name and "ALSD++ beam 4 +" in name else ""])
        print(rows[-len(times):], flush=True)
    print(markdown_table(["batch", "decoder (demo-rnnt, 60 clips)", "ms (60 clips)", "x default greedy",
                          "RTFx (decoder)", "best = tensor engine's"], rows))
    print("\n".join(wind_notes))


def wind_window_note(decoders: dict, parts: list, last_counts) -> str:
    """WIND's lazy window against the full window on ``parts``: the joint rows each computed (the engine's
    counter) and the utterances whose n-best lists are equal (tokens, timestamps, scores)."""
    outs, joint_rows = [], []
    for name in ("WIND beam 4 + token LM (one engine call)", "WIND beam 4 + token LM (one engine call, full window)"):
        hyps, total = [], 0
        for e, n in parts:
            hyps += decoders[name](e, n)
            total += last_counts()["joint_rows"]
        outs.append([(h.tokens, h.timestamps, h.score) for h in hyps])
        joint_rows.append(total)
    same = sum(a == b for a, b in zip(*outs))
    return (f"WIND joint rows {joint_rows[0]} (lazy window) / {joint_rows[1]} (full window), "
            f"best hypotheses equal (tokens, frames, score) {same}/{len(outs[0])}")


def stream_chunks(dec, enc: torch.Tensor, lengths: torch.Tensor, frames: int) -> list:
    """Best hypotheses of the streams ``enc [B, T, D]`` (``lengths [B]``) fed to ``dec`` (a BeamSearchDecoder)
    ``frames`` encoder frames at a time, each utterance's last chunk final."""
    state = dec.init_state(enc.shape[0], enc.shape[2])
    for a in range(0, enc.shape[1], frames):
        b = a + frames
        state = dec.advance(state, enc[:, a:b], (lengths - a).clamp(min=0, max=frames), final=lengths <= b)
    return [row[0] for row in dec.finalize(state)]


def streaming_main(repeats: int, chunk_s: float) -> None:
    """Issue 38 item 1, streaming: ALSD++ beam 4 + the bundled token 4-gram on demo-rnnt's 60 clips fed in
    ``chunk_s`` chunks of encoder output (80 ms frames), batch 1 (clip by clip) and 16 (16 streams in lockstep),
    one thread, interleaved in one run: one engine call per chunk (the default), the per-step path (networks
    in torch, one C++ call per step: the one-call chunk path switched off), the whole utterances in one call,
    against the default greedy (C++, whole utterances); the fastest of ``repeats`` interleaved runs each."""
    from unittest import mock

    from asrdecode.native import transducer_search
    from asrdecode.transducer.beam import BeamSearchDecoder

    model, lm, enc, lengths = demo_rnnt_clips()
    dec = BeamSearchDecoder(model, beam=4, fusion=[(lm, 0.5)], max_symbols=MAX_SYMBOLS)
    frames = max(1, round(chunk_s / 0.08))

    def per_step(e, n):
        with mock.patch.object(transducer_search, "search_chunk", return_value=None):
            return stream_chunks(dec, e, n, frames)

    label = f"{frames * 0.08:g} s chunks"
    decoders = {
        "default greedy (C++, whole utterances)": lambda e, n: greedy(model, e, n, max_symbols=MAX_SYMBOLS),
        "ALSD++ beam 4 + token LM, whole utterances (one engine call)": lambda e, n: [
            row[0] for row in dec.decode(e, n)],
        f"ALSD++ beam 4 + token LM, {label} (one engine call per chunk)": lambda e, n: stream_chunks(
            dec, e, n, frames),
        f"ALSD++ beam 4 + token LM, {label} (per-step path)": per_step,
    }
    rows: list[list[object]] = []
    for batch in (1, 16):
        parts = clip_batches(enc, lengths, batch)
        fns = {name: (lambda fn=fn, parts=parts: [h for e, n in parts for h in fn(e, n)])
               for name, fn in decoders.items()}
        times = time_many(fns, repeats=repeats, warmup=1, stat="min")  # (the fastest: a loaded machine)
        base = times["default greedy (C++, whole utterances)"]
        whole = fns["ALSD++ beam 4 + token LM, whole utterances (one engine call)"]()
        for name, t in times.items():
            same = ""
            if "chunks" in name:
                got = fns[name]()
                same = f"{sum(a.tokens == b.tokens and a.timestamps == b.timestamps for a, b in zip(got, whole))}/60"
            rows.append([batch, name, t * 1e3, t / base, float(lengths.sum()) * 0.08 / t, same])
        print(rows[-len(times):], flush=True)
    print(markdown_table(["batch", "decoder (demo-rnnt, 60 clips)", "ms (60 clips)", "x default greedy",
                          "RTFx (decoder)", "best = whole utterance's"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-wer", action="store_true")
    ap.add_argument("--slow-repeats", type=int, default=1,
                    help="--nemo: timed runs of NeMo's per-utterance searches on the paper model")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--skip-paper-lm", action="store_true", help="no LM rows on the paper models (no lmplz needed)")
    ap.add_argument("--nemo", action="store_true", help="only ours vs NeMo (run with NeMo's python)")
    ap.add_argument("--wind", action="store_true", help="only WIND beam vs ALSD++ (beams 2, 4, 8)")
    ap.add_argument("--tune-lm", action="store_true", help="only the LM weight / beta / blank scoring tuning")
    ap.add_argument("--native-search", action="store_true",
                    help="only ALSD++ beam 4 + token LM / default greedy on demo-rnnt's 60 clips, batch 1 and 16")
    ap.add_argument("--streaming", action="store_true",
                    help="only ALSD++ beam 4 + token LM streamed in chunks (one call per chunk vs per step) / greedy, "
                         "demo-rnnt's 60 clips, batch 1 and 16")
    ap.add_argument("--chunk", type=float, default=0.5, help="--streaming: chunk length in seconds of audio")
    args = ap.parse_args()
    single_thread()
    if args.streaming:
        streaming_main(args.repeats, args.chunk)
        return
    if args.tune_lm:
        tune_lm_main()
        return
    if args.wind:
        wind_main(args.frames, args.repeats)
        return
    if args.native_search:
        native_search_main(args.repeats)
        return
    if args.nemo:
        nemo_main(args.frames, args.repeats, args.slow_repeats)
        return
    rows: list[list[object]] = []
    # the paper models as calibrated (flat random distributions) without LM; with the token LM, their joint
    # sharpened x16 (confident, like a trained model's: on the flat ones the LM outweighs the acoustics and
    # every search emits up to the symbol cap on every frame)
    plm = None if args.skip_paper_lm else paper_lm()
    for tdt in (False, True):
        kind = "TDT" if tdt else "RNN-T"
        model = make_paper_model(tdt=tdt)
        for batch in (1, 16):
            enc, lengths = make_encoder_output(batch, args.frames, seed=7)
            rows += speed_rows(f"paper {kind}", model, enc, lengths, args.repeats)
            print(rows[-3:], flush=True)
        if plm is None:
            continue
        with torch.no_grad():
            model.joint_out.weight.mul_(SHARPEN)
            model.joint_out.bias.mul_(SHARPEN)
        for batch in (1, 16):
            enc, lengths = make_encoder_output(batch, args.frames, seed=7)
            rows += speed_rows(f"paper {kind}, joint x{SHARPEN:g}", model, enc, lengths, args.repeats, lm=plm,
                               lm_weight=PAPER_LM_WEIGHT, plain=False)
            print(rows[-5:], flush=True)
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
                print(rows[-7:], flush=True)
    print(markdown_table(["model", "batch", "decoder", "ms / batch", "x greedy time", "RTFx (decoder)", "labels"], rows))
    if not args.skip_wer:
        wrows = []
        for name in ("demo-rnnt", "demo-tdt"):
            wrows += wer_rows(name, [(0.3, 0.0), (0.7, 2.0)])
        print(markdown_table(["model", "test set", "decoder", "WER"], wrows))


if __name__ == "__main__":
    main()
