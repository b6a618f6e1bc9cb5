"""``python -m asrdecode.demo`` (``make demo``): every decoder of the package on the bundled models.

Decodes the bundled synthetic test set (``data/synth_test``, 50 utterances) and the real clips
(``data/real``, 10 utterances) with ``phone-ctc`` (hama's phone model, when the ``hama`` extra is
installed; its default WFST decoding, graph built on the first run) and the bundled models
``demo-rnnt``, ``demo-tdt`` and ``demo-ctc`` and prints one table: WER on each set, decoder-only RTFx (audio seconds / decoder
seconds, encoder excluded, fastest of ``--repeats`` runs, both sets together) and its ratio to the
family's baseline measured in the same run (transducers: frame-looping greedy; CTC: greedy).

The three models share one encoder, so the front end and encoder run once per test set. One
thread; with an empty graph cache (the first run builds phone-ctc's graph, ~2 min, and demo-ctc's
2000-word graph, ~40 s) 3.6 minutes wall on 2 shared cores; later runs skip both builds.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, cast

import torch

from . import ctc
from . import transducer as tr
from .audio import read_audio
from .errors import AsrDecodeError
from .evaluate import read_manifest, texts_of, timed, wer
from .pipeline import NBest, best_of
from .results import Hypothesis

__all__ = ["main", "run_demo", "phone_ctc_rows", "DemoRow"]

DATA = Path(__file__).resolve().parents[2] / "data"
BEAM = 8
TLG_WORDS = 2000  # vocabulary of the demo's WFST graph (the word 3-gram pruned to its most likely words)


@dataclass
class DemoRow:
    """One line of the demo table."""

    model: str
    decoder: str
    wer: dict[str, float] = field(default_factory=dict)
    decoder_seconds: float = 0.0
    audio_seconds: float = 0.0
    ratio: float = math.nan
    note: str = ""

    @property
    def rtfx(self) -> float:
        return self.audio_seconds / self.decoder_seconds if self.decoder_seconds > 0 else math.inf


def demo_graph(demo, log: Optional[Callable[[str], None]] = None, *, path_only: bool = False):
    """The demo's TLG: the bundled word 3-gram pruned to its TLG_WORDS most likely words, normal
    topology, lexicon spelled by ``demo``'s tokenizer; ``None`` without the word LM.

    Building takes ~20 s; the graph is kept in the per-user cache (:mod:`asrdecode.models.graph_cache`:
    keyed by the tokenizer and LM bytes and the graph format, written atomically, a stale or corrupt
    entry rebuilt with a message); ``benchmarks/serving.py`` uses the same graph. ``path_only``: the
    cached file's path instead of the loaded graph.
    """
    from .ctc.wfst import build_tlg, lexicon_from_tokenizer, load_graph
    from .ctc.wfst.graph import FORMAT
    from .lm.arpa import prune_vocabulary, read_arpa
    from .models.demo import ASSETS
    from .models.graph_cache import cached_file, file_digest

    arpa_path = ASSETS / "word-3gram.arpa.gz"
    if not arpa_path.is_file():
        return None

    def build(path: Path) -> None:
        arpa = prune_vocabulary(read_arpa(arpa_path), TLG_WORDS)
        words = [w for w in arpa.vocab if w not in ("<s>", "</s>")]
        build_tlg(demo.tokenizer.vocab_size, lexicon_from_tokenizer(words, demo.tokenizer), arpa,
                  topology="normal", blank_id=demo.blank_id).save(path)

    inputs = {"graph_format": FORMAT, "tokenizer": file_digest(ASSETS / "tokenizer.model"),
              "lm": file_digest(arpa_path), "words": TLG_WORDS, "topology": "normal",
              "vocab_size": demo.tokenizer.vocab_size, "blank_id": demo.blank_id}
    entry = cached_file(f"demo-tlg-normal-{TLG_WORDS}", inputs, build,
                        what=f"the demo models' decoding graph ({TLG_WORDS} words)", log=log)
    return entry.path if path_only else load_graph(entry.path)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _registry(demo, **given) -> Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]:
    """The decode function every entry point builds for ``given`` (registry resolution and builder)."""
    from .pipeline import make_pipeline, resolve_options

    return make_pipeline(demo, resolve_options(demo, given)).decode


def _decoders(demo, lm) -> list[tuple[str, Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]]]:
    """(name, decode(model output, lengths)) for every decoder family that applies to ``demo``: the
    registry's decoders (LM rows: ``lm``, the token LM's path, with the model's tuned weight and bonus
    as ``transcribe --lm`` applies them), plus the baselines the registry does not offer
    (frame-looping greedy, CTC blank collapse)."""
    tok = demo.tokenizer
    if demo.kind == "ctc":
        b = demo.blank_id
        out = [
            ("greedy", _registry(demo, decoder="greedy")),
            (f"beam {BEAM}", _registry(demo, decoder="beam", beam=BEAM)),
            (f"beam {BEAM} + blank collapse", lambda x, n: best_of(cast(NBest,
                ctc.beam_search(x, n, b, beam=BEAM, blank_collapse=0.999, tokenizer=tok)))),
        ]
        if lm is not None:
            out.append((f"beam {BEAM} + token LM", _registry(demo, decoder="beam", beam=BEAM, lm=str(lm))))
        graph = demo_graph(demo, path_only=True)
        if graph is not None:
            out.append((f"WFST TLG ({TLG_WORDS} words, 3-gram)", _registry(
                demo, decoder="wfst", graph=str(graph), wfst_beam=12.0, max_active=2000, acoustic_scale=2.0)))
        return out
    m = demo.model
    # the paper's loops on the tensor engine (engine="auto" would run the C++ greedy for all of them),
    # then the native engine's greedy: every row gives the same hypotheses
    out = [
        ("greedy frame-looping", lambda x, n: cast(list[Hypothesis], tr.greedy(m, x, n, loop="frames", tokenizer=tok,
                                                                              acceleration="eager", engine="torch"))),
        ("greedy label-looping", _registry(demo, decoder="greedy", engine="torch")),
    ]
    if demo.kind == "rnnt":
        out.append(("label-looping + WIND 8", _registry(demo, decoder="greedy", window=8, engine="torch")))
    out.append(("greedy, native C++ engine", _registry(demo, decoder="greedy", engine="native")))
    out.append((f"beam {BEAM}", _registry(demo, decoder="beam", beam=BEAM)))
    if lm is not None:
        out.append((f"beam {BEAM} + token LM", _registry(demo, decoder="beam", beam=BEAM, lm=str(lm))))
    return out


def run_demo(data_dir: Path = DATA, models: tuple[str, ...] = ("demo-rnnt", "demo-tdt", "demo-ctc"),
             repeats: int = 3, log: Callable[[str], None] = print) -> list[DemoRow]:
    """Decode the bundled test sets with every decoder and return the table rows."""
    from .models import load
    from .models.demo import ASSETS

    sets = {"synthetic": data_dir / "synth_test" / "manifest.jsonl", "real": data_dir / "real" / "manifest.jsonl"}
    loaded = []
    for name in models:
        try:
            loaded.append(load(name))
        except AsrDecodeError as err:
            log(f"note: skipping {name}: {err}")
    if not loaded:
        raise AsrDecodeError("no bundled model could be loaded")
    lm = None
    lm_path = ASSETS / "token-4gram.arpa.gz"
    if lm_path.is_file():
        lm = lm_path
    else:
        log(f"note: {lm_path} is missing; LM rows skipped")
    # The bundled models share the front end and the encoder: run them once per set.
    encoded = {}
    for sname, mpath in sets.items():
        entries = read_manifest(mpath)
        waves = [read_audio(e.audio_filepath) for e in entries]
        t0 = time.perf_counter()
        feats, flen = loaded[0].features(waves)
        with torch.inference_mode():
            enc, elen = loaded[0].encode_features(feats, flen)
        audio_s = sum(w.numel() for w in waves) / 16000
        log(f"{sname}: {len(entries)} utterances, {audio_s:.1f} s of audio, front end + encoder "
            f"{time.perf_counter() - t0:.1f} s")
        encoded[sname] = (enc, elen, [e.text for e in entries], audio_s)
    rows: list[DemoRow] = []
    for demo in loaded:
        if not _same_weights(demo.encoder, loaded[0].encoder):
            raise AsrDecodeError(f"{demo.name} does not share the encoder of {loaded[0].name}")
        family_rows = []
        for dname, fn in _decoders(demo, lm):
            row = DemoRow(demo.name, dname)
            for sname, (enc, elen, refs, audio_s) in encoded.items():
                with torch.inference_mode():
                    x = demo.model.log_probs_from_encoder(enc) if demo.kind == "ctc" else enc
                hyps, secs = timed(functools.partial(fn, x, elen), repeats=repeats)
                row.wer[sname] = wer(refs, texts_of(hyps))
                row.decoder_seconds += secs
                row.audio_seconds += audio_s
            family_rows.append(row)
            log(f"  {demo.name:9s} {dname:28s} done")
        base = family_rows[0]
        for row in family_rows:
            if not row.note:
                row.ratio = row.rtfx / base.rtfx
        rows.extend(family_rows)
    return rows


def phone_ctc_rows(data_dir: Path = DATA, repeats: int = 1, log: Callable[[str], None] = print) -> list[DemoRow]:
    """The row of ``phone-ctc`` (hama's phone CTC model, real speech) with its default decoding:
    WFST over its cached TLG graph (built on the first run). No row when hama is not installed."""
    from .models import load_bundle
    from .models.phone_lexicon import HamaMissingError
    from .pipeline import make_pipeline, resolve_options

    try:
        bundle = load_bundle("phone-ctc")
    except HamaMissingError as err:
        log(f"note: skipping phone-ctc: {err}")
        return []
    t0 = time.perf_counter()
    bundle.graph_path(log=log)
    log(f"phone-ctc graph ready in {time.perf_counter() - t0:.1f} s")
    decode = make_pipeline(bundle, resolve_options(bundle)).decode
    words = "all" if bundle.words is None else bundle.words
    row = DemoRow(bundle.name, f"WFST TLG ({words} words, 3-gram)", ratio=1.0)
    for sname, sub in (("synthetic", "synth_test"), ("real", "real")):
        entries = read_manifest(data_dir / sub / "manifest.jsonl")
        waves = [read_audio(e.audio_filepath) for e in entries]
        t0 = time.perf_counter()
        with torch.inference_mode():
            feats, flen = bundle.features(waves)
            x = bundle.model.log_probs_from_encoder(bundle.encode_features(feats, flen)[0])
        log(f"{sname}: phone-ctc front end (hama) {time.perf_counter() - t0:.1f} s")
        hyps, secs = timed(functools.partial(decode, x, flen), repeats=repeats)
        row.wer[sname] = wer([e.text for e in entries], texts_of(hyps))
        row.decoder_seconds += secs
        row.audio_seconds += sum(w.numel() for w in waves) / 16000
    log(f"  {bundle.name:9s} {row.decoder:28s} done")
    return [row]


def format_table(rows: list[DemoRow]) -> str:
    """The table as plain text."""
    head = ["model", "decoder", "WER synth %", "WER real %", "dec. RTFx", "x baseline"]
    body = []
    for r in rows:
        if r.note:
            body.append([r.model, r.decoder, "-", "-", "-", r.note])
            continue
        body.append([r.model, r.decoder, f"{100 * r.wer['synthetic']:.1f}", f"{100 * r.wer['real']:.1f}",
                     f"{r.rtfx:,.0f}", f"{r.ratio:.2f}"])
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(b, widths))))
    return "\n".join(lines)


def _print_rich(rows: list[DemoRow]) -> bool:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return False
    t = Table(title="asrdecode demo: bundled models, decoder-only RTFx (one thread)")
    for col in ["model", "decoder", "WER synth %", "WER real %", "dec. RTFx", "x baseline"]:
        t.add_column(col, justify="left" if col in ("model", "decoder") else "right", no_wrap=True)
    for r in rows:
        if r.note:
            t.add_row(r.model, r.decoder, "-", "-", "-", r.note)
        else:
            t.add_row(r.model, r.decoder, f"{100 * r.wer['synthetic']:.1f}", f"{100 * r.wer['real']:.1f}",
                      f"{r.rtfx:,.0f}", f"{r.ratio:.2f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # no wrapping when piped (make demo | tee ...)
    console.print(t)
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m asrdecode.demo``."""
    ap = argparse.ArgumentParser(prog="python -m asrdecode.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder with synth_test/ and real/ (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="timing runs per decoder, fastest counts (default: 3)")
    ap.add_argument("--plain", action="store_true", help="plain-text table even when rich is installed")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        say = lambda s: print(s, flush=True)  # noqa: E731
        rows = phone_ctc_rows(args.data, log=say) + run_demo(args.data, repeats=max(1, args.repeats), log=say)
    except (AsrDecodeError, OSError) as err:
        print(f"asrdecode.demo: error: {err}", file=sys.stderr)
        return 2
    print()
    if args.plain or not _print_rich(rows):
        print(format_table(rows))
    print("WER: normalised text (asrdecode.evaluate.normalize_text). RTFx: audio seconds / decoder seconds, "
          "encoder excluded; 'x baseline' = RTFx / RTFx of the family's first row (frame-looping / CTC greedy).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
