"""WER and delay of final words of streams, per latency setting, in a simulated real-time feed.

For each model and latency (``asrdecode.streaming.latency``: latency = block + lookahead), every
clip of the model's test set is fed to a :class:`~asrdecode.streaming.StreamDecoder` in chunks of
``--chunk`` seconds (0.16 s: the browser page's microphone) as a real-time client would send them,
and the stream is ended (``final``) right after its last chunk. Reported per latency:

- **WER** of the streams' final results (equal to ``StreamDecoder.offline`` at that latency), next
  to whole-file decoding (the ``transcribe`` path: the whole clip encoded at once);
- **delay of final words**: a word of the final transcript is *final* from the first result after
  which every result (partial or final) starts with the final transcript's words up to it (a
  stable prefix). Its delay is the time from the end of the word's audio (its end time in the final
  result) to when that result was emitted, on a simulated clock: chunk ``k`` arrives when its
  audio has been spoken, its step starts when it has arrived and the previous step is done, and
  takes the step's measured CPU time (one thread). Median and 95th percentile over all words;
  words finished only by the end of the stream count with the final result's time;
- **partials**: per-chunk step cost (median / p95 CPU ms; every chunk gets a partial result) and
  the mean audio between changes of the partial text (``update``).

    OMP_NUM_THREADS=1 python3 benchmarks/stream_latency.py [--models phone-ctc demo-ctc ...]
        [--latencies 0.1 0.2 0.4 0.8 1.2 1.6 2.0] [--limit N] [--out table.md] [--json rows.json]

``--frames N,C,R ...``: instead, for explicit geometries (encoder frames: block, left, right), the
WER of ``offline`` and how close the block front end's frames are to whole-file frames (share of
frames with the same top class; mean KL divergence from the whole-file posteriors; CTC models):

    OMP_NUM_THREADS=1 python3 benchmarks/stream_latency.py --models phone-ctc --frames 16,16,4 16,50,64 25,50,55

phone-ctc (the CLI's default: WFST over its cached graph) is measured on data/real; the demo models
(trained on synthetic voices, ~85 % WER on real speech) on data/synth_test. ``--old`` adds a row
for the old fixed front end (16 frames of block and of left context, 4 of lookahead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import torch

ROOT = Path(__file__).resolve().parent.parent

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.evaluate import read_manifest, wer  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.records import hypothesis_record  # noqa: E402
from asrdecode.serving.server import bundle_decoding  # noqa: E402
from asrdecode.streaming import StreamDecoder  # noqa: E402

SETS = {"phone-ctc": ROOT / "data/real/manifest.jsonl"}
SYNTH = ROOT / "data/synth_test/manifest.jsonl"
LATENCIES = [0.1, 0.2, 0.4, 0.8, 1.2, 1.6, 2.0]
WHOLE = {"block_frames": 10**7, "left_context": 0, "right_context": 0}  # one window: the whole clip
OLD = {"block_frames": 16, "left_context": 16, "right_context": 4}


@dataclass
class Row:
    """One model x latency: WER %, delays (s), partial cost (ms) and text cadence (s of audio)."""

    model: str
    setting: str
    block: float
    left: float
    right: float
    wer: float
    whole_wer: float
    delay_median: float
    delay_p95: float
    step_ms_median: float
    step_ms_p95: float
    update_s: float
    rtf: float


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs`` by linear interpolation (0.0 for none)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def words_of(dec: StreamDecoder, hyp: Any) -> list[tuple[str, float]]:
    """``[(word, end seconds)]`` of a hypothesis (WFST words, or the tokenizer's word spans)."""
    rec = hypothesis_record(hyp, dec.bundle.tokenizer, dec.bundle.frame_seconds, "")
    words = rec.get("words")
    if words is None:
        return [(w, 0.0) for w in (hyp.text or "").split()]
    return [(w["word"], float(w["end"])) for w in words]


def stable_delays(steps: list[tuple[float, list[str]]], final: list[tuple[str, float]]) -> list[float]:
    """Delay of each final word: ``steps`` are ``(emitted at, words)`` per result in order (the last
    is the final result); word ``i`` is final from the first step after which every step's words
    start with ``final[:i + 1]``."""
    target = [w for w, _ in final]
    lcp = []
    for _, words in steps:
        n = 0
        while n < min(len(words), len(target)) and words[n] == target[n]:
            n += 1
        lcp.append(n)
    suffix_min = lcp[:]
    for k in range(len(lcp) - 2, -1, -1):
        suffix_min[k] = min(lcp[k], suffix_min[k + 1])
    delays, k = [], 0
    for i, (_, end) in enumerate(final):
        while suffix_min[k] <= i:
            k += 1
        delays.append(steps[k][0] - end)
    return delays


def feed(dec: StreamDecoder, wave: torch.Tensor, chunk: int, latency: Optional[float]
         ) -> tuple[str, list[float], list[float], list[float]]:
    """One real-time stream: ``(final text, word delays s, step CPU s, audio s between text changes)``."""
    sr = 16000
    dec.open("s", latency=latency) if latency is not None else dec.open("s")
    steps: list[tuple[float, list[str]]] = []
    costs: list[float] = []
    clock, last_text, last_change, changes = 0.0, "", 0.0, []
    n = wave.numel()
    starts = list(range(0, n, chunk)) or [0]
    for i, a in enumerate(starts):
        b = min(a + chunk, n)
        last = i == len(starts) - 1
        t0 = time.process_time()
        res = dec.step({"s": wave[a:b]}, final={"s"} if last else ())["s"]
        words = [w for w, _ in words_of(dec, res.hypothesis)] if not last else []
        cost = time.process_time() - t0
        costs.append(cost)
        clock = max(clock, b / sr) + cost
        if last:
            final = words_of(dec, res.hypothesis)
            words = [w for w, _ in final]
        steps.append((clock, words))
        if res.text != last_text:
            changes.append(b / sr - last_change)
            last_text, last_change = res.text, b / sr
    return res.text, stable_delays(steps, final), costs, changes


def measure(model: str, settings: list[tuple[str, dict[str, Any]]], manifest: Path, limit: Optional[int],
            chunk_s: float) -> list[Row]:
    """Every setting of one model over its test set (``settings``: label and StreamDecoder keywords)."""
    bundle = load_bundle(model)
    decoder, options = bundle_decoding(bundle, None, {})
    entries = read_manifest(manifest)[:limit]
    waves = [read_audio(e.audio_filepath) for e in entries]
    refs = [e.text for e in entries]
    audio_s = sum(w.numel() for w in waves) / 16000
    whole = StreamDecoder(bundle, decoder, **WHOLE, **options)
    whole_wer = 100 * wer(refs, [whole.offline(w).text or "" for w in waves])
    rows = []
    for label, kw in settings:
        dec = StreamDecoder(bundle, decoder, **kw, **options)
        info = dec.latency_info()
        texts, delays, costs, changes = [], [], [], []
        for w in waves:
            text, d, c, ch = feed(dec, w, int(round(chunk_s * 16000)), None)
            texts.append(text)
            delays += d
            costs += c
            changes += ch
        row = Row(model, label, info["block"], info["left"], info["right"], round(100 * wer(refs, texts), 2),
                  round(whole_wer, 2), round(statistics.median(delays), 3) if delays else 0.0,
                  round(percentile(delays, 0.95), 3), round(1000 * statistics.median(costs), 1),
                  round(1000 * percentile(costs, 0.95), 1), round(statistics.mean(changes), 3) if changes else 0.0,
                  round(sum(costs) / audio_s, 3))
        print(json.dumps(asdict(row)), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def frame_agreement(whole: StreamDecoder, dec: StreamDecoder, waves: list[torch.Tensor]) -> tuple[float, float]:
    """``(share of frames with the same top class, mean KL(whole || blocks))`` of ``dec``'s front end
    against ``whole``'s over ``waves`` (CTC log-probs ``[T, V]``)."""
    same = total = 0
    kl = 0.0
    for w in waves:
        ref, got = whole.front.encode_utterance(w), dec.front.encode_utterance(w)
        n = min(ref.shape[0], got.shape[0])
        ref, got = ref[:n].log_softmax(-1), got[:n].log_softmax(-1)
        same += int((ref.argmax(-1) == got.argmax(-1)).sum())
        kl += float((ref.exp() * (ref - got)).sum())
        total += n
    return same / max(1, total), kl / max(1, total)


def frames_table(model: str, geometries: list[str], manifest: Path, limit: Optional[int]) -> str:
    """WER and frame agreement of explicit ``"N,C,R"`` geometries (markdown)."""
    bundle = load_bundle(model)
    decoder, options = bundle_decoding(bundle, None, {})
    entries = read_manifest(manifest)[:limit]
    waves = [read_audio(e.audio_filepath) for e in entries]
    refs = [e.text for e in entries]
    whole = StreamDecoder(bundle, decoder, **WHOLE, **options)
    out = [f"| {model}: N / C / R (frames) | WER % | same top class | KL |", "|---|---|---|---|",
           f"| whole file | {100 * wer(refs, [whole.offline(w).text or '' for w in waves]):.2f} | 100 % | 0 |"]
    for g in geometries:
        n, c, r = (int(x) for x in g.split(","))
        dec = StreamDecoder(bundle, decoder, block_frames=n, left_context=c, right_context=r, **options)
        err = 100 * wer(refs, [dec.offline(w).text or "" for w in waves])
        agree = frame_agreement(whole, dec, waves) if bundle.kind == "ctc" else (float("nan"), float("nan"))
        out.append(f"| {n} / {c} / {r} | {err:.2f} | {100 * agree[0]:.1f} % | {agree[1]:.3f} |")
        print(out[-1], file=sys.stderr, flush=True)
    return "\n".join(out) + "\n"


def markdown(rows: list[Row]) -> str:
    """The docs table."""
    out = ["| model | latency | block / left / right (s) | WER % | whole file | delay median (s) | delay p95 (s) "
           "| partial step median / p95 (ms) | partial text update (s) | CPU / audio |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.model} | {r.setting} | {r.block:g} / {r.left:g} / {r.right:g} | {r.wer:.2f} "
                   f"| {r.whole_wer:.2f} | {r.delay_median:.2f} | {r.delay_p95:.2f} | {r.step_ms_median:.1f} / "
                   f"{r.step_ms_p95:.1f} | {r.update_s:.2f} | {r.rtf:.3f} |")
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["phone-ctc", "demo-ctc", "demo-rnnt", "demo-tdt"])
    p.add_argument("--latencies", nargs="+", type=float, default=LATENCIES)
    p.add_argument("--old", action="store_true", help="add the old fixed front end (N=16, C=16, R=4)")
    p.add_argument("--limit", type=int, help="first N clips of each set")
    p.add_argument("--chunk", type=float, default=0.16, help="seconds of audio per message (default: 0.16)")
    p.add_argument("--out", type=Path, help="write the markdown table here")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--frames", nargs="+", metavar="N,C,R", help="WER and frame agreement of these geometries")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.frames:
        tables = "\n".join(frames_table(m, args.frames, SETS.get(m, SYNTH), args.limit) for m in args.models)
        print(tables)
        if args.out:
            args.out.write_text(tables)
        return 0
    rows: list[Row] = []
    for model in args.models:
        settings = [(f"{lat:g} s", {"latency": lat}) for lat in args.latencies]
        if args.old:
            settings.insert(0, ("old fixed", dict(OLD)))
        rows += measure(model, settings, SETS.get(model, SYNTH), args.limit, args.chunk)
    table = markdown(rows)
    print(table)
    if args.out:
        args.out.write_text(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
