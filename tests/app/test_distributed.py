"""asrdecode.distributed: a Ray run equals the local transcription, exactly once, resumable.

The Ray tests share one local Ray instance (``ray.init(num_cpus=2)``, module-scoped; the killed
driver of one test is a subprocess connected to it) and skip only when ``ray`` is not importable.
The manifest is 8 bundled utterances in shards of 3 (3 + 3 + 2).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asrdecode.errors import AsrDecodeError, DecodingInputError, FileFormatError
from asrdecode.evaluate import cer, read_manifest, wer

from asrdecode import distributed as dist

ROOT = Path(__file__).resolve().parents[2]
BATCH = 3


def _write_manifest(path: Path) -> Path:
    lines = []
    for sub, k in (("real", 4), ("synth_test", 4)):
        src = ROOT / "data" / sub / "manifest.jsonl"
        for line in src.read_text(encoding="utf-8").splitlines()[:k]:
            obj = json.loads(line)
            obj["audio_filepath"] = str((src.parent / obj["audio_filepath"]).resolve())
            lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _driver_after_first_commit(script: str, out: Path) -> subprocess.Popen:
    """Start a driver process running ``script`` and wait until it has committed a part file in ``out``."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 120
    while not list((out / "parts").glob("part-*.jsonl")):
        if proc.poll() is not None:
            pytest.fail(f"the driver exited before committing: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no part file committed within 120 s")
        time.sleep(0.05)
    return proc


def _same_records(got: list[dict], want: list[dict]) -> bool:
    """Same records (ids, tokens, timestamps, text, ...) with float scores within a tolerance: Ray's
    actors and this process may run torch with different thread counts (last-bit differences)."""
    def strip(r: dict) -> dict:
        return {k: v for k, v in r.items() if k != "score"}

    assert [strip(r) for r in got] == [strip(r) for r in want]
    scores = [(a.get("score"), b.get("score")) for a, b in zip(got, want)]
    assert [a is None for a, _ in scores] == [b is None for _, b in scores]  # failed utterances: no score
    assert [a for a, b in scores if b is not None] == pytest.approx([b for _, b in scores if b is not None],
                                                                    rel=1e-5, abs=1e-4)
    return True


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return _write_manifest(tmp_path_factory.mktemp("manifest") / "manifest.jsonl")


@pytest.fixture(scope="module")
def local_rnnt(manifest) -> list[dict]:
    return dist.transcribe_local(manifest, model="demo-rnnt", batch_size=BATCH)


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    # the actors import the ModelBundle test double (tests/bundle_double.py) by module name
    import suite_paths

    os.environ["PYTHONPATH"] = suite_paths.pythonpath()
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


# ------------------------------------------------------------------------------ local, no Ray
def test_local_equals_cli_eval(manifest, local_rnnt, tmp_path) -> None:
    from asrdecode.cli import main

    out = tmp_path / "pred.jsonl"
    assert main(["eval", str(manifest), "--model", "demo-rnnt", "--batch-size", str(BATCH), "--no-progress",
                 "-o", str(out)]) == 0
    cli = _read_jsonl(out)
    entries = read_manifest(manifest)
    assert [r["id"] for r in local_rnnt] == list(range(len(entries)))
    assert [r["pred_text"] for r in local_rnnt] == [r["pred_text"] for r in cli]
    assert [r["audio_filepath"] for r in local_rnnt] == [str(e.audio_filepath) for e in entries]
    assert all(len(r["tokens"]) == len(r["timestamps"]) and r["durations"] is None for r in local_rnnt)
    assert any(r["tokens"] for r in local_rnnt)


def test_no_model_means_the_cli_default_model(manifest, monkeypatch) -> None:
    # model=None follows models.default_model() (phone-ctc with hama, else demo-rnnt) as eval/serve do
    import asrdecode.models as models

    monkeypatch.setattr(models, "default_model", lambda: "demo-tdt")
    bundle, _, _ = dist.build_pipeline()
    assert bundle.name == "demo-tdt"
    small = read_manifest(manifest)[:2]
    recs = dist._decode_entries(range(2), small, *dist.build_pipeline()[1:], 2, manifest)[0]
    assert all(r["durations"] is not None for r in recs)  # TDT decoded, not the old demo-rnnt default
    assert recs == dist._decode_entries(range(2), small, *dist.build_pipeline("demo-tdt")[1:], 2, manifest)[0]


