"""Corpus decoding on Ray: a manifest decoded by a pool of actors, exactly once, resumable.

:func:`transcribe_dataset` reads a manifest (:func:`asrdecode.evaluate.read_manifest`), cuts it
into *shards* of ``batch_size`` consecutive utterances (the batches a local run decodes, see
:func:`transcribe_local`), and runs them through Ray Data ``map_batches`` with a pool of
``num_actors`` decoder actors: each actor loads the model once, decodes one shard per call with
the same calls as the local run (:func:`~asrdecode.pipeline.make_pipeline` and
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

An utterance whose audio cannot be read (missing, unreadable, not a WAV file) fails alone: its
record has ``error`` (the reason, with the manifest line) and null results, the other utterances
of its shard are decoded, and the run goes on (:attr:`DatasetRun.failed`). A resumed run decodes
again every shard that holds a failed utterance, so fixing the file (or the manifest line, see
below) and rerunning the same command completes the output.

Exactly once and resume:

* a shard's part file has a fixed name, so a task that Ray retries (an actor died after
  committing) replaces the file with the same content instead of adding a second copy;
* a run whose ``run.json`` matches (same model, decoder, options and batch size) skips every
  shard whose utterances are all in committed part files without errors, so after a crash only
  the rest is decoded; a mismatch is an error, never a mix of two configurations;
* an edited manifest (the same file, say with a bad file's line fixed) is accepted on resume:
  a committed part file is kept only if it is still a shard of the new manifest and every record
  of it matches the entry now at its position (audio file, duration, text); the other part files
  are deleted and their shards decoded again (another manifest file is still an error);
* Ctrl-C (SIGINT) stops the run with :class:`RunInterrupted` (the CLI prints one line, no
  traceback); the committed shards stay, and rerunning goes on from them;
* the merge keeps each utterance once: if two part files hold the same id (a hand-copied file,
  two drivers on one folder), the record from the part file whose name sorts first wins and the
  drop is counted in :attr:`DatasetRun.duplicates`.

Because shards are the local run's batches, a Ray run's results are identical (tokens,
timestamps, text and float score) to :func:`transcribe_local` with the same ``batch_size``, on a
fresh run and on a resumed one. See ``docs/distributed.md`` for cluster use and the limits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

from .errors import AsrDecodeError, DecodingInputError, FileFormatError, check_int, check_number
from .evaluate import ManifestEntry, Timing, read_manifest, run_evaluation
from .paths import check_output_dir
from .pipeline import DecodeOptions, make_pipeline, resolve_options
from .progress import progress as show_progress
from .results import Hypothesis

__all__ = [
    "transcribe_dataset",
    "transcribe_local",
    "build_pipeline",
    "DatasetRun",
    "DistributedRunError",
    "RunInterrupted",
    "InjectedFailure",
    "RESULT_FILE",
    "RAY_REQUIREMENT",
]

RESULT_FILE = "transcripts.jsonl"
CONFIG_FILE = "run.json"
PARTS_DIR = "parts"
RAY_REQUIREMENT = "ray[data]==2.60.0"
_FORMAT = 1


class DistributedRunError(AsrDecodeError):
    """A Ray run failed part-way; what was committed stays, rerunning the same command (``resume=True``) goes on."""


class RunInterrupted(DistributedRunError):
    """The run was interrupted (Ctrl-C); what was committed stays, a rerun goes on from it."""


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


def _check_options(model: str, decoder: Optional[str], decoder_options: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """``decoder_options`` checked as :class:`~asrdecode.pipeline.DecodeOptions`; the keys that were given."""
    if not isinstance(model, str) or not model:
        raise DecodingInputError(f"model must be a model name or spec (see asrdecode.models.load_bundle), got {model!r}")
    given = dict(decoder_options or {})
    opts = DecodeOptions.from_mapping("greedy" if decoder is None else decoder, given)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items() if k in given}


def resolved_options(bundle: Any, decoder: Optional[str], decoder_options: Optional[Mapping[str, Any]]
                     ) -> DecodeOptions:
    """The options a run decodes ``bundle`` with: :func:`~asrdecode.registry.resolve_options` (as the
    CLI's ``transcribe`` / ``eval``) of ``decoder`` and ``decoder_options``."""
    return resolve_options(bundle, {"decoder": decoder, **(decoder_options or {})})


def _model_or_default(model: Optional[str]) -> str:
    """``model``, or the CLI's default model when it is ``None`` (:func:`asrdecode.models.default_model`:
    ``phone-ctc`` when hama is installed, else ``demo-rnnt``), so a run records the model it used."""
    if model is not None:
        return model
    from .models import default_model

    return default_model()


def build_pipeline(model: Optional[str] = None, decoder: Optional[str] = None,
                   decoder_options: Optional[Mapping[str, Any]] = None,
                   device: str | torch.device = "cpu") -> tuple[Any, Callable, Callable]:
    """The model and the ``(encode, decode)`` pair that ``asrdecode eval`` uses, from Python values.

    Args:
        model: a model spec as ``--model`` takes it (:func:`asrdecode.models.load_bundle`: a bundled
            name, ``PATH.nemo``, ``package.module:attribute``); ``None``: the CLI's default
            (:func:`asrdecode.models.default_model`: ``phone-ctc`` when hama is installed, else
            ``demo-rnnt``), decoded as ``asrdecode eval`` decodes it with no ``--model``.
        decoder: ``"greedy"``, ``"beam"`` or ``"wfst"`` (``None``: the model's default from its
            ``decode_defaults``, e.g. WFST over its cached graph for phone-ctc, else greedy).
        decoder_options: the CLI's decoding flags as keys (the fields of
            :class:`~asrdecode.pipeline.DecodeOptions`: ``beam``, ``window``, ``lm`` (path),
            ``lm_weight``, ``beta``, ``boost`` (list of ``"PHRASE:WEIGHT"``), ``graph`` (path),
            ``acoustic_scale``, ``word_lm``, ...); missing keys take the model's tuned
            ``decode_defaults``, then the CLI defaults.
        device: where the encoder and decoder run (the front end always runs on the CPU).

    Returns:
        ``(bundle, encode, decode)`` from :func:`asrdecode.models.load_bundle` and
        :func:`asrdecode.pipeline.make_pipeline`.

    Raises:
        DecodingInputError: unknown model, decoder or option, or an ill-typed option.
        AsrDecodeError: what ``make_pipeline`` rejects (e.g. ``wfst`` without ``graph``).
    """
    from .models import load_bundle

    model = _model_or_default(model)
    opts = _check_options(model, decoder, decoder_options)
    dev = torch.device(device)
    if dev.type != "cpu" and any(k in opts for k in DecodeOptions.CPU_ONLY):
        raise DecodingInputError(f"decoder_options {sorted(k for k in opts if k in DecodeOptions.CPU_ONLY)} build "
                                 "their LM/boosting/graph tensors on the CPU: decode them on a CPU device")
    demo = load_bundle(model, device=dev)
    encode, decode = make_pipeline(demo if dev.type == "cpu" else _OnDevice(demo, dev),
                                   resolved_options(demo, decoder, opts))
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


def _failed_record(index: int, entry: ManifestEntry, error: str) -> dict[str, Any]:
    """The record of an utterance that could not be decoded: ``error`` and null results."""
    return {"id": index, "audio_filepath": str(entry.audio_filepath), "duration": entry.duration, "text": entry.text,
            "pred_text": None, "score": None, "tokens": None, "timestamps": None, "durations": None, "error": error}


def _decode_entries(ids: Sequence[int], entries: Sequence[ManifestEntry], encode: Callable, decode: Callable,
                    batch_size: int, manifest: str | Path) -> tuple[list[dict[str, Any]], Timing]:
    """Decode ``entries`` (manifest positions ``ids``) in batches of ``batch_size`` -> records, timing.

    Every file is read first; one that cannot be read fails its utterance only (a record with
    ``error`` naming the manifest line), and the readable ones are decoded in batches.
    """
    from .audio import read_audio

    waves: dict[str, torch.Tensor] = {}
    errors: dict[int, str] = {}
    for i, e in zip(ids, entries):
        key = str(e.audio_filepath)
        if key in waves:
            continue
        try:
            waves[key] = read_audio(e.audio_filepath)
        except Exception as err:  # noqa: BLE001 - whatever breaks reading one file is that file's
            reason = " ".join(str(err).split()) or type(err).__name__
            errors[i] = str(FileFormatError(manifest, e.line, f"{type(err).__name__}: {reason}"))
    good = [(i, e) for i, e in zip(ids, entries) if i not in errors and str(e.audio_filepath) in waves]
    res = run_evaluation([e for _, e in good], encode, decode, read=lambda p: waves[str(p)], batch_size=batch_size)
    decoded = {i: _record(i, e, h) for (i, e), h in zip(good, res.hypotheses)}
    return [decoded[i] if i in decoded else _failed_record(i, e, errors[i]) for i, e in zip(ids, entries)], res.timing


def transcribe_local(manifest: str | Path, *, model: Optional[str] = None, decoder: Optional[str] = None,
                     decoder_options: Optional[Mapping[str, Any]] = None,
                     batch_size: int = 16) -> list[dict[str, Any]]:
    """Decode a manifest in this process: the reference that :func:`transcribe_dataset` equals.

    The same calls as ``asrdecode eval`` (:func:`build_pipeline`, then
    :func:`~asrdecode.evaluate.run_evaluation` in batches of ``batch_size`` consecutive entries);
    ``model=None`` is the CLI's default model with its default decoding.

    Returns:
        one record per manifest entry, in manifest order, as in ``transcripts.jsonl`` (see the
        module docstring; ``audio_filepath`` is absolute, resolved from the manifest's folder;
        an unreadable file gives a record with ``error``).
    """
    check_int("batch_size", batch_size, low=1)
    manifest = Path(manifest).resolve()
    entries = read_manifest(manifest)
    _, encode, decode = build_pipeline(model, decoder, decoder_options)
    records: list[dict[str, Any]] = []
    for start, stop in _shards(len(entries), batch_size):  # the shards of a Ray run, one batch each
        recs, _ = _decode_entries(range(start, stop), entries[start:stop], encode, decode, stop - start, manifest)
        records.extend(recs)
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
        failed: manifest positions whose audio could not be read (their records hold ``error``;
            a rerun tries them again).
        decoder: the decoder the run used (the model's default when none was given).
        options: the resolved decoding options that differ from the registry's defaults
            (:meth:`~asrdecode.pipeline.DecodeOptions.changed`: given flags and the model's tuned values).
        wer, cer: corpus WER and CER of the decoded utterances against the manifest's texts (over
            every record without ``error``); ``None`` when no manifest entry has a reference text.
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
    failed: list[int] = field(default_factory=list)
    decoder: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    wer: Optional[float] = None
    cer: Optional[float] = None


def _scores(records: Sequence[Mapping[str, Any]]) -> tuple[Optional[float], Optional[float]]:
    """Corpus WER and CER of the records without ``error`` (``None, None`` when no record has a reference)."""
    from .evaluate import cer, wer

    done = [r for r in records if r.get("error") is None and r.get("pred_text") is not None]
    if not any(str(r.get("text") or "").strip() for r in done):
        return None, None
    refs, hyps = [str(r.get("text") or "") for r in done], [str(r["pred_text"]) for r in done]
    return wer(refs, hyps), cer(refs, hyps)


def _config(manifest: Path, n: int, model: str, decoder: Optional[str], opts: dict[str, Any],
            batch_size: int, resolved: Optional[DecodeOptions] = None) -> dict[str, Any]:
    """``run.json``: what was decoded and how; ``resolved`` (the options the actors decode with) is
    recorded as ``resolved_decoder`` / ``resolved_options`` (not compared on resume: the given
    ``decoder`` and ``decoder_options`` are)."""
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    cfg = {"format": _FORMAT, "manifest": str(manifest), "manifest_sha256": digest, "utterances": n,
           "model": model, "decoder": decoder, "decoder_options": opts, "batch_size": batch_size}
    if resolved is not None:
        cfg.update(resolved_decoder=resolved.decoder, resolved_options=resolved.changed())
    return cfg


def _stale_parts(parts: Path, entries: Sequence[ManifestEntry], batch_size: int) -> list[Path]:
    """Part files that no longer fit an edited manifest: not one of its shards, or a record that is
    unreadable or differs from the entry now at its position (audio file, duration, text)."""
    shards = {_part_name(s, e) for s, e in _shards(len(entries), batch_size)}
    stale = []
    for path in sorted(parts.glob("part-*.jsonl")):
        if path.name not in shards:
            stale.append(path)
            continue
        try:
            recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        except (ValueError, UnicodeDecodeError):
            stale.append(path)
            continue
        for rec in recs:
            i = rec.get("id") if isinstance(rec, dict) else None
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(entries) or \
                    (rec.get("audio_filepath"), rec.get("duration"), rec.get("text")) != \
                    (str(entries[i].audio_filepath), entries[i].duration, entries[i].text):
                stale.append(path)
                break
    return stale


def _prepare(out: Path, config: dict[str, Any], resume: bool,
             entries: Optional[Sequence[ManifestEntry]] = None) -> Path:
    """Create or check ``run.json``; returns the parts folder (stale temporary files removed).

    On resume with an edited manifest (``entries``: the new one), the part files that no longer
    fit it are deleted and ``run.json`` is updated; other differences are an error."""
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
                                 "unknown; use another output_dir, or start over with --restart "
                                 "(Python: resume=False)")
    if cfg_path.exists():
        try:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise FileFormatError(cfg_path, None, f"not a run description: {err}") from None
        keys = ("format", "model", "decoder", "decoder_options", "batch_size", "manifest_sha256", "utterances")
        diff = [k for k in keys if not isinstance(old, dict) or old.get(k) != config[k]]
        # the same manifest file, edited (say, a bad file's line fixed): accepted, see below
        edited = bool(diff) and entries is not None and set(diff) <= {"manifest_sha256", "utterances"} \
            and old.get("manifest") == config["manifest"]
        if diff and not edited:
            raise DecodingInputError(f"{out} holds results of a different run ({', '.join(diff)} differ from "
                                     f"{cfg_path}): use another output_dir, or start over with --restart "
                                     "(Python: resume=False)")
        if edited:  # keep the committed shards that still fit the manifest
            assert entries is not None
            if parts.is_dir():
                for path in _stale_parts(parts, entries, config["batch_size"]):
                    path.unlink()
            _commit(cfg_path, json.dumps(config, indent=1, ensure_ascii=False) + "\n")
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
                                  f"manifest line {entries[missing[0]].line}); rerun the same command to decode them "
                                  "(Python: resume=True)")
    path = out / RESULT_FILE
    _commit(path, _dumps([found[i] for i in range(len(entries))]))
    return path, dropped


