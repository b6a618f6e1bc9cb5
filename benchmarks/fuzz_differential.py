"""Differential fuzzing: the two engines against each other and against the oracle, on the inputs the test
suite's property tests do not draw (sharp joints and peaked emissions, float32, negative fusion weights).

Each case draws an entry point and its settings:
- ``transducer-beam``: ALSD++ / AES++ / WIND, engine ``native`` and ``torch`` against
  ``reference_beam_search`` / ``reference_wind_beam_search``; RNN-T or TDT (not WIND), LSTM prediction
  network, the joint's output scaled by 1-16 (a trained model's confident frames: ``p[blank]`` rounds to 1
  in float32 from about 17 nats), float64 or float32, fusion none / token LM / token LM plus a table
  bigram at a negative weight (an internal-LM subtraction) / a negative LM alone / per-utterance boosting,
  either blank scoring, either pruning, beta in -0.5..0.8, cap 1-4;
- ``transducer-greedy``: label-looping (also WIND, window 2-9) and frame-looping greedy, ``native`` and
  ``torch``, against ``reference_greedy``;
- ``ctc-beam``: the prefix beam search, ``native`` and ``torch`` against ``reference_beam_search``, peaked
  emissions (peak up to 40 nats), float32 / float64, a table bigram or an n-gram LM at weights -0.5..1,
  beta, token beam, blank collapse, beam threshold;
- ``streaming``: CTC beam or ALSD++ / AES++ / WIND beam on either engine, transducer greedy (the torch
  engine: the C++ greedy decodes whole utterances only), the same
  inputs in random chunks against the whole utterances (the decoders' ``init_state`` / ``advance`` /
  ``finalize``);
- ``wfst``: WFST token passing, native against torch (n-best; the tensor engine's fixed and dynamic 1-best
  loops too), on random small graphs, whole and in chunks;
- ``tlg``: TLG graphs built from random lexicons and bigram ARPAs (either topology), the WFST decoder at an
  unbounded beam on either engine against the exhaustive search;
- ``ctc-word-lm``: the CTC prefix beam search with a word-level LM (and a token LM, boosting), native
  against torch against the oracle;
- ``modified-beam``: sherpa-onnx's modified beam search, the C++ engine against the Python one;
- ``nemo-beam``: NeMo's beam search (sherpa-onnx's port), the C++ engine against the Python one, near-ties
  at a cut measured (``tests/near_ties.py``);
- ``masked``: one of the entry points above on inputs with masked classes (``-inf``, probability 0): CTC
  (prefix beam, streamed, word LM, WFST, TLG) with 20-70 % of the emissions' entries masked, each frame
  keeping one; transducer beam and greedy with that share of the labels (sometimes blank, a TDT duration)
  masked by a -inf joint bias;
- ``broken``: NaN or +inf in a transducer's joint bias or a fusion model's scores: every search on both
  engines (and the CTC oracle) raises its named error, or, where it never read the broken values (early
  pruning may not), returns what it returns with them -inf;
- ``graphs``: the GPU path on the CPU: one decoder object with ``acceleration="cuda_graphs"`` (emulated by
  ``accel.EmulatedGraphRunner``: padded to buckets, loops and "graphs" kept between calls) called on 3-4
  batches of changing shapes, each call against the native engine: CTC prefix beam, transducer beam and
  greedy, the WFST fixed loop (sometimes on masked inputs); ``--device cuda`` runs the decoders on a GPU
  with real CUDA graphs (``benchmarks/gpu_session.sh``'s ``fuzz`` stage).

Case ``N`` of an entry point draws its settings from its own stream, so a case number keeps its inputs
when entry points are added.

A case passes when every decoder returns and all agree (tokens, frames, durations; scores within 1e-4
absolute for float64, 1e-3 relative for float32 inputs); an error passes only where the oracle raises the
same class (the runaway search without a symbol cap). Anything else is printed with its case, a defect to
fix and keep as a test, or a near-tie that float32 rounding decides: on the sharpest joints two alignments
of one transcript can score equal to 1e-7, and which of them a merge keeps (the float32 engines agree, the
float64 oracle may keep the other) decides what the symbol cap still allows later. Cases are reproducible
from ``--seed`` and their number (``make fuzz-diff FUZZ_MINUTES=20``)::

    OMP_NUM_THREADS=1 PYTHONPATH=src:tests python benchmarks/fuzz_differential.py --minutes 20 [--seed 0]
    OMP_NUM_THREADS=1 PYTHONPATH=src:tests python benchmarks/fuzz_differential.py --case transducer-beam:123
    OMP_NUM_THREADS=1 PYTHONPATH=src:tests python benchmarks/fuzz_differential.py --only graphs --device cuda --minutes 2
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import importlib
import math
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import suite_paths  # noqa: E402  (tests/ and its subfolders)

suite_paths.add_to_sys_path()

from asrdecode import ctc  # noqa: E402
from asrdecode.lm import NGramLM  # noqa: E402
from asrdecode.lm.boosting import BoostingTree  # noqa: E402
from asrdecode.transducer import _checks  # noqa: E402
from asrdecode.transducer.beam import BeamSearchDecoder, beam_search  # noqa: E402
from asrdecode.transducer.greedy import GreedyDecoder, greedy  # noqa: E402
from asrdecode.transducer.reference import reference_greedy  # noqa: E402
from asrdecode.transducer.reference_beam import reference_beam_search  # noqa: E402
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search  # noqa: E402
from test_ctc_helpers import TableBigram, mask_classes, peaky_log_probs, random_lengths, random_token_arpa  # noqa: E402
from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model, tiny_lm  # noqa: E402


class Disagreement(AssertionError):
    """Two decoders of one case differ (the message says which and where)."""


def _keys(hyps: list) -> list:
    return [(h.tokens, h.timestamps, getattr(h, "durations", None), h.score) for h in hyps]


def _close(a: float, b: float, float32: bool) -> bool:
    if a == b:
        return True
    tol = 1e-3 * max(1.0, abs(b)) if float32 else 1e-4
    return abs(a - b) <= tol


def _same(got: list, want: list, float32: bool, what: str, ordered: bool = True) -> None:
    """Hypothesis lists equal: tokens, frames, durations exactly, scores within the tolerance."""
    g, w = _keys(got), _keys(want)
    if not ordered:
        g, w = sorted(g, key=lambda k: (-k[3], k[:3])), sorted(w, key=lambda k: (-k[3], k[:3]))
    if len(g) != len(w) or any(x[:3] != y[:3] or not _close(x[3], y[3], float32) for x, y in zip(g, w)):
        raise Disagreement(f"{what}:\n  got  {g}\n  want {w}")


def _later(seed: int, k: int = 0) -> random.Random:
    """A random stream of case ``seed`` apart from the case's own, for the draws added after an entry point
    was written (masked classes, the WFST 1-best loop): earlier case numbers keep their inputs."""
    return random.Random(f"later-{k}-{seed}")


class Resources:
    """What cases share: the tiny token LM of the transducer tests, a folder for the CTC LMs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.token_lm = tiny_lm(folder)
        self._ctc_lms: dict[tuple[int, int, int], NGramLM] = {}

    def ctc_lm(self, seed: int, vocab: int, blank: int) -> NGramLM:
        key = (seed % 7, vocab, blank)
        if key not in self._ctc_lms:
            path = self.folder / f"ctc_{key[0]}_{vocab}_{blank}.arpa"
            path.write_text(random_token_arpa(key[0], vocab, blank, order=1 + key[0] % 3))
            self._ctc_lms[key] = NGramLM.from_arpa(path, vocab_size=vocab, blank_id=blank)
        return self._ctc_lms[key]