def test_no_model_decodes_as_cli_eval_without_model(tmp_path) -> None:
    # the real default: phone-ctc with its decode_defaults (WFST over its cached graph) when hama is
    # installed; conftest.py makes its graph small (ASRDECODE_PHONE_WORDS)
    from asrdecode.cli import main
    from asrdecode.models import default_model

    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(ROOT / f"data/real/cards-00{i}.wav"),
                                            "duration": 1.0, "text": "x"}) + "\n" for i in (1, 2)), encoding="utf-8")
    bundle, _, _ = dist.build_pipeline()
    assert bundle.name == default_model()
    recs = dist.transcribe_local(manifest, batch_size=2)
    out = tmp_path / "pred.jsonl"
    assert main(["eval", str(manifest), "--batch-size", "2", "--no-progress", "-o", str(out)]) == 0
    assert [r["pred_text"] for r in recs] == [r["pred_text"] for r in _read_jsonl(out)]
    if default_model() == "phone-ctc":  # WFST: word spans, the bundle's tuned decoder
        assert all(r["words"] and r["pred_text"] for r in recs)


def test_device_wrapper_feeds_the_cli_pipeline(manifest) -> None:
    # the wrapper GPU actors use: the CLI pipeline through it gives the plain pipeline's results
    from asrdecode.audio import read_audio
    from asrdecode.pipeline import DecodeOptions, make_pipeline

    demo, encode, decode = dist.build_pipeline("demo-tdt")
    wrapped = dist._OnDevice(demo, torch.device("cpu"))
    assert wrapped.kind == "tdt" and wrapped.tokenizer is demo.tokenizer
    encode2, decode2 = make_pipeline(wrapped, DecodeOptions())
    waves = [read_audio(e.audio_filepath) for e in read_manifest(manifest)[:2]]
    a = decode(*encode(waves))
    b = decode2(*encode2(waves))
    assert [(h.tokens, h.timestamps, h.durations, h.score) for h in a] == \
           [(h.tokens, h.timestamps, h.durations, h.score) for h in b]
    assert all(h.durations is not None for h in a)


def test_bad_options_raise() -> None:
    with pytest.raises(DecodingInputError, match="unknown key 'beam_size'"):
        dist.build_pipeline("demo-ctc", "beam", {"beam_size": 4})
    with pytest.raises(DecodingInputError, match=r"decoder_options\['beam'\]"):
        dist.build_pipeline("demo-ctc", "beam", {"beam": "4"})
    with pytest.raises(DecodingInputError, match="expected a bundled model name"):
        dist.build_pipeline("demo-xyz")
    with pytest.raises(DecodingInputError, match="decoder must be one of"):
        dist.build_pipeline("demo-ctc", "viterbi")
    with pytest.raises(DecodingInputError, match="on the CPU"):
        dist.build_pipeline("demo-ctc", "beam", {"lm": "x.arpa"}, device="meta")
    with pytest.raises(AsrDecodeError, match="--graph"):
        dist.build_pipeline("demo-ctc", "wfst")
    with pytest.raises(DecodingInputError, match="batch_size"):
        dist.transcribe_local(ROOT / "data/real/manifest.jsonl", batch_size=0)


def _fake_record(i: int, entry, pred: str) -> dict:
    return {"id": i, "audio_filepath": str(entry.audio_filepath), "pred_text": pred}


