"""Fuzzing harness for the file parsers (no tests here): the ARPA reader, the WAV reader and the
manifest reader, fed random bytes and mutated valid files (hypothesis strategies).

The contract: every input either parses or raises a *named* error (a ``ValueError`` subclass of
:class:`asrdecode.errors.AsrDecodeError`), never another exception, never a hang, never unbounded
memory. ``tests/app/test_fuzz_parsers.py`` runs a few hundred inputs per parser in CI;
``benchmarks/fuzz_parsers.py`` runs >= 10,000 per parser and records count, time and peak memory.
"""

from __future__ import annotations

import gzip
import io
import json
import resource
import tempfile
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from asrdecode.audio import read_audio
from asrdecode.errors import AsrDecodeError
from asrdecode.evaluate import read_manifest
from asrdecode.lm import read_arpa

ARPA = "\n".join([
    "\\data\\", "ngram 1=5", "ngram 2=3", "ngram 3=1", "", "\\1-grams:", "-1.0\t<unk>", "-99\t<s>\t-0.5",
    "-0.7\t</s>", "-0.6\tdog\t-0.3", "-0.8\tcat\t-0.2", "", "\\2-grams:", "-0.3\t<s> dog\t-0.1",
    "-0.4\tdog cat\t-0.2", "-0.2\tcat </s>", "", "\\3-grams:", "-0.1\t<s> dog cat", "", "\\end\\", "",
]).encode()


def _wav(sr: int, width: int, channels: int, n: int) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(sr + width + channels)
    with wave.open(buf, "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(sr)
        f.writeframes(rng.integers(0, 256, n * width * channels, dtype=np.uint8).tobytes())
    return buf.getvalue()


WAVS = [_wav(16000, 2, 1, 400), _wav(8000, 1, 2, 300), _wav(22050, 3, 1, 200), _wav(48000, 4, 2, 100)]
AUDIO_NAME = "clip.wav"
MANIFEST = "".join(json.dumps(d) + "\n" for d in [
    {"audio_filepath": AUDIO_NAME, "duration": 0.025, "text": "a dog"},
    {"audio_filepath": AUDIO_NAME, "duration": 1, "text": "", "speaker": 3},
]).encode()

# ----------------------------------------------------------------------------------- strategies
_OPS = st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate"])


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    """A valid seed file with 1..8 random edits (byte flips and sets, insertions, deletions, a cut,
    a duplicated span)."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(_OPS)
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0, 0xFF, 0x0A, 0x20, 0x5C, 0x2D, 0x30, 0x39, 0x22, 0x7B, 0x80]))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif op == "truncate":
            del data[pos:]
        elif op == "duplicate":
            span = bytes(data[pos : pos + draw(st.integers(1, 64))])
            data[pos:pos] = span * draw(st.integers(1, 4))
    return bytes(data)


def arpa_inputs() -> st.SearchStrategy[tuple[str, bytes]]:
    """(file name, bytes): random bytes, mutated ARPA text, mutated and truncated gzip of it."""
    gz = gzip.compress(ARPA)
    return st.one_of(
        st.tuples(st.sampled_from(["lm.arpa", "lm.arpa.gz"]), st.binary(max_size=512)),
        st.tuples(st.just("lm.arpa"), mutated([ARPA])),
        st.tuples(st.just("lm.arpa.gz"), mutated([gz])),
        st.tuples(st.just("lm.arpa.gz"), mutated([ARPA]).map(gzip.compress)),
    )


def wav_inputs() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=512), mutated(WAVS), st.sampled_from(WAVS).map(lambda b: b"RIFF" + b[4:44]))


def manifest_inputs() -> st.SearchStrategy[bytes]:
    text = st.lists(st.one_of(
        st.text(max_size=40),
        st.builds(lambda a, d, t: json.dumps({"audio_filepath": a, "duration": d, "text": t}),
                  st.sampled_from([AUDIO_NAME, "", "missing.wav", "/", "."]),
                  st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=3)),
                  st.one_of(st.text(max_size=10), st.integers(), st.none())),
    ), max_size=5).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))
    return st.one_of(st.binary(max_size=512), mutated([MANIFEST]), text)


# --------------------------------------------------------------------------------------- running
@dataclass
class FuzzStats:
    """What one parser did with its inputs."""

    inputs: int = 0
    parsed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    max_growth_mb: float = 0.0  # largest rise of the process's peak RSS during one input

    def record(self, outcome: str, seconds: float, growth_mb: float = 0.0) -> None:
        self.inputs += 1
        self.max_growth_mb = max(self.max_growth_mb, growth_mb)
        if outcome == "ok":
            self.parsed += 1
        else:
            self.errors[outcome] = self.errors.get(outcome, 0) + 1
        self.slowest_s = max(self.slowest_s, seconds)


class Workdir:
    """A temporary folder holding the clip the manifests refer to."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="asrdecode-fuzz-")
        self.path = Path(self._tmp.name)
        (self.path / AUDIO_NAME).write_bytes(WAVS[0])

    def close(self) -> None:
        self._tmp.cleanup()


def run_one(parse: Callable[[Path], object], path: Path, data: bytes, stats: FuzzStats | None = None) -> str:
    """Write ``data`` to ``path`` and parse it: "ok", or the name of the named error raised.

    Any other exception propagates (the fuzz test fails on it).
    """
    path.write_bytes(data)
    peak0 = peak_rss_mb()
    t0 = time.perf_counter()
    try:
        parse(path)
        outcome = "ok"
    except AsrDecodeError as err:
        if not isinstance(err, ValueError):
            raise
        outcome = type(err).__name__
    if stats is not None:
        stats.record(outcome, time.perf_counter() - t0, peak_rss_mb() - peak0)
    return outcome


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


PARSERS: dict[str, Callable[[Path], object]] = {
    "arpa": read_arpa,
    "wav": read_audio,
    "manifest": read_manifest,
}
