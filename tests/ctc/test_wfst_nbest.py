"""WFST decoder n-best lists and lattices vs exhaustive search over the graph's paths."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

pytest.importorskip("kaldifst")

import kaldifst  # noqa: E402

from asrdecode.ctc.wfst import WFSTDecoder, build_tlg  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from test_ctc_wfst import BLANK, LEXICON, V, _arcs, _lm, all_paths  # noqa: E402


@pytest.fixture(scope="module")
def graphs():
    return {top: build_tlg(V, LEXICON, _lm(), topology=top, blank_id=BLANK) for top in ("compact", "normal")}


def exhaustive_word_scores(g, lp, boost=None):
    """{word sequence: best total score} over every frame alignment of ``lp [T, V]`` and graph path."""
    arcs = _arcs(g)
    widx = g.word_index()
    bw = {widx[w]: v for w, v in (boost or {}).items()}
    best: dict[tuple[str, ...], float] = {}
    for frames in itertools.product(range(lp.shape[1]), repeat=lp.shape[0]):
        am = sum(float(lp[t, f]) for t, f in enumerate(frames))
        for words, _, gs in all_paths(g, list(frames), arcs):
            k = tuple(g.words[w] for w in words)
            best[k] = max(best.get(k, -math.inf), am + gs + sum(bw.get(w, 0.0) for w in words))
    return best


def _words(h):
    return tuple(w for w, _, _ in h.words)


def _check_path(h, lp):
    """The hypothesis' tokens spell its words (lexicon), and its frames are consistent."""
    spelled = [t for w in _words(h) for t in LEXICON[w]]
    assert h.tokens == spelled
    assert h.timestamps == sorted(h.timestamps) and all(0 <= t < lp.shape[0] for t in h.timestamps)
    for (_, s, e), nxt in zip(h.words, h.words[1:] + [None]):
        assert s <= e and (nxt is None or e <= nxt[1])


@pytest.mark.parametrize("top", ["compact", "normal"])
@pytest.mark.parametrize("seed", range(5))
def test_nbest_equals_exhaustive_distinct_word_sequences(graphs, top, seed):
    g = graphs[top]
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(3, 5, V, generator=gen) * 2).log_softmax(-1)
    lengths = torch.tensor([5, 4, 3])
    boosts = [None, {"ba": 1.5}, {"a": -0.5, "aa": 0.7}]
    N = 6
    dec = WFSTDecoder(g, beam=1e9, lattice_beam=1e9)
    nbest = dec(lp, lengths, boosts=boosts, nbest=N)
    one = dec(lp, lengths, boosts=boosts)
    for b in range(3):
        want = sorted(exhaustive_word_scores(g, lp[b, : lengths[b]], boosts[b]).items(), key=lambda x: -x[1])[:N]
        got = nbest[b]
        assert len(got) == min(N, len(want))
        assert got[0].words == one[b].words and got[0].tokens == one[b].tokens
        assert got[0].score == pytest.approx(one[b].score, rel=1e-6, abs=1e-6)
        for h, (_want_words, score) in zip(got, want):
            assert h.score == pytest.approx(score, abs=1e-4)
        # the same set of word sequences (ties at the cut may swap places)
        cut = want[-1][1]
        assert {_words(h) for h in got if h.score > cut + 1e-4} == {w for w, s in want if s > cut + 1e-4}
        assert len({_words(h) for h in got}) == len(got)
        scores = exhaustive_word_scores(g, lp[b, : lengths[b]], boosts[b])
        for h in got:
            assert h.score == pytest.approx(scores[_words(h)], abs=1e-4)  # the sequence's best path
            _check_path(h, lp[b, : lengths[b]])


@pytest.mark.parametrize("top", ["compact", "normal"])
def test_nbest_first_is_the_one_best_under_pruning(graphs, top):
    g = graphs[top]
    gen = torch.Generator().manual_seed(5)
    lp = (torch.randn(6, 14, V, generator=gen) * 3).log_softmax(-1)
    lengths = torch.tensor([14, 9, 0, 1, 12, 14])
    for beam, max_active, lattice_beam in [(4.0, 3, 2.0), (8.0, 6, 5.0), (1e9, 1000, 1e9)]:
        dec = WFSTDecoder(g, beam=beam, max_active=max_active, lattice_beam=lattice_beam)
        one = dec(lp, lengths)
        nbest = dec(lp, lengths, nbest=5)
        for b in range(6):
            h0 = nbest[b][0]
            assert (h0.words, h0.tokens, h0.timestamps) == (one[b].words, one[b].tokens, one[b].timestamps)
            assert h0.score == pytest.approx(one[b].score, rel=1e-6, abs=1e-6)
            assert [h.score for h in nbest[b][1:]] == sorted([h.score for h in nbest[b][1:]], reverse=True)
            assert all(h.score <= h0.score + 1e-4 for h in nbest[b])
            assert len({_words(h) for h in nbest[b]}) == len(nbest[b])
        assert nbest[2][0].words == [] and len(nbest[2]) == 1