def test_merge_keeps_each_utterance_once_first_part_wins(manifest, tmp_path) -> None:
    entries = read_manifest(manifest)
    parts = tmp_path / "parts"
    parts.mkdir()
    recs = [_fake_record(i, e, f"utt {i}") for i, e in enumerate(entries)]
    dist._commit(parts / dist._part_name(0, 5), dist._dumps(recs[:5]))
    dist._commit(parts / dist._part_name(5, 8), dist._dumps(recs[5:]))
    # a second copy of utterances 1..3 with other content, in a part whose name sorts later
    dist._commit(parts / dist._part_name(1, 4), dist._dumps([dict(r, pred_text="late copy") for r in recs[1:4]]))
    (parts / ".part-000000009-000000010.jsonl.x.tmp").write_text("half a line")  # an uncommitted temp file
    path, dropped = dist._merge(tmp_path, parts, entries)
    merged = _read_jsonl(path)
    assert merged == recs and dropped == 3
    # the same part files written in the opposite order merge the same way
    again = tmp_path / "again"
    (again / "parts").mkdir(parents=True)
    for p in sorted(parts.glob("part-*"), reverse=True):
        dist._commit(again / "parts" / p.name, p.read_text(encoding="utf-8"))
    assert dist._merge(again, again / "parts", entries)[1] == 3
    assert _read_jsonl(again / dist.RESULT_FILE) == recs

    os.unlink(parts / dist._part_name(5, 8))
    with pytest.raises(dist.DistributedRunError,
                       match="3 utterances have no committed result .first: id 5, manifest line 6.") as err:
        dist._merge(tmp_path, parts, entries)
    assert "rerun the same command" in str(err.value)  # the CLI's way first (resume is its default)
    bad = dict(recs[6], audio_filepath="/elsewhere.wav")
    dist._commit(parts / dist._part_name(6, 7), dist._dumps([bad]))
    with pytest.raises(FileFormatError, match=r"part-000000006-000000007.jsonl:1: record 6 is for"):
        dist._read_parts(parts, entries)


def test_run_config_mismatch_is_an_error(manifest, tmp_path) -> None:
    entries = read_manifest(manifest)
    cfg = dist._config(manifest.resolve(), len(entries), "demo-rnnt", "greedy", {}, BATCH)
    parts = dist._prepare(tmp_path, cfg, resume=True)
    dist._commit(parts / dist._part_name(0, 3), "{}\n")
    assert dist._prepare(tmp_path, cfg, resume=True) == parts  # same configuration: resumable
    assert (parts / dist._part_name(0, 3)).exists()
    other = dict(cfg, decoder="beam", decoder_options={"beam": 4})
    with pytest.raises(DecodingInputError, match="decoder, decoder_options differ"):
        dist._prepare(tmp_path, other, resume=True)
    dist._prepare(tmp_path, other, resume=False)  # starts over: old parts removed
    assert not list(parts.glob("part-*")) and json.loads((tmp_path / "run.json").read_text())["decoder"] == "beam"
    dist._commit(parts / dist._part_name(0, 3), "{}\n")
    os.unlink(tmp_path / "run.json")
    with pytest.raises(DecodingInputError, match="run.json is missing"):
        dist._prepare(tmp_path, cfg, resume=True)


def test_resolved_options_are_recorded_but_not_compared_on_resume(manifest, tmp_path) -> None:
    from asrdecode.models import load

    entries = read_manifest(manifest)
    bundle = load("demo-ctc")
    resolved = dist.resolved_options(bundle, "beam", {"beam": 3})
    cfg = dist._config(manifest.resolve(), len(entries), "demo-ctc", "beam", {"beam": 3}, BATCH, resolved)
    assert cfg["resolved_decoder"] == "beam" and cfg["resolved_options"] == resolved.changed()
    assert cfg["resolved_options"]["beam"] == 3
    dist._prepare(tmp_path, cfg, resume=True)
    assert json.loads((tmp_path / "run.json").read_text())["resolved_options"] == resolved.changed()
    # a run.json written before resolved options were recorded still resumes
    dist._prepare(tmp_path, {k: v for k, v in cfg.items() if not k.startswith("resolved")}, resume=True)


class _TTY(io.StringIO):
    """A stderr that says it is a terminal (progress bars are drawn only on one)."""

    def isatty(self) -> bool:
        return True


