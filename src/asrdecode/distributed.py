"""Corpus decoding on Ray: a manifest decoded by a pool of actors, exactly once, resumable.

:func:`transcribe_dataset` reads a manifest (:func:`asrdecode.evaluate.read_manifest`), cuts it
into *shards* of ``batch_size`` consecutive utterances (the batches a local run decodes, see
:func:`transcribe_local`), and runs them through Ray Data ``map_batches`` with a pool of
``num_actors`` decoder actors: each actor loads the model once, decodes one shard per call with
the same calls as the local run (the CLI's :func:`~asrdecode.cli.make_pipeline` and
:func:`~asrdecode.evaluate.run_evaluation`) and commits the shard's results itself, as one part
file written atomically (temporary file, fsync, ``os.replace``). Results never travel through the
driver; the driver merges the committed part files into one JSON-lines file in manifest order.

Output folder (``output_dir``, a path every Ray node can see on a cluster)::

    run.json                         what was decoded and how (checked when a run resumes)
    parts/part-<start>-<stop>.jsonl  one committed shard: records of utterances start..stop-1
    transcripts.jsonl                the merged result, one record per utterance, manifest order

A record: ``id`` (0-based manifest position), ``audio_filepath``, ``duration``, ``text`` (the
reference), ``pred_text``, ``score``, ``tokens``, ``timestamps`` (encoder frames), ``durations``
(TDT, else null) and, for WFST decoding, ``words`` (``[word, first_frame, last_frame]``).

Exactly once and resume:

* a shard's part file has a fixed name, so a task that Ray retries (an actor died after
  committing) replaces the file with the same content instead of adding a second copy;
* a run whose ``run.json`` matches (same manifest bytes, model, decoder, options and batch size)
  skips every shard whose utterances are all in committed part files, so after a crash only the
  rest is decoded; a mismatch is an error, never a mix of two configurations;
* the merge keeps each utterance once: if two part files hold the same id (a hand-copied file,
  two drivers on one folder), the record from the part file whose name sorts first wins and the
  drop is counted in :attr:`DatasetRun.duplicates`.

Because shards are the local run's batches, a Ray run's results are identical (tokens,
timestamps, text and float score) to :func:`transcribe_local` with the same ``batch_size``, on a
fresh run and on a resumed one. See ``docs/distributed.md`` for cluster use and the limits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch

from .errors import AsrDecodeError, DecodingInputError, FileFormatError
from .evaluate import ManifestEntry, Timing, read_manifest, run_evaluation
from .results import Hypothesis

__all__ = [
    "transcribe_dataset",
    "transcribe_local",
    "build_pipeline",
    "DatasetRun",
    "DistributedRunError",
    "InjectedFailure",
    "RESULT_FILE",
    "RAY_REQUIREMENT",
]

RESULT_FILE = "transcripts.jsonl"
CONFIG_FILE = "run.json"
PARTS_DIR = "parts"
RAY_REQUIREMENT = "ray[data]==2.60.0"
_FORMAT = 1
_MODELS = ("demo-rnnt", "demo-tdt", "demo-ctc")
_DECODERS = ("greedy", "beam", "wfst")
# decoder_options key -> (CLI flag it stands for, accepted Python types)
_OPTIONS: dict[str, tuple[str, tuple[type, ...]]] = {
    "beam": ("--beam", (int,)),
    "window": ("--window", (int,)),
    "method": ("--method", (str,)),
    "lm": ("--lm", (str, os.PathLike)),
    "lm_weight": ("--lm-weight", (int, float)),
    "beta": ("--beta", (int, float)),
    "boost": ("--boost", (list, tuple)),
    "graph": ("--graph", (str, os.PathLike)),
    "acoustic_scale": ("--acoustic-scale", (int, float)),
    "word_lm": ("--word-lm", (str, os.PathLike)),
    "word_lm_weight": ("--word-lm-weight", (int, float)),
    "word_bonus": ("--word-bonus", (int, float)),
}
_CPU_ONLY_OPTIONS = ("lm", "boost", "graph", "word_lm")  # fusion models and graphs are built on the CPU


class DistributedRunError(AsrDecodeError):
    """A Ray run failed part-way; what was committed stays, a rerun with ``resume=True`` goes on."""


class InjectedFailure(RuntimeError):
    """Raised inside an actor by the test-only ``_faults`` option of :func:`transcribe_dataset`."""


# ------------------------------------------------------------------------------- the local path
class _OnDevice:
    """A demo model whose encoder runs on ``device``: features (CPU) are moved there first."""

    def __init__(self, demo: Any, device: torch.device) -> None:
        self._demo = demo
        self._device = device

    def __getattr__(self, name: str) -> Any:
        return getattr(self._demo, name)

    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._demo.encode_features(feats.to(self._device), lengths.to(self._device))


def _check_options(model: str, decoder: str, decoder_options: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    if model not in _MODELS:
        raise DecodingInputError(f"model must be one of {list(_MODELS)}, got {model!r}")
    if decoder not in _DECODERS:
        raise DecodingInputError(f"decoder must be one of {list(_DECODERS)}, got {decoder!r}")
    opts = dict(decoder_options or {})
    for key, value in opts.items():
        if key not in _OPTIONS:
            raise DecodingInputError(f"decoder_options: unknown key {key!r}; known: {sorted(_OPTIONS)}")
        flag, types = _OPTIONS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise DecodingInputError(f"decoder_options[{key!r}] (the CLI's {flag}) must be "
                                     f"{' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")
        if isinstance(value, os.PathLike):
            opts[key] = os.fspath(value)
        elif key == "boost":
            if not all(isinstance(b, str) for b in value):
                raise DecodingInputError("decoder_options['boost'] must be a list of 'PHRASE:WEIGHT' strings")
            opts[key] = list(value)
    return opts


def build_pipeline(model: str = "demo-rnnt", decoder: str = "greedy",
                   decoder_options: Optional[Mapping[str, Any]] = None,
                   device: str | torch.device = "cpu") -> tuple[Any, Callable, Callable]:
    """The model and the ``(encode, decode)`` pair that ``asrdecode eval`` uses, from Python values.

    Args:
        model: a bundled model name (``"demo-rnnt"``, ``"demo-tdt"``, ``"demo-ctc"``).
        decoder: ``"greedy"``, ``"beam"`` or ``"wfst"``.
        decoder_options: the CLI's decoding flags as keys: ``beam``, ``window``, ``lm`` (path),
            ``lm_weight``, ``beta``, ``boost`` (list of ``"PHRASE:WEIGHT"``), ``graph`` (path),
            ``acoustic_scale``, ``word_lm`` (path), ``word_lm_weight``, ``word_bonus``; missing keys
            take the CLI defaults.
        device: where the encoder and decoder run (the front end always runs on the CPU).

    Returns:
        ``(demo, encode, decode)`` from :func:`asrdecode.models.load` and
        :func:`asrdecode.cli.make_pipeline`.

    Raises:
        DecodingInputError: unknown model, decoder or option, or an ill-typed option.
        AsrDecodeError: what ``make_pipeline`` rejects (e.g. ``wfst`` without ``graph``).
    """
    from .cli import build_parser, make_pipeline
    from .models import load

    opts = _check_options(model, decoder, decoder_options)
    dev = torch.device(device)
    if dev.type != "cpu" and any(k in opts for k in _CPU_ONLY_OPTIONS):
        raise DecodingInputError(f"decoder_options {sorted(k for k in opts if k in _CPU_ONLY_OPTIONS)} build "
                                 "their LM/boosting/graph tensors on the CPU: decode them on a CPU device")
    args: argparse.Namespace = build_parser().parse_args(["eval", "-"])  # the CLI's defaults
    args.model, args.decoder = model, decoder
    for key, value in opts.items():
        setattr(args, key, value)
    demo = load(model, device=dev)
    encode, decode = make_pipeline(demo if dev.type == "cpu" else _OnDevice(demo, dev), args)
    return demo, encode, decode


def _record(index: int, entry: ManifestEntry, hyp: Hypothesis) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": index, "audio_filepath": str(entry.audio_filepath), "duration": entry.duration, "text": entry.text,
        "pred_text": hyp.text or "", "score": float(hyp.score),
        "tokens": [int(t) for t in hyp.tokens], "timestamps": [int(t) for t in hyp.timestamps],
        "durations": None if hyp.durations is None else [int(d) for d in hyp.durations],
    }
    if hyp.words is not None:
        rec["words"] = [[str(w), int(s), int(e)] for w, s, e in hyp.words]
    return rec


def _decode_entries(ids: Sequence[int], entries: Sequence[ManifestEntry], encode: Callable, decode: Callable,
                    batch_size: int, manifest: str | Path) -> tuple[list[dict[str, Any]], Timing]:
    """Decode ``entries`` (manifest positions ``ids``) in batches of ``batch_size`` -> records, timing."""
    from .audio import read_audio

    lines = {str(e.audio_filepath): e.line for e in entries}

    def read(path: Path) -> torch.Tensor:
        try:
            return read_audio(path)
        except FileFormatError as err:
            raise FileFormatError(manifest, lines.get(str(path)), str(err)) from None

    res = run_evaluation(entries, encode, decode, read=read, batch_size=batch_size)
    return [_record(i, e, h) for i, e, h in zip(ids, entries, res.hypotheses)], res.timing


def transcribe_local(manifest: str | Path, *, model: str = "demo-rnnt", decoder: str = "greedy",
                     decoder_options: Optional[Mapping[str, Any]] = None,
                     batch_size: int = 16) -> list[dict[str, Any]]:
    """Decode a manifest in this process: the reference that :func:`transcribe_dataset` equals.

    The same calls as ``asrdecode eval`` (:func:`build_pipeline`, then
    :func:`~asrdecode.evaluate.run_evaluation` in batches of ``batch_size`` consecutive entries).

    Returns:
        one record per manifest entry, in manifest order, as in ``transcripts.jsonl`` (see the
        module docstring; ``audio_filepath`` is absolute, resolved from the manifest's folder).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise DecodingInputError(f"batch_size must be an int >= 1, got {batch_size!r}")
    manifest = Path(manifest).resolve()
    entries = read_manifest(manifest)
    _, encode, decode = build_pipeline(model, decoder, decoder_options)
    records, _ = _decode_entries(range(len(entries)), entries, encode, decode, batch_size, manifest)
    return records


# ----------------------------------------------------------------------------------- part files
def _commit(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably: temporary file, fsync, rename, fsync dir."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(str(path.parent), os.O_RDONLY)
    except OSError:  # pragma: no cover - folders that cannot be opened (some network file systems)
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def _part_name(start: int, stop: int) -> str:
    return f"part-{start:09d}-{stop:09d}.jsonl"


def _dumps(records: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _read_parts(parts_dir: Path, entries: Sequence[ManifestEntry]) -> tuple[dict[int, dict[str, Any]], int]:
    """Committed records by id (first part file in name order wins) and the number of dropped duplicates.

    Every record is checked against the manifest (id in range, same audio file); a part file
    that does not fit raises :class:`FileFormatError` naming the file and line.
    """
    found: dict[int, dict[str, Any]] = {}
    dropped = 0
    if not parts_dir.is_dir():
        return found, 0
    for path in sorted(parts_dir.glob("part-*.jsonl")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise FileFormatError(path, no, f"not valid JSON ({err.msg})") from None
            i = rec.get("id") if isinstance(rec, dict) else None
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(entries):
                raise FileFormatError(path, no, f"record id {i!r} is not a position of the manifest")
            if rec.get("audio_filepath") != str(entries[i].audio_filepath):
                raise FileFormatError(path, no, f"record {i} is for {rec.get('audio_filepath')!r}, the manifest "
                                      f"has {str(entries[i].audio_filepath)!r} there")
            if i in found:
                dropped += 1
            else:
                found[i] = rec
    return found, dropped


def _shards(n: int, batch_size: int) -> list[tuple[int, int]]:
    return [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]


# --------------------------------------------------------------------------------------- actors
class _ShardDecoder:
    """Ray Data actor: loads the model once, decodes one shard per row and commits its part file."""

    def __init__(self, model: str, decoder: str, decoder_options: dict[str, Any], parts_dir: str,
                 manifest: str, threads: int, faults: Optional[dict[str, Any]] = None) -> None:
        import ray

        torch.set_num_threads(max(1, int(threads)))
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self.device = torch.device("cuda" if self.gpu_ids and torch.cuda.is_available() else "cpu")
        self.demo, self.encode, self.decode = build_pipeline(model, decoder, decoder_options, self.device)
        self.parts_dir = Path(parts_dir)
        self.manifest = manifest
        self.faults = dict(faults or {})

    def _fault(self, stage: str) -> None:
        """Test-only failures in the real pipeline (see ``_faults`` of :func:`transcribe_dataset`)."""
        if stage == "before" and "fail_when_committed" in self.faults:
            committed = len(list(self.parts_dir.glob("part-*.jsonl")))
            if committed >= int(self.faults["fail_when_committed"]):
                raise InjectedFailure(f"injected failure: {committed} part files are committed")
        if stage == "after" and "sleep_after_commit" in self.faults:
            time.sleep(float(self.faults["sleep_after_commit"]))  # holds the run open for a test to kill
        if stage == "after" and "exit_after_commit" in self.faults:
            marker = Path(self.faults["exit_after_commit"])
            try:
                fd = os.open(str(marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)  # the actor process dies after its commit, before Ray hears of the result

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, list[Any]] = {k: [] for k in ("start", "stop", "audio_seconds", "frontend_seconds",
                                                      "decoder_seconds", "device", "gpu_ids", "pid")}
        for r in range(len(batch["start"])):
            start, stop = int(batch["start"][r]), int(batch["stop"][r])
            entries = [ManifestEntry(Path(str(p)), float(d), str(t), int(ln)) for p, d, t, ln in
                       zip(batch["paths"][r], batch["durations"][r], batch["texts"][r], batch["lines"][r])]
            if len(entries) != stop - start:
                raise DecodingInputError(f"shard {start}:{stop} arrived with {len(entries)} entries")
            self._fault("before")
            with torch.inference_mode():
                records, timing = _decode_entries(range(start, stop), entries, self.encode, self.decode,
                                                  len(entries), self.manifest)
            _commit(self.parts_dir / _part_name(start, stop), _dumps(records))
            self._fault("after")
            for key, value in (("start", start), ("stop", stop), ("audio_seconds", timing.audio_seconds),
                               ("frontend_seconds", timing.frontend_seconds),
                               ("decoder_seconds", timing.decoder_seconds), ("device", str(self.device)),
                               ("gpu_ids", ",".join(self.gpu_ids)), ("pid", os.getpid())):
                out[key].append(value)
        return {k: np.asarray(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------- driver
@dataclass
class DatasetRun:
    """What :func:`transcribe_dataset` did.

    Attributes:
        output: the merged result file (``output_dir/transcripts.jsonl``).
        utterances: manifest entries (= records in ``output``).
        decoded: manifest positions decoded by this run, ascending (the others were committed before).
        skipped: utterances found committed and not decoded again.
        duplicates: records dropped by the merge because an earlier part file held the same id.
        timing: audio, front-end and decoder seconds summed over this run's shards (actor time).
        wall_seconds: wall-clock time of the Ray execution (actor start-up included, ``ray.init`` not).
        num_gpus_per_actor: the GPU share each actor asked Ray for (0 when nothing was left to decode).
        devices: the torch devices the actors decoded on (e.g. ``["cpu"]``).
        actor_pids: process ids of the actors that committed shards in this run.
    """

    output: Path
    utterances: int
    decoded: list[int]
    skipped: int
    duplicates: int
    timing: Timing
    wall_seconds: float
    num_gpus_per_actor: float
    devices: list[str] = field(default_factory=list)
    actor_pids: list[int] = field(default_factory=list)


def _config(manifest: Path, n: int, model: str, decoder: str, opts: dict[str, Any], batch_size: int) -> dict[str, Any]:
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    return {"format": _FORMAT, "manifest": str(manifest), "manifest_sha256": digest, "utterances": n,
            "model": model, "decoder": decoder, "decoder_options": opts, "batch_size": batch_size}


def _prepare(out: Path, config: dict[str, Any], resume: bool) -> Path:
    """Create or check ``run.json``; returns the parts folder (stale temporary files removed)."""
    parts = out / PARTS_DIR
    cfg_path = out / CONFIG_FILE
    if not resume:
        for p in parts.glob("part-*.jsonl") if parts.is_dir() else []:
            p.unlink()
        for p in (cfg_path, out / RESULT_FILE):
            if p.exists():
                p.unlink()
    if not cfg_path.exists() and parts.is_dir() and any(parts.glob("part-*.jsonl")):
        raise DecodingInputError(f"{parts} holds part files but {cfg_path} is missing: their configuration is "
                                 "unknown; use another output_dir, or resume=False to start over")
    if cfg_path.exists():
        try:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise FileFormatError(cfg_path, None, f"not a run description: {err}") from None
        keys = ("format", "manifest_sha256", "utterances", "model", "decoder", "decoder_options", "batch_size")
        diff = [k for k in keys if not isinstance(old, dict) or old.get(k) != config[k]]
        if diff:
            raise DecodingInputError(f"{out} holds results of a different run ({', '.join(diff)} differ from "
                                     f"{cfg_path}): use another output_dir, or resume=False to start over")
    else:
        _commit(cfg_path, json.dumps(config, indent=1, ensure_ascii=False) + "\n")
    parts.mkdir(exist_ok=True)
    for tmp in parts.glob(".part-*.tmp"):  # left by a writer that died before its rename
        tmp.unlink(missing_ok=True)
    return parts


def _merge(out: Path, parts: Path, entries: Sequence[ManifestEntry]) -> tuple[Path, int]:
    found, dropped = _read_parts(parts, entries)
    missing = [i for i in range(len(entries)) if i not in found]
    if missing:
        raise DistributedRunError(f"{len(missing)} utterances have no committed result (first: id {missing[0]}, "
                                  f"manifest line {entries[missing[0]].line}); rerun with resume=True")
    path = out / RESULT_FILE
    _commit(path, _dumps([found[i] for i in range(len(entries))]))
    return path, dropped


def _gpus_per_actor(requested: Optional[float], num_actors: int, opts: dict[str, Any]) -> float:
    import ray

    cpu_only = [k for k in _CPU_ONLY_OPTIONS if k in opts]
    if requested is None:
        gpus = float(ray.cluster_resources().get("GPU", 0.0))
        return min(1.0, gpus / num_actors) if gpus > 0 and not cpu_only else 0.0
    if isinstance(requested, bool) or not isinstance(requested, (int, float)) or not math.isfinite(requested) \
            or requested < 0:
        raise DecodingInputError(f"num_gpus_per_actor must be None (auto) or a number >= 0, got {requested!r}")
    if requested > 0 and cpu_only:
        raise DecodingInputError(f"decoder_options {cpu_only} run on the CPU: use num_gpus_per_actor=0")
    return float(requested)


def _root_cause(err: BaseException) -> str:
    """The failing line of an actor's exception: Ray passes it as traceback text, not as an object."""
    text = str(err)
    head = text.split("The above exception was the direct cause of the following exception:")[0]
    lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


def transcribe_dataset(
    manifest: str | Path,
    output_dir: str | Path,
    *,
    model: str = "demo-rnnt",
    decoder: str = "greedy",
    decoder_options: Optional[Mapping[str, Any]] = None,
    batch_size: int = 16,
    num_actors: int = 2,
    num_gpus_per_actor: Optional[float] = None,
    cpus_per_actor: float = 1.0,
    resume: bool = True,
    ray_address: Optional[str] = None,
    _faults: Optional[Mapping[str, Any]] = None,
) -> DatasetRun:
    """Decode every utterance of a manifest with a Ray actor pool; results once each, resumable.

    Args:
        manifest: NeMo-style JSON-lines manifest (:func:`~asrdecode.evaluate.read_manifest`); on a
            cluster, it and its audio files must be readable at the same paths on every node.
        output_dir: folder for ``run.json``, ``parts/`` and ``transcripts.jsonl`` (created if
            missing); on a cluster a shared file system path.
        model, decoder, decoder_options: as :func:`build_pipeline` (the ``asrdecode eval`` options).
        batch_size: utterances per shard = per decoder batch (the local run's batches).
        num_actors: decoder actors (one model each) in the Ray Data actor pool.
        num_gpus_per_actor: GPU share per actor; ``None``: ``min(1, cluster GPUs / num_actors)``
            when the cluster has GPUs and the options can run there, else 0. An actor given a GPU
            decodes on ``cuda`` when torch sees CUDA (else on the CPU, see :attr:`DatasetRun.devices`).
        cpus_per_actor: CPUs Ray reserves per actor; also the actor's torch thread count.
        resume: keep committed results of an earlier run of the same configuration and decode
            the rest; ``False`` deletes them first.
        ray_address: passed to ``ray.init(address=...)`` when Ray is not initialised yet
            (``"auto"`` joins a running cluster; ``None``: a cluster from ``RAY_ADDRESS`` or a local one).
        _faults: for tests only: ``{"fail_when_committed": k}`` makes an actor raise
            :class:`InjectedFailure` before decoding a shard once ``k`` part files exist;
            ``{"exit_after_commit": marker_path}`` kills the first actor process that commits a
            shard (once, remembered by creating ``marker_path``), so Ray retries its task;
            ``{"sleep_after_commit": seconds}`` pauses an actor after each commit (a test kills
            the driver meanwhile).

    Returns:
        a :class:`DatasetRun`; ``.output`` is the merged ``transcripts.jsonl`` (one record per
        utterance, manifest order, equal to :func:`transcribe_local`'s records).

    Raises:
        DecodingInputError: bad arguments, or ``output_dir`` holds a run of another configuration.
        FileFormatError: bad manifest, or a part file that does not fit the manifest.
        DistributedRunError: the Ray execution failed (committed shards stay; rerun to go on).
        ImportError: Ray is not installed.
    """
    for name, value in (("batch_size", batch_size), ("num_actors", num_actors)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DecodingInputError(f"{name} must be an int >= 1, got {value!r}")
    if isinstance(cpus_per_actor, bool) or not isinstance(cpus_per_actor, (int, float)) \
            or not math.isfinite(cpus_per_actor) or cpus_per_actor <= 0:
        raise DecodingInputError(f"cpus_per_actor must be a number > 0, got {cpus_per_actor!r}")
    try:
        import ray
        import ray.data
    except ImportError as err:
        raise ImportError(f"asrdecode.distributed needs Ray: pip install '{RAY_REQUIREMENT}'") from err

    manifest = Path(manifest).resolve()
    entries = read_manifest(manifest)
    opts = _check_options(model, decoder, decoder_options)
    if num_gpus_per_actor is not None:
        _gpus_per_actor(num_gpus_per_actor, num_actors, opts)  # a bad value fails before anything runs
    build_pipeline(model, decoder, opts)  # bad options fail here, before any actor starts
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    parts = _prepare(out, _config(manifest, len(entries), model, decoder, opts, batch_size), resume)

    committed, _ = _read_parts(parts, entries)
    todo = [(s, e) for s, e in _shards(len(entries), batch_size) if any(i not in committed for i in range(s, e))]
    skipped = len(entries) - sum(e - s for s, e in todo)
    timing = Timing()
    decoded: list[int] = []
    devices: set[str] = set()
    pids: set[int] = set()
    gpus = 0.0
    t0 = time.perf_counter()
    if todo:  # else everything is committed: only the merge is left, Ray is not needed
        if not ray.is_initialized():
            ray.init(**({"address": ray_address} if ray_address else {"include_dashboard": False}))
        gpus = _gpus_per_actor(num_gpus_per_actor, num_actors, opts)
        rows = [{"start": s, "stop": e,
                 "paths": [str(x.audio_filepath) for x in entries[s:e]],
                 "durations": [x.duration for x in entries[s:e]],
                 "texts": [x.text for x in entries[s:e]],
                 "lines": [x.line for x in entries[s:e]]} for s, e in todo]
        ds = ray.data.from_items(rows, override_num_blocks=min(len(rows), 1000)).map_batches(
            _ShardDecoder,
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=num_actors),
            num_cpus=cpus_per_actor,
            num_gpus=gpus,
            fn_constructor_kwargs={"model": model, "decoder": decoder, "decoder_options": opts,
                                   "parts_dir": str(parts), "manifest": str(manifest),
                                   "threads": max(1, int(cpus_per_actor)), "faults": dict(_faults or {})},
        )
        try:
            for row in ds.iter_rows():
                decoded.extend(range(int(row["start"]), int(row["stop"])))
                timing += Timing(float(row["audio_seconds"]), float(row["frontend_seconds"]),
                                 float(row["decoder_seconds"]))
                devices.add(str(row["device"]))
                pids.add(int(row["pid"]))
        except Exception as err:
            done, _ = _read_parts(parts, entries)
            raise DistributedRunError(
                f"the Ray run failed after {len(done)} of {len(entries)} utterances were committed in {parts}; "
                f"rerun with resume=True to decode the rest (after fixing the cause if it is in the input). "
                f"Cause: {_root_cause(err)}") from err
    wall = time.perf_counter() - t0
    path, dropped = _merge(out, parts, entries)
    return DatasetRun(output=path, utterances=len(entries), decoded=sorted(set(decoded)), skipped=skipped,
                      duplicates=dropped, timing=timing, wall_seconds=wall, num_gpus_per_actor=gpus,
                      devices=sorted(devices), actor_pids=sorted(pids))
