#!/usr/bin/env python3
"""Decoding on a GPU (or any device) against the network floor, greedy, and the native CPU engine.

One command, on whatever device is present, measures in one run:

* greedy, paper-sized RNN-T and TDT (benchmarks/paper_model.py: V 1024, LSTM 640, joint 640),
  ``B`` x ``T`` random encoder output: label-looping, frame-looping and WIND (w=8), eager and CUDA
  graphs, each against the **network floor**: the same network work (encoder projection, ``U``
  prediction steps, ``T + U`` joints with their argmax) captured as one CUDA graph (eager off CUDA);
* the transducer beam searches (ALSD++, AES++ beam 4 with the bundled token 4-gram, WIND beam 4)
  on demo-rnnt's encoder output of the bundled clips, against label-looping greedy;
* CTC prefix beam search (beam 16 + the token 4-gram) on demo-ctc's log-probs, and WFST (TLG,
  compact topology, the bundled word 3-gram pruned to ``--wfst-words``) decoding, against the
  native C++ engine on 1 and ``--cpu-threads`` threads (the batch split over a thread pool; the
  engine releases the GIL) on the same inputs.

Every row says how many utterances give results identical to the CPU's (tokens and frames; words
for WFST), the host reads of one call (``asrdecode.accel.count_host_reads``), the median time, RTFx
(seconds of audio per second of decoding, decoder only: the encoder output is already on the device)
and its ratio to the row's baseline. A markdown table and JSON go to ``--out-dir``.

    python benchmarks/gpu.py                          # on CUDA when present, within --budget-s (300)
    python benchmarks/gpu.py --device cpu --quick     # the CI smoke test: small sizes, eager only

Times are medians of ``--repeats`` warm calls (graphs captured and kept by the decoder objects in the
warm-up). Compare ratios of one run only; name the device (the table does) with every figure.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from asrdecode import ctc  # noqa: E402
from asrdecode.accel import compiled_graphs, count_host_reads  # noqa: E402
from asrdecode.round_check import CompiledRoundMismatch  # noqa: E402
from asrdecode.transducer import BeamSearchDecoder, GreedyDecoder, LSTMTransducer  # noqa: E402

FRAME_SECONDS = 0.08  # the paper model's and the demo models' encoder frame


# -- measuring ------------------------------------------------------------------------------------------


class Budget:
    """Wall-clock budget of the run: sections and rows are skipped (and said so) once it is spent."""

    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, repeats: int, warmup: int = 1) -> tuple[float, Any]:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` calls (graph captures happen there),
    and the last result."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def host_reads(fn: Callable[[], Any]) -> int:
    with count_host_reads() as reads:
        fn()
    return reads.count


def same_hypothesis(a: Any, b: Any) -> bool:
    """Same tokens, frames and (TDT) durations; n-best lists compare their best."""
    if isinstance(a, list):
        a, b = a[0], b[0]
    return (list(a.tokens) == list(b.tokens) and list(a.timestamps) == list(b.timestamps)
            and list(a.durations or []) == list(b.durations or []))


def count_same(xs: Sequence[Any], ys: Sequence[Any], same: Callable[[Any, Any], bool] = same_hypothesis) -> int:
    return sum(1 for x, y in zip(xs, ys) if same(x, y))


@dataclass
class Row:
    section: str
    name: str
    seconds: float
    audio_seconds: float
    baseline: str = ""
    ratio: float | None = None  # baseline time / this time (> 1: faster than the baseline)
    identical: str = ""
    host_reads: int | None = None
    note: str = ""

    @property
    def rtfx(self) -> float:
        return self.audio_seconds / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class Report:
    device: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        ratio = "" if row.ratio is None else f" {row.ratio:.2f}x {row.baseline}"
        print(f"[{row.section}] {row.name}: {row.seconds * 1e3:.2f} ms, RTFx {row.rtfx:.0f}{ratio}, identical "
              f"{row.identical}, host reads {row.host_reads} {row.note}", flush=True)
        return row

    def markdown(self) -> str:
        lines = [f"Device: {self.device}.", "",
                 "| section | decoder | ms | RTFx | vs baseline | identical to CPU | host reads / call |",
                 "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            ratio = "" if r.ratio is None else f"{r.ratio:.2f}x {r.baseline}"
            reads = "" if r.host_reads is None else str(r.host_reads)
            name = r.name + (f" ({r.note})" if r.note else "")
            lines.append(f"| {r.section} | {name} | {r.seconds * 1e3:.2f} | {r.rtfx:.0f} | {ratio} | {r.identical} "
                         f"| {reads} |")
        lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict:
        return {"device": self.device, "notes": self.notes,
                "rows": [dict(r.__dict__, rtfx=r.rtfx) for r in self.rows]}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


# -- the network floor of greedy decoding ----------------------------------------------------------------


def network_floor(model: Any, enc: torch.Tensor, labels: torch.Tensor, device: torch.device) -> Callable[[], None]:
    """A callable doing greedy decoding's network work for ``enc [B, T, D]`` and ``labels [B, U]``: the
    encoder projection, ``U`` prediction steps (+ projection) and ``T + U`` joints with their argmax, as
    one CUDA graph on CUDA (its replay), else eagerly."""
    B, T, _ = enc.shape
    U = labels.shape[1]

    def work() -> None:
        enc_proj = model.project_encoder(enc)
        state = model.initial_state(B, device=device, dtype=enc.dtype)
        dec, state = model.predict(torch.full((B,), model.blank_id, dtype=torch.long, device=device), state)
        dec_proj = model.project_decoder(dec)
        for u in range(U):
            dec, state = model.predict(labels[:, u], state)
            dec_proj = model.project_decoder(dec)
        for i in range(T + U):
            model.joint(enc_proj.select(1, min(i, T - 1)), dec_proj).max(dim=-1)

    if device.type != "cuda":
        return work
    stream = torch.cuda.Stream(device)  # pragma: no cover - needs CUDA
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        work()  # warm-up (the model's cached step weights) before capture
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    return graph.replay


def label_matrix(hyps: Sequence[Any], blank: int, device: torch.device) -> torch.Tensor:
    """``[B, U]`` labels of the hypotheses (padded with the first label or 0): what the floor predicts."""
    U = max((len(h.tokens) for h in hyps), default=0)
    rows = [list(h.tokens) + [0] * (U - len(h.tokens)) for h in hyps]
    return torch.tensor(rows, dtype=torch.long, device=device).reshape(len(hyps), U)


# -- sections ----------------------------------------------------------------------------------------------


def greedy_section(report: Report, device: torch.device, args: argparse.Namespace, budget: Budget) -> None:
    from paper_model import make_encoder_output, make_paper_model

    B, T = args.batch, args.frames
    for tdt in (False, True):
        if budget.left() < 20:
            report.notes.append(f"greedy {'TDT' if tdt else 'RNN-T'} skipped: budget spent")
            continue
        section = f"greedy {'TDT' if tdt else 'RNN-T'} (paper model, B={B}, T={T})"
        if args.quick:
            cpu_model = LSTMTransducer(129, 64, 96, 96, blank_id=128, durations=[0, 1, 2, 3, 4] if tdt else None).eval()
            with torch.no_grad():  # about one label per two frames, as a trained model
                cpu_model.joint_out.bias[128] += 1.0
            enc_cpu = torch.randn(B, T, 64, generator=torch.Generator().manual_seed(1))
            lengths_cpu = torch.full((B,), T, dtype=torch.long)
            section = section.replace("paper model", "small random model")
        else:
            cpu_model = make_paper_model(seed=0, tdt=tdt)
            enc_cpu, lengths_cpu = make_encoder_output(B, T, seed=3)
        lengths_cpu[::3] = (lengths_cpu[::3] * 2) // 3  # a few shorter utterances
        with torch.inference_mode():
            reference = GreedyDecoder(cpu_model, engine="auto").decode(enc_cpu, lengths_cpu)
        model = copy.deepcopy(cpu_model).to(device)
        enc, lengths = enc_cpu.to(device), lengths_cpu.to(device)
        audio = float(lengths_cpu.sum()) * FRAME_SECONDS
        with torch.inference_mode():
            floor_fn = network_floor(model, enc, label_matrix(reference, model.blank_id, device), device)
            floor_s, _ = timed(floor_fn, device, args.repeats)
        report.add(Row(section, "network floor (one graph)" if device.type == "cuda" else "network floor (eager)",
                       floor_s, audio, note=f"U={max(len(h.tokens) for h in reference)}"))
        modes = ["eager"] + (["cuda_graphs"] if device.type == "cuda" else [])
        configs = [("label-looping", "labels", 1), ("frame-looping", "frames", 1)]
        if not tdt:
            configs.append(("WIND w=8", "labels", 8))
        times: dict[tuple[str, str], float] = {}
        for mode in modes:
            for name, loop, window in configs:
                if budget.left() < 10:
                    report.notes.append(f"{section} {name} {mode} skipped: budget spent")
                    continue
                dec = GreedyDecoder(model, loop=loop, window=window, acceleration=mode, engine="torch")

                def call(dec: GreedyDecoder = dec, enc: torch.Tensor = enc, lengths: torch.Tensor = lengths) -> Any:
                    with torch.inference_mode():
                        return dec.decode(enc, lengths)

                seconds, hyps = timed(call, device, args.repeats)
                times[(name, mode)] = seconds
                report.add(Row(section, f"{name}, {mode}", seconds, audio, "the floor", floor_s / seconds,
                               f"{count_same(hyps, reference)}/{B}", host_reads(call),
                               note=f"{seconds / floor_s:.1f}x the floor"))
        if ("label-looping", "eager") in times and ("frame-looping", "eager") in times:
            report.notes.append(f"{section}: label-looping / frame-looping speed, eager: "
                                f"{times[('frame-looping', 'eager')] / times[('label-looping', 'eager')]:.2f}x")
        if ("label-looping", "cuda_graphs") in times and ("frame-looping", "cuda_graphs") in times:
            report.notes.append(f"{section}: label-looping / frame-looping speed, graphs: "
                                f"{times[('frame-looping', 'cuda_graphs')] / times[('label-looping', 'cuda_graphs')]:.2f}x")


def _clips(limit: int | None = None) -> list[Path]:
    rows: list[Path] = []
    for manifest in (ROOT / "data/synth_test/manifest.jsonl", ROOT / "data/real/manifest.jsonl"):
        for line in manifest.read_text().splitlines():
            if line.strip():
                rows.append(manifest.parent / json.loads(line)["audio_filepath"])
    return rows[:limit] if limit else rows


def _tile(x: torch.Tensor, lengths: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Repeat the utterances of ``x [N, T, ...]`` to ``batch`` rows."""
    reps = -(-batch // x.shape[0])
    return x.repeat(reps, *([1] * (x.dim() - 1)))[:batch].contiguous(), lengths.repeat(reps)[:batch].contiguous()


@functools.lru_cache(maxsize=4)
def demo_outputs(name: str, clips: int | None, ctc_head: bool) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The demo model, and its encoder output (or CTC log-probs) of the bundled clips, on the CPU."""
    from asrdecode.audio import read_audio
    from asrdecode.models import load

    demo = load(name)
    audio = [read_audio(str(p)) for p in _clips(clips)]
    with torch.inference_mode():
        x, n = demo.features(audio)
        enc, lengths = demo.encode_features(x, n)
        if ctc_head:
            enc = demo.model.log_probs_from_encoder(enc).float()
    return demo, enc.contiguous(), lengths


def beam_section(report: Report, device: torch.device, args: argparse.Namespace, budget: Budget) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    if budget.left() < 30:
        report.notes.append("transducer beam section skipped: budget spent")
        return
    demo, enc_all, len_all = demo_outputs("demo-rnnt", 8 if args.quick else None, ctc_head=False)
    B = min(args.beam_batch, enc_all.shape[0]) if args.quick else args.beam_batch
    enc_cpu, lengths_cpu = _tile(enc_all, len_all, B)
    enc_cpu = enc_cpu[:, : int(lengths_cpu.max())].contiguous()
    section = f"transducer beam (demo-rnnt, B={B}, {int(lengths_cpu.max())} frames max)"
    weight, beta = LM_TUNED["demo-rnnt"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=demo.tokenizer.vocab_size,
                           blank_id=demo.tokenizer.blank_id)
    cpu_model = demo.model
    model = copy.deepcopy(cpu_model).to(device)
    enc, lengths = enc_cpu.to(device), lengths_cpu.to(device)
    lm_dev = lm.to(device)
    audio = float(lengths_cpu.sum()) * FRAME_SECONDS
    mode = "cuda_graphs" if device.type == "cuda" else "eager"

    def greedy_call() -> Any:
        with torch.inference_mode():
            return greedy_dec.decode(enc, lengths)

    greedy_dec = GreedyDecoder(model, acceleration=mode, engine="torch")
    greedy_s, _ = timed(greedy_call, device, args.repeats)
    report.add(Row(section, f"greedy label-looping, {mode}", greedy_s, audio, host_reads=host_reads(greedy_call)))
    searches = [("ALSD++ beam 4 + LM", dict(method="alsd", fusion=[(lm, weight)], beta=beta)),
                ("AES++ beam 4 + LM", dict(method="aes", fusion=[(lm, weight)], beta=beta)),
                ("WIND beam 4 + LM", dict(method="wind", window=8, fusion=[(lm, weight)], beta=beta)),
                ("ALSD++ beam 4", dict(method="alsd")),
                ("WIND beam 4", dict(method="wind", window=8))]
    for name, options in searches:
        if budget.left() < 15:
            report.notes.append(f"{section} {name} skipped: budget spent")
            continue
        with torch.inference_mode():
            reference = BeamSearchDecoder(cpu_model, beam=4, engine="auto", **options).decode(enc_cpu, lengths_cpu)
        dev_options = dict(options)
        if "fusion" in dev_options:
            dev_options["fusion"] = [(lm_dev, weight)]
        dec = BeamSearchDecoder(model, beam=4, acceleration=mode, engine="torch", **dev_options)

        def call(dec: BeamSearchDecoder = dec) -> Any:
            with torch.inference_mode():
                return dec.decode(enc, lengths)

        seconds, nbest = timed(call, device, max(1, args.repeats // 2))
        add = functools.partial(_beam_row, report, section, name, greedy_s, reference, audio)
        add(mode, seconds, nbest, host_reads(call))
        if args.compiled_graphs and device.type == "cuda":
            COMPILED.append((COMPILED_PRIORITY[name], f"{section} {name}", call,
                             functools.partial(add, "torch.compile inside CUDA graphs")))
        if name == "ALSD++ beam 4 + LM" and budget.left() > 15:  # the LM with a dense row for every state
            dense = BeamSearchDecoder(model, beam=4, acceleration=mode, engine="torch",
                                      **{**dev_options, "fusion": [(lm_dev.with_dense_rows(), weight)]})

            def call_dense(dec: BeamSearchDecoder = dense) -> Any:
                with torch.inference_mode():
                    return dec.decode(enc, lengths)

            seconds, nbest = timed(call_dense, device, max(1, args.repeats // 2))
            _beam_row(report, section, name + " (LM with dense rows)", greedy_s, reference, audio, mode, seconds,
                      nbest)


def _beam_row(report: Report, section: str, name: str, greedy_s: float, reference: list, audio: float, how: str,
              seconds: float, nbest: list, reads: int | None = None) -> None:
    """A beam search's row: its time against greedy's, its n-best lists against the CPU reference's."""
    report.add(Row(section, f"{name}, {how}", seconds, audio, "greedy", greedy_s / seconds,
                   f"{count_same(nbest, reference)}/{len(reference)}", reads,
                   note=f"{seconds / greedy_s:.2f}x greedy's time"))


def _native_threads(decode: Callable[[torch.Tensor, torch.Tensor], list], x: torch.Tensor, lengths: torch.Tensor,
                    threads: int, pool: ThreadPoolExecutor) -> list:
    """``decode`` over the batch split into ``threads`` parts run on a thread pool, results in order."""
    parts = [p for p in zip(x.tensor_split(threads), lengths.tensor_split(threads)) if p[0].shape[0]]
    out: list = []
    for res in pool.map(lambda p: decode(*p), parts):
        out.extend(res)
    return out


def _cpu_baselines(report: Report, section: str, decode: Callable[[torch.Tensor, torch.Tensor], list],
                   x: torch.Tensor, lengths: torch.Tensor, audio: float, args: argparse.Namespace,
                   cpu: torch.device) -> dict[int, float]:
    """The native engine on 1 and ``args.cpu_threads`` threads: their times by thread count."""
    out = {}
    for threads in sorted({1, args.cpu_threads}):
        with ThreadPoolExecutor(threads) as pool:
            def call(threads: int = threads, pool: ThreadPoolExecutor = pool) -> list:
                with torch.inference_mode():
                    return _native_threads(decode, x, lengths, threads, pool)

            seconds, _ = timed(call, cpu, max(1, args.repeats // 3), warmup=1)
        out[threads] = seconds
        report.add(Row(section, f"native engine, CPU, {threads} thread{'s' if threads > 1 else ''}", seconds, audio))
    return out


def ctc_section(report: Report, device: torch.device, args: argparse.Namespace, budget: Budget) -> None:
    from asrdecode.lm import NGramLM
    from asrdecode.models.demo import ASSETS, LM_TUNED

    if budget.left() < 30:
        report.notes.append("CTC beam section skipped: budget spent")
        return
    demo, lp_all, len_all = demo_outputs("demo-ctc", 8 if args.quick else None, ctc_head=True)
    B = args.ctc_batch
    lp_cpu, lengths_cpu = _tile(lp_all, len_all, B)
    blank, V = demo.blank_id, lp_cpu.shape[-1]
    weight, beta = LM_TUNED["demo-ctc"]
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=blank)
    audio = float(lengths_cpu.sum()) * FRAME_SECONDS
    cpu = torch.device("cpu")
    for name, fusion, collapse in (("beam 16 + token LM", [(lm, weight)], None),
                                   ("beam 16 + token LM, blank collapse 0.999", [(lm, weight)], 0.999),
                                   ("beam 16", [], None)):
        if budget.left() < 20:
            report.notes.append(f"CTC {name} skipped: budget spent")
            continue
        section = f"CTC prefix beam (demo-ctc, {name}, B={B})"
        native = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16, fusion=fusion, beta=beta if fusion else 0.0,
                                    blank_collapse=collapse, engine="native")
        base = _cpu_baselines(report, section, native.decode, lp_cpu, lengths_cpu, audio, args, cpu)
        with torch.inference_mode():
            reference = native.decode(lp_cpu, lengths_cpu)
        lm_dev = [(m.to(device), w) for m, w in fusion]
        dec = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16, fusion=lm_dev, beta=beta if fusion else 0.0,
                                 blank_collapse=collapse, engine="torch")
        lp, lengths = lp_cpu.to(device), lengths_cpu.to(device)

        def call(dec: Any = dec, lp: torch.Tensor = lp, lengths: torch.Tensor = lengths) -> Any:
            with torch.inference_mode():
                return dec.decode(lp, lengths)

        seconds, nbest = timed(call, device, max(1, args.repeats // 2))
        _tensor_rows(report, section, f"tensor engine, {device.type}", seconds, nbest, reference=reference,
                     same=_same_best_tokens, base=base, audio=audio, reads=host_reads(call))
        if args.compiled_graphs and device.type == "cuda" and fusion and collapse is None:
            COMPILED.append((COMPILED_PRIORITY["CTC + LM"], section, call, functools.partial(
                _tensor_rows, report, section, COMPILED_NAME, same=_same_best_tokens, reference=reference, base=base,
                audio=audio, reads=None)))
        if fusion and collapse is None and budget.left() > 15:  # the LM with a dense row for every state
            dense = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16, beta=beta, engine="torch",
                                       fusion=[(m.with_dense_rows(), w) for m, w in lm_dev])

            def call_dense(dec: Any = dense, lp: torch.Tensor = lp, lengths: torch.Tensor = lengths) -> Any:
                with torch.inference_mode():
                    return dec.decode(lp, lengths)

            seconds, nbest = timed(call_dense, device, max(1, args.repeats // 2))
            _tensor_rows(report, section, f"tensor engine, {device.type}, LM with dense rows", seconds, nbest,
                         reference=reference, same=_same_best_tokens, base=base, audio=audio, reads=None)
            if args.compiled_graphs and device.type == "cuda":
                COMPILED.append((COMPILED_PRIORITY["CTC + LM with dense rows"], section, call_dense, functools.partial(
                    _tensor_rows, report, section, COMPILED_NAME + ", LM with dense rows", same=_same_best_tokens,
                    reference=reference, base=base, audio=audio, reads=None)))


def _same_best_tokens(a: list, b: list) -> bool:
    return a[0].tokens == b[0].tokens


def _same_words(a: Any, b: Any) -> bool:
    return [w for w, _, _ in a.words] == [w for w, _, _ in b.words]


def _tensor_rows(report: Report, section: str, name: str, seconds: float, out: list, *, reference: list,
                 same: Callable[[Any, Any], bool], base: dict[int, float], audio: float, reads: int | None) -> None:
    """One row per native baseline (by thread count) for the tensor engine's ``seconds``; ``reads`` on the
    first."""
    for threads, base_s in base.items():
        report.add(Row(section, name, seconds, audio, f"native {threads} thread{'s' if threads > 1 else ''}",
                       base_s / seconds, f"{count_same(out, reference, same)}/{len(reference)}",
                       reads if threads == 1 else None))


def _wfst_graph(demo: Any, words: int) -> Any:
    """The TLG (compact) of the bundled word 3-gram pruned to ``words`` words, cached in work/cache/gpu-bench."""
    from asrdecode.ctc.wfst import DecodingGraph, build_tlg, lexicon_from_tokenizer
    from asrdecode.lm.arpa import prune_vocabulary, read_arpa
    from asrdecode.models.demo import ASSETS

    path = ROOT / "work/cache/gpu-bench" / f"tlg-compact-{words}-v{demo.tokenizer.vocab_size}.pt"
    if path.exists():
        return DecodingGraph.load(path)
    arpa = prune_vocabulary(read_arpa(ASSETS / "word-3gram.arpa.gz"), words)
    lex = lexicon_from_tokenizer([w for w in arpa.vocab if w not in ("<s>", "</s>")], demo.tokenizer,
                                 on_unknown="skip")
    graph = build_tlg(demo.tokenizer.vocab_size, lex, arpa, topology="compact", blank_id=demo.blank_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph.save(path)
    return graph


def wfst_section(report: Report, device: torch.device, args: argparse.Namespace, budget: Budget) -> None:
    from asrdecode.ctc.wfst import WFSTDecoder

    if budget.left() < 40:
        report.notes.append("WFST section skipped: budget spent")
        return
    demo, lp_all, len_all = demo_outputs("demo-ctc", 8 if args.quick else None, ctc_head=True)
    try:
        t0 = time.perf_counter()
        graph = _wfst_graph(demo, args.wfst_words)
        report.notes.append(f"WFST graph: {args.wfst_words} words, {graph.num_states} states, {graph.num_arcs} arcs "
                            f"(loaded or built in {time.perf_counter() - t0:.1f} s)")
    except ImportError as err:  # kaldifst builds the graph
        report.notes.append(f"WFST section skipped: {err}")
        return
    B = args.ctc_batch
    lp_cpu, lengths_cpu = _tile(lp_all, len_all, B)
    audio = float(lengths_cpu.sum()) * FRAME_SECONDS
    options = dict(beam=12.0, max_active=2000, acoustic_scale=2.0)
    section = f"WFST TLG (demo-ctc, {args.wfst_words} words, beam 12, max_active 2000, B={B})"
    native = WFSTDecoder(graph, engine="native", **options)
    base = _cpu_baselines(report, section, native, lp_cpu, lengths_cpu, audio, args, torch.device("cpu"))
    with torch.inference_mode():
        reference = native(lp_cpu, lengths_cpu)
    dec = WFSTDecoder(graph, engine="torch", **options)
    lp, lengths = lp_cpu.to(device), lengths_cpu.to(device)

    def call() -> Any:
        with torch.inference_mode():
            return dec(lp, lengths)

    seconds, hyps = timed(call, device, max(1, args.repeats // 3))
    if args.compiled_graphs and device.type == "cuda":
        COMPILED.append((COMPILED_PRIORITY["WFST"], section, call, functools.partial(
            _tensor_rows, report, section, COMPILED_NAME, same=_same_words, reference=reference, base=base,
            audio=audio, reads=None)))
    _tensor_rows(report, section, f"tensor engine, {device.type}", seconds, hyps, reference=reference,
                 same=_same_words, base=base, audio=audio, reads=host_reads(call))
    # the same loop expanding every arc (no dense rows: no acoustic pre-pruning), the loop before it had one
    every = WFSTDecoder(graph, engine="torch", dense_min_degree=10**9, **options)

    def call_every() -> Any:
        with torch.inference_mode():
            return every(lp, lengths)

    if budget.left() > 30:
        seconds, hyps = timed(call_every, device, max(1, args.repeats // 3))
        _tensor_rows(report, section, f"tensor engine, {device.type}, every arc (no pre-pruning)", seconds, hyps,
                     reference=reference, same=_same_words, base=base, audio=audio, reads=None)
        if args.compiled_graphs and device.type == "cuda":  # (which expansion to default on a card)
            COMPILED.append((COMPILED_PRIORITY["WFST every arc"], section, call_every, functools.partial(
                _tensor_rows, report, section, COMPILED_NAME + ", every arc", same=_same_words, reference=reference,
                base=base, audio=audio, reads=None)))
    # the default expansion with the epsilon passes over a budget of candidates, not in dense rows (which
    # layout a card prefers: dense rows make fewer ops, the budget fewer elements)
    from asrdecode.ctc.wfst import fixed

    def call_budget() -> Any:
        with fixed.epsilon_layout(dense=False), torch.inference_mode():
            return dec(lp, lengths)

    eps_degree = int((graph.p_ptr[1:] - graph.p_ptr[:-1]).max()) if graph.p_ptr.numel() > 1 else 0
    if 0 < eps_degree <= fixed.DENSE_EPSILON_DEGREE and budget.left() > 30:
        seconds, hyps = timed(call_budget, device, max(1, args.repeats // 3))
        _tensor_rows(report, section, f"tensor engine, {device.type}, epsilon passes over a budget", seconds, hyps,
                     reference=reference, same=_same_words, base=base, audio=audio, reads=None)


#: (priority, section, warm call, ``add(seconds, results)``: adds its rows, compared as the section compares) of
#: the searches that --compiled-graphs times again with torch.compile'd steps inside the CUDA graphs, at the end
COMPILED: list[tuple[int, str, Callable[[], Any], Callable[[float, list], None]]] = []
COMPILED_NAME = "tensor engine, torch.compile inside CUDA graphs"
#: the order the compiled rows run in while the budget lasts (lower first; each compiles for seconds): the
#: searches with a target first, the variants after
COMPILED_PRIORITY = {"CTC + LM": 0, "WFST": 1, "ALSD++ beam 4 + LM": 2, "AES++ beam 4 + LM": 3, "WFST every arc": 4,
                     "CTC + LM with dense rows": 5, "WIND beam 4 + LM": 6, "ALSD++ beam 4": 7, "WIND beam 4": 8}


def compiled_section(report: Report, device: torch.device, args: argparse.Namespace, budget: Budget) -> None:
    """The rows of COMPILED again, their steps torch.compile'd inside the graphs (compilation in the warm-up)."""
    for _, section, call, add in sorted(COMPILED, key=lambda row: row[0]):
        if budget.left() < 60:
            report.notes.append(f"{section}: compiled graphs skipped: budget spent")
            continue
        t0 = time.perf_counter()
        try:
            with compiled_graphs(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CompiledRoundMismatch)
                seconds, out = timed(call, device, max(1, args.repeats // 3))
        except Exception as err:  # an optional row: say why it is missing
            report.notes.append(f"{section}: compiled graphs failed: {type(err).__name__}: {err}"[:400])
            continue
        report.notes.append(f"{section}: compiled graphs' first call (compilation + capture + the round check "
                            f"against eager) took {time.perf_counter() - t0 - seconds:.0f} s")
        n_rows = len(report.rows)
        add(seconds, out)
        rejected = [str(w.message) for w in caught if issubclass(w.category, CompiledRoundMismatch)]
        if rejected:  # the library fell back to the eager round: the row timed that
            for row in report.rows[n_rows:]:
                row.name += " (compiled round rejected by its check: eager rounds timed)"
            report.notes.append(f"{section}: {rejected[0]}"[:600])


SECTIONS = {"greedy": greedy_section, "beam": beam_section, "ctc": ctc_section, "wfst": wfst_section,
            "compiled": compiled_section}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="small sizes (the CPU smoke test)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="skip what would not fit in this many seconds")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)} "
                    "(compiled: with --compiled-graphs, the transducer beam, CTC + LM and WFST rows again with compiled steps)")
    ap.add_argument("--batch", type=int, default=32, help="greedy batch (paper model)")
    ap.add_argument("--frames", type=int, default=150, help="greedy frames (paper model)")
    ap.add_argument("--beam-batch", type=int, default=32)
    ap.add_argument("--ctc-batch", type=int, default=128)
    ap.add_argument("--wfst-words", type=int, default=2000)
    ap.add_argument("--cpu-threads", type=int, default=16, help="threads of the native engine's second baseline")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--compiled-graphs", action="store_true",
                    help="also time the transducer beam searches (ALSD++, AES++, WIND), CTC beam + LM and WFST with "
                    "torch.compile'd steps inside the CUDA graphs "
                    "(compiles: a slow first call), as the last rows")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks/latest"))
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.frames, args.beam_batch, args.ctc_batch = 4, 40, 4, 8
        args.wfst_words, args.cpu_threads, args.repeats = 100, 2, 1
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def main(argv: Sequence[str] | None = None) -> Report:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    budget = Budget(args.budget_s)
    report = Report(device_name(device))
    print(f"device: {report.device}", flush=True)
    for name in args.sections.split(","):
        SECTIONS[name](report, device, args, budget)
    report.notes.append(f"run took {time.perf_counter() - budget.start:.0f} s (budget {args.budget_s:.0f} s); "
                        f"`python benchmarks/gpu.py {' '.join(argv if argv is not None else sys.argv[1:])}`")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.md").write_text(report.markdown())
    (out / "gpu.json").write_text(json.dumps(report.as_json(), indent=1))
    print(report.markdown(), flush=True)
    return report


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