def _read_jsonl_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _gpus_per_actor(requested: Optional[float], num_actors: int, opts: dict[str, Any]) -> float:
    import ray

    cpu_only = [k for k in DecodeOptions.CPU_ONLY if k in opts]
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
    model: Optional[str] = None,
    decoder: Optional[str] = None,
    decoder_options: Optional[Mapping[str, Any]] = None,
    batch_size: int = 16,
    num_actors: int = 2,
    num_gpus_per_actor: Optional[float] = None,
    cpus_per_actor: float = 1.0,
    resume: bool = True,
    ray_address: Optional[str] = None,
    verbose: bool = False,
    _faults: Optional[Mapping[str, Any]] = None,
) -> DatasetRun:
    """Decode every utterance of a manifest with a Ray actor pool; results once each, resumable.

    Args:
        manifest: NeMo-style JSON-lines manifest (:func:`~asrdecode.evaluate.read_manifest`); on a
            cluster, it and its audio files must be readable at the same paths on every node.
        output_dir: folder for ``run.json``, ``parts/`` and ``transcripts.jsonl`` (created if
            missing); on a cluster a shared file system path.
        model, decoder, decoder_options: as :func:`build_pipeline` (the ``asrdecode eval`` options;
            ``model=None``: the CLI's default model, recorded by name in ``run.json``, so a resumed
            run after installing or removing hama is refused instead of mixing two models).
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
        verbose: let Ray print its own logs and progress bars; ``False`` (default) keeps them out of
            the way (see :func:`_quiet_ray`) and shows one bar of shards done instead
            (:func:`asrdecode.progress.progress`: on a terminal only).
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
    _check_run_args(batch_size, num_actors, cpus_per_actor)
    ray = _import_ray()

    manifest = Path(manifest).resolve()
    entries = read_manifest(manifest)
    model, opts, checked = _resolve_decoding(model, decoder, decoder_options, num_gpus_per_actor, num_actors)
    out = Path(output_dir).resolve()
    check_output_dir(out, "output_dir")  # created and probed before any decoding
    resolved = resolved_options(checked[0], decoder, opts)
    parts = _prepare(out, _config(manifest, len(entries), model, decoder, opts, batch_size, resolved), resume,
                     entries)

    todo, skipped = _pending_shards(parts, entries, batch_size)
    gpus = 0.0
    t0 = time.perf_counter()
    progress = _Progress()
    if todo:  # else everything is committed: only the merge is left, Ray is not needed
        if not ray.is_initialized():
            kw: dict[str, Any] = {"address": ray_address} if ray_address else {"include_dashboard": False}
            if not verbose:
                kw.update(logging_level=logging.ERROR, log_to_driver=False)
            with _quiet_ray(not verbose):
                ray.init(**kw)
        gpus = _gpus_per_actor(num_gpus_per_actor, num_actors, opts)
        actor_kwargs = {"model": model, "decoder": decoder, "decoder_options": opts, "parts_dir": str(parts),
                        "manifest": str(manifest), "threads": max(1, int(cpus_per_actor)),
                        "faults": dict(_faults or {})}
        _decode_shards(ray, todo, entries, parts, progress, actor_kwargs, num_actors, cpus_per_actor, gpus,
                       quiet=not verbose)
    wall = time.perf_counter() - t0
    path, dropped = _merge(out, parts, entries)
    records = _read_jsonl_records(path)
    failed = [r["id"] for r in records if r.get("error") is not None]
    wer, cer = _scores(records)
    return DatasetRun(output=path, utterances=len(entries), decoded=sorted(set(progress.decoded)), skipped=skipped,
                      duplicates=dropped, timing=progress.timing, wall_seconds=wall, num_gpus_per_actor=gpus,
                      devices=sorted(progress.devices), actor_pids=sorted(progress.pids), failed=failed,
                      decoder=resolved.decoder, options=resolved.changed(), wer=wer, cer=cer)


@contextlib.contextmanager
def _quiet_ray(quiet: bool) -> Iterator[None]:
    """While active (``quiet``): Ray's Python loggers at ERROR (Ray Data's at CRITICAL), and Ray Data
    without its progress bars, its progress log lines and its execution-start lines; restored afterwards."""
    if not quiet:
        yield
        return
    import ray.data

    ctx = ray.data.DataContext.get_current()
    saved = {k: getattr(ctx, k) for k in ("enable_progress_bars", "print_on_execution_start", "enable_auto_log_stats")}
    # Ray Data logs an actor's exception at ERROR with its stack trace; the run's DistributedRunError
    # names its cause in one line, so Ray Data is at CRITICAL
    loggers = {logging.getLogger("ray"): logging.ERROR, logging.getLogger("ray.data"): logging.CRITICAL}
    levels = {lg: lg.level for lg in loggers}
    try:
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        ctx.enable_auto_log_stats = False
        for lg, level in loggers.items():
            lg.setLevel(level)
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)
        for lg, level in levels.items():
            lg.setLevel(level)


def _resolve_decoding(model: Optional[str], decoder: Optional[str], decoder_options: Optional[Mapping[str, Any]],
                      num_gpus_per_actor: Optional[float], num_actors: int) -> tuple[str, dict[str, Any], Any]:
    """The model's name (``None``: the CLI's default), the checked decoder options and the pipeline built
    with them (:func:`build_pipeline`); bad options or a bad ``num_gpus_per_actor`` fail here, before any
    actor starts."""
    model = _model_or_default(model)
    opts = _check_options(model, decoder, decoder_options)
    if num_gpus_per_actor is not None:
        _gpus_per_actor(num_gpus_per_actor, num_actors, opts)  # a bad value fails before anything runs
    return model, opts, build_pipeline(model, decoder, opts)


def _pending_shards(parts: Path, entries: Sequence[ManifestEntry], batch_size: int) -> tuple[list[tuple[int, int]], int]:
    """The shards ``(start, end)`` with an utterance not committed yet (or committed as failed: tried
    again), and the number of utterances they leave out (committed by an earlier run)."""
    committed, _ = _read_parts(parts, entries)
    done = {i for i, rec in committed.items() if "error" not in rec}  # failed utterances are tried again
    todo = [(s, e) for s, e in _shards(len(entries), batch_size) if any(i not in done for i in range(s, e))]
    return todo, len(entries) - sum(e - s for s, e in todo)


def _decode_shards(ray: Any, todo: list[tuple[int, int]], entries: Sequence[ManifestEntry], parts: Path,
                   progress: _Progress, actor_kwargs: dict[str, Any], num_actors: int, cpus_per_actor: float,
                   gpus: float, *, quiet: bool) -> None:
    """Decode the ``todo`` shards on a Ray Data actor pool of :class:`_ShardDecoder` (each commits its
    part files), following the commits in ``progress`` and a shards bar (Ray's own logging quiet when
    ``quiet``)."""
    ds = ray.data.from_items(_shard_rows(entries, todo), override_num_blocks=min(len(todo), 1000)).map_batches(
        _ShardDecoder, batch_size=1, compute=ray.data.ActorPoolStrategy(size=num_actors),
        num_cpus=cpus_per_actor, num_gpus=gpus, fn_constructor_kwargs=actor_kwargs)
    with _quiet_ray(quiet), show_progress(len(todo), "shards", "shard") as bar:
        _collect(ds, progress, parts, entries, bar.update)


def _check_run_args(batch_size: object, num_actors: object, cpus_per_actor: object) -> None:
    for name, value in (("batch_size", batch_size), ("num_actors", num_actors)):
        check_int(name, value, low=1)
    check_number("cpus_per_actor", cpus_per_actor, low=0, low_open=True)


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise ImportError(f"asrdecode.distributed needs Ray: pip install '{RAY_REQUIREMENT}'") from err
    return ray


def _shard_rows(entries: Sequence[ManifestEntry], shards: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """One Ray Data row per shard: its manifest range and what the actor needs of its entries."""
    return [{"start": s, "stop": e,
             "paths": [str(x.audio_filepath) for x in entries[s:e]],
             "durations": [x.duration for x in entries[s:e]],
             "texts": [x.text for x in entries[s:e]],
             "lines": [x.line for x in entries[s:e]]} for s, e in shards]


@dataclass
class _Progress:
    """What the driver learns from the actors' result rows."""

    decoded: list[int] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    devices: set[str] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)