def test_lattice_beam_prunes(graphs):
    g = graphs["compact"]
    gen = torch.Generator().manual_seed(9)
    lp = (torch.randn(1, 12, V, generator=gen) * 2).log_softmax(-1)
    sizes = []
    for lb in (0.5, 3.0, 1e9):
        hyps, lats = WFSTDecoder(g, beam=1e9, lattice_beam=lb)(lp, nbest=50, return_lattice=True)
        sizes.append(sum(lats[0].num_arcs(s) for s in range(lats[0].num_states)))
        best = hyps[0][0].score
        assert all(h.score <= best + 1e-6 for h in hyps[0])  # (arcs of paths within lb may combine into worse paths)
        if lb == 1e9:
            assert len(hyps[0]) == 50
    assert sizes[0] < sizes[1] < sizes[2]


def test_kaldi_lattice_matches_scores(graphs):
    g = graphs["normal"]
    gen = torch.Generator().manual_seed(3)
    lp = (torch.randn(2, 7, V, generator=gen) * 2).log_softmax(-1)
    dec = WFSTDecoder(g, beam=1e9, lattice_beam=4.0, acoustic_scale=1.5)
    hyps, lats = dec(lp, torch.tensor([7, 5]), return_lattice=True)
    for b, (h, lat) in enumerate(zip(hyps, lats)):
        assert isinstance(lat, kaldifst.Lattice)
        ok, ilabels, olabels, w = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(lat))
        assert ok
        assert -(w.value1 + w.value2) == pytest.approx(h.score, abs=1e-4)
        assert [g.words[o] for o in olabels] == [x for x, _, _ in h.words]
        # one token read per frame; the acoustic cost is acoustic_scale * their log-probs
        frames = [i - 1 for i in ilabels]
        assert len(frames) == (7, 5)[b]
        assert w.value2 == pytest.approx(-1.5 * sum(float(lp[b, t, k]) for t, k in enumerate(frames)), abs=1e-4)


@pytest.mark.parametrize("top", ["compact", "normal"])
def test_streaming_nbest_equals_whole(graphs, top):
    g = graphs[top]
    gen = torch.Generator().manual_seed(21)
    lp = (torch.randn(3, 11, V, generator=gen) * 2).log_softmax(-1)
    lengths = torch.tensor([11, 6, 9])
    boosts = [{"ab": 0.5}, None, {"b": -0.3}]
    dec = WFSTDecoder(g, beam=7.0, max_active=8, lattice_beam=4.0)
    whole = dec(lp, lengths, boosts=boosts, nbest=4)
    state = dec.init_state(3, boosts=boosts, lattice=True)
    for lo in range(0, 11, 3):
        chunk = lp[:, lo : lo + 3]
        dec.advance(state, chunk, (lengths - lo).clamp(0, chunk.shape[1]))
    parts = dec.hypotheses(state, nbest=4)
    for a, b in zip(whole, parts):
        assert [(h.words, h.tokens, h.timestamps) for h in a] == [(h.words, h.tokens, h.timestamps) for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_nbest_with_frame_index(graphs):
    from asrdecode.ctc import blank_collapse

    g = graphs["normal"]
    frames = [BLANK, BLANK, 0, BLANK, BLANK, 2, BLANK, BLANK, 2, 0, BLANK]
    lp = torch.full((1, len(frames), V), -3.0)
    for t, k in enumerate(frames):
        lp[0, t, k] = 0.0
    lp = torch.log_softmax(lp, -1)
    collapsed, n, fi = blank_collapse(lp, None, BLANK, threshold=0.9)
    dec = WFSTDecoder(g, beam=1e9)
    full = dec(lp, nbest=3)[0]
    mapped = dec(collapsed, n, frame_index=fi, nbest=3)[0]
    assert mapped[0].words == full[0].words
    for h in mapped:
        assert all(0 <= s <= e < len(frames) for _, s, e in h.words)


def test_nbest_errors(graphs):
    dec = WFSTDecoder(graphs["compact"])
    lp = torch.zeros(1, 3, V).log_softmax(-1)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(DecodingInputError, match="nbest"):
            dec(lp, nbest=bad)
    state = dec.init_state(1)
    dec.advance(state, lp)
    with pytest.raises(DecodingInputError, match="lattice=True"):
        dec.hypotheses(state, nbest=2)
    with pytest.raises(DecodingInputError, match="lattice_beam"):
        WFSTDecoder(graphs["compact"], lattice_beam=0.0)
    assert len(dec(lp, nbest=1)[0]) == 1
