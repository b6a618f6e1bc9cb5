#!/usr/bin/env python3
"""Recipe step 2: synthesise speech corpora with offline TTS engines (espeak-ng, flite).

* ``train``: sentences from ``work/text/train.txt`` spoken by the TRAIN voices.
* ``test``: sentences from ``work/text/heldout.txt`` spoken by the TEST voices only (held-out
  sentences AND held-out voices).

Every utterance gets a random speaking rate / pitch (espeak-ng) or duration stretch (flite),
a random gain, light white noise (SNR 15..40 dB) and, with probability 0.3, a short synthetic
reverb (exponentially decaying noise impulse response, RT60 0.1..0.4 s). Output is 16 kHz mono
16-bit wav plus a NeMo-style JSON-lines manifest (``audio_filepath``, ``duration``, ``text``,
``voice``) with paths relative to the manifest.

Usage:
    python3 recipes/synthesize.py --split train --num 3000 --out work/synth/train
    python3 recipes/synthesize.py --split test --num 300 --out work/synth/test
Run time: about 0.05 s per utterance per core (3,000 utterances: ~2-3 minutes on 2 cores).
Needs: apt-get install espeak-ng flite; pip install numpy scipy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import wave
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy.signal import fftconvolve, resample_poly

SR = 16000

# (engine, voice) pairs. TEST voices never appear in training.
TRAIN_VOICES = [
    ("espeak", "en-us+m1"),
    ("espeak", "en-us+f2"),
    ("espeak", "en-gb+m3"),
    ("espeak", "en-gb-x-rp+f1"),
    ("espeak", "en-029+m2"),
    ("espeak", "en-gb-scotland+f3"),
    ("espeak", "en-gb-x-gbclan+m4"),
    ("espeak", "en-us+f5"),
    ("flite", "kal16"),
    ("flite", "slt"),
    ("flite", "rms"),
    ("flite", "kal"),
]
# The "wide" training set (``--voices wide``): every espeak-ng English accent except the two test
# accents, crossed with espeak-ng voice variants except the two test variants (f4, m7), plus
# the four training flite voices with a random f0 target. A voice is drawn per utterance.
WIDE_ESPEAK_ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-029", "en-gb-scotland", "en-gb-x-gbclan"]
WIDE_ESPEAK_VARIANTS = [
    "m1", "m2", "m3", "m4", "m5", "m6", "m8", "f1", "f2", "f3", "f5", "Alex", "Andy", "Annie", "adam",
    "aunty", "benjamin", "boris", "caleb", "david", "ed", "edward", "iven", "john", "linda", "max",
    "michel", "norbert", "paul", "quincy", "rob", "robert", "steph", "travis", "zac", "klatt", "klatt2",
    "klatt3", "klatt4", "croak", "grandpa", "grandma", "shelby", "victor",
]
WIDE_FLITE = ["kal16", "slt", "rms", "kal"]
WIDE_FLITE_SHARE = 0.35

TEST_VOICES = [
    ("espeak", "en-us-nyc+f4"),
    ("espeak", "en-gb-x-gbcwmd+m7"),
    ("flite", "awb"),
]


def read_wav(path: str) -> tuple[np.ndarray, int]:
    with wave.open(path, "rb") as f:
        sr = f.getframerate()
        raw = f.readframes(f.getnframes())
        ch = f.getnchannels()
    x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    return x, sr


def write_wav(path: Path, x: np.ndarray) -> None:
    pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SR)
        f.writeframes(pcm.tobytes())


def tts(engine: str, voice: str, text: str, rng: random.Random, tmp: str, wide: bool = False) -> np.ndarray:
    """Render ``text`` with one voice -> 16 kHz float waveform."""
    out = os.path.join(tmp, "tts.wav")
    if engine == "espeak":
        cmd = ["espeak-ng", "-v", voice, "-s", str(rng.randint(135, 190)), "-p", str(rng.randint(30, 70)),
               "-w", out, text]
    else:
        stretch = rng.uniform(0.85, 1.15)
        cmd = ["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.3f}", "-t", text, "-o", out]
        if wide:
            cmd[3:3] = ["--setf", f"int_f0_target_mean={rng.randint(80, 230)}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    x, sr = read_wav(out)
    if sr != SR:
        g = np.gcd(sr, SR)
        x = resample_poly(x, SR // g, sr // g).astype(np.float32)
    return x


def random_eq(x: np.ndarray, rng: random.Random) -> np.ndarray:
    """A random spectral tilt plus one random peak/notch (a few dB), to vary the channel."""
    spec = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1.0 / SR)
    octaves = np.log2(np.maximum(f, 50.0) / 1000.0)
    gain_db = rng.uniform(-3.0, 3.0) * octaves
    centre, width, peak = rng.uniform(300, 5000), rng.uniform(0.3, 1.5), rng.uniform(-8.0, 8.0)
    gain_db += peak * np.exp(-0.5 * (np.log2(np.maximum(f, 1.0) / centre) / width) ** 2)
    return np.fft.irfft(spec * 10 ** (gain_db / 20), n=len(x)).astype(np.float32)


def augment(x: np.ndarray, rng: random.Random, wide: bool = False) -> np.ndarray:
    nrng = np.random.default_rng(rng.randrange(2**31))
    if wide:
        x = random_eq(x, rng)
    # trim long silences a little and add random leading/trailing pause
    x = np.concatenate([np.zeros(int(SR * rng.uniform(0.05, 0.3)), np.float32), x,
                        np.zeros(int(SR * rng.uniform(0.05, 0.3)), np.float32)])
    if rng.random() < 0.3:
        rt60 = rng.uniform(0.1, 0.4)
        n = int(SR * rt60)
        t = np.arange(n) / SR
        ir = nrng.standard_normal(n).astype(np.float32) * np.exp(-6.9 * t / rt60).astype(np.float32)
        ir[0] = 1.0 / rng.uniform(0.15, 0.5)
        ir /= np.sqrt((ir**2).sum())
        x = fftconvolve(x, ir)[: len(x)].astype(np.float32)
    peak = float(np.abs(x).max()) or 1.0
    x = x / peak * rng.uniform(0.2, 0.9)
    power = float((x**2).mean()) + 1e-12
    snr = rng.uniform(15.0, 40.0)
    x = x + nrng.standard_normal(len(x)).astype(np.float32) * np.sqrt(power / 10 ** (snr / 10))
    return np.clip(x, -1.0, 1.0)


def wide_voice(rng: random.Random) -> tuple[str, str]:
    """One voice of the wide training set (see ``WIDE_*``)."""
    if rng.random() < WIDE_FLITE_SHARE:
        return "flite", rng.choice(WIDE_FLITE)
    return "espeak", f"{rng.choice(WIDE_ESPEAK_ACCENTS)}+{rng.choice(WIDE_ESPEAK_VARIANTS)}"


def _work(job: tuple[int, str, str, str, str, int, bool]) -> dict:
    idx, engine, voice, text, out_dir, seed, wide = job
    rng = random.Random(seed)
    if wide:
        engine, voice = wide_voice(rng)
    with tempfile.TemporaryDirectory() as tmp:
        x = augment(tts(engine, voice, text, rng, tmp, wide), rng, wide)
    name = f"{idx:06d}.wav"
    write_wav(Path(out_dir) / name, x)
    return {"audio_filepath": name, "duration": round(len(x) / SR, 3), "text": text, "voice": f"{engine}:{voice}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=["train", "test"], required=True)
    ap.add_argument("--num", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--text-dir", default="work/text")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-words", type=int, default=14)
    ap.add_argument("--voices", choices=["base", "wide"], default="base",
                    help="train split: the 12 fixed voices in turn (base), or a random voice per utterance "
                         "from many espeak-ng accent x variant pairs and flite with random f0, plus random EQ (wide)")
    args = ap.parse_args()
    t0 = time.time()
    src = Path(args.text_dir) / ("train.txt" if args.split == "train" else "heldout.txt")
    sentences = [s for s in src.read_text().splitlines() if s and len(s.split()) <= args.max_words]
    rng = random.Random(args.seed + (0 if args.split == "train" else 1))
    chosen = rng.sample(sentences, min(args.num, len(sentences)))
    voices = TRAIN_VOICES if args.split == "train" else TEST_VOICES
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wide = args.split == "train" and args.voices == "wide"
    jobs = [(i, *voices[i % len(voices)], s, str(out), rng.randrange(2**31), wide) for i, s in enumerate(chosen)]
    with Pool(args.jobs) as pool:
        rows = pool.map(_work, jobs, chunksize=16)
    with open(out / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    hours = sum(r["duration"] for r in rows) / 3600
    print(f"{args.split}: {len(rows)} utterances, {hours:.2f} h audio, {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
