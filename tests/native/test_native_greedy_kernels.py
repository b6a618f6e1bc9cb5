"""The C++ greedy's dense kernels (native/dense.cpp: tiled AVX2 + FMA product, vectorised tanh / sigmoid /
exp, argmax, log-sum-exp) and its frame blocking (transducer_greedy_lstm.cpp: the joint of several
frames per product while the decoder output is unchanged) decide exactly as the frame-by-frame tensor
engine: same tokens, frames and durations on random models whose widths are and are not multiples of 8,
mostly-blank and mostly-label models, at batch sizes 1, 3 and 8 (a row's result never depends on the
batch: batched and one-utterance calls give identical hypotheses, scores included), tails shorter than
a block, empty utterances; the same with every kernel path (ASRDECODE_NATIVE_KERNELS=portable / avx2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import suite_paths
import torch

from asrdecode.native import available
from asrdecode.transducer import LSTMTransducer, greedy

pytestmark = pytest.mark.skipif(not available(), reason="no C++ compiler for the native engine")

from asrdecode.native.transducer_greedy_lstm import (StatelessJointWeights, greedy_lstm,  # noqa: E402
                                                      greedy_stateless, weights_from_lstm_transducer)

LENGTHS = [0, 1, 2, 37, 5, 64, 13, 50]  # 8 utterances: empty, shorter than any block, long


def _same(got, want, score_abs=1e-3) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.tokens, g.timestamps, g.durations) == (w.tokens, w.timestamps, w.durations)
        assert g.score == pytest.approx(w.score, abs=score_abs)


def _lstm_model(seed: int, enc: int, pred: int, joint: int, vocab: int, blank_shift: float, tdt: bool) -> LSTMTransducer:
    torch.manual_seed(seed)
    blank = seed % vocab
    t = LSTMTransducer(vocab, enc, pred, joint, blank, durations=[0, 1, 2, 4] if tdt else None,
                       pred_layers=1 + seed % 2).eval()
    with torch.no_grad():
        t.joint_out.weight.mul_(3.0)
        t.joint_out.bias[blank] += blank_shift
    return t


def _batches(fn, enc: torch.Tensor, lengths: list[int], size: int) -> list:
    """``fn`` over the utterances ``size`` at a time (each batch cut to its longest utterance)."""
    out = []
    for i in range(0, len(lengths), size):
        lens = lengths[i:i + size]
        out += fn(enc[i:i + size, :max(max(lens), 1)], lens)
    return out


# (seed, encoder, LSTM, joint widths, vocab, blank logit shift, TDT, regime): widths multiples of 8 (full
# tiles) and not (every tail); mostly blank (long blocks: fewer labels than half the frames) or mostly
# labels (blocks cut at once: more labels than frames); RNN-T and TDT (blank durations skip rows of a block)
CASES = [(0, 16, 32, 64, 96, 4.5, False, "blank"), (1, 13, 20, 37, 29, 4.0, False, "blank"),
         (2, 13, 20, 37, 29, -3.0, False, "labels"), (3, 16, 24, 40, 50, 3.0, True, "mixed"),
         (4, 7, 9, 11, 5, 3.0, True, "blank"), (5, 24, 16, 72, 130, -1.0, False, "labels")]


def _regime_holds(regime: str, labels: int, frames: int) -> bool:
    return 0 < labels and (labels < frames / 2 if regime == "blank" else labels > frames if regime == "labels" else True)


@pytest.mark.parametrize("case", CASES)
def test_lstm_kernels_and_blocks_equal_the_tensor_engine_at_any_batch(case) -> None:
    seed, d, p, h, v, shift, tdt, regime = case
    t = _lstm_model(seed, d, p, h, v, shift, tdt)
    w = weights_from_lstm_transducer(t)
    enc = torch.randn(len(LENGTHS), max(LENGTHS), d, generator=torch.Generator().manual_seed(seed)) * 2
    for ms in (1, 4):
        with torch.no_grad():
            want = greedy(t, enc, LENGTHS, max_symbols=ms, engine="torch")
        per_size = {n: _batches(lambda e, lens, ms=ms: greedy_lstm(w, e, lens, max_symbols=ms), enc, LENGTHS, n)
                    for n in (1, 3, 8)}
        _same(per_size[8], want)
        for n in (1, 3):  # bit for bit the same hypotheses whatever the batch
            assert per_size[n] == per_size[8]
        assert per_size[8][0].tokens == []
    assert _regime_holds(regime, sum(len(x.tokens) for x in per_size[8]), sum(LENGTHS))


def _stateless_weights(seed: int, vocab: int, e: int, groups: int, c: int, h: int, blank_shift: float
                       ) -> StatelessJointWeights:
    g = np.random.default_rng(seed)
    bout = g.normal(size=vocab)
    bout[0] += blank_shift
    return StatelessJointWeights(g.normal(size=(vocab, e)), g.normal(size=(e, e // groups, c)) / np.sqrt(e // groups * c),
                                 g.normal(size=e) * 0.1 if seed % 2 else None, groups,
                                 g.normal(size=(h, e)) / np.sqrt(e), g.normal(size=h) * 0.1,
                                 g.normal(size=(vocab, h)) * 3 / np.sqrt(h), bout, 0, vocab)


def _stateless_reference(w: StatelessJointWeights, enc: np.ndarray, lengths: list[int], max_symbols: int,
                         unk: int | None) -> list[tuple[list[int], list[int], float]]:
    """Frame-by-frame greedy in numpy (float32 joint, blank start context)."""
    out = []
    for b, n in enumerate(lengths):
        ctx, t, sym, toks, frames, score = [w.blank_id] * w.context_size, 0, 0, [], [], 0.0
        g = w.decoder_out(np.array([ctx]))[0].astype(np.float32)
        while t < n:
            lg = (np.tanh(enc[b, t] + g) @ w.wout.T + w.bout).astype(np.float64)
            if unk is not None:
                lg[w.blank_id], lg[unk] = max(lg[unk], lg[w.blank_id]), -np.inf
            y = int(np.argmax(lg))
            score += lg[y] - (lg.max() + np.log(np.exp(lg - lg.max()).sum()))
            if y == w.blank_id:
                t, sym = t + 1, 0
                continue
            toks.append(y)
            frames.append(t)
            sym += 1
            if sym >= max_symbols:
                t, sym = t + 1, 0
            ctx = ctx[1:] + [y]
            g = w.decoder_out(np.array([ctx]))[0].astype(np.float32)
        out.append((toks, frames, score))
    return out


@pytest.mark.parametrize("seed,vocab,e,groups,c,h,shift,regime", [(0, 60, 32, 8, 2, 48, 8.0, "blank"),
                                                                  (1, 37, 20, 5, 3, 29, 6.0, "mixed"),
                                                                  (2, 45, 16, 4, 2, 13, -2.0, "labels")])
def test_stateless_kernels_and_blocks_equal_a_numpy_greedy_at_any_batch(seed, vocab, e, groups, c, h, shift,
                                                                         regime) -> None:
    w = _stateless_weights(seed, vocab, e, groups, c, h, shift)
    enc = np.random.default_rng(seed + 10).normal(size=(len(LENGTHS), max(LENGTHS), h)).astype(np.float32)
    for ms, unk in ((1, 2), (3, None)):
        want = _stateless_reference(w, enc, LENGTHS, ms, unk)
        per_size = {n: _batches(lambda x, lens, ms=ms, unk=unk: greedy_stateless(w, x, lens, max_symbols=ms,
                                                                                  unk_id=unk),
                                torch.from_numpy(enc), LENGTHS, n) for n in (1, 3, 8)}
        for got, (toks, frames, score) in zip(per_size[8], want):
            assert (got.tokens, got.timestamps) == (toks, frames)
            assert got.score == pytest.approx(score, abs=1e-3)
        for n in (1, 3):
            assert per_size[n] == per_size[8]
    assert _regime_holds(regime, sum(len(x.tokens) for x in per_size[8]), sum(LENGTHS))


_DECODE_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_native_greedy_kernels import CASES, LENGTHS, _lstm_model
from asrdecode.native.transducer_greedy_lstm import greedy_lstm, weights_from_lstm_transducer
out = []
for seed, d, p, h, v, shift, tdt, _ in CASES:
    w = weights_from_lstm_transducer(_lstm_model(seed, d, p, h, v, shift, tdt))
    enc = torch.randn(len(LENGTHS), max(LENGTHS), d, generator=torch.Generator().manual_seed(seed)) * 2
    out.append([[x.tokens, x.timestamps, x.durations, x.score] for x in greedy_lstm(w, enc, LENGTHS, max_symbols=4)])
print(json.dumps(out))
"""


