"""Issue 28: sherpa-onnx's words on ``asrdecode export-onnx`` output against asrdecode's.

For demo-rnnt and demo-tdt, exported with and without the front-end adapter (``export_onnx(..., adapter=)``):
sherpa-onnx (``OfflineRecognizer.from_transducer(..., model_type="nemo_transducer")``, greedy, 1 thread)
decodes the 60 clips of data/real + data/synth_test; ``asrdecode transcribe`` decodes them with the bundled
model and with the exported directory. Prints the WER of sherpa-onnx's words against the bundled model's
and how many of the 60 transcripts are identical; then the same for our own front end with the frames moved
by a few samples (sherpa-onnx's sit 120 samples before ours), for scale.

Usage: OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/sherpa_export.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from asrdecode import cli  # noqa: E402
from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.evaluate import wer  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.models.onnx_export import export_onnx  # noqa: E402

CLIPS = sorted(ROOT.glob("data/real/*.wav")) + sorted(ROOT.glob("data/synth_test/*.wav"))


def references() -> list[str]:
    """The reference transcripts of CLIPS (the two manifests)."""
    texts = {}
    for d in ("data/real", "data/synth_test"):
        for line in (ROOT / d / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            texts[(ROOT / d / r["audio_filepath"]).resolve()] = r["text"]
    return [texts[c.resolve()] for c in CLIPS]


def transcribe(model: str) -> list[str]:
    """``asrdecode transcribe CLIPS --model MODEL --format json`` -> the texts."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["transcribe", *map(str, CLIPS), "--model", model, "--format", "json"]) == 0
    return [r["text"] for r in json.loads(out.getvalue())]


def sherpa_words(d: Path) -> list[str]:
    """sherpa-onnx's greedy words for CLIPS from the NeMo-layout directory ``d``."""
    import sherpa_onnx

    rec = sherpa_onnx.OfflineRecognizer.from_transducer(
        str(d / "encoder.onnx"), str(d / "decoder.onnx"), str(d / "joiner.onnx"), str(d / "tokens.txt"),
        num_threads=1, decoding_method="greedy_search", model_type="nemo_transducer")
    streams = []
    for c in CLIPS:
        s = rec.create_stream()
        s.accept_waveform(16000, read_audio(c).numpy())
        streams.append(s)
    rec.decode_streams(streams)
    return [s.result.text.strip() for s in streams]


def shifted_words(name: str, skip: int) -> list[str]:
    """The bundled model's greedy words with the first ``skip`` samples of every clip dropped (frames ``skip``
    samples later): how much a front end that is slightly off moves these models."""
    from asrdecode.pipeline import make_pipeline, resolve_options

    b = load_bundle(name)
    pipe = make_pipeline(b, resolve_options(b, {"decoder": "greedy"}))
    return [b.tokenizer.decode(pipe.decode(*pipe.encode([read_audio(c)[skip:]]))[0].tokens) for c in CLIPS]


def main() -> int:
    print("| model | export | sherpa-onnx vs asrdecode WER: all / real / synth | identical: all (60) / real (10) / "
          "synth (50) | asrdecode on the export = bundled | WER vs references: asrdecode / sherpa-onnx |")
    print("|---|---|---|---|---|---|")
    refs = references()
    n_real = len(list(ROOT.glob("data/real/*.wav")))
    for name in ("demo-rnnt", "demo-tdt"):
        ours = transcribe(name)
        for adapter in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                export_onnx(load_bundle(name), tmp, adapter=adapter)
                theirs = sherpa_words(Path(tmp))
                back = transcribe(tmp)
            parts = [(ours, theirs), (ours[:n_real], theirs[:n_real]), (ours[n_real:], theirs[n_real:])]
            errs = " / ".join(f"{wer(a, b):.4f}" for a, b in parts)
            same = " / ".join(str(sum(x == y for x, y in zip(a, b))) for a, b in parts)
            print(f"| {name} | {'adapter' if adapter else 'no adapter'} | {errs} | {same} | "
                  f"{sum(a == b for a, b in zip(ours, back))}/60 | {wer(refs, ours):.4f} / {wer(refs, theirs):.4f} |",
                  flush=True)
    print("\n| model | our front end, frames k samples later | WER vs unshifted | identical (of 60) |\n|---|---|---|---|")
    for name in ("demo-rnnt", "demo-tdt"):
        base = shifted_words(name, 0)
        for skip in (1, 10, 40):
            moved = shifted_words(name, skip)
            print(f"| {name} | {skip} | {wer(base, moved):.4f} | {sum(a == b for a, b in zip(base, moved))} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