def test_quiet_ray_sets_and_restores_rays_logging() -> None:
    import logging

    pytest.importorskip("ray")
    data = pytest.importorskip("ray.data")
    ctx = data.DataContext.get_current()
    before = (ctx.enable_progress_bars, ctx.print_on_execution_start, logging.getLogger("ray").level,
              logging.getLogger("ray.data").level)
    with dist._quiet_ray(True):
        assert not ctx.enable_progress_bars and not ctx.print_on_execution_start
        assert logging.getLogger("ray").level == logging.ERROR
        assert logging.getLogger("ray.data").level == logging.CRITICAL
    after = (ctx.enable_progress_bars, ctx.print_on_execution_start, logging.getLogger("ray").level,
             logging.getLogger("ray.data").level)
    assert after == before
    with dist._quiet_ray(False):  # --verbose: Ray's own settings
        assert (ctx.enable_progress_bars, logging.getLogger("ray.data").level) == (before[0], before[3])


def test_scores_use_references_and_skip_failed_utterances() -> None:
    recs = [{"text": "a b c d", "pred_text": "a b x d"}, {"text": "e f", "pred_text": "e f"},
            {"text": "g h", "pred_text": None, "error": "unreadable"}]
    wer, cer = dist._scores(recs)
    assert wer == pytest.approx(1 / 6) and cer == pytest.approx(1 / 10)
    assert dist._scores([{"text": "", "pred_text": "x"}, {"text": " ", "pred_text": ""}]) == (None, None)
    assert dist._scores([]) == (None, None)


def test_without_ray_the_error_says_what_to_install(monkeypatch, manifest, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    monkeypatch.setitem(sys.modules, "ray.data", None)
    with pytest.raises(ImportError, match=r"pip install 'ray\[data\]==2\.60\.0'"):
        dist.transcribe_dataset(manifest, tmp_path / "out", model="demo-rnnt")
    assert not (tmp_path / "out").exists()


def test_gpu_share_per_actor(monkeypatch, manifest, tmp_path) -> None:
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0})
    assert dist._gpus_per_actor(None, 4, {}) == 0.5  # auto: 2 GPUs shared by 4 actors
    assert dist._gpus_per_actor(None, 1, {}) == 1.0
    assert dist._gpus_per_actor(None, 2, {"lm": "x.arpa"}) == 0.0  # fusion runs on CPU actors
    assert dist._gpus_per_actor(0.25, 2, {}) == 0.25
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0})
    assert dist._gpus_per_actor(None, 2, {}) == 0.0
    with pytest.raises(DecodingInputError, match="use num_gpus_per_actor=0"):
        dist._gpus_per_actor(1, 2, {"boost": ["a:1"]})
    for bad in (-1, float("nan"), "1", True):
        with pytest.raises(DecodingInputError, match="num_gpus_per_actor"):
            dist.transcribe_dataset(manifest, tmp_path, model="demo-rnnt", num_gpus_per_actor=bad)
    assert not (tmp_path / "run.json").exists()  # rejected before anything was written


# -------------------------------------------------------------------------------------- on Ray
def test_ray_run_equals_local_transcription(ray_session, manifest, local_rnnt, tmp_path) -> None:
    run = dist.transcribe_dataset(manifest, tmp_path / "out", model="demo-rnnt", batch_size=BATCH, num_actors=2)
    assert run.output == (tmp_path / "out" / dist.RESULT_FILE).resolve()
    assert _same_records(_read_jsonl(run.output), local_rnnt)  # tokens, timestamps, text equal; score close
    assert run.decoded == list(range(8)) and run.skipped == 0 and run.duplicates == 0
    assert run.num_gpus_per_actor == 0.0 and run.devices == ["cpu"]
    assert sorted(p.name for p in (tmp_path / "out" / "parts").iterdir()) == \
           [dist._part_name(0, 3), dist._part_name(3, 6), dist._part_name(6, 8)]
    assert run.timing.audio_seconds == pytest.approx(sum(e.duration for e in read_manifest(manifest)), abs=0.05)


