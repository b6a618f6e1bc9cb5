"""The ``asrdecode`` command line: ``transcribe``, ``decode``, ``eval``, ``build-lm``, ``build-graph``, ``bench``,
``serve``, ``loadtest`` and ``export-onnx``.

Every error in the input (a missing or unreadable file, a bad manifest line, a wrong shape, an
option that does not fit the model) prints one line ``asrdecode: error: ...`` naming the file or
line on stderr and exits with status 2. Output files are written atomically (a temporary file in
the same folder, renamed when complete), so a failed run never leaves a partial file behind.
Audio at any sample rate is resampled to 16 kHz (:func:`asrdecode.audio.read_audio`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from .errors import AsrDecodeError, FileFormatError
from .paths import check_output_dir, check_output_path
from .progress import NoBar, progress, set_quiet, status
from .pipeline import DecodeOptions, make_pipeline, parse_boost
from .registry import KINDS, OPTIONS, decoder_names, options_for, resolve_options
from .records import FORMATS, SUBTITLE_FORMATS, format_records, hypothesis_record, write_atomic
from .models import default_model

__all__ = ["main", "build_parser", "decode_options"]

#: the bundled models (``--model`` also takes a NeMo checkpoint or ``package.module:attribute``)
MODELS = ("phone-ctc", "demo-rnnt", "demo-tdt", "demo-ctc")
_MODEL_HELP = ("bundled model (" + ", ".join(MODELS) + "), a NeMo checkpoint PATH.nemo, a Hugging Face CTC "
               "model directory, an ONNX transducer directory (sherpa-onnx layout), or "
               "package.module:attribute naming a ModelBundle (default: %(default)s)")


class CLIError(AsrDecodeError):
    """A command-line usage or input error (exit status 2)."""


# ------------------------------------------------------------------------------------------ helpers
def warn(message: str) -> None:
    """One line ``asrdecode: warning: MESSAGE`` on stderr (never silenced by ``--quiet``)."""
    print(f"asrdecode: warning: {message}", file=sys.stderr, flush=True)


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(output, text)


def _load_model(spec: str):
    from .models import load_bundle

    return load_bundle(spec)


#: DecodeOptions fields that a decoding command's flags of the same name set (the registry's options)
_OPTION_FLAGS = ("decoder", *(o.name for o in OPTIONS))


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The decoding flags the user set (an unset flag is ``None``: the model's default applies)."""
    given = {k: getattr(args, k, None) for k in _OPTION_FLAGS}
    given["boost"] = tuple(given["boost"]) if given["boost"] else None
    return {k: v for k, v in given.items() if v is not None}


def decode_options(args: argparse.Namespace, bundle: Any = None) -> DecodeOptions:
    """The :class:`~asrdecode.pipeline.DecodeOptions` of a decoding command
    (:func:`~asrdecode.registry.resolve_options`: the flags the user set, else ``bundle``'s tuned
    ``decode_defaults`` where they apply, else the registry's defaults)."""
    return resolve_options(bundle, given_options(args))


# -------------------------------------------------------------------------------------- subcommands
def cmd_transcribe(args: argparse.Namespace) -> int:
    from .audio import read_audio

    if not (math.isfinite(args.long_audio_seconds) and args.long_audio_seconds > 0):
        raise CLIError(f"--long-audio-seconds must be a number > 0, got {args.long_audio_seconds}")
    given_folder = any(a != "-" and Path(a).is_dir() for a in args.audio)
    args.audio = audio_inputs(args.audio)
    # before decoding: a missing folder must not lose the results
    subtitle_files = _subtitle_files(args, given_folder)
    if subtitle_files is None:
        check_output_path(args.output)
    if args.audio.count("-") > 1:
        raise CLIError("'-' (standard input) can be given once")
    # every file is checked before anything is decoded
    waves = [read_stdin_audio() if a == "-" else read_audio(a) for a in args.audio]
    for a, w in zip(args.audio, waves):
        if w.numel() == 0:  # decodes to an empty hypothesis (exit 0), but the user should know why
            warn(f"{a} holds no audio samples; its transcript is empty")
    demo = _load_model(args.model)
    opts = decode_options(args, demo)
    if opts.nbest > 1 and args.format != "json":
        raise CLIError(f"--nbest {opts.nbest} needs --format json (the {args.format} format holds one hypothesis)")
    lists = decode_waves_nbest(demo, opts, waves, long_audio_seconds=args.long_audio_seconds)
    records = [_record_with_nbest(hs, demo, str(a), opts.nbest) for hs, a in zip(lists, args.audio)]
    if subtitle_files is None:
        _emit(format_records(records, args.format), args.output)
    else:
        for record, path in zip(records, subtitle_files):
            write_atomic(path, format_records([record], args.format))
    return 0


def _subtitle_files(args: argparse.Namespace, given_folder: bool = False) -> Optional[list[Path]]:
    """Where ``transcribe --format srt|vtt`` writes each audio file's subtitles when ``-o`` is a folder:
    ``FOLDER/<audio stem>.<format>``. ``-o`` is a folder (created if missing) when it is one, ends in ``/``,
    or several files or an input folder (``given_folder``) are decoded. ``None``: one output (stdout or
    ``-o FILE``) for one file's subtitles. Raises :class:`CLIError` for several files without ``-o``, or two
    files of the same stem."""
    if args.format not in SUBTITLE_FORMATS:
        return None
    raw = args.output
    out = None if raw is None else Path(raw)
    several = len(args.audio) > 1
    if out is None or not (several or given_folder or out.is_dir() or str(raw).endswith(("/", os.sep))):
        if several:
            raise CLIError(f"--format {args.format} writes one subtitle file per audio file: give -o FOLDER "
                           f"for these {len(args.audio)} files")
        return None
    folder = check_output_dir(out, "-o")
    paths = [folder / f"{Path(a).stem if a != '-' else 'stdin'}.{args.format}" for a in args.audio]
    seen: dict[Path, str] = {}
    for a, path in zip(args.audio, paths):
        if path in seen:
            raise CLIError(f"{seen[path]} and {a} would both write {path}")
        seen[path] = a
    return paths


def read_stdin_audio() -> torch.Tensor:
    """``transcribe -``: the audio file on standard input (any format :func:`~asrdecode.audio.read_audio` reads;
    a WAV written to a pipe, as ``ffmpeg -i talk.mp4 -f wav -`` writes it, included), 16 kHz ``[N]``."""
    from .audio import read_audio

    data = sys.stdin.buffer.read()
    if not data:
        raise CLIError("-: standard input holds no audio (pipe a file in: ... | asrdecode transcribe -)")
    with tempfile.TemporaryDirectory(prefix="asrdecode-stdin-") as tmp:
        path = Path(tmp) / "stdin"
        path.write_bytes(data)
        try:
            return read_audio(path)
        except FileFormatError as err:
            message = str(err).replace(f"{path}: ", "", 1).replace(str(path), "standard input")
            raise FileFormatError("-", None, message) from None