@pytest.mark.parametrize("kernels", ["portable", "avx2"])
def test_every_kernel_path_decides_as_the_default_one(kernels) -> None:
    """ASRDECODE_NATIVE_KERNELS caps the kernels (portable; AVX2 + FMA without the AVX-512 product): the
    same decisions as the best path this CPU has (scores to float rounding)."""
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, ASRDECODE_NATIVE_KERNELS=kernels, PYTHONPATH=suite_paths.pythonpath())
    proc = subprocess.run([sys.executable, "-c", _DECODE_SCRIPT.format(tests=tests)], env=env, capture_output=True,
                          text=True, check=True)
    capped = json.loads(proc.stdout.strip().splitlines()[-1])
    for (seed, d, p, h, v, shift, tdt, _), got in zip(CASES, capped):
        w = weights_from_lstm_transducer(_lstm_model(seed, d, p, h, v, shift, tdt))
        enc = torch.randn(len(LENGTHS), max(LENGTHS), d, generator=torch.Generator().manual_seed(seed)) * 2
        for (toks, frames, durs, score), x in zip(got, greedy_lstm(w, enc, LENGTHS, max_symbols=4)):
            assert (toks, frames, durs) == (x.tokens, x.timestamps, x.durations)
            assert score == pytest.approx(x.score, abs=1e-3)