def test_ray_crash_then_resume_decodes_only_the_rest(ray_session, manifest, local_rnnt, tmp_path) -> None:
    out = tmp_path / "out"
    with pytest.raises(dist.DistributedRunError, match="injected failure") as info:
        dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=BATCH, num_actors=1,
                                _faults={"fail_when_committed": 1})
    assert "rerun the same command" in str(info.value) and "(Python: resume=True)" in str(info.value)
    assert not (out / dist.RESULT_FILE).exists()
    parts = sorted((out / "parts").glob("part-*.jsonl"))
    committed = {r["id"] for p in parts for r in _read_jsonl(p)}
    assert 1 <= len(parts) < 3 and committed  # some shards committed, the failing one not
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in parts}

    with pytest.raises(DecodingInputError, match="batch_size differ"):
        dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=BATCH + 1, num_actors=1)

    run = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=BATCH, num_actors=1)
    assert run.decoded == sorted(set(range(8)) - committed)  # only the rest was decoded
    assert run.skipped == len(committed) and run.duplicates == 0
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in parts} == stamps  # not rewritten
    assert _same_records(_read_jsonl(run.output), local_rnnt)

    # nothing left to do
    again = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=BATCH, num_actors=1)
    assert again.decoded == [] and again.skipped == 8 and _same_records(_read_jsonl(again.output), local_rnnt)


def test_ray_driver_killed_mid_run_then_resumed(ray_session, manifest, local_rnnt, tmp_path) -> None:
    # a real crash: the driver process gets SIGKILL (no exception handling, no cleanup) while its
    # actor holds the run open after committing the first shard
    out = tmp_path / "out"
    script = (
        "import ray\n"
        "from asrdecode import distributed as dist\n"
        f"ray.init(address={ray_session.get_runtime_context().gcs_address!r}, log_to_driver=False)\n"
        f"dist.transcribe_dataset({str(manifest)!r}, {str(out)!r}, model='demo-rnnt', batch_size={BATCH},\n"
        "                        num_actors=1,\n"
        "                        num_gpus_per_actor=0, _faults={'sleep_after_commit': 300})\n"
    )
    proc = _driver_after_first_commit(script, out)
    proc.kill()  # the driver dies mid-run
    proc.wait(timeout=30)
    proc.stderr.close()
    parts = sorted((out / "parts").glob("part-*.jsonl"))
    assert len(parts) == 1 and not (out / dist.RESULT_FILE).exists()  # one actor, paused after its commit
    committed = {r["id"] for r in _read_jsonl(parts[0])}
    assert parts[0].name in {dist._part_name(s, min(s + BATCH, 8)) for s in range(0, 8, BATCH)}
    stamp = (parts[0].stat().st_ino, parts[0].stat().st_mtime_ns)

    run = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=BATCH, num_actors=1)
    assert run.decoded == sorted(set(range(8)) - committed) and run.skipped == len(committed)
    assert run.duplicates == 0
    assert (parts[0].stat().st_ino, parts[0].stat().st_mtime_ns) == stamp
    assert _same_records(_read_jsonl(run.output), local_rnnt)


def test_ray_run_without_model_uses_and_records_the_default(ray_session, manifest, tmp_path, monkeypatch) -> None:
    import asrdecode.models as models

    monkeypatch.setattr(models, "default_model", lambda: "demo-tdt")  # the actors get the resolved name
    run = dist.transcribe_dataset(manifest, tmp_path / "out", batch_size=BATCH, num_actors=1)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["model"] == "demo-tdt"
    assert _same_records(_read_jsonl(run.output), dist.transcribe_local(manifest, model="demo-tdt", batch_size=BATCH))
    with pytest.raises(DecodingInputError, match="model"):  # the default changed: not mixed into this run
        monkeypatch.setattr(models, "default_model", lambda: "demo-rnnt")
        dist.transcribe_dataset(manifest, tmp_path / "out", batch_size=BATCH, num_actors=1)


def test_ray_actor_killed_after_commit_is_retried_exactly_once(ray_session, manifest, tmp_path) -> None:
    local = dist.transcribe_local(manifest, model="demo-tdt", batch_size=BATCH)
    marker = tmp_path / "actor-died"
    run = dist.transcribe_dataset(manifest, tmp_path / "out", model="demo-tdt", batch_size=BATCH, num_actors=2,
                                  _faults={"exit_after_commit": str(marker)})
    assert marker.exists()  # an actor process did die right after committing a shard
    assert run.decoded == list(range(8)) and run.duplicates == 0
    merged = _read_jsonl(run.output)
    assert _same_records(merged, local) and [r["id"] for r in merged] == list(range(8))
    assert all(r["durations"] is not None for r in merged)
    assert len(list((tmp_path / "out" / "parts").glob("part-*.jsonl"))) == 3


