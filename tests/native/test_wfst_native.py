"""WFST token passing on the native engine vs the tensor engine: random small graphs and emissions,
whole and streamed in chunks (switching engines between chunks), with boosting, n-best and lattices."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("kaldifst")

from asrdecode import native  # noqa: E402
from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402

if not native.available():  # pragma: no cover - machines without a C++ compiler
    pytest.skip("native engine unavailable", allow_module_level=True)

WORDS = ["<eps>", "w1", "w2", "w3", "w4"]


def random_graph(seed: int) -> DecodingGraph:
    """A random graph: emitting arcs anywhere (some starting a token), epsilon arcs only forwards
    (no epsilon cycle), random words and weights, a few final states."""
    rng = np.random.default_rng(seed)
    S = int(rng.integers(3, 12))
    V = int(rng.integers(2, 6))
    blank = int(rng.integers(0, V))
    lines = []
    for s in range(S):
        for _ in range(int(rng.integers(0, 2 * V + 1))):
            tok = int(rng.integers(0, V))
            il = tok + 1 + (V if rng.random() < 0.5 else 0)
            ol = int(rng.integers(1, len(WORDS))) if rng.random() < 0.3 else 0
            lines.append(f"{s} {int(rng.integers(0, S))} {il} {ol} {rng.exponential(1.0):.6f}")
        for _ in range(int(rng.integers(0, 3))):
            if s + 1 < S:
                ol = int(rng.integers(1, len(WORDS))) if rng.random() < 0.5 else 0
                lines.append(f"{s} {int(rng.integers(s + 1, S))} 0 {ol} {rng.exponential(1.0):.6f}")
    if not lines or not lines[0].startswith("0 "):
        lines.insert(0, f"0 0 {1 + blank} 0 0.5")
    for s in rng.choice(S, size=max(1, S // 3), replace=False):
        lines.append(f"{int(s)} {rng.exponential(1.0):.6f}")
    return DecodingGraph.from_fst_text("\n".join(lines), WORDS, V, blank)


def _same(a, b):
    assert [h.words for h in a] == [h.words for h in b]
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.timestamps for h in a] == [h.timestamps for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def _same_lattice(x, y):
    assert (x is None) == (y is None)
    if x is None:
        return
    assert x.num_nodes == y.num_nodes
    for k in ("src", "dst", "word", "token", "start", "frame"):
        np.testing.assert_array_equal(getattr(x, k), getattr(y, k), err_msg=k)
    np.testing.assert_allclose(x.graph, y.graph, atol=1e-5)
    np.testing.assert_allclose(x.am, y.am, atol=1e-5)
    assert sorted(x.final) == sorted(y.final)
    assert [x.final[k] for k in sorted(x.final)] == pytest.approx([y.final[k] for k in sorted(y.final)], abs=1e-5)


def _inputs(seed: int, g: DecodingGraph, B: int, T: int):
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(B, T, g.vocab_size + 1, generator=gen) * 3).log_softmax(-1)
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[0] = T
    boosts = [{"w1": 1.5, "w3": -0.7}, None, {"w2": 0.4}][:B] if seed % 2 else None
    return lp, lengths, boosts


def _decoders(g, seed):
    rng = np.random.default_rng(seed + 1)
    beam = float(rng.choice([2.0, 5.0, 1e9]))
    max_active = int(rng.choice([2, 4, 50]))
    kw = dict(beam=beam, max_active=max_active, acoustic_scale=float(rng.choice([0.5, 1.0, 2.0])),
              lattice_beam=float(rng.choice([1.0, 4.0])), dense_min_degree=int(rng.choice([1, 10**9])),
              min_active=int(rng.choice([0, 0, 3])))
    return WFSTDecoder(g, engine="native", **kw), WFSTDecoder(g, engine="torch", **kw)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_native_equals_tensor_engine(seed):
    g = random_graph(seed)
    lp, lengths, boosts = _inputs(seed, g, 3, 9)
    nat, ten = _decoders(g, seed)
    _same(nat(lp, lengths, boosts=boosts), ten(lp, lengths, boosts=boosts))
    a, b = _same_lattices(nat, ten, lp, lengths, boosts)
    for x, y in zip(nat.hypotheses(a, nbest=3), ten.hypotheses(b, nbest=3)):
        _same(x, y)


def _same_lattices(nat, ten, lp, lengths, boosts):
    """Both engines' lattice-recording states after ``lp`` (compared); returns them."""
    a = nat.init_state(lp.shape[0], boosts=boosts, lattice=True)
    b = ten.init_state(lp.shape[0], boosts=boosts, lattice=True)
    nat.advance(a, lp, lengths)
    ten.advance(b, lp, lengths)
    for x, y in zip(nat._lattices(a), ten._lattices(b)):
        _same_lattice(x, y)
    return a, b


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), chunk=st.integers(1, 4))
def test_native_streamed_in_chunks_equals_whole(seed, chunk):
    g = random_graph(seed)
    T = 10
    lp, lengths, boosts = _inputs(seed, g, 3, T)
    nat, ten = _decoders(g, seed)
    whole = ten(lp, lengths, boosts=boosts, nbest=2)
    state = nat.init_state(3, boosts=boosts, lattice=True)
    for i, lo in enumerate(range(0, T, chunk)):
        part = lp[:, lo : lo + chunk]
        dec = nat if i % 3 != 2 else ten  # a stream may switch engines between chunks
        dec.advance(state, part, (lengths - lo).clamp(0, part.shape[1]))
    for x, y in zip(nat.hypotheses(state, nbest=2), whole):
        _same(x, y)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rate=st.sampled_from([0.3, 0.7]))