def _collect(ds: Any, progress: _Progress, parts: Path, entries: Sequence[ManifestEntry],
             shard_done: Callable[[int], None] = lambda n: None) -> None:
    """Run the Ray pipeline ``ds`` to the end, adding each committed shard's row to ``progress`` (and
    calling ``shard_done(1)``); an interruption or failure says how much is committed and how to go on."""
    try:
        for row in ds.iter_rows():
            shard_done(1)
            progress.decoded.extend(range(int(row["start"]), int(row["stop"])))
            progress.timing += Timing(float(row["audio_seconds"]), float(row["frontend_seconds"]),
                                      float(row["decoder_seconds"]))
            progress.devices.add(str(row["device"]))
            progress.pids.add(int(row["pid"]))
    except KeyboardInterrupt:
        committed_now, _ = _read_parts(parts, entries)
        raise RunInterrupted(
            f"interrupted: {len(committed_now)} of {len(entries)} utterances are committed in {parts}; "
            "rerun the same command to decode the rest (Python: resume=True)") from None
    except Exception as err:
        committed_now, _ = _read_parts(parts, entries)
        raise DistributedRunError(
            f"the Ray run failed after {len(committed_now)} of {len(entries)} utterances were committed in "
            f"{parts}; rerun the same command to decode the rest (Python: resume=True), after fixing the cause "
            f"if it is in the input. Cause: {_root_cause(err)}") from err