def _bad_audio_manifest(tmp_path: Path) -> tuple[Path, Path]:
    """Three utterances; the second one's file is not a WAV file."""
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav file")
    lines = [{"audio_filepath": str(ROOT / "data/real/cards-001.wav"), "duration": 1.0, "text": "a"},
             {"audio_filepath": "bad.wav", "duration": 1.0, "text": "b"},
             {"audio_filepath": str(ROOT / "data/real/cards-003.wav"), "duration": 1.0, "text": "c"}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return manifest, bad


def test_local_unreadable_file_fails_only_its_utterance(tmp_path) -> None:
    manifest, bad = _bad_audio_manifest(tmp_path)
    recs = dist.transcribe_local(manifest, model="demo-rnnt", batch_size=3)
    assert [r["id"] for r in recs] == [0, 1, 2]
    assert recs[1]["pred_text"] is None and recs[1]["tokens"] is None
    assert "m.jsonl:2" in recs[1]["error"] and "bad.wav" not in recs[0].get("error", "")
    assert "error" not in recs[0] and "error" not in recs[2] and recs[0]["tokens"] is not None
    bad.write_bytes((ROOT / "data/real/cards-002.wav").read_bytes())  # fixed
    fixed = dist.transcribe_local(manifest, model="demo-rnnt", batch_size=3)
    assert all("error" not in r for r in fixed) and fixed[0]["tokens"] is not None


def test_edited_manifest_keeps_only_the_shards_that_still_fit(manifest, tmp_path) -> None:
    entries = read_manifest(manifest)
    cfg = dist._config(manifest.resolve(), len(entries), "demo-rnnt", "greedy", {}, BATCH)
    out = tmp_path / "out"
    out.mkdir()
    parts = dist._prepare(out, cfg, resume=True, entries=entries)
    for s, e in ((0, 3), (3, 6), (6, 8)):
        dist._commit(parts / dist._part_name(s, e), "".join(
            json.dumps({"id": i, "audio_filepath": str(entries[i].audio_filepath), "duration": entries[i].duration,
                        "text": entries[i].text}) + "\n" for i in range(s, e)))
    edited = tmp_path / "edited.jsonl"
    lines = manifest.read_text(encoding="utf-8").splitlines()
    obj = json.loads(lines[4])
    obj["text"] = "a corrected reference"
    lines[4] = json.dumps(obj)
    edited.write_text("\n".join(lines) + "\n", encoding="utf-8")
    new_entries = read_manifest(edited)
    new_cfg = dist._config(edited.resolve(), len(new_entries), "demo-rnnt", "greedy", {}, BATCH)
    with pytest.raises(DecodingInputError, match="manifest_sha256"):  # another manifest file: refused
        dist._prepare(out, new_cfg, resume=True, entries=new_entries)
    manifest_copy = out / "m.jsonl"  # the same file, edited in place: accepted
    manifest_copy.write_text(manifest.read_text(encoding="utf-8"), encoding="utf-8")
    cfg_copy = dist._config(manifest_copy.resolve(), len(entries), "demo-rnnt", "greedy", {}, BATCH)
    (out / "run.json").write_text(json.dumps(cfg_copy), encoding="utf-8")
    manifest_copy.write_text(edited.read_text(encoding="utf-8"), encoding="utf-8")
    new_cfg = dist._config(manifest_copy.resolve(), len(new_entries), "demo-rnnt", "greedy", {}, BATCH)
    with pytest.raises(DecodingInputError, match="manifest_sha256"):  # without the entries: refused
        dist._prepare(out, new_cfg, resume=True)
    dist._prepare(out, new_cfg, resume=True, entries=new_entries)
    assert sorted(p.name for p in parts.glob("part-*")) == [dist._part_name(0, 3), dist._part_name(6, 8)]
    assert json.loads((out / "run.json").read_text())["manifest_sha256"] == new_cfg["manifest_sha256"]
    dist._prepare(out, new_cfg, resume=True, entries=new_entries)  # now it is the run's manifest
    # a shorter manifest: the last shard changed its bounds
    manifest_copy.write_text("\n".join(edited.read_text(encoding="utf-8").splitlines()[:7]) + "\n", encoding="utf-8")
    short = read_manifest(manifest_copy)
    dist._prepare(out, dist._config(manifest_copy.resolve(), 7, "demo-rnnt", "greedy", {}, BATCH), resume=True,
                  entries=short)
    assert sorted(p.name for p in parts.glob("part-*")) == [dist._part_name(0, 3)]


def test_ray_unreadable_file_fails_only_its_utterance_then_rerun_completes(ray_session, tmp_path) -> None:
    manifest, bad = _bad_audio_manifest(tmp_path)
    out = tmp_path / "out"
    run = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=2, num_actors=1)  # shards 0-1 and 2
    assert run.failed == [1] and run.decoded == [0, 1, 2]
    recs = _read_jsonl(run.output)
    assert "m.jsonl:2" in recs[1]["error"] and recs[1]["pred_text"] is None
    assert all("error" not in recs[i] for i in (0, 2))
    assert _same_records(recs, dist.transcribe_local(manifest, model="demo-rnnt", batch_size=2))
    # fix the file, rerun the same command: only the failed utterance's shard is decoded again
    bad.write_bytes((ROOT / "data/real/cards-002.wav").read_bytes())
    run = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=2, num_actors=1)
    assert run.failed == [] and run.decoded == [0, 1] and run.skipped == 1
    assert _same_records(_read_jsonl(run.output), dist.transcribe_local(manifest, model="demo-rnnt", batch_size=2))
    # or fix the manifest line instead: the edited manifest is accepted
    bad.write_bytes(b"broken again")
    dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=2, num_actors=1, resume=False)
    lines = manifest.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({"audio_filepath": str(ROOT / "data/real/cards-004.wav"), "duration": 1.0, "text": "b"})
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = dist.transcribe_dataset(manifest, out, model="demo-rnnt", batch_size=2, num_actors=1)
    assert run.failed == [] and run.decoded == [0, 1] and run.skipped == 1
    assert _same_records(_read_jsonl(run.output), dist.transcribe_local(manifest, model="demo-rnnt", batch_size=2))