def test_masked_classes_on_both_engines(seed, rate):
    """Emissions with classes of probability 0 (-inf): a -inf score is no path on either engine (1-best by
    the tensor engine's fixed and dynamic loops, n-best, lattices), no token sits on a frame
    where its class is masked, and where every path is masked the result is the empty fallback."""
    from test_ctc_helpers import mask_classes

    g = random_graph(seed)
    lp, lengths, boosts = _inputs(seed, g, 3, 9)
    lp = mask_classes(lp, seed, rate)
    nat, ten = _decoders(g, seed)
    first = ten(lp, lengths, boosts=boosts)
    _same(nat(lp, lengths, boosts=boosts), first)
    _same(WFSTDecoder(g, config=ten.config, loop="fixed")(lp, lengths, boosts=boosts), first)
    a, b = _same_lattices(nat, ten, lp, lengths, boosts)
    got = nat.hypotheses(a, nbest=3)
    for u, (x, y) in enumerate(zip(got, ten.hypotheses(b, nbest=3))):
        _same(x, y)
        _same(x[:1], [first[u]])
        for h in x:
            assert h.score > -np.inf or (h.tokens == [] and h.words == [])
            assert all(lp[u, t, k] > -np.inf for k, t in zip(h.tokens, h.timestamps))


def test_every_path_masked_gives_the_empty_fallback():
    """A graph that reads only token 1 (blank 0): once token 1 and blank are masked on a frame, no path is
    left; both engines return one empty hypothesis scored -inf instead of a path of probability 0."""
    g = DecodingGraph.from_fst_text("0 0 1 0 0.0\n0 1 2 1 0.5\n1 1 2 0 0.0\n1 1 1 0 0.0\n1 0.0", WORDS, 3, 0)
    lp = torch.full((1, 4, 3), -1.0986123)
    lp[0, 2, :2] = -np.inf
    lp[0, 2, 2] = 0.0
    fine = lp.clone()
    fine[0, 2] = torch.tensor([-0.5, -1.5, -1.5]).log_softmax(-1)
    for engine, loop in (("native", "auto"), ("torch", "dynamic"), ("torch", "fixed")):
        dec = WFSTDecoder(g, engine=engine, beam=1e9, loop=loop)
        assert dec(fine)[0].words and dec(fine)[0].score > -np.inf
        for h in (dec(lp)[0], dec(lp, nbest=2)[0][0]):
            assert h.tokens == [] and h.words == [] and h.score == -np.inf, engine


def test_native_on_a_tlg_with_frame_index_and_lattice_output():
    from asrdecode.ctc import blank_collapse
    from asrdecode.ctc.wfst import build_tlg
    from asrdecode.lm import ArpaModel

    words = {"ab": [0, 2], "ba": [2, 0], "a": [0], "b": [2], "aa": [0, 0]}
    lm = ArpaModel.from_dict({("<s>",): (-99.0, -0.25), ("</s>",): (-0.9, None), ("ab",): (-0.6, -0.2),
                              ("ba",): (-0.7, -0.1), ("a",): (-0.8, -0.3), ("b",): (-0.9, -0.05), ("aa",): (-1.1, -0.1),
                              ("<s>", "ab"): (-0.3, None), ("a", "</s>"): (-0.4, None)})
    gen = torch.Generator().manual_seed(3)
    lp = (torch.randn(2, 20, 3, generator=gen) * 3).log_softmax(-1)
    lens = torch.tensor([20, 13])
    x, xl, fi = blank_collapse(lp, lens, 1, threshold=0.9)
    for top in ("compact", "normal"):
        g = build_tlg(3, words, lm, topology=top, blank_id=1)
        got, lat_n = WFSTDecoder(g, beam=8.0, engine="native")(x, xl, frame_index=fi, nbest=3, return_lattice=True)
        want, lat_t = WFSTDecoder(g, beam=8.0, engine="torch")(x, xl, frame_index=fi, nbest=3, return_lattice=True)
        for a, b in zip(got, want):
            _same(a, b)
        for a, b in zip(lat_n, lat_t):
            assert a.num_states == b.num_states


def test_engine_argument():
    g = random_graph(0)
    with pytest.raises(DecodingInputError, match="engine"):
        WFSTDecoder(g, engine="gpu")
    assert WFSTDecoder(g).engine == "auto"


def test_fst_text_parsed_in_blocks_and_chunks():
    from asrdecode.ctc.wfst.graph import _parse_fst_text

    rng = np.random.default_rng(0)
    lines = [f"{rng.integers(0, 50)} {rng.integers(0, 50)} {rng.integers(0, 9)} {rng.integers(0, 4)} {rng.random():.5f}"
             for _ in range(300)]
    lines[7] = "3 4 1 0"  # no weight
    lines[100:100] = ["12 0.25", "", "13"]  # finals (with and without a cost), an empty line
    text = "\n".join(lines)  # no final newline
    whole = _parse_fst_text(text)
    for chunk, block in ((1, 7), (13, 64), (1000, 5)):
        got = _parse_fst_text(text, chunk=chunk, block=block)
        for a, b in zip(got[:5], whole[:5]):
            np.testing.assert_array_equal(a, b)
        assert got[5:] == whole[5:] == ({12: 0.25, 13: 0.0}, int(lines[0].split()[0]))
    assert whole[0].shape == (300,) and whole[4][7] == 0.0


def test_min_active_keeps_the_path_a_narrow_beam_loses():
    """kaldi's min_active rule: on this graph the beam alone leaves only a dead-end state (no token
    survives the last frame); keeping the best 20 tokens finds the path kaldi's FasterDecoder finds."""
    g = random_graph(11)
    gen = torch.Generator().manual_seed(11)
    lp = (torch.randn(1, 6, g.vocab_size + 1, generator=gen) * 3).log_softmax(-1)
    for engine in ("native", "torch"):
        assert WFSTDecoder(g, beam=3.0, engine=engine)(lp)[0].score == float("-inf")
        h = WFSTDecoder(g, beam=3.0, min_active=20, engine=engine)(lp)[0]
        assert [w for w, _, _ in h.words] == ["w3", "w1", "w1", "w1", "w4"]
        assert h.score == pytest.approx(-14.0146, abs=1e-3)  # kaldi-decoder 0.3.2: -14.014618
    with pytest.raises(DecodingInputError, match="min_active"):
        WFSTDecoder(g, min_active=-1)
    with pytest.raises(DecodingInputError, match="min_active"):
        WFSTDecoder(g, min_active=2.5)