#: the audio files ``transcribe FOLDER`` decodes (by suffix, case-insensitive)
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3")


def audio_inputs(paths: Sequence[str]) -> list[str]:
    """``transcribe``'s inputs with every folder replaced by its audio files (:data:`AUDIO_SUFFIXES`, not
    recursive, in name order); a folder without any is an error that names ``eval`` for manifests."""
    out: list[str] = []
    for a in paths:
        p = Path(a)
        if not p.is_dir():
            out.append(a)
            continue
        found = sorted(str(f) for f in p.iterdir() if f.is_file() and f.suffix.lower() in AUDIO_SUFFIXES)
        if not found:
            manifests = sorted(f.name for f in p.glob("*.jsonl"))
            hint = (f"; to score its manifest: asrdecode eval {p / manifests[0]} (or transcribe-dataset)"
                    if manifests else "")
            raise CLIError(f"{a}: a folder without audio files ({', '.join(AUDIO_SUFFIXES)}){hint}")
        out += found
    return out


def _record_with_nbest(hyps: list[Any], bundle: Any, name: str, nbest: int) -> dict[str, Any]:
    """The record of the best hypothesis; with ``nbest > 1`` also ``"nbest"``: every hypothesis's record."""
    from .pipeline import best_of

    rec = hypothesis_record(best_of([hyps])[0], bundle.tokenizer, bundle.frame_seconds, name)
    if nbest > 1:
        rec["nbest"] = [{k: v for k, v in hypothesis_record(h, bundle.tokenizer, bundle.frame_seconds, name).items()
                         if k != "audio"} for h in hyps]
    return rec


#: one status line per this many seconds while audio decodes in several calls with stderr not a terminal
_STATUS_EVERY_S = 60.0


def decode_waves(bundle: Any, opts: DecodeOptions, waves: list[torch.Tensor], *,
                 long_audio_seconds: Optional[float] = None) -> list[Any]:
    """Hypotheses of ``waves`` (16 kHz): batched pipeline calls of similar lengths
    (:func:`asrdecode.long_audio.decode_files`), except that a wave longer than
    ``long_audio_seconds`` is cut into windows at pauses, each decoded whole and the results joined
    (:mod:`asrdecode.long_audio`: memory bounded by the window, not the file; a wave no longer than a
    window gives exactly its whole-file result)."""
    from .pipeline import best_of

    return best_of(decode_waves_nbest(bundle, opts, waves, long_audio_seconds=long_audio_seconds))


def decode_waves_nbest(bundle: Any, opts: DecodeOptions, waves: list[torch.Tensor], *,
                       long_audio_seconds: Optional[float] = None,
                       window: Optional[Any] = None) -> list[list[Any]]:
    """:func:`decode_waves` with each wave's n-best list (``opts.nbest`` long at most; a long wave's
    joined result is a list of one, so ``nbest > 1`` with a long wave is an error); ``window`` is the
    :class:`~asrdecode.long_audio.WindowConfig` of long waves (default: its defaults)."""
    from .audio import SAMPLE_RATE
    from .long_audio import WindowConfig, decode_files, plan_files

    batches, long = plan_files([w.numel() for w in waves], long_audio_seconds)
    if long and opts.nbest > 1:
        raise CLIError(f"--nbest {opts.nbest}: files over --long-audio-seconds {long_audio_seconds:g} are decoded "
                       "in windows joined into one hypothesis; raise --long-audio-seconds")
    pipe = make_pipeline(bundle, opts)
    seconds = sum(w.numel() for w in waves) / SAMPLE_RATE
    several = long or len(batches) > 1  # more than one decoder call: a bar
    bar_of = progress(seconds, "decoding audio", "s", every_s=_STATUS_EVERY_S) if several else NoBar()
    with bar_of as bar:
        return decode_files(bundle, pipe, waves, opts.nbest, long_audio_seconds=long_audio_seconds,
                            config=window or WindowConfig(), on_audio=bar.update)


