"""``asrdecode bench``: decoder speed, WIND jump lengths and WER vs LM weight, as a table and plots.

Everything is measured in one run on one thread, decoder only (the front end and the encoder run
once, before any timing):

- **RTFx vs batch size** for the transducer decoders (frame-looping greedy, label-looping greedy,
  label-looping + WIND 8, ALSD beam 4; at most 10 labels per frame) on ``demo-rnnt`` and the CTC
  decoders (greedy, beam 8) on ``demo-ctc``; optionally (``paper=True``) the transducer decoders
  also on a random paper-sized RNN-T (encoder 512, prediction 640, joint 640, vocabulary 1024 +
  blank, 8 random utterances). A batch size ``B`` decodes the same workload (every utterance,
  repeated as needed to make at least ``max(batches)``) in batches of ``B``; the timings of one batch size are interleaved across decoders and the median
  of ``repeats`` counts. RTFx = audio seconds / decoder seconds; the ratio is against the
  family's baseline (frame-looping greedy, CTC greedy) at the same batch size.
- **WIND jump lengths**: how many frames each WIND window step advanced when decoding the bundled
  data with ``demo-rnnt`` and ``window=8``. Derived from the emitted labels' frames alone
  (:func:`wind_jumps`): before a label on frame ``t'`` found from frame ``t`` the search consumes
  ``g = t' - t`` blanks in ``g // w`` full steps of ``w`` and one step of ``g % w`` (0 when the
  label sits on the first frame of the window); after the last label the ``L - t`` remaining blanks
  take full steps and one step of the remainder, if any.
- **WER vs LM weight** of CTC beam search (beam 8) with the bundled token 4-gram LM.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, cast

import torch

from . import ctc
from . import transducer as tr
from .errors import DecodingInputError
from .pipeline import NBest, best_of
from .results import Hypothesis

__all__ = [
    "BenchConfig",
    "SpeedRow",
    "BenchResult",
    "wind_jumps",
    "run_bench",
    "format_markdown",
    "write_plots",
]

DATA = Path(__file__).resolve().parents[2] / "data"
WIND = 8
TRANSDUCER_BEAM = 4
CTC_BEAM = 8
MAX_SYMBOLS = 10


@dataclass
class BenchConfig:
    """What :func:`run_bench` measures."""

    batches: Sequence[int] = (1, 4, 16, 32)
    repeats: int = 3
    lm_weights: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0)
    beta: float = 2.0
    utterances: Optional[int] = None  # bundled utterances to encode (None: all)
    paper: bool = False
    paper_frames: int = 150
    data_dir: Path = DATA

    def validate(self) -> None:
        """Raise :class:`DecodingInputError` on a setting that cannot be run."""
        if not self.batches:
            raise DecodingInputError("at least one batch size is needed")
        if any(int(b) < 1 for b in self.batches):
            raise DecodingInputError(f"batch sizes must be >= 1, got {list(self.batches)}")
        if self.repeats < 1:
            raise DecodingInputError(f"repeats must be >= 1, got {self.repeats}")
        if not self.lm_weights:
            raise DecodingInputError("at least one LM weight is needed")
        if any(not math.isfinite(w) or w < 0 for w in self.lm_weights):
            raise DecodingInputError(f"LM weights must be finite and >= 0, got {list(self.lm_weights)}")
        if self.utterances is not None and self.utterances < 1:
            raise DecodingInputError(f"utterances must be >= 1, got {self.utterances}")
        if self.paper_frames < 1:
            raise DecodingInputError(f"paper frames must be >= 1, got {self.paper_frames}")


@dataclass
class SpeedRow:
    """Decoder-only speed of one decoder at one batch size."""

    model: str
    decoder: str
    batch: int
    audio_seconds: float
    seconds: float
    ratio: float = math.nan  # RTFx / RTFx of the family's baseline at this batch size

    @property
    def rtfx(self) -> float:
        return self.audio_seconds / self.seconds if self.seconds > 0 else math.inf


@dataclass
class BenchResult:
    """Everything :func:`run_bench` measured."""

    speed: list[SpeedRow] = field(default_factory=list)
    wind_window: int = WIND
    wind_jumps: Counter = field(default_factory=Counter)
    lm_wer: list[tuple[float, float]] = field(default_factory=list)  # (weight, WER)
    beta: float = 0.0
    utterances: int = 0
    audio_seconds: float = 0.0


def wind_jumps(hyps: Sequence[Hypothesis], lengths: Sequence[int], window: int) -> Counter:
    """Frames advanced by each WIND window step of RNN-T greedy decoding, as ``{frames: steps}``.

    Computed from the hypotheses' label frames (see the module docstring), valid for RNN-T greedy
    decoding without ``max_symbols``.
    """
    if window < 1:
        raise DecodingInputError(f"window must be >= 1, got {window}")
    if len(hyps) != len(lengths):
        raise DecodingInputError(f"{len(hyps)} hypotheses but {len(lengths)} lengths")
    jumps: Counter = Counter()
    for h, n in zip(hyps, lengths):
        t = 0
        for f in list(h.timestamps) + [int(n)]:
            gap = int(f) - t
            if gap < 0:
                raise DecodingInputError("label frames must not decrease and must lie inside the utterance")
            full, rest = divmod(gap, window)
            jumps[window] += full
            if f < n or rest:  # a label: one more step (advancing ``rest``); the end: only a remainder
                jumps[rest] += 1
            t = int(f)
    return Counter({k: v for k, v in jumps.items() if v})


# ------------------------------------------------------------------------------------------ helpers
def _median_times(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each function after one warm-up; repeats are interleaved."""
    with torch.inference_mode():
        for fn in fns.values():
            fn()
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(repeats):
            for k, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def _workload(x: torch.Tensor, lengths: torch.Tensor, n: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` utterances of ``x`` (repeated as needed) in batches of ``batch``, each cut to its longest."""
    idx = [i % x.shape[0] for i in range(n)]
    out = []
    for s in range(0, n, batch):
        sel = torch.tensor(idx[s : s + batch])
        ln = lengths[sel]
        out.append((x[sel, : int(ln.max())].contiguous(), ln))
    return out


def _speed(model_name: str, decoders: dict[str, tuple[str, Callable]], inputs: dict[str, torch.Tensor],
           lengths: torch.Tensor, frame_seconds: float, cfg: BenchConfig) -> list[SpeedRow]:
    """Time every decoder (the first is the baseline) for every batch size."""
    n = max(max(int(b) for b in cfg.batches), int(lengths.shape[0]))
    rows = []
    for B in cfg.batches:
        B = int(B)
        fns: dict[str, Callable[[], object]] = {}
        audio = 0.0
        for name, (kind, fn) in decoders.items():
            work = _workload(inputs[kind], lengths, n, B)
            audio = float(sum(int(ln.sum()) for _, ln in work)) * frame_seconds
            fns[name] = (lambda f, w: lambda: [f(x, ln) for x, ln in w])(fn, work)
        times = _median_times(fns, cfg.repeats)
        base = audio / times[next(iter(decoders))]
        for name in decoders:
            row = SpeedRow(model_name, name, B, audio, times[name])
            row.ratio = row.rtfx / base
            rows.append(row)
    return rows


def _transducer_decoders(model) -> dict[str, tuple[str, Callable]]:
    # At most MAX_SYMBOLS labels per frame, as beam search's default cap (random-weight models
    # can otherwise emit without end on one frame).
    kw: dict[str, Any] = dict(max_symbols=MAX_SYMBOLS, acceleration="eager", engine="torch")  # the tensor loops
    return {
        "greedy frame-looping": ("enc", lambda x, n: tr.greedy(model, x, n, loop="frames", **kw)),
        "greedy label-looping": ("enc", lambda x, n: tr.greedy(model, x, n, loop="labels", **kw)),
        f"label-looping + WIND {WIND}": ("enc", lambda x, n: tr.greedy(model, x, n, window=WIND, **kw)),
        f"ALSD beam {TRANSDUCER_BEAM}": ("enc", lambda x, n: tr.beam_search(
            model, x, n, beam=TRANSDUCER_BEAM, max_symbols=MAX_SYMBOLS)),
    }


def _paper_model(frames: int):
    """A random paper-sized RNN-T whose greedy output has about 0.3 labels per frame, and its input."""
    from .transducer import LSTMTransducer

    vocab = 1025
    torch.manual_seed(0)
    model = LSTMTransducer(vocab, 512, 640, 640, blank_id=vocab - 1).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    probe = torch.randn(4, 50, 512, generator=g)
    probe_len = torch.full((4,), 50)
    base = model.joint_out.bias[vocab - 1].item()
    lo, hi = -1.0, 6.0  # a larger blank bias gives fewer labels; bisect towards 0.3 labels per frame
    with torch.inference_mode():
        for _ in range(10):
            mid = (lo + hi) / 2
            model.joint_out.bias[vocab - 1] = base + mid
            hyps = cast(list[Hypothesis], tr.greedy(model, probe, probe_len, max_symbols=MAX_SYMBOLS,
                                                    acceleration="eager"))
            if sum(len(h.tokens) for h in hyps) / 200.0 > 0.3:
                lo = mid
            else:
                hi = mid
        model.joint_out.bias[vocab - 1] = base + (lo + hi) / 2
    enc = torch.randn(8, frames, 512, generator=g)
    return model, enc, torch.full((8,), frames, dtype=torch.long)


def _encode_bundled(cfg: BenchConfig, log: Callable[[str], None]):
    from .audio import read_audio
    from .evaluate import read_manifest

    entries = []
    for sub in ("synth_test", "real"):
        entries += read_manifest(cfg.data_dir / sub / "manifest.jsonl")
    if cfg.utterances is not None:
        entries = entries[: cfg.utterances]
    from .models import load

    rnnt, ctc_demo = load("demo-rnnt"), load("demo-ctc")
    waves = [read_audio(e.audio_filepath) for e in entries]
    t0 = time.perf_counter()
    with torch.inference_mode():
        feats, flen = rnnt.features(waves)
        enc, elen = rnnt.encode_features(feats, flen)
        logp = ctc_demo.model.log_probs_from_encoder(enc)  # the bundled models share one encoder
    log(f"encoded {len(entries)} utterances ({sum(w.numel() for w in waves) / 16000:.1f} s of audio) "
        f"in {time.perf_counter() - t0:.1f} s")
    return rnnt, ctc_demo, enc, elen, logp, [e.text for e in entries]


# ---------------------------------------------------------------------------------------------- run
def run_bench(cfg: BenchConfig, log: Callable[[str], None] = lambda s: None) -> BenchResult:
    """Run every measurement of ``asrdecode bench`` (one thread) and return the results."""
    from .evaluate import wer
    from .lm import NGramLM
    from .models.demo import ASSETS

    cfg.validate()
    torch.set_num_threads(1)
    rnnt, ctc_demo, enc, elen, logp, refs = _encode_bundled(cfg, log)
    res = BenchResult(beta=cfg.beta, utterances=len(refs), audio_seconds=float(elen.sum()) * rnnt.frame_seconds)

    res.speed += _speed("demo-rnnt", _transducer_decoders(rnnt.model), {"enc": enc}, elen, rnnt.frame_seconds, cfg)
    log("transducer speed done")
    cb = ctc_demo.blank_id
    ctc_decoders = {
        "CTC greedy": ("logp", lambda x, n: ctc.greedy(x, n, cb)),
        f"CTC beam {CTC_BEAM}": ("logp", lambda x, n: ctc.beam_search(x, n, cb, beam=CTC_BEAM)),
    }
    res.speed += _speed("demo-ctc", ctc_decoders, {"logp": logp}, elen, ctc_demo.frame_seconds, cfg)
    log("CTC speed done")
    if cfg.paper:
        model, penc, plen = _paper_model(cfg.paper_frames)
        res.speed += _speed("paper RNN-T (random)", _transducer_decoders(model), {"enc": penc}, plen, 0.08, cfg)
        log("paper-sized model speed done")

    with torch.inference_mode():
        hyps = cast(list[Hypothesis], tr.greedy(rnnt.model, enc, elen, window=WIND, acceleration="eager",
                                                  engine="torch"))
    res.wind_window = WIND
    res.wind_jumps = wind_jumps(hyps, elen.tolist(), WIND)

    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=ctc_demo.tokenizer.vocab_size, blank_id=cb)
    for w in cfg.lm_weights:
        fusion = [(lm, float(w))] if w > 0 else []
        with torch.inference_mode():
            out = best_of(cast(NBest, ctc.beam_search(logp, elen, cb, beam=CTC_BEAM, fusion=fusion,
                                                      beta=cfg.beta if fusion else 0.0, tokenizer=ctc_demo.tokenizer)))
        res.lm_wer.append((float(w), wer(refs, [h.text or "" for h in out])))
    log("WER vs LM weight done")
    return res


# ------------------------------------------------------------------------------------------- output
def format_markdown(res: BenchResult, cfg: BenchConfig) -> str:
    """The results as markdown (speed table, WIND jump histogram, WER vs LM weight)."""
    lines = [
        "# asrdecode bench",
        "",
        f"{res.utterances} bundled utterances ({res.audio_seconds:.1f} s of audio, encoder frames x frame length); workload per batch size: "
        f"{max(max(cfg.batches), res.utterances)} utterances; one thread; decoder only; median of {cfg.repeats} interleaved runs.",
        "",
        "## Decoder speed",
        "",
        "| model | decoder | batch | RTFx | x baseline |",
        "|---|---|---:|---:|---:|",
    ]
    for r in res.speed:
        lines.append(f"| {r.model} | {r.decoder} | {r.batch} | {r.rtfx:.1f} | {r.ratio:.2f} |")
    if cfg.paper:
        lines += ["", f"paper RNN-T (random): 8 random utterances of {cfg.paper_frames} frames (80 ms each), "
                  f"workload {max(max(cfg.batches), 8)} utterances per batch size."]
    lines += ["", "x baseline: RTFx / RTFx of the family's first decoder (greedy frame-looping, CTC greedy) "
              "at the same batch size, measured in the same run.", "",
              f"## WIND jump lengths (demo-rnnt, window {res.wind_window})", "",
              "| frames advanced | window steps |", "|---:|---:|"]
    for k in sorted(res.wind_jumps):
        lines.append(f"| {k} | {res.wind_jumps[k]} |")
    lines += ["", f"## WER vs LM weight (demo-ctc, CTC beam {CTC_BEAM}, token 4-gram, bonus {res.beta:g} "
              "per token when the weight is > 0)", "", "| LM weight | WER % |", "|---:|---:|"]
    for w, e in res.lm_wer:
        lines.append(f"| {w:g} | {100 * e:.2f} |")
    return "\n".join(lines) + "\n"


def write_plots(res: BenchResult, out: Path) -> list[Path]:
    """Write ``rtfx_vs_batch.png``, ``wind_jumps.png`` and ``wer_vs_lm_weight.png`` into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    models = list(dict.fromkeys(r.model for r in res.speed))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
    for ax, m in zip(axes[0], models):
        rows = [r for r in res.speed if r.model == m]
        for d in dict.fromkeys(r.decoder for r in rows):
            pts = [(r.batch, r.rtfx) for r in rows if r.decoder == d]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=d)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        batches = sorted({r.batch for r in rows})
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("batch size")
        ax.set_ylabel("RTFx (decoder only)")
        ax.set_title(m)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "rtfx_vs_batch.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ks = list(range(res.wind_window + 1))
    ax.bar(ks, [res.wind_jumps.get(k, 0) for k in ks])
    ax.set_xticks(ks)
    ax.set_xlabel("frames advanced by a window step")
    ax.set_ylabel("window steps")
    ax.set_title(f"WIND {res.wind_window} jump lengths (demo-rnnt)")
    fig.tight_layout()
    paths.append(out / "wind_jumps.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot([w for w, _ in res.lm_wer], [100 * e for _, e in res.lm_wer], marker="o")
    ax.set_xlabel("LM weight")
    ax.set_ylabel("WER %")
    ax.set_title(f"CTC beam {CTC_BEAM} + token 4-gram (demo-ctc)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out / "wer_vs_lm_weight.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths
