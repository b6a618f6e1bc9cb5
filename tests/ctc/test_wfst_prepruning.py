"""Acoustic pre-pruning (dense per-state token rows) and packed arcs give the plain expansion's results."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import WFSTDecoder, build_tlg, fixed  # noqa: E402
from asrdecode.lm import ArpaModel  # noqa: E402

V, BLANK = 6, 5
WORDS = {"a": [0], "b": [1], "ab": [0, 1], "ba": [1, 0], "cd": [2, 3], "dc": [3, 2], "abc": [0, 1, 2], "e": [4],
         "ee": [4, 4], "ce": [2, 4], "da": [3, 0]}


@pytest.fixture(scope="module")
def graphs():
    d = {("<s>",): (-99.0, -0.3), ("</s>",): (-1.0, None)}
    for i, w in enumerate(WORDS):
        d[(w,)] = (-0.5 - 0.1 * i, -0.2 - 0.05 * (i % 3))
    d.update({("<s>", "ab"): (-0.2, None), ("ab", "cd"): (-0.3, None), ("cd", "</s>"): (-0.1, None),
              ("e", "e"): (-0.4, None), ("da", "ba"): (-0.2, None)})
    lm = ArpaModel.from_dict(d)
    return {top: build_tlg(V, WORDS, lm, topology=top, blank_id=BLANK) for top in ("compact", "normal")}


def _same(a, b):
    assert [h.words for h in a] == [h.words for h in b]
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.timestamps for h in a] == [h.timestamps for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


@pytest.mark.parametrize("loop", ["auto", "fixed"])
@pytest.mark.parametrize("top", ["compact", "normal"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beam,max_active", [(3.0, 4), (6.0, 20), (1e9, 10000)])
def test_prepruning_equals_plain_expansion(graphs, top, seed, beam, max_active, loop):
    """The dynamic loop (``auto`` on the CPU) and the fixed-shape loop (1-best; n-best runs the dynamic one)."""
    g = graphs[top]
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(4, 16, V, generator=gen) * 3).log_softmax(-1)
    lengths = torch.tensor([16, 11, 0, 7])
    boosts = [{"cd": 2.0, "e": -1.0}, None, None, {"ba": 0.5}] if seed % 2 else None
    dense = WFSTDecoder(g, beam=beam, max_active=max_active, dense_min_degree=1, engine="torch", loop=loop)
    plain = WFSTDecoder(g, beam=beam, max_active=max_active, dense_min_degree=10**9, engine="torch", loop=loop)
    rows = dense._dense_rows(g)
    assert rows is not None and int((rows[0] >= 0).sum()) == g.num_states - int((g.e_ptr[1:] == g.e_ptr[:-1]).sum())
    assert plain._dense_rows(g) is None
    _same(dense(lp, lengths, boosts=boosts), plain(lp, lengths, boosts=boosts))
    nd, npl = dense(lp, lengths, boosts=boosts, nbest=3), plain(lp, lengths, boosts=boosts, nbest=3)
    for a, b in zip(nd, npl):
        _same(a, b)


@pytest.mark.parametrize("loop", ["auto", "fixed"])
def test_prepruning_memory_cap_and_unsorted_arcs(graphs, loop):
    g = graphs["compact"]
    gen = torch.Generator().manual_seed(1)
    lp = (torch.randn(2, 12, V, generator=gen) * 3).log_softmax(-1)
    want = WFSTDecoder(g, beam=5.0, dense_min_degree=10**9)(lp)
    capped = WFSTDecoder(g, beam=5.0, dense_min_degree=1, dense_memory_mb=3 * 8 * V / 2**20,  # room for 3 rows
                         engine="torch", loop=loop)
    assert int((capped._dense_rows(g)[0] >= 0).sum()) == 3
    _same(capped(lp), want)
    # a graph whose arcs are not sorted by token within a state (e.g. built elsewhere): rows still right
    from dataclasses import replace

    perm = torch.arange(g.e_src.shape[0])
    for s in range(g.num_states):
        lo, hi = int(g.e_ptr[s]), int(g.e_ptr[s + 1])
        perm[lo:hi] = perm[lo:hi].flip(0)
    shuffled = replace(g, **{k: getattr(g, k)[perm] for k in ("e_src", "e_dst", "e_ilabel", "e_olabel", "e_score", "e_start")})
    dec = WFSTDecoder(shuffled, beam=5.0, dense_min_degree=1, engine="torch", loop=loop)
    got = dec(lp)
    assert [h.words for h in got] == [h.words for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5)


def test_streaming_with_prepruning(graphs):
    g = graphs["normal"]
    gen = torch.Generator().manual_seed(4)
    lp = (torch.randn(3, 14, V, generator=gen) * 3).log_softmax(-1)
    lengths = torch.tensor([14, 5, 10])
    dec = WFSTDecoder(g, beam=6.0, max_active=10, dense_min_degree=1)
    whole = dec(lp, lengths)
    state = dec.init_state(3)
    for lo in range(0, 14, 5):
        chunk = lp[:, lo : lo + 5]
        dec.advance(state, chunk, (lengths - lo).clamp(0, chunk.shape[1]))
    _same(dec.hypotheses(state), whole)


def test_prepruning_bad_settings(graphs):
    from asrdecode.errors import DecodingInputError

    with pytest.raises(DecodingInputError, match="dense_min_degree"):
        WFSTDecoder(graphs["compact"], dense_min_degree=0)
    with pytest.raises(DecodingInputError, match="dense_memory_mb"):
        WFSTDecoder(graphs["compact"], dense_memory_mb=-1.0)
    # no memory for rows: the plain expansion
    assert WFSTDecoder(graphs["compact"], dense_min_degree=1, dense_memory_mb=0)._dense_rows(graphs["compact"]) is None


def test_fixed_loop_prepruning_expands_fewer_arcs(graphs):
    """The fixed-shape loop's most arcs in a frame (counted by the loop) with dense rows against without, on
    peaky log-probs (few tokens near the best): about half here (V=6; 4-5x on demo-ctc's 2000-word TLG,
    ``benchmarks/wfst_fixed_work.py``), the same results."""
    g = graphs["normal"]
    gen = torch.Generator().manual_seed(5)
    lp = (torch.randn(8, 40, V, generator=gen) * 8).log_softmax(-1)
    lengths = torch.tensor([40, 33, 40, 12, 40, 27, 40, 40])
    want = WFSTDecoder(g, beam=5.0, engine="torch", loop="dynamic")(lp, lengths)
    most = {}
    for deg in (1, 10**9):
        fixed.LOOPS.clear()
        dec = WFSTDecoder(g, beam=5.0, dense_min_degree=deg, engine="torch", loop="fixed")
        _same(dec(lp, lengths), want)
        loop = list(fixed.LOOPS._entries.values())[-1]
        assert loop.pre == (deg == 1)
        most[deg] = loop.flags[1]
    assert most[1] * 3 < most[10**9] * 2, most