def test_ray_cli_reports_failed_utterances(ray_session, tmp_path, capsys) -> None:
    from asrdecode.cli import main

    manifest, _ = _bad_audio_manifest(tmp_path)
    tty = _TTY()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stderr", tty)
        assert main(["transcribe-dataset", str(manifest), str(tmp_path / "out"), "--model", "demo-rnnt",
                     "--batch-size", "3", "--actors", "1", "--quiet"]) == 1
    cap = capsys.readouterr()
    assert "failed            1" in cap.out
    lines = tty.getvalue().splitlines()  # --quiet: no bar, but the failure still prints
    assert len(lines) == 1 and "1 utterances failed" in lines[0]


def test_ray_ctrl_c_exits_cleanly_then_resumes(ray_session, manifest, local_rnnt, tmp_path) -> None:
    out = tmp_path / "out"
    script = (
        "import functools, sys, ray\n"
        "from asrdecode import distributed as dist\n"
        "from asrdecode.cli import main\n"
        f"ray.init(address={ray_session.get_runtime_context().gcs_address!r}, log_to_driver=False)\n"
        "dist.transcribe_dataset = functools.partial(dist.transcribe_dataset, _faults={'sleep_after_commit': 300})\n"
        f"sys.exit(main(['transcribe-dataset', {str(manifest)!r}, {str(out)!r}, '--model', 'demo-rnnt',\n"
        f"'--batch-size', '{BATCH}',\n"
        "                '--actors', '1', '--gpus-per-actor', '0']))\n"
    )
    proc = _driver_after_first_commit(script, out)
    try:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()
    assert code == 2, err[-3000:]
    assert "interrupted" in err and "rerun" in err and "Traceback" not in err, err[-3000:]
    from asrdecode.cli import main

    assert main(["transcribe-dataset", str(manifest), str(out), "--model", "demo-rnnt", "--batch-size", str(BATCH),
                 "--actors", "1"]) == 0
    assert _same_records(_read_jsonl(out / dist.RESULT_FILE), local_rnnt)


