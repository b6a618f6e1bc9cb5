"""WFST word times: every word's start and end lie within the frames of its own tokens.

The output label of a word sits anywhere from its first token to a later word's in a determinised
graph, so the times come from splitting the tokens into the words' pronunciations (issue 29, defect
1: phone-ctc's words started where the previous word ended). Checked on random emissions for
lexicons with several pronunciations per word (both topologies, both engines) and on the real clips
for phone-ctc (hama) and demo-ctc (BPE).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder, build_tlg, load_graph  # noqa: E402
from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.lm import ArpaModel  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "data" / "real"
ENGINES = ("torch", "native")

V, A, BLANK, B, WB = 4, 0, 1, 2, 3  # tokens a, b and a word boundary wb; blank in the middle
# every word also spelled with a trailing boundary token, and "a b" spells both "ab" and "a" + "b":
# determinisation delays the words' output labels past their own tokens
PRONS = {
    "a": [[A], [A, WB]], "b": [[B], [B, WB]], "ab": [[A, B], [A, B, WB]],
    "ba": [[B, A], [B, A, WB]], "aab": [[A, A, B], [A, A, B, WB]],
}


def _lm() -> ArpaModel:
    return ArpaModel.from_dict({
        ("<s>",): (-99.0, -0.2), ("</s>",): (-0.9, None), ("a",): (-0.7, -0.2), ("b",): (-0.8, -0.1),
        ("ab",): (-0.9, -0.2), ("ba",): (-0.9, -0.1), ("aab",): (-1.2, -0.1),
        ("<s>", "ab"): (-0.3, None), ("ab", "ba"): (-0.2, None), ("a", "b"): (-0.4, None),
    })


def spans_within_tokens(hyp, prons: dict[str, list[tuple[int, ...]]], slack: int = 1) -> bool:
    """Whether ``hyp.tokens`` split into one pronunciation per word, in order, so that each word's
    start is its first token's frame and its end lies from its last token's first frame to before the
    next word's first token (both +- ``slack`` frames)."""
    toks, frames, words = hyp.tokens, hyp.timestamps, hyp.words

    def fits(k: int, pos: int) -> bool:
        if k == len(words):
            return pos == len(toks)
        w, start, end = words[k]
        for p in prons[w]:
            nxt = pos + len(p)
            if tuple(toks[pos:nxt]) != tuple(p) or not p:
                continue
            stop = frames[nxt] if nxt < len(toks) else 10 ** 9
            if abs(start - frames[pos]) <= slack and frames[nxt - 1] - slack <= end < stop + slack and fits(k + 1, nxt):
                return True
        return False

    return fits(0, 0)


@pytest.fixture(scope="module")
def graphs() -> dict[str, DecodingGraph]:
    return {top: build_tlg(V, PRONS, _lm(), topology=top, blank_id=BLANK) for top in ("compact", "normal")}


@pytest.mark.parametrize("top", ["compact", "normal"])
@pytest.mark.parametrize("engine", ENGINES)
def test_word_times_inside_their_tokens_random(graphs, top, engine):
    g = graphs[top]
    prons = {w: [tuple(p) for p in ps] for w, ps in PRONS.items()}
    gen = torch.Generator().manual_seed(3)
    lp = (torch.randn(12, 14, V, generator=gen) * 3).log_softmax(-1)
    lengths = torch.randint(0, 15, (12,), generator=gen)
    hyps = WFSTDecoder(g, beam=12.0, engine=engine)(lp, lengths)
    assert sum(len(h.words) for h in hyps) > 12
    for h in hyps:
        assert spans_within_tokens(h, prons), (h.tokens, h.timestamps, h.words)


@pytest.mark.parametrize("engine", ENGINES)
def test_delayed_output_label_gets_its_own_tokens(graphs, engine):
    """ "a _ _ b _ _ _ _ b a": the words' labels come out late; the times follow the tokens."""
    g = graphs["compact"]
    frames = [A, BLANK, BLANK, B, BLANK, BLANK, BLANK, BLANK, B, A]
    lp = torch.full((1, len(frames), V), -9.0)
    for t, k in enumerate(frames):
        lp[0, t, k] = -0.01
    h = WFSTDecoder(g, beam=1e9, engine=engine)(lp)[0]
    assert h.tokens == [A, B, B, A] and h.timestamps == [0, 3, 8, 9]
    assert h.words == [("ab", 0, 3), ("ba", 8, 9)]


def test_graph_without_pronunciations_keeps_the_old_rule(graphs):
    """Graph files written before pronunciations were recorded: one length per word still gives times."""
    single = {"ab": [A, B], "ba": [B, A], "a": [A], "b": [B], "aab": [A, A, B]}
    g = build_tlg(V, single, _lm(), topology="compact", blank_id=BLANK)
    lp = torch.full((1, 6, V), -9.0)
    for t, k in enumerate([A, B, BLANK, BLANK, B, A]):
        lp[0, t, k] = -0.01
    with_prons = WFSTDecoder(g, beam=1e9)(lp)[0]
    g.pron_ptr = g.pron_tokens = None
    without = WFSTDecoder(g, beam=1e9)(lp)[0]
    assert with_prons.words == without.words == [("ab", 0, 1), ("ba", 4, 5)]


