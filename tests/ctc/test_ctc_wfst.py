"""WFST (TLG) decoding: topologies, graph building and the token-passing decoder vs exhaustive search."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder, build_tlg, ctc_topology_text, read_lexicon  # noqa: E402
from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.lm import ArpaModel, write_arpa  # noqa: E402

V, BLANK = 3, 1  # tokens 0 ("a") and 2 ("b"); blank in the middle on purpose
LEXICON = {"ab": [0, 2], "ba": [2, 0], "a": [0], "b": [2], "aa": [0, 0]}


def _lm() -> ArpaModel:
    return ArpaModel.from_dict({
        ("<s>",): (-99.0, -0.25), ("</s>",): (-0.9, None), ("ab",): (-0.6, -0.2), ("ba",): (-0.7, -0.1),
        ("a",): (-0.8, -0.3), ("b",): (-0.9, -0.05), ("aa",): (-1.1, -0.1),
        ("<s>", "ab"): (-0.3, None), ("ab", "ba"): (-0.2, None), ("a", "</s>"): (-0.4, None), ("b", "a"): (-0.5, None),
    })


@pytest.fixture(scope="module")
def graphs() -> dict[str, DecodingGraph]:
    return {top: build_tlg(V, LEXICON, _lm(), topology=top, blank_id=BLANK) for top in ("compact", "normal")}


# ---- readable oracle: enumerate every path of the graph that reads a given frame-token sequence ----

def _arcs(g: DecodingGraph):
    em: dict[int, list] = {}
    ep: dict[int, list] = {}
    for i in range(g.e_src.shape[0]):
        em.setdefault(int(g.e_src[i]), []).append(
            (int(g.e_ilabel[i]), int(g.e_dst[i]), int(g.e_olabel[i]), float(g.e_score[i]), bool(g.e_start[i])))
    for i in range(g.p_src.shape[0]):
        ep.setdefault(int(g.p_src[i]), []).append((int(g.p_dst[i]), int(g.p_olabel[i]), float(g.p_score[i])))
    return em, ep


def all_paths(g: DecodingGraph, frames: list[int], arcs=None):
    """Every accepting path reading ``frames``: list of (word ids, started tokens, graph score)."""
    em, ep = arcs or _arcs(g)
    out = []

    def walk(state, i, words, toks, score, eps_steps):
        if i == len(frames) and math.isfinite(float(g.final_score[state])):
            out.append((tuple(words), tuple(toks), score + float(g.final_score[state])))
        if eps_steps < 10:
            for dst, ol, sc in ep.get(state, []):
                walk(dst, i, words + ([ol] if ol else []), toks, score + sc, eps_steps + 1)
        if i < len(frames):
            for il, dst, ol, sc, st in em.get(state, []):
                if il == frames[i]:
                    walk(dst, i + 1, words + ([ol] if ol else []), toks + ([il] if st else []), score + sc, 0)

    walk(g.start, 0, [], [], 0.0, 0)
    return out


def exhaustive_best(g: DecodingGraph, lp: torch.Tensor, boost: dict[str, float] | None = None):
    """Best (total score, words, tokens) over every frame alignment of ``lp [T, V]`` and every graph path."""
    arcs = _arcs(g)
    widx = g.word_index()
    bw = {widx[w]: v for w, v in (boost or {}).items()}
    best = (-math.inf, None, None)
    for frames in itertools.product(range(lp.shape[1]), repeat=lp.shape[0]):
        am = sum(float(lp[t, f]) for t, f in enumerate(frames))
        for words, toks, gs in all_paths(g, list(frames), arcs):
            total = am + gs + sum(bw.get(w, 0.0) for w in words)
            if total > best[0]:
                best = (total, [g.words[w] for w in words], list(toks))
    return best


def _collapse(frames):
    out, last = [], None
    for f in frames:
        if f != BLANK and f != last:
            out.append(f)
        last = f
    return tuple(out)


def _compact_readings(frames):
    """Token sequences of the compact topology: a run of r equal non-blank frames gives 1..r tokens."""
    runs = [(k, len(list(grp))) for k, grp in itertools.groupby(frames)]
    options = [[(k,) * n for n in range(1, r + 1)] if k != BLANK else [()] for k, r in runs]
    return {tuple(x for part in combo for x in part) for combo in itertools.product(*options)}


def _topology_graph(top: str) -> DecodingGraph:
    return DecodingGraph.from_fst_text(ctc_topology_text(V, BLANK, top), ["<eps>"] + [str(t) for t in range(V)], V, BLANK, top)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_normal_topology_is_the_ctc_collapse(n):
    g = _topology_graph("normal")
    for frames in itertools.product(range(V), repeat=n):
        outs = {tuple(w - 1 for w in words) for words, _, _ in all_paths(g, list(frames))}
        assert outs == {_collapse(frames)}, frames
        # the start flags mark exactly the output tokens
        assert {toks for _, toks, _ in all_paths(g, list(frames))} == {_collapse(frames)}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_compact_topology_also_splits_repeats(n):
    g = _topology_graph("compact")
    for frames in itertools.product(range(V), repeat=n):
        paths = all_paths(g, list(frames))
        outs = {tuple(w - 1 for w in words) for words, _, _ in paths}
        assert outs == _compact_readings(frames), frames
        assert _collapse(frames) in outs
        assert all(toks == tuple(w - 1 for w in words) for words, toks, _ in paths)
    assert {tuple(w - 1 for w in ws) for ws, _, _ in all_paths(g, [0, 0])} == {(0,), (0, 0)}
    assert {tuple(w - 1 for w in ws) for ws, _, _ in all_paths(_topology_graph("normal"), [0, 0])} == {(0,)}


def _segmentations(tokens: tuple[int, ...]) -> set[tuple[str, ...]]:
    if not tokens:
        return {()}
    out = set()
    for w, sp in LEXICON.items():
        if tuple(sp) == tokens[: len(sp)]:
            out |= {(w,) + rest for rest in _segmentations(tokens[len(sp):])}
    return out


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_tlg_reads_exactly_the_lexicon_spellings(graphs, top):
    g = graphs[top]
    arcs = _arcs(g)
    for n in range(1, 6):
        for frames in itertools.product(range(V), repeat=n):
            got = {tuple(g.words[w] for w in ws) for ws, _, _ in all_paths(g, list(frames), arcs)}
            readings = {_collapse(frames)} if top == "normal" else _compact_readings(frames)
            want = set().union(*(_segmentations(r) for r in readings))
            assert got == want, (frames, got, want)


def test_tlg_scores_are_the_lm(graphs):
    # "<s> ab ba </s>": explicit bigrams <s> ab, ab ba; ba </s> backs off: bo(ba) + p(</s>)
    want = math.log(10) * (-0.3 - 0.2 + (-0.1 - 0.9))
    for g in graphs.values():
        scores = [s for ws, _, s in all_paths(g, [0, 2, BLANK, 2, 0]) if [g.words[w] for w in ws] == ["ab", "ba"]]
        assert max(scores) == pytest.approx(want, abs=2e-3)  # determinisation quantises weights (delta 1/1024)


@pytest.mark.parametrize("top", ["normal", "compact"])
@pytest.mark.parametrize("seed", range(6))
def test_decoder_equals_exhaustive_search(graphs, top, seed):
    g = graphs[top]
    gen = torch.Generator().manual_seed(seed)
    B, T = 3, 5
    lp = (torch.randn(B, T, V, generator=gen) * 2).log_softmax(-1)
    lengths = torch.tensor([5, 3, 4])
    hyps = WFSTDecoder(g, beam=1e9)(lp, lengths)
    for b in range(B):
        score, words, toks = exhaustive_best(g, lp[b, : lengths[b]])
        assert [w for w, _, _ in hyps[b].words] == words
        assert hyps[b].tokens == toks
        assert hyps[b].score == pytest.approx(score, abs=1e-4)


def test_acoustic_scale_and_word_times(graphs):
    g = graphs["normal"]
    lp = torch.full((1, 6, V), -8.0)
    for t, k in enumerate([0, 0, 2, BLANK, 2, 0]):  # "a a b _ b a": ab ba
        lp[0, t, k] = -0.01
    h = WFSTDecoder(g, beam=1e9, acoustic_scale=2.0)(lp)[0]
    assert [w for w, _, _ in h.words] == ["ab", "ba"]
    assert h.words == [("ab", 0, 2), ("ba", 4, 5)]  # from the tokens spelling each word
    assert h.tokens == [0, 2, 2, 0] and h.timestamps == [0, 2, 4, 5]
    lm = math.log(10) * (-0.3 - 0.2 - 0.1 - 0.9)
    assert h.score == pytest.approx(2.0 * -0.06 + lm, abs=2e-3)


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_batch_invariance(graphs, top):
    g = graphs[top]
    gen = torch.Generator().manual_seed(7)
    lp = (torch.randn(5, 9, V, generator=gen) * 2).log_softmax(-1)
    lengths = torch.tensor([9, 1, 6, 0, 8])
    dec = WFSTDecoder(g, beam=8.0, max_active=6)
    together = dec(lp, lengths)
    for b in range(5):
        alone = dec(lp[b : b + 1, : max(int(lengths[b]), 1)], lengths[b : b + 1])[0]
        assert alone.words == together[b].words and alone.tokens == together[b].tokens
        assert alone.score == pytest.approx(together[b].score, abs=1e-5)
    assert together[3].tokens == [] and together[3].words == []


@pytest.mark.parametrize("seed", range(4))
def test_boosting_equals_boosted_exhaustive_search(graphs, seed):
    g = graphs["compact"]
    gen = torch.Generator().manual_seed(100 + seed)
    lp = (torch.randn(2, 5, V, generator=gen) * 2).log_softmax(-1)
    boosts = [{"ba": 3.0, "a": -1.0}, {"aa": 2.5}]
    hyps = WFSTDecoder(g, beam=1e9)(lp, boosts=boosts)
    plain = WFSTDecoder(g, beam=1e9)(lp)
    for b in range(2):
        score, words, _ = exhaustive_best(g, lp[b], boosts[b])
        assert [w for w, _, _ in hyps[b].words] == words
        assert hyps[b].score == pytest.approx(score, abs=1e-4)
        # a boost changes the 1-best only if the boosted optimum differs from the plain one
        p_score, p_words, _ = exhaustive_best(g, lp[b])
        assert [w for w, _, _ in plain[b].words] == p_words


def test_boost_flips_result_only_past_the_gap(graphs):
    g = graphs["normal"]
    lp = torch.full((1, 3, V), -6.0)
    lp[0, 0, 0] = -0.1
    lp[0, 1, BLANK] = -0.1
    lp[0, 2, 0] = -0.1  # "a _ a": best is "a a" or "aa"
    dec = WFSTDecoder(g, beam=1e9)
    base = dec(lp)[0]
    base_words = [w for w, _, _ in base.words]
    # word times come from the tokens spelling each word, even when determinisation delays the word label
    assert base.words in ([("aa", 0, 2)], [("a", 0, 0), ("a", 2, 2)])
    other = ["aa"] if base_words != ["aa"] else ["a", "a"]
    # score of the other reading, from the exhaustive search restricted to it
    alt = max(s for ws, _, s in all_paths(g, [0, BLANK, 0]) if [g.words[w] for w in ws] == other)
    gap = (base.score - (-0.3)) - alt
    assert gap > 0
    w = other[0]
    n = len(other)
    small = dec(lp, boosts=[{w: 0.9 * gap / n}])[0]
    assert [x for x, _, _ in small.words] == base_words
    big = dec(lp, boosts=[{w: 1.1 * gap / n}])[0]
    assert [x for x, _, _ in big.words] == other
    # a small boost of a word of neither reading changes nothing
    assert dec(lp, boosts=[{"ba": 0.5}])[0].words == base.words


def test_save_load_round_trip(graphs, tmp_path):
    g = graphs["compact"]
    g.save(tmp_path / "tlg.pt")
    g2 = DecodingGraph.load(tmp_path / "tlg.pt")
    lp = torch.randn(2, 6, V, generator=torch.Generator().manual_seed(3)).log_softmax(-1)
    a, b = WFSTDecoder(g)(lp), WFSTDecoder(g2)(lp)
    assert [h.words for h in a] == [h.words for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-6, abs=1e-6)
    (tmp_path / "bad.pt").write_bytes(b"nope")
    with pytest.raises(FileFormatError, match="bad.pt"):
        DecodingGraph.load(tmp_path / "bad.pt")


def test_lexicon_file(tmp_path):
    syms = ["a", "<blk>", "b"]
    p = tmp_path / "lex.txt"
    p.write_text("ab a b\n\nba b a\n")
    assert read_lexicon(p, syms) == {"ab": [0, 2], "ba": [2, 0]}
    g = build_tlg(syms, p, _lm_only(["ab", "ba"]), topology="normal")
    assert g.blank_id == 1 and g.words == ["<eps>", "ab", "ba"]
    p.write_text("ab a b\nba\n")
    with pytest.raises(FileFormatError, match=r"lex.txt:2"):
        read_lexicon(p, syms)
    p.write_text("ab a b\nba b c\n")
    with pytest.raises(FileFormatError, match=r"lex.txt:2.*'c'"):
        build_tlg(syms, p, _lm_only(["ab", "ba"]))
    p.write_text("\n\n")
    with pytest.raises(FileFormatError, match="empty"):
        read_lexicon(p, syms)


def _lm_only(words):
    d = {("<s>",): (-99.0, None), ("</s>",): (-1.0, None)}
    d.update({(w,): (-1.0, None) for w in words})
    return ArpaModel.from_dict(d)


def test_bad_inputs(graphs, tmp_path):
    arpa = write_arpa(_lm_only(["ab", "zz"]), tmp_path / "lm.arpa")
    with pytest.raises(FileFormatError, match=r"lm.arpa:\d+.*'zz'"):
        build_tlg(V, {"ab": [0, 2]}, arpa, blank_id=BLANK)
    with pytest.raises(DecodingInputError, match="empty"):
        build_tlg(V, {}, _lm(), blank_id=BLANK)
    with pytest.raises(DecodingInputError, match="token 7"):
        build_tlg(V, {"ab": [0, 7]}, _lm_only(["ab"]), blank_id=BLANK)
    with pytest.raises(DecodingInputError, match="token 1"):
        build_tlg(V, {"ab": [0, 1]}, _lm_only(["ab"]), blank_id=BLANK)
    with pytest.raises(DecodingInputError, match="topology"):
        build_tlg(V, LEXICON, _lm(), topology="fancy", blank_id=BLANK)
    g = graphs["normal"]
    dec = WFSTDecoder(g)
    with pytest.raises(DecodingInputError, match="2 classes"):
        dec(torch.zeros(1, 3, 2))
    with pytest.raises(DecodingInputError, match="'zz'"):
        dec(torch.zeros(1, 3, V), boosts=[{"zz": 1.0}])
    with pytest.raises(DecodingInputError, match="one entry per utterance"):
        dec(torch.zeros(2, 3, V), boosts=[{}])
    with pytest.raises(DecodingInputError, match="blank"):
        WFSTDecoder(g, blank_id=0)
    with pytest.raises(DecodingInputError, match=r"NaN or \+inf"):
        dec(torch.full((1, 3, V), float("nan")))
    for engine in ("native", "torch"):
        bad = torch.zeros(2, 3, V)
        bad[1, 1, 0] = float("inf")
        with pytest.raises(DecodingInputError, match=r"NaN or \+inf"):
            WFSTDecoder(g, engine=engine)(bad)
        bad[1, 1] = -float("inf")
        with pytest.raises(DecodingInputError, match="all -inf"):
            WFSTDecoder(g, engine=engine)(bad)
        WFSTDecoder(g, engine=engine)(bad, torch.tensor([3, 1]))  # ... in padding: not inspected
        bad[1, 1, 1:] = 0.0  # one class masked: fine
        WFSTDecoder(g, engine=engine)(bad)
    with pytest.raises(DecodingInputError):
        dec(torch.zeros(1, 3, V), torch.tensor([4]))


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_streaming_equals_whole(graphs, top):
    g = graphs[top]
    gen = torch.Generator().manual_seed(11)
    lp = (torch.randn(4, 13, V, generator=gen) * 2).log_softmax(-1)
    lengths = torch.tensor([13, 7, 0, 10])
    boosts = [{"ab": 1.0}, None, None, {"b": -0.5}]
    dec = WFSTDecoder(g, beam=6.0, max_active=5)
    whole = dec(lp, lengths, boosts=boosts)
    state = dec.init_state(4, boosts=boosts)
    for lo in range(0, 13, 4):
        chunk = lp[:, lo : lo + 4]
        cl = (lengths - lo).clamp(0, chunk.shape[1])
        dec.advance(state, chunk, cl)
        assert len(dec.hypotheses(state)) == 4
    parts = dec.hypotheses(state)
    for a, b in zip(whole, parts):
        assert a.words == b.words and a.tokens == b.tokens and a.timestamps == b.timestamps
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_lexicon_from_tokenizer_and_narrow_beam():
    from asrdecode.ctc.wfst import lexicon_from_tokenizer

    class CharTok:  # "a" -> 0, "b" -> 2 (blank 1)
        def encode(self, text):
            return [{"a": 0, "b": 2}[c] for c in text]

    lex = lexicon_from_tokenizer(["ab", "ba", "a"], CharTok())
    assert lex == {"ab": [0, 2], "ba": [2, 0], "a": [0]}
    g = build_tlg(V, lex, _lm_only(["ab", "ba", "a"]), blank_id=BLANK)
    lp = torch.full((1, 4, V), -5.0)
    for t, k in enumerate([2, 0, BLANK, 0]):
        lp[0, t, k] = -0.05
    wide = WFSTDecoder(g, beam=1e9)(lp)[0]
    narrow = WFSTDecoder(g, beam=3.0, max_active=1)(lp)[0]
    assert [w for w, _, _ in wide.words] == ["ba", "a"]
    # one token per frame: a search error is allowed, a better-than-optimal score is not
    assert narrow.score <= wide.score + 1e-6 and all(w in lex for w, _, _ in narrow.words)


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_homophones_and_prefixes_get_disambiguated(top):
    lex = {"ab": [0, 2], "ab2": [0, 2], "a": [0], "aba": [0, 2, 0]}
    g = build_tlg(V, lex, _lm_only(list(lex)), topology=top, blank_id=BLANK)
    arcs = _arcs(g)
    got = {tuple(g.words[w] for w in ws) for ws, _, _ in all_paths(g, [0, 2, BLANK, 0], arcs)}
    assert got == {("ab", "a"), ("ab2", "a"), ("aba",)}
    # the disambiguation symbols are gone: every emitting arc reads a model token
    assert int(g.e_ilabel.max()) < V and int(g.e_ilabel.min()) >= 0


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_blank_collapse_first_keeps_original_frames(graphs, top):
    """Decoding blank-collapsed frames with their frame_index gives the words and times of the full input."""
    from asrdecode.ctc import blank_collapse

    g = graphs[top]
    frames = [BLANK, BLANK, 0, BLANK, BLANK, 2, BLANK, BLANK, BLANK, 2, 0, BLANK, BLANK]  # "ab ba" among blanks
    lp = torch.full((2, len(frames), V), -9.0)
    for t, k in enumerate(frames):
        lp[:, t, k] = 0.0
    lp = torch.log_softmax(lp, -1)
    lengths = torch.tensor([len(frames), len(frames) - 2])
    dec = WFSTDecoder(g, beam=1e9)
    full = dec(lp, lengths)
    collapsed, new_lengths, frame_index = blank_collapse(lp, lengths, BLANK, threshold=0.999)
    assert int(new_lengths[0]) < len(frames)  # frames were removed
    mapped = dec(collapsed, new_lengths, frame_index=frame_index)
    for a, b in zip(mapped, full):
        assert a.words == b.words and a.tokens == b.tokens and a.timestamps == b.timestamps
    with pytest.raises(DecodingInputError, match="frame_index"):
        dec(collapsed, new_lengths, frame_index=frame_index[:, :1])