def _load_emissions(path: str) -> torch.Tensor:
    p = Path(path)
    if not p.is_file():
        raise FileFormatError(p, None, "no such emissions file")
    if p.suffix == ".npy":
        try:
            x = torch.from_numpy(np.load(p, allow_pickle=False))
        except (ValueError, OSError) as err:
            raise FileFormatError(p, None, f"not a numpy .npy array: {err}") from None
    elif p.suffix == ".pt":
        try:
            x = torch.load(str(p), map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types (UnpicklingError, RuntimeError, ...)
            raise FileFormatError(p, None, f"not a torch-saved tensor: {str(err).splitlines()[0]}") from None
        if not isinstance(x, torch.Tensor):
            raise FileFormatError(p, None, f"expected a tensor, found a {type(x).__name__}")
    else:
        raise FileFormatError(p, None, "emissions must be a .pt or .npy file")
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() != 3 or not x.is_floating_point():
        raise FileFormatError(p, None, f"expected float log-probs [T, V] or [B, T, V], got {x.dtype} {tuple(x.shape)}")
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class _Emissions:
    """What a registry decoder needs of a model, for saved CTC emissions: kind, blank, vocabulary, tokenizer."""

    kind = "ctc"

    def __init__(self, vocab: int, blank_id: int, tokenizer: Any) -> None:
        from types import SimpleNamespace

        self.model, self.blank_id, self.tokenizer = SimpleNamespace(vocab_size=vocab), blank_id, tokenizer


def cmd_decode(args: argparse.Namespace) -> int:
    from .pipeline import best_of
    from .registry import check_options

    check_output_path(args.output)
    x = _load_emissions(args.emissions)
    bundle = _load_model(args.model) if args.model else None
    tok = bundle.tokenizer if bundle is not None else None
    if tok is not None and tok.vocab_size != x.shape[2]:
        raise CLIError(f"{args.emissions}: vocabulary {x.shape[2]} does not match {args.model}'s {tok.vocab_size}")
    if bundle is not None and bundle.kind != "ctc":
        raise CLIError(f"decode reads CTC emissions; --model {args.model} is a {bundle.kind} model")
    opts = decode_options(args, bundle)
    if args.log_softmax:
        x = x.log_softmax(-1)
    emissions = _Emissions(x.shape[2], args.blank_id, tok)
    decoder = check_options("ctc", opts)
    with torch.inference_mode():
        lists = decoder.build(emissions, opts)(x, torch.full((x.shape[0],), x.shape[1], dtype=torch.long))
    hyps = best_of(lists)
    if args.format == "json":
        recs = [{"index": i, **_emission_record(h), **({"nbest": [_emission_record(a) for a in hs]}
                                                         if opts.nbest > 1 else {})}
                for i, (h, hs) in enumerate(zip(hyps, lists))]
        text = json.dumps(recs, ensure_ascii=False) + "\n"
    else:
        if opts.nbest > 1:
            raise CLIError(f"--nbest {opts.nbest} needs --format json")
        text = "".join(f"{i}\t{h.text if h.text is not None else ' '.join(map(str, h.tokens))}\n"
                       for i, h in enumerate(hyps))
    _emit(text, args.output)
    return 0


def _emission_record(h: Any) -> dict[str, Any]:
    return {"tokens": h.tokens, "timestamps": h.timestamps, "score": float(h.score),
            **({"text": h.text} if h.text is not None else {})}


def cmd_eval(args: argparse.Namespace) -> int:
    from .audio import read_audio
    from .evaluate import read_manifest, run_evaluation

    check_output_path(args.output)  # before decoding: a missing folder must not lose the results
    entries = read_manifest(args.manifest)
    for e in entries:  # fail on a bad audio file before any decoding, naming the manifest line
        try:
            read_audio(e.audio_filepath)
        except FileFormatError as err:
            raise FileFormatError(args.manifest, e.line, str(err)) from None
    demo = _load_model(args.model)
    opts = decode_options(args, demo)
    if opts.nbest > 1 and not args.output:
        raise CLIError(f"--nbest {opts.nbest} needs -o PATH (the n-best lists go into the predictions)")
    encode, decode, lists = _recording_nbest(make_pipeline(demo, opts))
    print(run_header(args.model, opts), flush=True)
    if args.no_progress:
        set_quiet(True)
    with progress(len(entries), "decoding", "utt") as bar:
        res = run_evaluation(entries, encode, decode, read=read_audio, batch_size=args.batch_size,
                             progress=bar.update)
    t = res.timing
    print(f"utterances        {len(entries)}")
    print(f"audio seconds     {t.audio_seconds:.1f}")
    print(f"WER               {100 * res.wer:.2f} %")
    print(f"CER               {100 * res.cer:.2f} %")
    print(f"RTFx total        {t.rtfx_total:.1f}")
    print(f"RTFx decoder-only {t.rtfx_decoder:.1f}")
    if args.output:
        lines = [json.dumps({"audio_filepath": str(e.audio_filepath), "text": e.text, "pred_text": h.text or "",
                             **({"nbest": [{"pred_text": a.text or "", "score": float(a.score)} for a in hs]}
                                if opts.nbest > 1 else {})}, ensure_ascii=False)
                 for e, h, hs in zip(entries, res.hypotheses, lists)]
        write_atomic(args.output, "\n".join(lines) + "\n")
        run = {"manifest": str(Path(args.manifest).resolve()), "utterances": len(entries),
               **run_description(args.model, opts), "wer": res.wer, "cer": res.cer,
               "audio_seconds": t.audio_seconds, "predictions": str(args.output)}
        write_atomic(eval_sidecar(args.output), json.dumps(run, indent=1, ensure_ascii=False) + "\n")
    return 0


def eval_sidecar(output: Path) -> Path:
    """Where ``eval -o OUTPUT`` records its run (model, decoder, resolved options, WER, CER):
    ``OUTPUT`` with its last suffix replaced by ``.run.json`` (``pred.jsonl`` -> ``pred.run.json``)."""
    return output.with_name(output.stem + ".run.json") if output.suffix else output.with_name(output.name + ".run.json")


def run_description(model: str, opts: DecodeOptions) -> dict[str, Any]:
    """``{"model", "decoder", "options"}`` of a run: ``options`` are the resolved options that differ
    from the registry's defaults (:meth:`DecodeOptions.changed`: the user's flags and the model's
    tuned values), JSON-ready."""
    return {"model": str(model), "decoder": opts.decoder, "options": opts.changed()}


def run_header(model: str, opts: DecodeOptions) -> str:
    """The line ``eval`` and ``transcribe-dataset`` print first, e.g.
    ``model demo-ctc, decoder beam (beam=8, lm=PATH, beta=2)`` (``(defaults)`` when no option differs)."""
    desc = run_description(model, opts)
    return header_line(desc["model"], desc["decoder"], desc["options"])


def header_line(model: str, decoder: str, options: dict[str, Any]) -> str:
    """``model MODEL, decoder DECODER (key=value, ...)`` of a run's description."""
    opts_text = ", ".join(f"{k}={_option_text(v)}" for k, v in options.items()) or "defaults"
    return f"model {model}, decoder {decoder} ({opts_text})"


def _option_text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _recording_nbest(pipe: Any) -> tuple[Callable, Callable, list[list[Any]]]:
    """``(encode, decode, lists)``: ``decode`` returns the best hypotheses and appends each utterance's
    n-best list to ``lists`` (in decoding order, as ``run_evaluation`` calls it batch by batch)."""
    from .pipeline import best_of

    lists: list[list[Any]] = []

    def decode(x: torch.Tensor, n: torch.Tensor) -> list[Any]:
        got = pipe.decode_nbest(x, n)
        lists.extend(got)
        return best_of(got)

    return pipe.encode, decode, lists


def cmd_build_lm(args: argparse.Namespace) -> int:
    from .lm import TokenMap, estimate_arpa

    src = Path(args.text)
    if not src.is_file():
        raise FileFormatError(src, None, "no such text file")
    try:
        lines = [ln.strip() for ln in src.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except UnicodeDecodeError as err:
        raise FileFormatError(src, None, f"not UTF-8 text: {err}") from None
    if not lines:
        raise FileFormatError(src, None, "the text file holds no sentences")
    if args.order < 1:
        raise CLIError(f"--order must be >= 1, got {args.order}")
    if args.tokens:
        tok = _load_model(args.model).tokenizer
        tmap = TokenMap.offset(tok.vocab_size, tok.blank_id)
        lines = [tmap.encode_line(tok.encode(s)) for s in lines]
    out = Path(args.out)
    if not out.parent.is_dir():
        raise CLIError(f"{out}: the output folder {out.parent} does not exist")
    with tempfile.TemporaryDirectory(prefix=".build_lm_", dir=str(out.parent)) as tmp:
        arpa = Path(tmp) / "lm.arpa"
        try:
            estimate_arpa(lines, args.order, arpa)
        except FileNotFoundError as err:
            raise CLIError(str(err)) from None
        except RuntimeError as err:
            raise CLIError(" ".join(str(err).split())) from None
        data = arpa.read_bytes()
        write_atomic(out, gzip.compress(data) if out.suffix == ".gz" else data)
    print(f"wrote {out} ({'token' if args.tokens else 'word'}-level {args.order}-gram, {len(lines)} sentences)")
    return 0


def cmd_build_graph(args: argparse.Namespace) -> int:
    from .ctc.wfst import build_tlg, lexicon_from_tokenizer, read_lexicon
    from .lm.arpa import drop_words, read_arpa

    for path, what in ((args.lm, "--lm"), (args.lexicon, "--lexicon")):
        if path is not None and not Path(path).is_file():
            raise CLIError(f"{path}: {what} file not found")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise CLIError(f"{out}: the output folder {out.parent} does not exist")
    tok = _load_model(args.model).tokenizer
    blank = tok.blank_id
    symbols = ["<blk>" if i == blank else tok.id_to_piece(i) for i in range(tok.vocab_size)]
    arpa = read_arpa(args.lm)
    if args.lexicon is not None:
        lexicon = read_lexicon(args.lexicon, symbols)
    else:  # spell every LM word with the model's tokenizer
        words = [w for w in arpa.vocab if w not in ("<s>", "</s>", "<unk>")]
        lexicon = lexicon_from_tokenizer(words, tok, "skip" if args.skip_unknown_words else "error")
        arpa = drop_words(arpa, [w for w in words if w not in lexicon])  # the skipped words leave the LM too
    status(f"asrdecode: building the {args.topology} TLG of {len(lexicon)} words ...")
    graph = build_tlg(symbols, lexicon, arpa, topology=args.topology, blank_id=blank,
                      log=lambda line: status(f"asrdecode: build-graph: {line}"))
    with tempfile.TemporaryDirectory(prefix=".build_graph_", dir=str(out.parent)) as tmp:
        tmp_path = Path(tmp) / "graph.pt"
        graph.save(tmp_path)
        os.replace(tmp_path, out)
    print(f"wrote {out} ({args.topology} TLG, {len(lexicon)} words, for --model {args.model}: decode with "
          f"--model {args.model} --decoder wfst --graph {out})")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import BenchConfig, format_markdown, run_bench, write_plots

    cfg = BenchConfig(batches=tuple(args.batches) if args.batches else ((1, 4) if args.quick else (1, 4, 16, 32)),
                      repeats=args.repeats if args.repeats is not None else (1 if args.quick else 3),
                      lm_weights=tuple(args.lm_weights) if args.lm_weights else
                      ((0.0, 0.5, 1.0) if args.quick else (0.0, 0.25, 0.5, 0.75, 1.0)),
                      beta=args.beta, utterances=8 if args.quick else None, paper=args.paper,
                      paper_frames=40 if args.quick else 150)
    cfg.validate()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out}: exists and is not a folder")
    if not out.parent.is_dir():
        raise CLIError(f"--out {out}: the parent folder {out.parent} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError("asrdecode bench needs matplotlib for its plots: pip install matplotlib") from None
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    res = run_bench(cfg, log=log)
    out.mkdir(exist_ok=True)
    table = format_markdown(res, cfg)
    write_atomic(out / "bench.md", table)
    for p in write_plots(res, out):
        log(f"wrote {p}")
    log(f"wrote {out / 'bench.md'}")
    sys.stdout.write(table)
    return 0


def _serve_modules(command: str):
    """Import the server modules, or fail with the pip extra to install."""
    from .serving import missing_serve_deps

    missing = missing_serve_deps()
    if missing:
        raise CLIError(f"asrdecode {command} needs {', '.join(missing)}: pip install -e '.[serve]' in the asrdecode checkout")
    from .serving import loadtest, server

    return server, loadtest


def _parse_options(specs: Optional[Sequence[str]]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs -> keyword arguments (VALUE as JSON when it parses, else a string)."""
    out: dict[str, Any] = {}
    for spec in specs or []:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip().isidentifier():
            raise CLIError(f"--option {spec!r}: expected KEY=VALUE with KEY a Python identifier")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _server_config(args: argparse.Namespace, server) -> Any:
    """The :class:`~asrdecode.serving.server.ServerConfig` of ``serve``'s flags: the decoding flags as
    registry options (resolved with the model by ``bundle_decoding``, as ``transcribe`` resolves
    them), ``--boost-weight`` and ``--option`` as StreamDecoder keyword arguments."""
    from .serving.protocol import Limits

    options = _parse_options(args.option)
    options.update((k, v) for k, v in given_options(args).items() if k != "decoder")
    if args.boost_weight is not None:
        options["boost_weight"] = args.boost_weight
    if getattr(args, "latency", None) is not None:
        from .streaming.latency import check_latency

        options["latency"] = check_latency("--latency", args.latency)
    try:
        settings = _settings_of(args, server.ServerConfig)
        settings["max_connections_per_client"] = settings["max_connections_per_client"] or None  # 0: no cap
        return server.ServerConfig(model=args.model, decoder=args.decoder, decoder_options=options,
                                   allowed_hosts=tuple(h for h in ",".join(args.allowed_hosts).split(",") if h),
                                   limits=Limits(**_settings_of(args, Limits)), **settings)
    except ValueError as err:
        raise CLIError(str(err)) from None


def _check_batching(args: argparse.Namespace) -> None:
    if args.max_batch < 1:
        raise CLIError(f"--max-batch must be >= 1, got {args.max_batch}")
    if not args.max_wait_ms >= 0:
        raise CLIError(f"--max-wait-ms must be >= 0, got {args.max_wait_ms}")
    if args.max_queue < 1:
        raise CLIError(f"--max-queue must be >= 1, got {args.max_queue}")


def dataset_options(args: argparse.Namespace) -> dict[str, Any]:
    """``transcribe-dataset``'s ``decoder_options`` (JSON-ready: recorded in ``run.json``): the given flags."""
    options = given_options(args)
    options.pop("decoder", None)
    if "boost" in options:
        options["boost"] = list(options["boost"])
    return options


def cmd_transcribe_dataset(args: argparse.Namespace) -> int:
    from .distributed import transcribe_dataset

    run = transcribe_dataset(args.manifest, args.output_dir, model=args.model, decoder=args.decoder,
                             decoder_options=dataset_options(args), batch_size=args.batch_size, num_actors=args.actors,
                             num_gpus_per_actor=args.gpus_per_actor, cpus_per_actor=args.cpus_per_actor,
                             resume=not args.restart, ray_address=args.address, verbose=args.verbose)
    audio = run.timing.audio_seconds
    print(header_line(args.model, run.decoder, run.options))
    print(f"utterances        {run.utterances}")
    print(f"decoded           {len(run.decoded)}")
    print(f"skipped (resumed) {run.skipped}")
    print(f"duplicates        {run.duplicates}")
    print(f"failed            {len(run.failed)}")
    print(f"devices           {', '.join(run.devices) or '-'}")
    print(f"wall seconds      {run.wall_seconds:.1f}")
    if run.wall_seconds > 0 and audio > 0:
        print(f"RTFx              {audio / run.wall_seconds:.1f}")
    if run.wer is not None and run.cer is not None:
        print(f"WER               {100 * run.wer:.2f} %")
        print(f"CER               {100 * run.cer:.2f} %")
    print(f"output            {run.output}")
    if run.failed:
        print(f"asrdecode: {len(run.failed)} utterances failed (their records hold 'error'; first: id {run.failed[0]}); "
              "fix them and rerun the same command to decode them", file=sys.stderr)
        return 1
    return 0


def _latency_words(service: Any) -> str:
    """``"latency 1.2 s (block 0.32 s, left 1 s, right 0.88 s), "`` of a service's default streams, or ``""``."""
    from .streaming.latency import latency_in_force

    info = latency_in_force(service.decoder)
    if info is None:
        return ""
    return (f"latency {info['latency']:g} s (block {info['block']:g} s, left {info['left']:g} s, "
            f"right {info['right']:g} s), ")


def cmd_serve(args: argparse.Namespace) -> int:
    server, _ = _serve_modules("serve")
    _check_batching(args)
    config = _server_config(args, server)
    from .serving.transcriptions import TranscriptionConfig

    try:
        uploads = TranscriptionConfig(**_settings_of(args, TranscriptionConfig))
    except ValueError as err:
        raise CLIError(f"--max-upload-mb / --max-upload-seconds / --long-audio-seconds: {err}") from None
    try:
        service = server.build_service(config, transcriptions=uploads)
    except (ValueError, TypeError) as err:  # an option the decoder does not take
        named = f" --decoder {args.decoder}" if args.decoder else ""
        raise CLIError(f"--model {args.model}{named}: {err}") from None
    sock = server.bind_socket(args.host, args.port)
    host, port = sock.getsockname()[:2]
    ready = (f"listening on ws://{host}:{port}{server.STREAM_PATH} (model {args.model}, "
             f"decoder {service.config.decoder}, {_latency_words(service)}"
             f"max batch {args.max_batch}, max wait {args.max_wait_ms:g} ms); page http://{host}:{port}/")
    srv = server.Server(service, host=host, port=port, log_level=args.log_level,
                        on_ready=lambda: print(ready, flush=True))
    # uvicorn handles SIGINT/SIGTERM while it serves (a graceful drain) and raises the signal again
    # once it has stopped; the no-op handlers below take that one, so the exit status is 0.
    import signal

    sigs = [signal.SIGINT, signal.SIGTERM]
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in sigs}
    try:
        srv.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped: {json.dumps(service.health())}", flush=True)
    return 0


def cmd_loadtest(args: argparse.Namespace) -> int:
    _, loadtest = _serve_modules("loadtest")
    _check_batching(args)
    if args.streams < 1:
        raise CLIError(f"--streams must be >= 1, got {args.streams}")
    if not args.chunk_seconds > 0:
        raise CLIError(f"--chunk-seconds must be > 0, got {args.chunk_seconds}")
    if args.duration is not None and not args.duration > 0:
        raise CLIError(f"--duration must be > 0, got {args.duration}")
    if (args.url is None) == (not args.spawn):
        raise CLIError("give either --url URL (a running server) or --spawn (start one)")
    clips = loadtest.load_clips(args.audio or ["data/real"])
    boosts = dict(parse_boost(b) for b in args.boost or [])
    kw = dict(chunk_seconds=args.chunk_seconds, duration=args.duration, encoding=args.encoding,
              boosts=boosts or None, stagger=not args.no_stagger, seed=args.seed)
    if args.latency is not None:
        from .streaming.latency import check_latency

        kw["latency"] = check_latency("--latency", args.latency)
    if args.spawn:
        serve_args = ["--model", args.model, "--max-batch", str(args.max_batch),
                      "--max-wait-ms", str(args.max_wait_ms), "--max-queue", str(args.max_queue),
                      "--max-streams", str(max(256, args.streams)), "--max-connections-per-client", "0"]
        for key, value in given_options(args).items():  # the registry's decoding flags, as given
            if key != "boost":  # loadtest's --boost is the streams' own (per-stream boosts), not serve's
                serve_args += [DecodeOptions.FLAGS[key], str(value)]
        if args.boost_weight is not None:
            serve_args += ["--boost-weight", str(args.boost_weight)]
        for o in args.option or []:
            serve_args += ["--option", o]
        with loadtest.spawn_server(serve_args) as url:
            report = loadtest.loadtest(url, clips, args.streams, **kw)
    else:
        report = loadtest.loadtest(args.url, clips, args.streams, **kw)
    if args.json:
        write_atomic(args.json, json.dumps(report.to_json(), indent=1, ensure_ascii=False) + "\n")
    sys.stdout.write(report.format_text())
    return 0 if report.summary()["failed"] == 0 else 1


# ------------------------------------------------------------------------------------------- parser
_TRANSCRIBE_EX = """examples:
  asrdecode transcribe data/real/cards-001.wav
  asrdecode transcribe a.wav b.wav --model demo-ctc --decoder beam --beam 8 \\
      --lm src/asrdecode/models/assets/token-4gram.arpa.gz --lm-weight 0.7 --beta 2
  asrdecode transcribe a.wav --model demo-rnnt --window 8 --format json -o a.json
  asrdecode transcribe a.wav --model demo-ctc --decoder beam --boost "sense and sensibility:2" --format ctm
  asrdecode transcribe talks/ --format srt -o subtitles/   # subtitles/<name>.srt for each audio file
  ffmpeg -i talk.mp4 -ac 1 -f wav - | asrdecode transcribe - --format srt > talk.srt   # '-': standard input
"""
_DECODE_EX = """examples:
  asrdecode decode logprobs.npy --blank-id 256 --model demo-ctc
  asrdecode decode logits.pt --blank-id 0 --log-softmax --decoder beam --beam 16 --format json
"""
_EVAL_EX = """examples:
  asrdecode eval data/synth_test/manifest.jsonl --model demo-rnnt
  asrdecode eval data/real/manifest.jsonl --model demo-ctc --decoder beam --beam 8 \\
      --lm src/asrdecode/models/assets/token-4gram.arpa.gz -o predictions.jsonl
"""
_DATASET_EX = """examples:
  asrdecode transcribe-dataset data/synth_test/manifest.jsonl out/ --actors 2
  asrdecode transcribe-dataset big.jsonl /shared/run1 --address auto --actors 16 --model demo-tdt --decoder beam
rerun the same command after a crash: committed shards are skipped (needs: pip install -e '.[distributed]' in the asrdecode checkout)
"""
_BUILD_GRAPH_EX = """examples:
  asrdecode build-graph --lm words.arpa --out tlg.pt                      # lexicon from the BPE tokenizer
  asrdecode build-graph --lm words.arpa --lexicon lexicon.txt --topology normal --out tlg.pt
"""
_BUILD_EX = """examples:
  asrdecode build-lm corpus.txt --order 3 --out words.arpa
  asrdecode build-lm corpus.txt --order 4 --tokens --model demo-ctc --out tokens.arpa.gz
(needs KenLM's lmplz: run recipes/build_kenlm.sh, or set $ASRDECODE_KENLM_BIN)
"""
_BENCH_EX = """examples:
  asrdecode bench --out bench/
  asrdecode bench --quick --out /tmp/bench
  asrdecode bench --batches 1 8 64 --paper --repeats 5 --out bench/
writes bench.md (also printed) and rtfx_vs_batch.png, wind_jumps.png, wer_vs_lm_weight.png
(needs matplotlib)
"""

_SERVE_EX = """examples:
  asrdecode serve                                             # the default model (phone-ctc: WFST) on ws://127.0.0.1:8000/v1/stream
  asrdecode serve --model demo-ctc --decoder beam --beam 8 --max-batch 32 --max-wait-ms 10 --port 9000
  asrdecode serve --max-batch 1                               # batching off
  asrdecode serve --latency 0.8                               # final words sooner, less accurate (docs/serving.md)
  curl -F file=@data/real/cards-001.wav -F model=phone-ctc http://127.0.0.1:8000/v1/audio/transcriptions
                                                              # a whole file, offline (OpenAI's audio API shape)
protocol: docs/serving.md; stop with Ctrl-C or SIGTERM (open streams finish, up to --drain-timeout)
(needs the server extra: pip install -e '.[serve]' in the asrdecode checkout)
"""
_LOADTEST_EX = """examples:
  asrdecode loadtest --spawn --streams 8                       # start a server, 8 real-time streams
  asrdecode loadtest --spawn --model demo-ctc --decoder beam --max-batch 32 --streams 32 --duration 30
  asrdecode loadtest --url ws://127.0.0.1:8000/v1/stream --streams 16 --audio data/synth_test --json load.json
reports compute, queue and total latency (mean, p99), response and final latency, RTFx; exit
status 1 if a stream failed (needs the server extra: pip install -e '.[serve]' in the asrdecode checkout)
"""

def _add_decoding(p: argparse.ArgumentParser, kinds: Sequence[str] = KINDS, *, model: bool = True,
                  skip: Sequence[str] = ()) -> None:
    """``--model``, ``--decoder`` and every registry option that a decoder of ``kinds`` takes (an unset
    flag is ``None``: the model's tuned value or the registry's default applies)."""
    if model:
        p.add_argument("--model", default=default_model(), help=_MODEL_HELP)
    p.add_argument("--decoder", choices=decoder_names(kinds), default=None,
                   help="default: the model's (phone-ctc: wfst over its cached graph; otherwise greedy)")
    g = p.add_argument_group("decoding options (docs/decoders.md)")
    for o in options_for(kinds):
        if o.name in skip:
            continue
        kw: dict[str, Any] = {"default": None, "metavar": o.metavar or {"int": "N", "float": "X"}.get(o.kind),
                              "help": _option_help(o)}
        if o.kind == "phrases":
            kw["action"] = "append"
        elif o.choices:
            kw["choices"] = o.choices
            kw.pop("metavar")
        else:
            kw["type"] = {"int": int, "float": float}.get(o.kind, str)
        g.add_argument(o.flag, **kw)


def _option_help(o: Any) -> str:
    default = "" if o.default in (None, ()) or "default" in o.help else f" (default: {o.default})"
    if o.tuned:
        default = f" (default: the model's tuned value, else {o.default})"
    return (o.help + default).replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``asrdecode``."""
    ap = argparse.ArgumentParser(prog="asrdecode", description="Fast CTC / RNN-T / TDT decoding.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="run `asrdecode COMMAND --help` for examples")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub, argparse.RawDescriptionHelpFormatter)
    return ap


def _add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (bars are shown only when stderr is a terminal; errors and "
                        "warnings always print)")


def _add_transcribe_command(sub: Any, raw: type) -> None:
    """The ``transcribe`` subcommand."""
    p = sub.add_parser("transcribe", help="transcribe audio files (a bundled model or any --model)", epilog=_TRANSCRIBE_EX,
                       formatter_class=raw)
    p.add_argument("audio", nargs="+", help="audio files (wav; other formats with soundfile), resampled to 16 kHz; "
                   "'-': standard input; a folder: its audio files (for a manifest with references use `eval` or "
                   "`transcribe-dataset`)")
    _add_decoding(p)
    p.add_argument("--long-audio-seconds", type=float, default=60.0,
                   help="files longer than this are cut into windows of at most 30 s at pauses, each decoded "
                        "whole, in bounded memory (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="srt / vtt: subtitles from the word times, one audio file's each (default: %(default)s)")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout; with srt / vtt, a FOLDER "
                   "(an existing one, a path ending in /, or any path for several files or an input folder) gets "
                   "FOLDER/<audio name>.srt|vtt for each file")
    _add_quiet(p)
    p.set_defaults(func=cmd_transcribe)


def _add_decode_command(sub: Any, raw: type) -> None:
    """The ``decode`` subcommand."""
    p = sub.add_parser("decode", help="decode saved CTC log-probs (.pt / .npy)", epilog=_DECODE_EX, formatter_class=raw)
    p.add_argument("emissions", help="[T, V] or [B, T, V] log-probs in a .pt or .npy file")
    p.add_argument("--blank-id", type=int, required=True, help="index of the blank class")
    p.add_argument("--log-softmax", action="store_true", help="the file holds logits: normalise them first")
    p.add_argument("--model", help="use this model's tokenizer for text (a --model spec as in transcribe)")
    _add_decoding(p, ("ctc",), model=False)
    p.add_argument("--format", choices=("text", "json"), default="text", help="default: %(default)s")
    p.add_argument("-o", "--output", type=Path, help="write here (atomically) instead of stdout")
    p.set_defaults(func=cmd_decode)


def _add_eval_command(sub: Any, raw: type) -> None:
    """The ``eval`` subcommand."""
    p = sub.add_parser("eval", help="WER, CER and RTFx on a NeMo-style manifest", epilog=_EVAL_EX, formatter_class=raw)
    p.add_argument("manifest", help="JSON lines with audio_filepath, duration, text")
    _add_decoding(p)
    p.add_argument("--batch-size", type=int, default=16, help="default: %(default)s")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the same as --quiet)")
    _add_quiet(p)
    p.add_argument("-o", "--output", type=Path, help="write predictions as JSON lines (atomically), and the "
                   "model, decoder, resolved options, WER and CER into OUTPUT's name with .run.json as its suffix")
    p.set_defaults(func=cmd_eval)


def _add_transcribe_dataset_command(sub: Any, raw: type) -> None:
    """The ``transcribe-dataset`` subcommand."""
    p = sub.add_parser("transcribe-dataset", help="decode a manifest on a Ray actor pool (resumable, exactly once)",
                       epilog=_DATASET_EX, formatter_class=raw)
    p.add_argument("manifest", help="JSON lines with audio_filepath (+ duration, text)")
    p.add_argument("output_dir", type=Path, help="run.json, parts/ and the merged transcripts.jsonl go here")
    _add_decoding(p)
    p.add_argument("--batch-size", type=int, default=16, help="utterances per shard and decoder batch (default: %(default)s)")
    p.add_argument("--actors", type=int, default=2, help="decoder actors, one model each (default: %(default)s)")
    p.add_argument("--gpus-per-actor", type=float, default=None, help="GPU share per actor (default: auto)")
    p.add_argument("--cpus-per-actor", type=float, default=1.0, help="default: %(default)s")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--restart", action="store_true",
                   help="discard the results already in output_dir and decode everything again")
    _add_quiet(p)
    p.add_argument("--verbose", action="store_true", help="let Ray print its own logs and progress bars")
    p.set_defaults(func=cmd_transcribe_dataset)


def _add_build_lm_command(sub: Any, raw: type) -> None:
    """The ``build-lm`` subcommand."""
    p = sub.add_parser("build-lm", help="estimate an ARPA n-gram LM with KenLM", epilog=_BUILD_EX, formatter_class=raw)
    p.add_argument("text", help="training text, one sentence per line")
    p.add_argument("--order", type=int, required=True, help="n-gram order")
    p.add_argument("--out", required=True, help="output ARPA file (.gz: gzip-compressed)")
    p.add_argument("--tokens", action="store_true", help="token-level LM over the model's BPE pieces")
    p.add_argument("--model", default="demo-ctc", help="the model whose tokenizer --tokens uses (default: %(default)s)")
    p.set_defaults(func=cmd_build_lm)


def _add_build_graph_command(sub: Any, raw: type) -> None:
    """The ``build-graph`` subcommand."""
    p = sub.add_parser("build-graph", help="build a TLG decoding graph (CTC topology, lexicon, word LM)",
                       epilog=_BUILD_GRAPH_EX, formatter_class=raw)
    p.add_argument("--lm", required=True, help="word-level ARPA LM (.arpa or .arpa.gz)")
    p.add_argument("--lexicon", help="lexicon file: 'word piece piece ...' lines (default: spell the LM's words "
                   "with the model's tokenizer)")
    p.add_argument("--topology", choices=("compact", "normal"), default="compact", help="CTC topology (default: %(default)s)")
    p.add_argument("--model", default="demo-ctc", help="model whose tokens the graph reads; decode with the same "
                   "--model (default: %(default)s, not transcribe's default phone-ctc, whose graph is built for it "
                   "on first use)")
    p.add_argument("--out", required=True, help="output graph file (load with asrdecode.ctc.wfst.load_graph)")
    p.add_argument("--skip-unknown-words", action="store_true",
                   help="leave out LM words the tokenizer cannot spell (default: an error naming the word)")
    _add_quiet(p)
    p.set_defaults(func=cmd_build_graph)


def _add_bench_command(sub: Any, raw: type) -> None:
    """The ``bench`` subcommand."""
    p = sub.add_parser("bench", help="decoder speed, WIND jumps and WER vs LM weight: table + PNG plots",
                       epilog=_BENCH_EX, formatter_class=raw)
    p.add_argument("--out", required=True, help="output folder (created if missing)")
    p.add_argument("--quick", action="store_true",
                   help="fast settings: 8 utterances, batches 1 4, one repeat, LM weights 0 0.5 1")
    p.add_argument("--batches", type=int, nargs="+", metavar="B", help="batch sizes (default: 1 4 16 32)")
    p.add_argument("--repeats", type=int, help="timed runs per decoder and batch size, median counts (default: 3)")
    p.add_argument("--lm-weights", type=float, nargs="+", metavar="W",
                   help="LM weights for CTC beam search (default: 0 0.25 0.5 0.75 1)")
    p.add_argument("--beta", type=float, default=2.0, help="per-token bonus with the LM (default: %(default)s)")
    p.add_argument("--paper", action="store_true", help="also time a random paper-sized RNN-T (encoder 512, joint 640, 1024 tokens; minutes)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_bench)


def _add_serve_command(sub: Any, raw: type) -> None:
    """The ``serve`` subcommand."""
    p = sub.add_parser("serve", help="streaming recognition server (WebSockets, dynamic batching)",
                       epilog=_SERVE_EX, formatter_class=raw)
    _add_serving(p)
    p.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    p.add_argument("--port", type=int, default=8000, help="default: %(default)s (0: any free port)")
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME[,NAME...]",
                   help="Host names (DNS names clients use) the server answers to besides loopback and --host; "
                        "other Host headers are refused (DNS rebinding). Repeatable")
    from .serving.protocol import Limits
    from .serving.settings import ServerConfig, TranscriptionConfig

    _add_settings(p, ServerConfig, skip=_BATCHING)
    _add_settings(p, Limits)
    _add_settings(p, TranscriptionConfig)
    p.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="warning",
                   help="uvicorn log level (default: %(default)s)")
    from .streaming.latency import MAX_LATENCY_SECONDS, MIN_LATENCY_SECONDS, POLICIES

    defaults = ", ".join(f"{name} {pol.default_latency:g}" for name, pol in POLICIES.items())
    p.add_argument("--latency", type=float, default=None, metavar="SECONDS",
                   help=f"streams' latency (block + lookahead, {MIN_LATENCY_SECONDS:g} to {MAX_LATENCY_SECONDS:g} s) "
                        f"unless a stream's start message names its own (default: the model's: {defaults}; "
                        "docs/serving.md)")
    p.set_defaults(func=cmd_serve)


def _add_loadtest_command(sub: Any, raw: type) -> None:
    """The ``loadtest`` subcommand."""
    p = sub.add_parser("loadtest", help="N concurrent real-time streams against a server: latency and RTFx",
                       epilog=_LOADTEST_EX, formatter_class=raw)
    p.add_argument("--url", help="stream URL of a running server (ws://HOST:PORT/v1/stream)")
    p.add_argument("--spawn", action="store_true", help="start `asrdecode serve` with the options below")
    p.add_argument("--streams", type=int, default=8, help="concurrent streams (default: %(default)s)")
    p.add_argument("--chunk-seconds", type=float, default=0.5, help="audio per message (default: %(default)s)")
    p.add_argument("--duration", type=float, help="keep the streams busy (clip after clip) this many seconds "
                   "(default: one clip per stream)")
    p.add_argument("--audio", nargs="+", metavar="PATH",
                   help="wav files, folders of wavs or manifests (default: data/real)")
    p.add_argument("--encoding", choices=("s16le", "f32le"), default="s16le", help="default: %(default)s")
    p.add_argument("--boost", action="append", metavar='"PHRASE:WEIGHT"', help="per-stream boost (repeatable)")
    p.add_argument("--no-stagger", action="store_true", help="start every stream at the same time")
    p.add_argument("--latency", type=float, metavar="SECONDS",
                   help="every stream's latency in its start message (default: the server's)")
    p.add_argument("--seed", type=int, default=0, help="start offsets (default: %(default)s)")
    p.add_argument("--json", type=Path, help="write the per-stream report here (atomically)")
    _add_serving(p, skip=("boost",))
    p.set_defaults(func=cmd_loadtest)


_EXPORT_ONNX_EX = """examples:
  asrdecode export-onnx demo-rnnt onnx-rnnt/       # encoder.onnx decoder.onnx joiner.onnx tokens.txt
  asrdecode transcribe a.wav --model onnx-rnnt/    # decode with onnxruntime
  (sherpa-onnx loads the default NeMo layout as model_type "nemo_transducer"; its words are close to
   asrdecode's, not equal: it computes its own fbank, which a fitted adapter in encoder.onnx maps to
   an approximation of the log-mel the model was trained on)
(needs the onnx extra: pip install -e '.[onnx]' in the asrdecode checkout)
"""


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from .models import load
    from .models.onnx_export import export_onnx

    if args.model not in ("demo-rnnt", "demo-tdt"):
        raise CLIError(f"export-onnx: MODEL must be demo-rnnt or demo-tdt, got {args.model!r}")
    for path in export_onnx(load(args.model), args.out_dir, layout=args.layout, adapter=not args.no_adapter):
        print(path)
    return 0


def _add_export_onnx_command(sub: Any, raw: type) -> None:
    """The ``export-onnx`` subcommand."""
    p = sub.add_parser("export-onnx", help="export a bundled transducer to ONNX (sherpa-onnx layout)",
                       epilog=_EXPORT_ONNX_EX, formatter_class=raw)
    p.add_argument("model", metavar="MODEL", help="demo-rnnt or demo-tdt")
    p.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (created if needed; files replaced)")
    p.add_argument("--layout", choices=("nemo", "stateful"), default="nemo",
                   help="nemo: NeMo's layout, which sherpa-onnx loads (default); stateful: asrdecode's own")
    p.add_argument("--no-adapter", action="store_true",
                   help="nemo layout: leave out the front-end adapter that maps sherpa-onnx's fbank to "
                        "(an approximation of) our log-mel; encoder.onnx then takes our log-mel")
    p.set_defaults(func=cmd_export_onnx)


#: every subcommand, in the order ``asrdecode --help`` lists them
_COMMANDS = (_add_transcribe_command, _add_decode_command, _add_eval_command, _add_transcribe_dataset_command,
             _add_build_lm_command, _add_build_graph_command, _add_bench_command, _add_serve_command,
             _add_loadtest_command, _add_export_onnx_command)


def _add_serving(p: argparse.ArgumentParser, skip: Sequence[str] = ()) -> None:
    _add_decoding(p, skip=skip)
    p.add_argument("--boost-weight", type=float,
                   help="--decoder beam: fusion weight of the per-stream boosts (without it, boosts are refused)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="another StreamDecoder keyword argument (VALUE read as JSON if it parses; repeatable)")
    from .serving.settings import ServerConfig

    _add_settings(p, ServerConfig, only=_BATCHING)


#: the ServerConfig fields that `serve` and `loadtest --spawn` both take
_BATCHING = ("max_batch", "max_wait_ms", "max_pending")


def _setting_dest(name: str, s: Any) -> str:
    """The argparse destination of a config field's flag."""
    return (s.flag or "--" + name.replace("_", "-"))[2:].replace("-", "_")


def _add_settings(p: argparse.ArgumentParser, cls: type, *, only: Sequence[str] = (),
                  skip: Sequence[str] = ()) -> None:
    """A flag per ``cls``'s ``cli`` field (:func:`~asrdecode.configs.setting` metadata: flag, help, default)."""
    for f in dataclasses.fields(cls):
        s = f.metadata.get("setting")
        if s is None or not s.cli or (only and f.name not in only) or f.name in skip:
            continue
        default = "" if f.default is None else " (default: %(default)s)"
        p.add_argument(s.flag or "--" + f.name.replace("_", "-"), type={"int": int, "float": float}[s.kind],
                       default=f.default, help=s.help.replace("%", "%%") + default)


def _settings_of(args: argparse.Namespace, cls: type, *, only: Sequence[str] = ()) -> dict[str, Any]:
    """``{field: value}`` of ``cls``'s ``cli`` fields from their flags."""
    return {f.name: getattr(args, _setting_dest(f.name, f.metadata["setting"])) for f in dataclasses.fields(cls)
            if "setting" in f.metadata and f.metadata["setting"].cli and (not only or f.name in only)
            and hasattr(args, _setting_dest(f.name, f.metadata["setting"]))}

def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``asrdecode``; returns the exit status (0, or 2 on bad input)."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1") or 1)))
    set_quiet(bool(getattr(args, "quiet", False)))
    try:
        return int(args.func(args))
    except (AsrDecodeError, OSError) as err:
        msg = " ".join(str(err).split()) or type(err).__name__
        print(f"asrdecode: error: {msg}", file=sys.stderr)
        return 2
    finally:
        set_quiet(False)


if __name__ == "__main__":
    sys.exit(main())