def test_pronunciations_saved_loaded_and_checked(graphs, tmp_path):
    g = graphs["compact"]
    idx = g.word_index()
    assert sorted(g.pronunciations(idx["ab"])) == [(A, B), (A, B, WB)]
    assert g.pronunciations(0) == [] and g.pronunciations(len(g.words)) == []
    g.save(tmp_path / "g.pt")
    back = load_graph(tmp_path / "g.pt")
    assert all(back.pronunciations(w) == g.pronunciations(w) for w in range(len(g.words)))
    bad = load_graph(tmp_path / "g.pt")
    bad.pron_ptr = bad.pron_ptr[:-1]
    with pytest.raises(DecodingInputError, match="pron_ptr"):
        bad.validate()
    bad = load_graph(tmp_path / "g.pt")
    bad.pron_tokens = bad.pron_tokens.clone()
    bad.pron_tokens[0] = V
    with pytest.raises(DecodingInputError, match="pron_tokens"):
        bad.validate()
    bad = load_graph(tmp_path / "g.pt")
    bad.pron_tokens = None
    with pytest.raises(DecodingInputError, match="together"):
        bad.validate()


# ---- the real clips ----------------------------------------------------------------------------

def _manifest_words() -> list[str]:
    lines = (REAL / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted({w for line in lines for w in json.loads(line)["text"].split()})


def _unigram_lm(words: list[str]) -> ArpaModel:
    d = {("<s>",): (-99.0, 0.0), ("</s>",): (-1.5, None)}
    d.update({(w,): (-2.0, 0.0) for w in words})
    return ArpaModel.from_dict(d)


def _clips() -> list[Path]:
    return sorted(REAL.glob("*.wav"))


@pytest.mark.parametrize("top", ["compact", "normal"])
def test_phone_ctc_word_times_on_real_clips(top):
    """phone-ctc (hama) over the clips' words (phones and phones + <wb> each), both engines."""
    pytest.importorskip("hama")
    from asrdecode.audio import read_audio
    from asrdecode.models.phone import ACOUSTIC_SCALE, PhoneCTCBundle

    bundle = PhoneCTCBundle(words=1)
    lex = bundle.phone_lexicon()
    words = [w for w in _manifest_words() if w in lex] + ["clothes", "clubs", "hearts", "diamonds", "spades"]
    index = {s: i for i, s in enumerate(bundle.symbols)}
    prons = {w: [tuple(index[p] for p in lex[w]), tuple(index[p] for p in lex[w]) + (bundle.wb_id,)]
             for w in words if w in lex}
    g = build_tlg(list(bundle.symbols), {w: [list(p) for p in ps] for w, ps in prons.items()},
                  _unigram_lm(sorted(prons)), topology=top, blank_id=bundle.blank_id)
    feats, lens = bundle.features([read_audio(p) for p in _clips()])
    lp = bundle.model.log_probs_from_encoder(bundle.encode_features(feats, lens)[0])
    n_words = 0
    for engine in ENGINES:
        hyps = WFSTDecoder(g, beam=12.0, acoustic_scale=ACOUSTIC_SCALE, engine=engine)(lp, lens)
        for h in hyps:
            assert spans_within_tokens(h, prons), (h.tokens, h.timestamps, h.words)
            n_words += len(h.words)
    assert n_words > 100  # the clips decode to real words


@pytest.mark.parametrize("top", ["compact", "normal"])
def test_demo_ctc_word_times_on_real_clips(top):
    """demo-ctc (sentencepiece BPE) with a small TLG; words spelled as the tokenizer does and with
    single-character pieces, both engines."""
    pytest.importorskip("sentencepiece")
    from asrdecode.audio import read_audio
    from asrdecode.models import load

    demo = load("demo-ctc")
    tok = demo.tokenizer
    piece = {tok.id_to_piece(i): i for i in range(tok.vocab_size) if i != demo.blank_id}
    prons: dict[str, list[tuple[int, ...]]] = {}
    for w in _manifest_words():
        ps = [tuple(tok.encode(w))]
        chars = ["\u2581" + w[0]] + list(w[1:])
        if all(c in piece for c in chars) and tuple(piece[c] for c in chars) != ps[0]:
            ps.append(tuple(piece[c] for c in chars))
        prons[w] = ps
    assert sum(len(p) > 1 for p in prons.values()) > 20
    g = build_tlg(tok.vocab_size, {w: [list(p) for p in ps] for w, ps in prons.items()}, _unigram_lm(sorted(prons)),
                  topology=top, blank_id=demo.blank_id)
    feats, lens = demo.features([read_audio(p) for p in _clips()])
    enc, elens = demo.encode_features(feats, lens)
    lp = demo.model.log_probs_from_encoder(enc)
    n_words = 0
    for engine in ENGINES:
        for h in WFSTDecoder(g, beam=12.0, engine=engine)(lp, elens):
            assert spans_within_tokens(h, prons), (h.tokens, h.timestamps, h.words)
            n_words += len(h.words)
    assert n_words > 50