def _sharp_model(seed: int, sharp: float, blank_bias: float, tdt: bool, float32: bool,
                 masked: float = 0.0) -> torch.nn.Module:
    """A random LSTM transducer, its joint's output scaled by ``sharp``; with ``masked`` > 0 about that share
    of its labels (sometimes blank too) and of its TDT durations get a -inf joint bias (probability 0
    everywhere), one label and one duration always kept."""
    m = random_model(seed, FUSION_V, FUSION_BLANK, [0, 1, 2] if tdt else None, blank_bias=blank_bias)
    with torch.no_grad():
        m.joint_out.weight.mul_(sharp)
        m.joint_out.bias.mul_(sharp)
        if masked:
            r = _later(seed, 2)
            labels = [v for v in range(FUSION_V) if v != FUSION_BLANK]
            off = [v for v in labels[1:] if r.random() < masked] + ([FUSION_BLANK] if r.random() < 0.15 else [])
            if tdt and r.random() < masked:
                off.append(FUSION_V + r.randrange(3))
            r.shuffle(labels)
            m.joint_out.bias[[v for v in off if v != labels[0]]] = float("-inf")
    return m.float() if float32 else m


def transducer_beam(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    method = r.choice(["alsd", "aes", "wind"])
    wind = method == "wind"
    tdt = not wind and r.random() < 0.3
    float32 = r.random() < 0.5
    sharp = r.choice([1.0, 4.0, 8.0, 16.0])
    batch, frames = r.randint(1, 3), r.randint(0, 12)
    cap = r.choice([1, 2, 3, 4])
    fusion_kind = r.choice(["none", "lm", "lm-ilm", "negative-lm", "boost"])
    weight = r.choice([0.3, 0.6, 1.0])
    fusion: list = {
        "none": [], "lm": [(res.token_lm, weight)], "negative-lm": [(res.token_lm, -weight)],
        "lm-ilm": [(res.token_lm, weight), (TableBigram(FUSION_V, FUSION_BLANK, seed=seed), -0.4)],
        "boost": [(BoostingTree.stack([BoostingTree.from_token_sequences(
            [[b % 4, 1], [3]], vocab_size=FUSION_V, blank_id=FUSION_BLANK, weight=1.2) for b in range(batch)]), 1.0)],
    }[fusion_kind]
    beam = r.randint(1, 5)
    kw: dict[str, Any] = dict(beam=beam, pruning=r.choice(["late", "early"]),
                              blank_scoring=r.choice(["lm_weighted", "none"]), max_symbols=cap,
                              beta=r.choice([0.0, 0.8, -0.5]), fusion=fusion)
    if wind:
        kw.update(window=r.randint(1, 8), expansion_gamma=r.choice([None, 0.5, 3.0]))
    m = _sharp_model(seed, sharp, r.choice([0.5, 1.0, 2.0]), tdt, float32, masked)
    enc = random_encoder(seed, batch, frames)
    enc = enc.float() if float32 else enc
    lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    label = (f"{method} {'tdt' if tdt else 'rnnt'} {'f32' if float32 else 'f64'} sharp={sharp} masked={masked} B={batch} "
             f"T={frames} fusion={fusion_kind}:{weight} {kw | {'fusion': None}}")
    native = beam_search(m, enc, lengths, nbest=beam, method=method, engine="native", **kw)
    tensor = beam_search(m, enc, lengths, nbest=beam, method=method, engine="torch", **kw)
    for b in range(batch):
        _same(native[b], tensor[b], float32, f"{label}: native vs torch, utterance {b}")
        if fusion_kind == "boost" and b > 0:
            continue  # the oracle takes one boosting tree for every utterance: utterance 0's is the stack's first
        n = int(lengths[b])
        one = [(BoostingTree.from_token_sequences([[b % 4, 1], [3]], vocab_size=FUSION_V, blank_id=FUSION_BLANK,
                                                  weight=1.2), 1.0)] if fusion_kind == "boost" else fusion
        okw = kw | {"fusion": one}
        ref = (reference_wind_beam_search(m, enc[b, :n], **okw) if wind
               else reference_beam_search(m, enc[b, :n], method=method, **okw))
        _same(native[b], ref[:beam], float32, f"{label}: native vs oracle, utterance {b}", ordered=False)
    return "transducer-beam"


def transducer_greedy(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    tdt = r.random() < 0.4
    float32 = r.random() < 0.5
    sharp = r.choice([1.0, 4.0, 8.0, 16.0])
    batch, frames = r.randint(1, 4), r.randint(0, 20)
    cap = r.choice([1, 2, 3, 5, 10])
    m = _sharp_model(seed, sharp, r.choice([0.5, 1.0, 2.0]), tdt, float32, masked)
    enc = random_encoder(seed, batch, frames)
    enc = enc.float() if float32 else enc
    lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    loop = r.choice(["labels", "labels", "frames"])
    window = r.randint(2, 9) if loop == "labels" and not tdt and r.random() < 0.5 else 1  # (WIND: RNN-T labels)
    opts: dict[str, Any] = dict(max_symbols=cap, loop=loop, window=window,
                                precompute_projections=r.random() < 0.8)
    label = (f"greedy {'tdt' if tdt else 'rnnt'} {'f32' if float32 else 'f64'} sharp={sharp} masked={masked} B={batch} "
             f"T={frames} {opts}")
    tensor = greedy(m, enc, lengths, engine="torch", **opts)
    native = greedy(m, enc, lengths, engine="native", **opts) if float32 else tensor  # (C++: float32)
    for b in range(batch):
        _same([native[b]], [tensor[b]], float32, f"{label}: native vs torch, utterance {b}")
        ref = reference_greedy(m, enc[b, : int(lengths[b])], cap)
        _same([tensor[b]], [ref], float32, f"{label}: torch vs oracle, utterance {b}")
    return "transducer-greedy"


def _ctc_three_ways(lp: torch.Tensor, lens: torch.Tensor, blank: int, kw: dict[str, Any], float32: bool,
                    label: str) -> None:
    """The CTC prefix beam search of ``lp [B, T, V]`` on the native engine equals the tensor engine's and the
    oracle's."""
    native = ctc.beam_search(lp, lens, blank, engine="native", **kw)
    tensor = ctc.beam_search(lp, lens, blank, engine="torch", **kw)
    ref = ctc.reference_beam_search(lp, lens, blank, **kw)
    for b in range(lp.shape[0]):
        _same(native[b], tensor[b], float32, f"{label}: native vs torch, utterance {b}")
        _same(native[b], ref[b], float32, f"{label}: native vs oracle, utterance {b}")


def ctc_beam(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    vocab = r.randint(3, 9)
    blank = seed % vocab
    batch, frames, beam = r.randint(1, 3), r.randint(0, 14), r.randint(1, 8)
    float32 = r.random() < 0.5
    peak = r.choice([4.0, 12.0, 25.0, 40.0])
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=peak,
                         dtype=torch.float32 if float32 else torch.float64)
    lp = mask_classes(lp, seed, masked) if masked else lp
    lens = random_lengths(seed, batch, frames)
    fusion_kind = r.choice(["none", "bigram", "lm", "negative-lm", "lm-ilm"])
    weight = r.choice([0.3, 0.7, 1.0])
    fusion: list = {
        "none": [], "bigram": [(TableBigram(vocab, blank, seed=seed), weight)],
        "lm": [(res.ctc_lm(seed, vocab, blank), weight)], "negative-lm": [(res.ctc_lm(seed, vocab, blank), -0.5)],
        "lm-ilm": [(res.ctc_lm(seed, vocab, blank), weight), (TableBigram(vocab, blank, seed=seed), -0.4)],
    }[fusion_kind]
    kw: dict[str, Any] = dict(beam=beam, fusion=fusion, beta=r.choice([0.0, 0.5, -0.5]), nbest=r.randint(1, beam),
                              token_beam=r.choice([None, None, 1, 2, 4]), blank_collapse=r.choice([None, "weak", 0.9]),
                              beam_threshold=r.choice([float("inf"), 20.0, 3.0]))
    label = (f"ctc V={vocab} blank={blank} {'f32' if float32 else 'f64'} peak={peak} masked={masked} B={batch} "
             f"T={frames} fusion={fusion_kind}:{weight} {kw | {'fusion': None}}")
    _ctc_three_ways(lp, lens, blank, kw, float32, label)
    return "ctc-beam"


def _bounds(r: random.Random, frames: int) -> list[int]:
    """Chunk edges ``0 = e0 < ... < en = frames`` (an empty chunk allowed as the first)."""
    cuts = sorted({r.randint(1, max(frames - 1, 1)) for _ in range(r.randint(0, 4))} - {frames}) if frames > 1 else []
    return [0, *cuts, frames]


def streaming(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    """A decoder's chunked search (random chunk edges, each utterance's last chunk marked final where the
    decoder takes the flag) equals its whole-utterance search: CTC beam, transducer greedy and beam, each
    on either engine."""
    kind = r.choice(["ctc-beam", "transducer-greedy", "transducer-beam"])
    kind = "ctc-beam" if masked else kind  # (masked classes: CTC emissions)
    engine = "torch" if kind == "transducer-greedy" else r.choice(["native", "torch"])  # (C++ greedy: whole only)
    float32 = r.random() < 0.5
    batch = r.randint(1, 3)
    if kind == "ctc-beam":
        vocab = r.randint(3, 8)
        blank = seed % vocab
        frames = r.randint(0, 30)
        x = peaky_log_probs(seed, batch, frames, vocab, blank, peak=r.choice([4.0, 12.0, 30.0]),
                            dtype=torch.float32 if float32 else torch.float64)
        x = mask_classes(x, seed, masked) if masked else x
        lengths = random_lengths(seed, batch, frames)
        fusion = r.choice([[], [(res.ctc_lm(seed, vocab, blank), r.choice([0.5, -0.4]))]])
        width = r.randint(1, 6)
        ctc_dec = ctc.CTCBeamDecoder(blank, beam=width, fusion=fusion, beta=r.choice([0.0, 0.5]),
                                     token_beam=r.choice([None, 2]), blank_collapse=r.choice([None, 0.9]),
                                     nbest=min(2, width), engine=engine)
        whole = ctc_dec.decode(x, lengths)
        ctc_state = ctc_dec.init_state(batch, vocab_size=vocab, dtype=x.dtype)
        edges = _bounds(r, frames)
        for a, b in zip(edges, edges[1:]):
            ctc_state = ctc_dec.advance(ctc_state, x[:, a:b], (lengths - a).clamp(min=0, max=b - a))
        streamed = ctc_dec.finalize(ctc_state)
    else:
        method = r.choice(["alsd", "aes", "wind"])  # (beam)
        tdt = (kind == "transducer-greedy" or method != "wind") and r.random() < 0.4  # (WIND: RNN-T only)
        m = _sharp_model(seed, r.choice([1.0, 4.0, 16.0]), r.choice([0.5, 1.0, 2.0]), tdt, float32)
        frames = r.randint(0, 24)
        x = random_encoder(seed, batch, frames)
        x = x.float() if float32 else x
        lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(seed))
        edges = _bounds(r, frames)
        if kind == "transducer-greedy":
            g_dec = GreedyDecoder(m, max_symbols=r.choice([1, 3, 10]), engine=engine)
            whole = [[h] for h in g_dec.decode(x, lengths)]
            g_state = g_dec.init_state(batch, dtype=x.dtype)
            for a, b in zip(edges, edges[1:]):
                g_state = g_dec.advance(g_state, x[:, a:b], (lengths - a).clamp(min=0, max=b - a))
            streamed = [[h] for h in g_dec.finalize(g_state)]
        else:
            beam = r.randint(1, 4)
            fusion = r.choice([[], [(res.token_lm, r.choice([0.5, -0.4]))]])
            extra: dict[str, Any] = dict(window=r.randint(1, 6)) if method == "wind" else {}
            b_dec = BeamSearchDecoder(m, beam=beam, method=method, fusion=fusion, max_symbols=r.choice([1, 2, 3]),
                                      pruning=r.choice(["late", "early"]), nbest=beam, engine=engine, **extra)
            whole = b_dec.decode(x, lengths)
            b_state = b_dec.init_state(batch, x.shape[-1], dtype=x.dtype)
            for a, b in zip(edges, edges[1:]):
                b_state = b_dec.advance(b_state, x[:, a:b], (lengths - a).clamp(min=0, max=b - a),
                                        final=lengths <= b)
            streamed = b_dec.finalize(b_state)
    label = f"streaming {kind} {engine} {'f32' if float32 else 'f64'} masked={masked} B={batch} edges={edges} seed={seed}"
    for b in range(batch):
        _same(streamed[b], whole[b], float32, f"{label}: streamed vs whole, utterance {b}")
    return "streaming"


def wfst(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    """WFST token passing, native against torch: a random small graph (``test_wfst_native.random_graph``),
    emissions scaled 1-20 before the log-softmax, whole and in chunks (switching engines between chunks), with
    per-utterance word boosts, n-best lists."""
    from test_wfst_native import _decoders, random_graph

    from asrdecode.ctc.wfst import WFSTDecoder

    g = random_graph(seed)
    batch, frames = r.randint(1, 3), r.randint(0, 16)
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(batch, frames, g.vocab_size + 1, generator=gen) * r.choice([1.0, 3.0, 8.0, 20.0])).log_softmax(-1)
    lp = mask_classes(lp, seed, masked) if masked else lp
    lengths = torch.randint(0, frames + 1, (batch,), generator=gen)
    boosts = [r.choice([None, {"w1": 1.5, "w3": -0.7}, {"w2": 4.0}]) for _ in range(batch)] if r.random() < 0.5 else None
    nat, ten = _decoders(g, seed)
    label = f"wfst seed={seed} B={batch} T={frames} masked={masked} boosts={boosts}"
    want = ten(lp, lengths, boosts=boosts, nbest=2)
    got = nat(lp, lengths, boosts=boosts, nbest=2)
    loop = _later(seed, 1).choice(["fixed", "dynamic"])  # the tensor engine's 1-best loops
    first = WFSTDecoder(g, config=ten.config, loop=loop)(lp, lengths, boosts=boosts)
    state = nat.init_state(batch, boosts=boosts, lattice=True)
    edges = _bounds(r, frames)
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        (nat if i % 2 == 0 else ten).advance(state, lp[:, a:b], (lengths - a).clamp(min=0, max=b - a))
    streamed = nat.hypotheses(state, nbest=2)
    for b in range(batch):
        _same(got[b], want[b], True, f"{label}: native vs torch, utterance {b}")
        _same([first[b]], want[b][:1], True, f"{label}: torch 1-best ({loop} loop) vs n-best, utterance {b}")
        _same(streamed[b], want[b], True, f"{label}: streamed {edges} vs whole, utterance {b}")
    return "wfst"


def tlg(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    """A TLG built from a random lexicon (2-6 words over 2-3 tokens, homophones allowed) and a random bigram
    ARPA, compact or normal topology: the WFST decoder at an unbounded beam, native and torch, against the
    exhaustive search over every alignment and graph path (``test_ctc_wfst.exhaustive_best``; T <= 5)."""
    from test_ctc_wfst import exhaustive_best

    from asrdecode.ctc.wfst import WFSTDecoder, build_tlg
    from asrdecode.lm import ArpaModel

    V = r.randint(3, 4)
    blank = r.randrange(V)
    tokens = [t for t in range(V) if t != blank]
    lexicon = {f"w{i}": [r.choice(tokens) for _ in range(r.randint(1, 3))] for i in range(r.randint(2, 6))}
    words = list(lexicon)
    grams: dict[tuple[str, ...], tuple[float, float | None]] = {
        ("<s>",): (-99.0, r.uniform(-0.5, 0.0)), ("</s>",): (r.uniform(-2.0, -0.2), None)}
    for w in words:
        grams[(w,)] = (r.uniform(-2.0, -0.2), r.uniform(-0.5, 0.0))
    for _ in range(r.randint(0, 6)):
        grams[(r.choice(["<s>", *words]), r.choice([*words, "</s>"]))] = (r.uniform(-1.0, -0.05), None)
    g = build_tlg(V, lexicon, ArpaModel.from_dict(grams), topology=r.choice(["compact", "normal"]), blank_id=blank)
    batch, frames = r.randint(1, 2), r.randint(1, 5)
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(batch, frames, V, generator=gen) * r.choice([1.0, 2.0, 4.0])).log_softmax(-1)
    lp = mask_classes(lp, seed, masked) if masked else lp
    lengths = torch.tensor([frames] + [r.randint(1, frames) for _ in range(batch - 1)])
    label = f"tlg V={V} blank={blank} {g.topology} lexicon={lexicon} B={batch} T={frames} masked={masked}"
    for engine in ("native", "torch"):
        hyps = WFSTDecoder(g, beam=1e9, engine=engine)(lp, lengths)
        for b in range(batch):
            score, best_words, best_tokens = exhaustive_best(g, lp[b, : int(lengths[b])])
            got = ([w for w, _, _ in hyps[b].words], hyps[b].tokens)
            if score == -math.inf:
                continue  # no path: the decoder's fallback (no words) is checked by the suite
            if got != (best_words, best_tokens) or abs(hyps[b].score - score) > 1e-4:
                raise Disagreement(f"{label}: {engine} vs exhaustive search, utterance {b}:\n  got  {got} "
                                   f"{hyps[b].score}\n  want {(best_words, best_tokens)} {score}")
    return "tlg"


def ctc_word_lm(r: random.Random, res: Resources, seed: int, masked: float = 0.0) -> str:
    """The CTC prefix beam search with a word-level n-gram LM (``test_lm_word.build``: a random vocabulary
    of word pieces, lookahead, a lexicon, a word bonus) plus a token LM and boosting, on peaked emissions:
    native against torch against the oracle, at positive and negative word-LM weights."""
    from test_lm_word import STYLES, build

    folder = res.folder / f"word_{seed}"
    folder.mkdir()
    lm, _, pieces, blank = build(folder, seed, r.choice(STYLES), lookahead=r.random() < 0.5,
                                 lexicon=r.random() < 0.5, unweighted_word_bonus=r.choice([0.0, 0.5, -1.0]))
    V = len(pieces)
    batch, frames, beam = r.randint(1, 3), r.randint(0, 14), r.randint(1, 5)
    float32 = r.random() < 0.5
    lp = peaky_log_probs(seed, batch, frames, V, blank, peak=r.choice([4.0, 12.0, 25.0]),
                         dtype=torch.float32 if float32 else torch.float64)
    lp = mask_classes(lp, seed, masked) if masked else lp
    lens = random_lengths(seed, batch, frames)
    fusion: list = [(lm, r.choice([0.7, 0.3, -0.5]))]
    if r.random() < 0.5:
        fusion.append((res.ctc_lm(seed, V, blank), r.choice([0.3, -0.3])))
    if r.random() < 0.3:
        fusion.append((BoostingTree.from_token_sequences([[t for t in range(V) if t != blank][:2]], vocab_size=V,
                                                         blank_id=blank), 0.5))
    kw: dict[str, Any] = dict(beam=beam, fusion=fusion, beta=r.choice([0.0, 0.3]), token_beam=r.choice([None, 2]),
                              nbest=beam, blank_collapse=r.choice([None, "weak"]))
    label = (f"ctc word LM V={V} blank={blank} {'f32' if float32 else 'f64'} masked={masked} B={batch} T={frames} "
             f"{kw | {'fusion': len(fusion)}}")
    _ctc_three_ways(lp, lens, blank, kw, float32, label)
    return "ctc-word-lm"


def modified_beam(r: random.Random, res: Resources, seed: int) -> str:
    """sherpa-onnx's modified beam search (``models.sherpa_search``): the C++ engine against the Python one
    on LSTM transducers with joints scaled 2-16, beam 1-8, an unknown-token id, length normalisation
    (near-ties at the last cut allowed: ``test_native_modified_beam._same_lists``; any other difference passes
    only where the Python search came within ``near_ties.TIE_ULPS`` float32 ulps of a tie at one of its
    frames' cuts, as for the NeMo search)."""
    from asrdecode.models.sherpa_search import modified_beam_search
    from near_ties import TIE_ULPS, modified_search_margin_ulps
    from test_native_modified_beam import _lstm_model, _same_lists

    vocab = r.randint(2, 24)
    t = _lstm_model(seed, vocab, r.randint(1, 2), r.randint(0, 23))
    with torch.no_grad():
        t.joint_out.weight.mul_(r.choice([1.0, 4.0, 8.0]))
    lens = [r.randint(0, 25) for _ in range(r.randint(1, 4))]
    enc = torch.randn(len(lens), max(lens), 10, generator=torch.Generator().manual_seed(seed)) * 2
    kw: dict[str, Any] = dict(beam=r.choice([1, 2, 4, 8]), unk_id=r.choice([None, r.randint(0, vocab - 1)]),
                              length_norm=r.random() < 0.5)
    want, margin = modified_search_margin_ulps(t, enc, lens, **kw)
    try:
        _same_lists(modified_beam_search(t, enc, lens, engine="native", **kw), want)
    except AssertionError as err:
        if margin > TIE_ULPS:
            raise Disagreement(f"modified beam vocab={vocab} lens={lens} {kw} (cut margin {margin:.1f} ulps): "
                               f"{err}") from err
    return "modified-beam"


def nemo_beam(r: random.Random, res: Resources, seed: int) -> str:
    """NeMo's beam search as sherpa-onnx runs it (``models.sherpa_nemo_search``, RNN-T and TDT): the C++ engine
    against the Python one on LSTM transducers with joints scaled 1-8; a difference passes only where the
    Python search came within ``near_ties.TIE_ULPS`` float32 ulps of a tie at one of its cuts."""
    from asrdecode.models.sherpa_nemo_search import nemo_beam_search
    from near_ties import TIE_ULPS, nemo_search_margin_ulps
    from test_native_nemo_beam import _model, _same_lists

    vocab = r.randint(2, 24)
    t = _model(seed, vocab, r.randint(1, 2), r.randint(0, 23), r.choice([None, None, [0, 1, 2, 3, 4], [0, 2, 3]]))
    with torch.no_grad():
        t.joint_out.weight.mul_(r.choice([1.0, 3.0, 8.0]))
    lens = [r.randint(0, 20) for _ in range(r.randint(1, 4))]
    enc = torch.randn(len(lens), max(lens), 10, generator=torch.Generator().manual_seed(seed)) * 2
    kw: dict[str, Any] = dict(beam=r.choice([1, 2, 4, 8]), unk_id=r.choice([None, r.randint(0, vocab - 1)]),
                              max_symbols=r.choice([1, 3, 10]))
    got = nemo_beam_search(t, enc, lens, engine="native", **kw)
    want, margin = nemo_search_margin_ulps(t, enc, lens, **kw)
    try:
        _same_lists(got, want)
    except AssertionError as err:
        if margin > TIE_ULPS:
            raise Disagreement(f"nemo beam vocab={vocab} lens={lens} {kw} (cut margin {margin:.1f} ulps): {err}") from err
    return "nemo-beam"


def _refused_or_unread(run: Callable[[Any], list], broken: Any, masked: Any, error: type, label: str) -> None:
    """``run(broken)`` raises ``error``, or (the search never read the broken scores, as early pruning may
    not) returns what ``run(masked)`` returns, the broken values replaced by -inf."""
    try:
        got = run(broken)
    except error:
        return
    except Exception as err:  # noqa: BLE001 - any other outcome is the finding
        raise Disagreement(f"{label}: raised {type(err).__name__}: {err}, expected {error.__name__}") from err
    want = run(masked)
    for b, (g, w) in enumerate(zip(got, want)):
        g, w = (g if isinstance(g, list) else [g]), (w if isinstance(w, list) else [w])
        if not all(math.isfinite(h.score) for h in g):
            raise Disagreement(f"{label}: utterance {b} returned non-finite scores {[h.score for h in g]}")
        _same(g, w, True, f"{label}: returned without {error.__name__}, and not the masked model's result, "
                          f"utterance {b}")


def broken_inputs(r: random.Random, res: Resources, seed: int) -> str:
    """NaN or +inf where a model's scores come from: a transducer's joint bias (some labels, the blank or a
    TDT duration) or a fusion model's label or end-of-sentence scores. Every search on both engines and
    every oracle raises the named error (NonFiniteJointError, FusionScoreError), or, where it never read
    the broken values, returns what the same search returns with them -inf."""
    from asrdecode.fusion import FusionScoreError
    from asrdecode.errors import NonFiniteJointError

    value = r.choice([math.nan, math.inf])
    kind = r.choice(["joint", "fusion", "fusion-final"])
    batch, frames = r.randint(1, 3), r.randint(1, 8)
    lengths = torch.tensor([frames] + [r.randint(1, frames) for _ in range(batch - 1)])
    label = f"broken {kind} value={value} seed={seed} B={batch} T={frames}"
    if kind == "joint":
        tdt = r.random() < 0.3
        m = _sharp_model(seed, r.choice([1.0, 4.0]), 1.0, tdt, True)
        cols = r.sample(range(m.joint_out.bias.shape[0]), r.randint(1, 2))
        bad, ok = m, _sharp_model(seed, 1.0, 1.0, tdt, True)
        with torch.no_grad():
            ok.load_state_dict(m.state_dict())
            bad.joint_out.bias[cols] = value
            ok.joint_out.bias[cols] = -math.inf
        enc = random_encoder(seed, batch, frames).float()
        method = r.choice(["alsd", "aes"] + ([] if tdt else ["wind"]))
        for engine in ("native", "torch"):
            _refused_or_unread(lambda mm, e=engine: greedy(mm, enc, lengths, engine=e, max_symbols=3), bad, ok,
                               NonFiniteJointError, f"{label} cols={cols} greedy {engine}")
            _refused_or_unread(lambda mm, e=engine: beam_search(mm, enc, lengths, beam=2, method=method, engine=e,
                                                      max_symbols=3), bad, ok, NonFiniteJointError,
                               f"{label} cols={cols} {method} {engine}")
        return "broken"
    final = kind == "fusion-final"
    ctc_case = r.random() < 0.5
    vocab, blank = (r.randint(3, 7), 0) if ctc_case else (FUSION_V, FUSION_BLANK)
    bad, ok = TableBigram(vocab, blank, seed=seed), TableBigram(vocab, blank, seed=seed)
    cols = r.sample([v for v in range(vocab) if v != blank], r.randint(1, vocab - 1))
    if final:
        bad.eos[:] = value
        ok.eos[:] = -math.inf
    else:
        bad.scores[:, cols] = value
        ok.scores[:, cols] = -math.inf
    weight = r.choice([0.5, -0.4])
    label += f" cols={cols} final={final} weight={weight}"
    if ctc_case:
        lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=r.choice([4.0, 12.0]), dtype=torch.float32)
        kw: dict[str, Any] = dict(beam=r.randint(1, 4), token_beam=r.choice([None, 2]))
        for engine in ("native", "torch"):
            _refused_or_unread(lambda fm, e=engine: ctc.beam_search(lp, lengths, blank, fusion=[(fm, weight)], engine=e,
                                                                     **kw),
                               bad, ok, FusionScoreError, f"{label} ctc {engine} {kw}")
        _refused_or_unread(lambda fm: ctc.reference_beam_search(lp, lengths, blank, fusion=[(fm, weight)], **kw),
                           bad, ok, FusionScoreError, f"{label} ctc oracle {kw}")
        return "broken"
    m = _sharp_model(seed, 1.0, 1.0, False, True)
    enc = random_encoder(seed, batch, frames).float()
    method = r.choice(["alsd", "aes", "wind"])
    kw = dict(beam=r.randint(1, 3), method=method, pruning=r.choice(["late", "early"]), max_symbols=3)
    for engine in ("native", "torch"):
        _refused_or_unread(lambda fm, e=engine: beam_search(m, enc, lengths, fusion=[(fm, weight)], engine=e, **kw),
                           bad, ok, FusionScoreError, f"{label} transducer {engine} {kw}")
    return "broken"


#: where the ``graphs`` entry's decoders run (``--device``): "cpu" emulates CUDA graphs, "cuda" captures them
DEVICE = torch.device("cpu")


class _CountedRunner:
    """The step runner of the ``graphs`` entry, its instances kept (to check a case took the graph path):
    :class:`~asrdecode.accel.EmulatedGraphRunner` on the CPU, :class:`~asrdecode.accel.StepRunner` on CUDA."""

    made: list = []

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from asrdecode.accel import EmulatedGraphRunner, StepRunner

        runner = (EmulatedGraphRunner if DEVICE.type == "cpu" else StepRunner)(*args, **kwargs)
        cls.made.append(runner)
        return runner


def _captured() -> int:
    """Graphs the runners made since the last :func:`_graph_path` began have captured."""
    return sum(run.captures for run in _CountedRunner.made)


@contextlib.contextmanager
def _graph_path():
    """``acceleration="cuda_graphs"`` with its captures counted: on the CPU every device loop on its graph path
    with :class:`~asrdecode.accel.EmulatedGraphRunner` (the CPU twin of capture: same padding to buckets, same
    in-place rounds, a replay checks no state tensor moved), on CUDA real graphs; the module-level loop caches
    cleared before and after."""
    from asrdecode.ctc import beam_loop
    from asrdecode.ctc.wfst import fixed
    mods = (beam_loop, fixed, importlib.import_module("asrdecode.transducer.beam"),
            importlib.import_module("asrdecode.transducer.greedy"))  # (the package exports functions of these names)
    for m in (beam_loop, fixed):
        m.LOOPS.clear()
    _CountedRunner.made.clear()
    with contextlib.ExitStack() as stack:
        for m in mods:
            real = m.resolve_mode
            if DEVICE.type == "cpu":
                stack.enter_context(mock.patch.object(m, "resolve_mode", lambda mode, device, real=real:
                                                      "cuda_graphs" if mode == "cuda_graphs" else real(mode, device)))
            stack.enter_context(mock.patch.object(m, "StepRunner", _CountedRunner))
        try:
            yield
        finally:
            for m in (beam_loop, fixed):
                m.LOOPS.clear()


def _graph_calls(r: random.Random, most_batch: int, most_frames: int) -> list[tuple[int, int]]:
    """Three or four ``(B, T)`` of calls on one decoder: a shape again (a warm call), a smaller one of the same
    buckets, one of larger buckets."""
    first = (r.randint(1, most_batch), r.randint(2, most_frames))  # (utterance 0 of the first call: all frames)
    calls = [first, first, (r.randint(1, first[0]), r.randint(0, first[1]))]
    if r.random() < 0.6:
        calls.append((r.randint(1, 2 * most_batch), r.randint(0, 2 * most_frames)))
    return calls


def _lengths(lens: torch.Tensor, call: int, frames: int) -> torch.Tensor:
    """``lens [B]``, the first call's utterance 0 given all ``frames`` (so every case runs its loop)."""
    if call == 0:
        lens[0] = frames
    return lens


def graphs(r: random.Random, res: Resources, seed: int) -> str:
    """The GPU path (on the CPU, or on CUDA with ``--device cuda``): one decoder object with
    ``acceleration="cuda_graphs"`` (emulated on the CPU) called on 3-4
    batches of changing shapes (the loops, their buffers and "graphs" kept between calls, batches padded to
    buckets), each call against the native engine: CTC prefix beam, transducer ALSD++ / AES++ / WIND beam,
    transducer greedy (label, WIND, frame looping), the WFST fixed loop; sometimes the last call streamed in
    chunks through the same decoder (``init_state`` / ``advance`` / ``finalize``)."""
    kind = r.choice(["ctc-beam", "transducer-beam", "transducer-greedy", "wfst"])
    float32 = kind == "wfst" or r.random() < 0.5
    dtype = torch.float32 if float32 else torch.float64
    masked = r.choice([0.0, 0.0, 0.3])
    calls = _graph_calls(r, 4, 14)
    stream = _later(seed, 3).random() < 0.4 and kind != "wfst"
    label = f"graphs {kind} {'f32' if float32 else 'f64'} masked={masked} calls={calls}"
    dev = DEVICE

    def on_dev(fusion: list) -> list:
        return fusion if dev.type == "cpu" else [(m.to(dev), w) for m, w in fusion]

    with _graph_path():
        if kind == "ctc-beam":
            vocab = r.randint(3, 9)
            blank = seed % vocab
            fusion_kind = r.choice(["none", "lm", "negative-lm", "bigram"])
            fusion_kind = "lm" if fusion_kind == "bigram" and dev.type != "cpu" else fusion_kind  # (a CPU table)
            fusion: list = {"none": [], "lm": [(res.ctc_lm(seed, vocab, blank), 0.7)],
                            "negative-lm": [(res.ctc_lm(seed, vocab, blank), -0.5)],
                            "bigram": [(TableBigram(vocab, blank, seed=seed), 0.6)]}[fusion_kind]
            beam = r.randint(1, 8)
            kw: dict[str, Any] = dict(beam=beam, fusion=fusion, beta=r.choice([0.0, 0.5]), nbest=r.randint(1, beam),
                                      token_beam=r.choice([None, None, 2]), blank_collapse=r.choice([None, "weak", 0.9]),
                                      beam_threshold=r.choice([float("inf"), 3.0]))
            label += f" V={vocab} blank={blank} fusion={fusion_kind} {kw | {'fusion': None}}"
            dec: Any = ctc.CTCBeamDecoder(blank, vocab_size=vocab, engine="torch", acceleration="cuda_graphs",
                                          **kw | {"fusion": on_dev(fusion)})
            for i, (B, T) in enumerate(calls):
                lp = peaky_log_probs(seed + 101 * i, B, T, vocab, blank, peak=r.choice([4.0, 12.0]), dtype=dtype)
                lp = mask_classes(lp, seed + i, masked) if masked else lp
                lens = _lengths(random_lengths(seed + i, B, T), i, T)
                got, want = dec.decode(lp.to(dev), lens.to(dev)), ctc.beam_search(lp, lens, blank, engine="native", **kw)
                if i == len(calls) - 1 and stream:  # the last call in chunks through the same decoder
                    edges = _bounds(r, T)
                    label += f" streamed {edges}"
                    state = dec.init_state(B, vocab_size=vocab, dtype=dtype, device=dev)
                    for a, e in zip(edges, edges[1:]):
                        state = dec.advance(state, lp[:, a:e].to(dev), (lens - a).clamp(min=0, max=e - a).to(dev))
                    got = dec.finalize(state)
                for b in range(B):
                    _same(got[b], want[b], float32, f"{label}: call {i}, graphs vs native, utterance {b}")
        elif kind in ("transducer-beam", "transducer-greedy"):
            beam_kind = kind == "transducer-beam"
            method = r.choice(["alsd", "aes", "wind"]) if beam_kind else "greedy"
            loop = r.choice(["labels", "labels", "frames"])
            tdt = method not in ("wind",) and r.random() < 0.3
            window = r.randint(2, 6) if (method == "wind" or (not beam_kind and loop == "labels" and not tdt
                                                               and r.random() < 0.5)) else 1
            m = _sharp_model(seed, r.choice([1.0, 4.0, 16.0]), r.choice([0.5, 1.0, 2.0]), tdt, float32, masked)
            cap = r.choice([1, 2, 3, 5])
            if beam_kind:
                fusion = r.choice([[], [(res.token_lm, 0.6)], [(res.token_lm, -0.4)]])
                beam = r.randint(1, 4)
                kw = dict(beam=beam, nbest=beam, method=method, max_symbols=cap, fusion=fusion,
                          pruning=r.choice(["late", "early"]), blank_scoring=r.choice(["lm_weighted", "none"]),
                          beta=r.choice([0.0, 0.8]))
                if method == "wind":
                    kw.update(window=window, expansion_gamma=r.choice([None, 3.0]))
                label += f" {method} {'tdt' if tdt else 'rnnt'} {kw | {'fusion': len(fusion)}}"
                dec = BeamSearchDecoder(copy.deepcopy(m).to(dev), engine="torch", acceleration="cuda_graphs",
                                        **kw | {"fusion": on_dev(fusion)})
                native = lambda enc, lens: beam_search(m, enc, lens, engine="native", **kw)  # noqa: E731
            else:
                kw = dict(max_symbols=cap, loop=loop, window=window, precompute_projections=r.random() < 0.8)
                label += f" greedy {'tdt' if tdt else 'rnnt'} {kw}"
                dec = GreedyDecoder(copy.deepcopy(m).to(dev), engine="torch", acceleration="cuda_graphs", **kw)
                native = lambda enc, lens: [[h] for h in greedy(m, enc, lens, engine="native" if float32  # noqa: E731
                                                                 else "torch", **kw)]
            for i, (B, T) in enumerate(calls):
                enc = random_encoder(seed + 101 * i, B, T)
                enc = enc.float() if float32 else enc
                lens = _lengths(torch.randint(0, T + 1, (B,), generator=torch.Generator().manual_seed(seed + i)), i, T)
                got, want = dec.decode(enc.to(dev), lens.to(dev)), native(enc, lens)
                if i == len(calls) - 1 and stream:  # the last call in chunks through the same decoder
                    edges = _bounds(r, T)
                    label += f" streamed {edges}"
                    state = dec.init_state(B, enc.shape[-1], dtype=enc.dtype, device=dev) if beam_kind else \
                        dec.init_state(B, dtype=enc.dtype, device=dev)
                    for a, e in zip(edges, edges[1:]):
                        chunk, valid = enc[:, a:e].to(dev), (lens - a).clamp(min=0, max=e - a).to(dev)
                        state = dec.advance(state, chunk, valid, final=lens.to(dev) <= e) if beam_kind else \
                            dec.advance(state, chunk, valid)
                    got = dec.finalize(state)
                for b in range(B):
                    nbest = got[b] if beam_kind else [got[b]]
                    _same(nbest, want[b], float32, f"{label}: call {i}, graphs vs native, utterance {b}")
        else:
            from test_wfst_native import _decoders, random_graph

            from asrdecode.ctc.wfst import WFSTDecoder

            g = random_graph(seed)
            nat, ten = _decoders(g, seed)
            dec = WFSTDecoder(g.to(dev), config=ten.config, loop="fixed", acceleration="cuda_graphs")
            label += f" seed={seed}"
            for i, (B, T) in enumerate(calls):
                gen = torch.Generator().manual_seed(seed + i)
                lp = (torch.randn(B, T, g.vocab_size + 1, generator=gen) * r.choice([1.0, 3.0, 8.0])).log_softmax(-1)
                lp = mask_classes(lp, seed + i, masked) if masked else lp
                lens = _lengths(torch.randint(0, T + 1, (B,), generator=gen), i, T)
                boosts = [r.choice([None, {"w1": 1.5}, {"w2": 4.0}]) for _ in range(B)] if r.random() < 0.5 else None
                got, want = dec(lp.to(dev), lens.to(dev), boosts=boosts), nat(lp, lens, boosts=boosts, nbest=1)
                for b in range(B):
                    _same([got[b]], want[b][:1], True, f"{label}: call {i} boosts={boosts}, graphs vs native, "
                                                       f"utterance {b}")
        # (blank collapse may drop every frame; a graph without emitting arcs has no frame loop to run)
        loopless = (kind == "ctc-beam" and kw["blank_collapse"]) or (kind == "wfst" and not g.e_src.numel())
        if not _captured() and not loopless:
            raise Disagreement(f"{label}: no graph captured (the case never took the graph path)")
    return "graphs"


def masked_inputs(r: random.Random, res: Resources, seed: int) -> str:
    """An entry point on inputs with masked classes (``-inf``: probability 0): CTC (prefix beam, streamed
    prefix beam, word LM, WFST, TLG) on emissions with 20-70 % of the entries masked, each frame keeping
    one; transducer beam and greedy with that share of the labels (sometimes blank, a TDT duration) masked by
    a -inf joint bias."""
    entry = r.choice(list(_MASKABLE))
    rate = r.choice([0.2, 0.3, 0.6, 0.7])
    _MASKABLE[entry](r, res, seed, rate)
    return "masked"


_MASKABLE: dict[str, Callable[[random.Random, Resources, int, float], str]] = {
    "ctc-beam": ctc_beam, "streaming": streaming, "ctc-word-lm": ctc_word_lm, "wfst": wfst, "tlg": tlg,
    "transducer-beam": transducer_beam, "transducer-greedy": transducer_greedy}

ENTRIES: dict[str, Callable[[random.Random, Resources, int], str]] = {
    "transducer-beam": transducer_beam, "transducer-greedy": transducer_greedy, "ctc-beam": ctc_beam,
    "streaming": streaming, "wfst": wfst, "tlg": tlg, "ctc-word-lm": ctc_word_lm, "modified-beam": modified_beam,
    "nemo-beam": nemo_beam, "masked": masked_inputs, "broken": broken_inputs, "graphs": graphs}


def run_case(entry: str, seed: int, res: Resources) -> tuple[str, str]:
    """``("pass" | "disagree" | "error", detail)`` of case ``seed`` of ``entry``."""
    r = random.Random(f"{entry}:{seed}")
    try:
        with mock.patch.object(_checks, "MAX_SYMBOLS_GUARD", 200), torch.inference_mode():
            ENTRIES[entry](r, res, seed)
    except Disagreement as err:
        return "disagree", str(err)
    except Exception:  # noqa: BLE001 (every other outcome is reported)
        return "error", "".join(traceback.format_exc().splitlines(keepends=True)[-3:])
    return "pass", ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0, help="the first case's number (cases are seed, seed + 1, ...)")
    ap.add_argument("--only", default="", help="comma-separated entry points (default: all)")
    ap.add_argument("--case", default="", help="ENTRY:N: run one case and print its outcome")
    ap.add_argument("--out", type=Path, help="append the counts as a markdown table")
    ap.add_argument("--device", default="cpu", help="where the graphs entry's decoders run: cpu (CUDA graphs "
                                                     "emulated) or cuda (captured; the others stay on the CPU)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        res = Resources(Path(tmp))
        if args.case:
            entry, n = args.case.rsplit(":", 1)
            print(*run_case(entry, int(n), res))
            return
        entries = [e for e in ENTRIES if not args.only or e in args.only.split(",")]
        counts: dict[str, collections.Counter] = {e: collections.Counter() for e in entries}
        end = time.monotonic() + 60 * args.minutes
        n = args.seed
        while time.monotonic() < end:
            entry = entries[n % len(entries)]
            outcome, detail = run_case(entry, n, res)
            counts[entry][outcome] += 1
            if outcome != "pass":
                print(f"--- {entry}:{n} {outcome}\n{detail}", flush=True)
            n += 1
    rows = ["| entry point | cases | pass | disagree | error |", "|---|---|---|---|---|"]
    rows += [f"| {e} | {sum(c.values())} | {c['pass']} | {c['disagree']} | {c['error']} |" for e, c in counts.items()]
    print("\n".join(rows))
    if args.out:
        with args.out.open("a") as f:
            f.write(f"\n`fuzz_differential.py --minutes {args.minutes} --seed {args.seed}`: cases "
                    f"{args.seed}..{n - 1}\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