def test_ray_cli_transcribe_dataset_then_rerun_skips_everything(ray_session, manifest, local_rnnt, tmp_path,
                                                               capsys) -> None:
    from asrdecode.cli import main

    out = tmp_path / "cli"
    args = ["transcribe-dataset", str(manifest), str(out), "--model", "demo-rnnt", "--batch-size", str(BATCH),
            "--actors", "1"]
    tty = _TTY()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stderr", tty)
        assert main(args) == 0
    assert "shards" in tty.getvalue() and "3/3" in tty.getvalue()  # the bar of shards, on a terminal
    first = capsys.readouterr().out
    assert "decoded           8" in first and "skipped (resumed) 0" in first
    assert first.splitlines()[0] == "model demo-rnnt, decoder greedy (defaults)"
    vals = {ln[:18].strip(): ln[18:].split()[0] for ln in first.splitlines()[1:]}
    refs, hyps = [r["text"] for r in local_rnnt], [r["pred_text"] for r in local_rnnt]
    assert float(vals["WER"]) == pytest.approx(100 * wer(refs, hyps), abs=0.01)
    assert float(vals["CER"]) == pytest.approx(100 * cer(refs, hyps), abs=0.01)
    cfg = json.loads((out / "run.json").read_text())
    assert cfg["resolved_decoder"] == "greedy" and cfg["resolved_options"] == {}
    assert _same_records(_read_jsonl(out / dist.RESULT_FILE), local_rnnt)
    assert main(args) == 0
    second = capsys.readouterr().out
    assert "decoded           0" in second and "skipped (resumed) 8" in second
    assert _same_records(_read_jsonl(out / dist.RESULT_FILE), local_rnnt)


def test_ray_cli_transcribe_dataset_of_a_bundle_that_is_not_bundled(ray_session, manifest, tmp_path, capsys) -> None:
    # a ModelBundle test double (tests/bundle_double.py), loaded by name in every actor
    from asrdecode.cli import main

    spec = "bundle_double:rnnt_bundle"
    out = tmp_path / "double"
    assert main(["transcribe-dataset", str(manifest), str(out), "--model", spec, "--batch-size", str(BATCH),
                 "--actors", "1"]) == 0
    assert "decoded           8" in capsys.readouterr().out
    assert _same_records(_read_jsonl(out / dist.RESULT_FILE),
                         dist.transcribe_local(manifest, model=spec, batch_size=BATCH))


@pytest.mark.slow  # ~10 s each; the same load_bundle path runs in-process in test_onnx_bundle / test_hf_bundle
@pytest.mark.parametrize("kind", ["onnx", "hf"])
def test_ray_cli_transcribe_dataset_of_a_model_directory(ray_session, manifest, tmp_path, capsys, kind) -> None:
    # a model directory (ONNX transducer / Hugging Face CTC, tests/onramp_models.py) in every actor
    from asrdecode.cli import main
    from onramp_models import cached_hf_ctc, cached_onnx

    pytest.importorskip("onnxruntime" if kind == "onnx" else "transformers")
    spec = str(cached_onnx("demo-rnnt") if kind == "onnx" else cached_hf_ctc())
    out = tmp_path / kind
    assert main(["transcribe-dataset", str(manifest), str(out), "--model", spec, "--batch-size", str(BATCH),
                 "--actors", "1"]) == 0
    assert "decoded           8" in capsys.readouterr().out
    assert _same_records(_read_jsonl(out / dist.RESULT_FILE),
                         dist.transcribe_local(manifest, model=spec, batch_size=BATCH))


def test_cli_run_keeps_rays_logging_out_of_the_way(manifest, tmp_path) -> None:
    # a driver that starts its own Ray, as a user's `asrdecode transcribe-dataset` does: without
    # --verbose, stderr holds a few lines at most (Ray printed ~15-40 INFO lines before)
    pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(manifest.read_text(encoding="utf-8").splitlines()[:2]) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "asrdecode.cli", "transcribe-dataset", str(small),
                           str(tmp_path / "out"), "--model", "demo-ctc", "--batch-size", "1", "--actors", "1",
                           "--cpus-per-actor", "0.5"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) < 5, proc.stderr
    assert not any(" INFO " in ln for ln in lines), proc.stderr
    assert "decoded           2" in proc.stdout and "WER" in proc.stdout
