"""Lexicons with several pronunciations per word: every spelling reads as the word."""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import WFSTDecoder, build_tlg, read_lexicon  # noqa: E402
from asrdecode.ctc.wfst.lexicon import pronunciations  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from test_ctc_wfst import BLANK, V, _arcs, _compact_readings, _lm_only, all_paths  # noqa: E402



def _segment(tokens, lex):
    if not tokens:
        return {()}
    out = set()
    for w, sp in lex.items():
        for p in pronunciations(sp):
            if tuple(tokens[: len(p)]) == p:
                out |= {(w,) + rest for rest in _segment(tokens[len(p):], lex)}
    return out


@pytest.mark.parametrize("top", ["normal", "compact"])
def test_every_pronunciation_reads_as_its_word(top):
    lex = {"ab": [[0, 2], [2, 0]], "a": [0], "x": [[2, 0]], "bb": [2, 2]}
    g = build_tlg(V, lex, _lm_only(list(lex)), topology=top, blank_id=BLANK)
    arcs = _arcs(g)
    for n in range(1, 6):
        for frames in itertools.product(range(V), repeat=n):
            got = {tuple(g.words[w] for w in ws) for ws, _, _ in all_paths(g, list(frames), arcs)}
            if top == "normal":
                out, last = [], None
                for f in frames:
                    if f != BLANK and f != last:
                        out.append(f)
                    last = f
                readings = {tuple(out)}
            else:
                readings = _compact_readings(frames)
            want = set().union(*(_segment(r, lex) for r in readings))
            assert got == want, (frames, got, want)
    # "b a" is both ab (second spelling) and x: the decoder picks by LM score, both are in the n-best
    lp = torch.full((1, 3, V), -9.0)
    for t, k in enumerate([2, BLANK, 0]):
        lp[0, t, k] = 0.0
    nbest = WFSTDecoder(g, beam=1e9)(lp.log_softmax(-1), nbest=5)[0]
    assert {tuple(w for w, _, _ in h.words) for h in nbest} >= {("ab",), ("x",)}
    # pronunciations of different lengths: word frames come from the arcs, still inside the utterance
    g2 = build_tlg(V, {"ab": [[0, 2], [0]], "b": [2]}, _lm_only(["ab", "b"]), topology=top, blank_id=BLANK)
    assert g2.word_lengths == [0, 0, 1]
    h = WFSTDecoder(g2, beam=1e9)(lp.log_softmax(-1))[0]
    assert all(0 <= s <= e < 3 for _, s, e in h.words)


def test_read_lexicon_all_pronunciations(tmp_path):
    syms = ["a", "<blk>", "b"]
    p = tmp_path / "lex.txt"
    p.write_text("ab a b\nab b a\nab a b\na a\n")
    assert read_lexicon(p, syms) == {"ab": [0, 2], "a": [0]}
    assert read_lexicon(p, syms, all_pronunciations=True) == {"ab": [[0, 2], [2, 0]], "a": [[0]]}
    g = build_tlg(syms, p, _lm_only(["ab", "a"]), topology="normal")  # a file gives every pronunciation
    got = {tuple(g.words[w] for w in ws) for ws, _, _ in all_paths(g, [2, 0])}
    assert got == {("ab",)}
    with pytest.raises(DecodingInputError, match="empty spelling"):
        build_tlg(V, {"ab": [[0, 2], []]}, _lm_only(["ab"]), blank_id=BLANK)
    with pytest.raises(DecodingInputError, match="token 1"):
        build_tlg(V, {"ab": [[0, 2], [0, BLANK]]}, _lm_only(["ab"]), blank_id=BLANK)
