"""Word-level n-gram LM over token ids (asrdecode.lm.WordNGramLM) against an independent word scorer.

The oracle splits a token sequence into words with its own rules per tokenizer style and scores
the words with the dictionary ARPA scorer of test_lm_ngram.py (textbook back-off, no asrdecode
code). Beam searches fused with the word LM are compared with their per-utterance oracles.
"""

from __future__ import annotations

import gzip
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.fusion import FusionModel
from asrdecode.lm import BoostingTree, NGramLM, WordNGramLM, read_arpa
from asrdecode.lm.word import DEFAULT_UNK_OFFSET, detect_boundaries, token_pieces, word_lm_fusion
from asrdecode.tokenizers import CharTokenizer
from asrdecode.transducer.beam import beam_search as tr_beam_search
from asrdecode.transducer.reference_beam import reference_beam_search as tr_reference
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from test_ctc_helpers import peaky_log_probs, random_lengths, random_token_arpa
from test_lm_ngram import DictArpaScorer
from transducer_models import hyp_key, random_encoder, random_model

LN10 = math.log(10.0)
SP = "\u2581"
SETTINGS = settings(max_examples=40, deadline=None)
STYLES = ("delimiter", "prefix", "wordpiece")


# ------------------------------------------------------------------------------------ fixtures
def random_vocab(rng: random.Random, style: str, alphabet: str = "abc") -> tuple[list[str | None], int]:
    """A vocabulary (blank at a random position) of single letters plus some multi-letter pieces."""
    multi = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(2, 3))) for _ in range(3)})
    if style == "delimiter":
        toks = [rng.choice(["|", " "])] + list(alphabet) + multi
    elif style == "prefix":
        toks = [SP] + list(alphabet) + multi + [SP + c for c in alphabet] + [SP + m for m in multi[:2]]
    else:
        toks = list(alphabet) + multi + ["##" + c for c in alphabet] + ["##" + m for m in multi[1:]]
    rng.shuffle(toks)
    blank = rng.randint(0, len(toks))
    return toks[:blank] + [None] + toks[blank:], blank


def random_word_arpa(rng: random.Random, words: list[str], order: int, with_unk: bool = True) -> str:
    """A random prefix-closed ARPA text over ``words`` (with back-offs, ``</s>`` and ``<unk>`` n-grams)."""
    grams: list[dict] = [dict() for _ in range(order)]
    uni = ["<s>", "</s>"] + (["<unk>"] if with_unk else []) + words
    for w in uni:
        lp = -99.0 if w == "<s>" else round(rng.uniform(-2.5, -0.1), 4)
        b = None if w == "</s>" or order == 1 or rng.random() < 0.3 else round(rng.uniform(-1.2, 0.4), 4)
        grams[0][(w,)] = (lp, b)
    for k in range(2, order + 1):
        ctxs = [g for g in grams[k - 2] if g[-1] != "</s>" and "<s>" not in g[1:]]
        for _ in range(rng.randint(0, 25) if ctxs else 0):
            ctx = rng.choice(ctxs)
            nxt = rng.choice(words + ["</s>"] + (["<unk>"] if with_unk else []))
            g = ctx + (nxt,)
            if g in grams[k - 1]:
                continue
            b = None if k == order or nxt == "</s>" or rng.random() < 0.3 else round(rng.uniform(-1.2, 0.4), 4)
            grams[k - 1][g] = (round(rng.uniform(-2.5, -0.05), 4), b)
    lines = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, start=1)]
    for k, g in enumerate(grams, start=1):
        lines += ["", f"\\{k}-grams:"]
        lines += [f"{lp}\t{' '.join(key)}" + ("" if b is None else f"\t{b}") for key, (lp, b) in g.items()]
    return "\n".join(lines + ["", "\\end\\", ""])


def random_case(seed: int, style: str, order: int | None = None, with_unk: bool | None = None):
    rng = random.Random(seed)
    pieces, blank = random_vocab(rng, style)
    words = sorted({"".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 9))})
    order = order or rng.randint(1, 3)
    text = random_word_arpa(rng, words, order, with_unk=rng.random() < 0.7 if with_unk is None else with_unk)
    return pieces, blank, words, text


# ------------------------------------------------------------------------------------ the oracle
def oracle_split(style: str, pieces: list[str | None], tokens: list[int]) -> tuple[list[str], str]:
    """(finished words, the open word's text) of a token sequence; blanks are skipped."""
    done: list[str] = []
    cur = ""
    for t in tokens:
        p = pieces[t]
        if p is None:
            continue
        if style == "delimiter":
            if p in ("|", " "):
                if cur:
                    done.append(cur)
                cur = ""
            else:
                cur += p
        elif style == "prefix":
            if p.startswith(SP):
                if cur:
                    done.append(cur)
                cur = p[1:]
            else:
                cur += p
        else:
            if p.startswith("##"):
                cur += p[2:]
            else:
                if cur:
                    done.append(cur)
                cur = p
    return done, cur


class WordOracle:
    def __init__(self, text: str, words: list[str], *, unk_offset=DEFAULT_UNK_OFFSET, unk_char_offset=-LN10,
                 bonus=0.0, lookahead=True, lexicon=False):
        self.arpa = DictArpaScorer(text)
        self.words = set(words)
        self.unigram = {w: self.arpa.prob[(w,)] * LN10 for w in words}
        self.unk_offset, self.bonus, self.lookahead, self.lexicon = unk_offset, bonus, lookahead, lexicon
        self.unk_char_offset = unk_char_offset

    def words_score(self, words: list[str], eos: bool) -> tuple[float, list[str]]:
        hist = ["<s>"]
        total = 0.0
        for w in words:
            total += self.arpa.log10p(hist, w) * LN10 + self.bonus
            if w not in self.words:
                total += -math.inf if self.lexicon else self.unk_offset + self.unk_char_offset * len(w)
            hist.append(self.arpa.word(w))
        if eos:
            total += self.arpa.log10p(hist, "</s>") * LN10
        return total, hist

    def partial(self, prefix: str) -> float:
        if not prefix:
            return 0.0
        compl = [self.unigram[w] for w in self.words if w.startswith(prefix)]
        if not compl:
            return -math.inf if self.lexicon else self.unk_offset + self.unk_char_offset * len(prefix)
        return max(compl) if self.lookahead else 0.0

    def running(self, style, pieces, tokens) -> float:
        """What the fused score must be after ``tokens``: finished words plus the open word's look-ahead."""
        done, cur = oracle_split(style, pieces, tokens)
        return self.words_score(done, eos=False)[0] + self.partial(cur)

    def total(self, style, pieces, tokens) -> float:
        done, cur = oracle_split(style, pieces, tokens)
        return self.words_score(done + ([cur] if cur else []), eos=True)[0]


def close(a: float, b: float, tol: float = 2e-4) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * max(1.0, abs(b))


def build(tmp_path, seed, style, **kw) -> tuple[WordNGramLM, WordOracle, list, int]:
    pieces, blank, words, text = random_case(seed, style)
    path = tmp_path / f"w{seed}.arpa"
    path.write_text(text)
    lm = WordNGramLM.from_arpa(path, pieces, blank_id=blank, **kw)
    okw = {k: kw[k] for k in ("lookahead", "lexicon", "unk_offset", "unk_char_offset") if k in kw}
    if "unweighted_word_bonus" in kw:
        okw["bonus"] = kw["unweighted_word_bonus"]
    return lm, WordOracle(text, words, **okw), pieces, blank


# ------------------------------------------------------------------------------------ scoring
@SETTINGS
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 1.5]), st.sampled_from([0.0, -0.7]), st.lists(st.integers(0, 40), max_size=14))
def test_sequence_scores_equal_the_word_oracle(tmp_path_factory, seed, style, lookahead, lexicon, bonus, per_char,
                                               raw):
    """Running scores after every token (look-ahead included) and the total with ``final``."""
    tmp = tmp_path_factory.mktemp("w")
    lm, oracle, pieces, blank = build(tmp, seed, style, lookahead=lookahead, lexicon=lexicon, unweighted_word_bonus=bonus,
                                      unk_offset=-3.0, unk_char_offset=per_char)
    V = len(pieces)
    tokens = [r % V for r in raw]
    state = lm.initial_states(1)
    running = 0.0
    for i, t in enumerate(tokens):
        sc, nx = lm.score_tokens(state, torch.tensor([[t]]))
        running += float(sc[0, 0])
        state = nx[:, 0]
        assert close(running, oracle.running(style, pieces, tokens[: i + 1])), (i, tokens[: i + 1])
        if math.isinf(running):
            break
    else:
        total = running + float(lm.final(state)[0])
        assert close(total, oracle.total(style, pieces, tokens)), tokens
        assert close(lm.score_sequence(tokens), total)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.booleans(), st.lists(st.integers(0, 40), max_size=10))
def test_with_word_bonus_equals_a_rebuild(tmp_path_factory, seed, style, lexicon, raw):
    tmp = tmp_path_factory.mktemp("w")
    lm, _, pieces, _ = build(tmp, seed, style, lexicon=lexicon, unweighted_word_bonus=0.5)
    rebuilt, _, _, _ = build(tmp, seed, style, lexicon=lexicon, unweighted_word_bonus=2.0)
    tokens = [r % len(pieces) for r in raw]
    assert close(lm.with_unweighted_word_bonus(2.0).score_sequence(tokens), rebuilt.score_sequence(tokens))
    assert close(lm.score_sequence(tokens), rebuilt.with_unweighted_word_bonus(0.5).score_sequence(tokens))


@SETTINGS
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.booleans())
def test_advance_rows_equal_score_tokens(tmp_path_factory, seed, style, lexicon):
    """``advance`` (whole vocabulary, batched) equals ``score_tokens`` token by token; blank keeps the state."""
    lm, _, pieces, blank = build(tmp_path_factory.mktemp("w"), seed, style, lexicon=lexicon)
    V = len(pieces)
    g = torch.Generator().manual_seed(seed)
    states = lm.initial_states(1)
    for _ in range(3):  # reach a mixture of states
        sc, nx = lm.advance(states)
        states = nx[torch.arange(nx.shape[0])[:, None], torch.randint(0, V, (nx.shape[0], 3), generator=g)].flatten()
    sc, nx = lm.advance(states)
    assert sc.shape == (states.shape[0], V) and nx.dtype == torch.int64
    tok = torch.arange(V).expand(states.shape[0], V)
    s2, n2 = lm.score_tokens(states, tok)
    assert torch.equal(nx, n2)
    assert torch.allclose(sc, s2, atol=1e-5, equal_nan=False) or torch.equal(torch.isinf(sc), torch.isinf(s2))
    fin = torch.isfinite(sc)
    assert torch.equal(fin, torch.isfinite(s2)) and torch.allclose(sc[fin], s2[fin], atol=1e-5)
    assert torch.all(sc[:, blank] == 0) and torch.equal(nx[:, blank], states)
    assert isinstance(lm, FusionModel)


def test_by_hand_sentencepiece():
    """'the cat' in ▁-pieces: the score of 'the' comes with '▁c', the score of 'cat' with final."""
    text = "\n".join(["\\data\\", "ngram 1=5", "ngram 2=2", "", "\\1-grams:", "-1.0\t<unk>", "-99\t<s>\t-0.5",
                      "-0.7\t</s>", "-0.4\tthe\t-0.2", "-1.3\tcat\t-0.1", "", "\\2-grams:", "-0.1\t<s> the",
                      "-0.6\tthe cat", "", "\\end\\", ""])
    pieces = ["▁the", "▁c", "at", "▁", "c", "<blank>"]
    arpa = read_arpa_text(text)
    lm = WordNGramLM.from_arpa_model(arpa, pieces, blank_id=5, lookahead=False, unk_offset=-2.0, unk_char_offset=-0.5)
    s = torch.tensor([lm.initial_states(1)[0]])
    sc, nx = lm.advance(s)
    assert sc[0, 0] == pytest.approx(0.0)  # '▁the' opens a word, no look-ahead
    s = nx[:, 0]
    sc, nx = lm.advance(s)
    assert sc[0, 1] == pytest.approx(-0.1 * LN10)  # '▁c' ends 'the' after <s>
    s = nx[:, 1]
    sc, nx = lm.advance(s)
    assert sc[0, 2] == pytest.approx(0.0)  # 'c' + 'at' = 'cat', still in the trie
    assert sc[0, 4] == pytest.approx(-2.0 - 0.5 * 2)  # 'cc' is no LM word's prefix: unk offsets at once
    sc_oov, nx_oov = lm.advance(nx[:, 4])
    assert sc_oov[0, 2] == pytest.approx(-0.5 * 2)  # 'ccat': two more characters
    # ends as <unk> after 'the' (back-off -0.2 + <unk> -1.0), then </s> after <unk> (-0.7); offsets already paid
    assert float(lm.final(nx_oov[:, 2])[0]) == pytest.approx((-1.2 - 0.7) * LN10)
    s = nx[:, 2]
    assert float(lm.final(s)[0]) == pytest.approx((-0.6 + (-0.1 + -0.7)) * LN10)  # cat | the; </s> backs off
    with_la = WordNGramLM.from_arpa_model(arpa, pieces, blank_id=5, lookahead=True)
    total = with_la.score_sequence([0, 1, 2])
    assert total == pytest.approx(lm.score_sequence([0, 1, 2]), abs=1e-5)
    sc, _ = with_la.advance(with_la.initial_states(1))
    assert sc[0, 0] == pytest.approx(-0.4 * LN10)  # best completion of 'the' is 'the'


def read_arpa_text(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.arpa"
        p.write_text(text)
        return read_arpa(p)


# ------------------------------------------------------------------------------------ boundaries
def test_boundary_detection_and_overrides():
    assert detect_boundaries([None, "a", "|", "b"]).style == "delimiter"
    assert detect_boundaries(["a", " ", None]).style == "delimiter"
    assert detect_boundaries([None, "▁", "a", "b"]).style == "delimiter"  # a lone ▁ in a character vocabulary
    assert detect_boundaries([None, "▁ab", "c", "▁"]).style == "prefix"
    assert detect_boundaries([None, "ab", "##c"]).style == "wordpiece"
    b = detect_boundaries([None, "a", "b", "_"], "delimiter", ["_"])
    assert b.starts_word == (False, False, False, True) and b.words([1, 3, 2, 2]) == ["a", "bb"]
    with pytest.raises(DecodingInputError, match="cannot detect word boundaries"):
        detect_boundaries([None, "a", "b", "cd"])
    with pytest.raises(DecodingInputError, match="boundary must be one of"):
        detect_boundaries([None, "a", "|"], "spaces")
    with pytest.raises(DecodingInputError, match="not tokens of the vocabulary"):
        detect_boundaries([None, "a", "|"], "delimiter", ["#"])
    with pytest.raises(DecodingInputError, match="needs a delimiter token"):
        detect_boundaries([None, "a", "b"], "delimiter")
    tok = CharTokenizer(["<b>", "a", "b", " "], blank_id=0)
    assert token_pieces(tok) == [None, "a", "b", " "]


def test_bad_inputs(tmp_path):
    pieces, blank, words, text = random_case(3, "delimiter", order=2)
    arpa = tmp_path / "w.arpa"
    arpa.write_text(text)
    with pytest.raises(DecodingInputError, match="vocab mismatch"):
        WordNGramLM.from_arpa(arpa, pieces, vocab_size=len(pieces) + 1, blank_id=blank)
    with pytest.raises(DecodingInputError, match="cannot detect word boundaries"):
        WordNGramLM.from_arpa(arpa, [None, "a", "b"], blank_id=0)
    with pytest.raises(DecodingInputError, match="blank_id"):
        token_pieces(CharTokenizer(["<b>", "a", "|"], blank_id=0), blank_id=1)
    with pytest.raises(DecodingInputError, match="tokenizer must be"):
        WordNGramLM.from_arpa(arpa, object(), blank_id=0)
    with pytest.raises(DecodingInputError, match="finite"):
        WordNGramLM.from_arpa(arpa, pieces, blank_id=blank, unk_offset=float("nan"))
    # KenLM binary (plain and gzipped)
    binary = tmp_path / "w.binary"
    binary.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\x00\x01\x02" * 4)
    with pytest.raises(FileFormatError, match="KenLM binary.*ARPA"):
        WordNGramLM.from_arpa(binary, pieces, blank_id=blank)
    gz = tmp_path / "w.binary.gz"
    gz.write_bytes(gzip.compress(binary.read_bytes()))
    with pytest.raises(FileFormatError, match="KenLM binary"):
        WordNGramLM.from_arpa(gz, pieces, blank_id=blank)
    with pytest.raises(FileFormatError, match="KenLM binary"):
        NGramLM.from_arpa(binary, vocab_size=4)
    # malformed ARPA and missing markers
    bad = tmp_path / "bad.arpa"
    bad.write_text(text.replace("\\2-grams:", "\\3-grams:"))
    with pytest.raises(FileFormatError, match="bad.arpa"):
        WordNGramLM.from_arpa(bad, pieces, blank_id=blank)
    nos = tmp_path / "nos.arpa"
    nos.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t</s>\n-1\ta\n\n\\end\\\n")
    with pytest.raises(FileFormatError, match="<s>"):
        WordNGramLM.from_arpa(nos, pieces, blank_id=blank)
    # the CLI helper
    with pytest.raises(FileFormatError, match="no such word LM file"):
        word_lm_fusion(tmp_path / "missing.arpa", pieces, vocab_size=len(pieces), blank_id=blank, weight=0.5)
    with pytest.raises(DecodingInputError, match="non-zero word LM weight"):
        word_lm_fusion(arpa, pieces, vocab_size=len(pieces), blank_id=blank, weight=0.0, word_bonus=1.0)
    lm, w = word_lm_fusion(arpa, pieces, vocab_size=len(pieces), blank_id=blank, weight=0.5, word_bonus=1.0)
    assert w == 0.5 and lm.unweighted_word_bonus == pytest.approx(2.0)
    # a decoder with another vocabulary
    lp = peaky_log_probs(0, 1, 4, len(pieces) + 1, blank)
    with pytest.raises(DecodingInputError, match="vocab_size"):
        ctc.beam_search(lp, None, blank, beam=2, fusion=[(lm, 0.5)])


# ------------------------------------------------------------------------------------ beam searches
def _same(got, want, tol=1e-4):
    for g, w in zip(got, want):
        assert [h.tokens for h in g] == [h.tokens for h in w]
        for a, b in zip(g, w):
            assert close(a.score, b.score, tol)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.integers(1, 3), st.integers(0, 12), st.integers(1, 5),
       st.booleans(), st.sampled_from([None, 2]))
def test_ctc_beam_with_word_lm_equals_reference(tmp_path_factory, seed, style, batch, frames, beam, lookahead,
                                                token_beam):
    tmp = tmp_path_factory.mktemp("w")
    lm, _, pieces, blank = build(tmp, seed, style, lookahead=lookahead, unweighted_word_bonus=0.5)
    V = len(pieces)
    tok_arpa = tmp / "tok.arpa"
    tok_arpa.write_text(random_token_arpa(seed, V, blank, order=2))
    token_lm = NGramLM.from_arpa(tok_arpa, vocab_size=V, blank_id=blank)
    boost = BoostingTree.from_token_sequences([[t for t in range(V) if t != blank][:2]], vocab_size=V, blank_id=blank)
    lp = peaky_log_probs(seed, batch, frames, V, blank, peak=4.0)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, fusion=[(lm, 0.6), (token_lm, 0.3), (boost, 0.5)], beta=0.3, token_beam=token_beam,
              nbest=beam)
    _same(ctc.beam_search(lp, lens, blank, **kw), ctc.reference_beam_search(lp, lens, blank, **kw))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.integers(2, 12))
def test_ctc_beam_streaming_with_word_lm_equals_whole(tmp_path_factory, seed, style, frames):
    lm, _, pieces, blank = build(tmp_path_factory.mktemp("w"), seed, style)
    V = len(pieces)
    lp = peaky_log_probs(seed, 2, frames, V, blank, peak=4.0)
    kw = dict(beam=3, fusion=[(lm, 0.8)], nbest=3)
    whole = ctc.beam_search(lp, None, blank, **kw)
    cut = 1 + seed % (frames - 1)
    state = ctc.beam_search(lp[:, :cut], None, blank, final=False, **kw)
    chunked = ctc.beam_search(lp[:, cut:], None, blank, state=state, **kw)
    _same(chunked, whole, tol=1e-5)


class _RowsWordLM(WordNGramLM):
    """The same word LM behind an overridden ``advance``: the native engine cannot read it and takes its rows."""

    def advance(self, states):
        return super().advance(states)


def _rows_copy(lm: WordNGramLM) -> WordNGramLM:
    new = object.__new__(_RowsWordLM)
    new.__dict__.update(lm.__dict__)
    return new


def _same_exactly(got, want, tol=1e-5):
    for g, w in zip(got, want):
        assert [(h.tokens, h.timestamps) for h in g] == [(h.tokens, h.timestamps) for h in w]
        for a, b in zip(g, w):
            assert close(a.score, b.score, tol)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(STYLES), st.integers(1, 3), st.integers(1, 12), st.integers(1, 5),
       st.booleans(), st.booleans(), st.sampled_from([0.0, 0.5, -1.0]), st.sampled_from([None, 2]),
       st.sampled_from([None, "weak"]), st.integers(0, 4))
def test_native_word_lm_equals_its_advance_and_the_torch_engine(tmp_path_factory, seed, style, batch, frames, beam,
                                                               lookahead, lexicon, bonus, token_beam, collapse, cut):
    """The engine's own word LM (arrays read natively) gives the hypotheses of the per-frame ``advance`` rows
    and of the tensor engine (tokens, timestamps; scores to 1e-5), whole and streamed in two chunks."""
    lm, _, pieces, blank = build(tmp_path_factory.mktemp("w"), seed, style, lookahead=lookahead, lexicon=lexicon,
                                 unweighted_word_bonus=bonus)
    V = len(pieces)
    lp = peaky_log_probs(seed, batch, frames, V, blank, peak=4.0).double()
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, beta=0.2, token_beam=token_beam, nbest=beam, blank_collapse=collapse)
    native = ctc.beam_search(lp, lens, blank, fusion=[(lm, 0.7)], engine="native", **kw)
    rows = ctc.beam_search(lp, lens, blank, fusion=[(_rows_copy(lm), 0.7)], engine="native", **kw)
    tensor = ctc.beam_search(lp, lens, blank, fusion=[(lm, 0.7)], engine="torch", **kw)
    _same_exactly(native, rows)
    _same_exactly(native, tensor)
    c = min(cut, frames)
    state = ctc.beam_search(lp[:, :c], lens.clamp(max=c), blank, fusion=[(lm, 0.7)], engine="native", final=False,
                            **kw)
    streamed = ctc.beam_search(lp[:, c:], (lens - c).clamp(min=0), blank, fusion=[(lm, 0.7)], engine="native",
                               state=state, **kw)
    _same_exactly(streamed, native)


def test_native_word_lm_is_read_natively(tmp_path):
    """The library's WordNGramLM runs inside the engine; a subclass with its own ``advance`` does not."""
    from asrdecode.native.ctc_beam import native_word_lm

    lm, _, _, _ = build(tmp_path, 3, "delimiter")
    assert native_word_lm(lm) is lm
    assert native_word_lm(lm.with_unweighted_word_bonus(1.5)) is not None
    assert native_word_lm(_rows_copy(lm)) is None


def test_ctc_beam_lexicon_mode_keeps_lm_words(tmp_path):
    """Lexicon mode: every finite-score hypothesis is made of LM words only, and equals the reference."""
    for seed in range(6):
        lm, oracle, pieces, blank = build(tmp_path, seed, "delimiter", lexicon=True)
        V = len(pieces)
        lp = peaky_log_probs(seed, 2, 10, V, blank, peak=3.0, blank_rate=0.4)
        kw = dict(beam=4, fusion=[(lm, 0.5)], nbest=4)
        got = ctc.beam_search(lp, None, blank, **kw)
        want = ctc.reference_beam_search(lp, None, blank, **kw)
        # -inf hypotheses (disallowed words) fill free beam slots in the reference only; compare the rest
        finite = lambda hyps: [[h for h in hs if math.isfinite(h.score)] for hs in hyps]  # noqa: E731
        _same(finite(got), finite(want))
        assert any(finite(got))
        for hyps in got:
            for h in hyps:
                done, cur = oracle_split("delimiter", pieces, h.tokens)
                if math.isfinite(h.score):
                    assert all(w in oracle.words for w in done + ([cur] if cur else []))


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_transducer_beams_with_word_lm_equal_reference(tmp_path, style, method, durations):
    if method == "wind" and durations is not None:
        pytest.skip("WIND beam search is RNN-T only")
    for seed in range(3):
        lm, _, pieces, blank = build(tmp_path, 50 + seed, style, unweighted_word_bonus=0.4)
        V = len(pieces)
        m = random_model(300 + seed, V, blank, durations, blank_bias=0.5, enc_dim=5)
        enc = random_encoder(seed, 2, 6)
        lengths = torch.tensor([6, 4])
        kw = dict(beam=3, fusion=[(lm, 0.5)], max_symbols_per_frame=3, beta=0.2)
        if method == "wind":
            kw["window"] = 2
        res = tr_beam_search(m, enc, lengths, nbest=3, method=method, **kw)
        for b in range(2):
            if method == "wind":
                ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
            else:
                ref = tr_reference(m, enc[b, : int(lengths[b])], method=method, **kw)
            assert sorted(hyp_key(res[b], 6)) == sorted(hyp_key(ref, 6)), (seed, b)


# ------------------------------------------------------------------------------------ bundled model
@pytest.fixture(scope="module")
def bundled():
    from asrdecode.models.demo import ASSETS
    from asrdecode.tokenizers import SentencePieceTokenizer

    tok = SentencePieceTokenizer(ASSETS / "tokenizer.model", blank_id=256)
    path = ASSETS / "word-3gram.arpa.gz"
    return tok, path, WordNGramLM.from_arpa(path, tok, vocab_size=257, blank_id=256)


def test_bundled_word_lm_with_the_demo_tokenizer(bundled):
    """The bundled word 3-gram over the demo models' ▁-pieces: scores equal the word oracle."""
    tok, path, lm = bundled
    assert lm.boundaries.style == "prefix"
    text = gzip.open(path, "rt", encoding="utf-8").read()
    oracle = WordOracle(text, lm.words)
    pieces = token_pieces(tok)
    for sent in ["the cat sat on the mat", "sense and sensibility", "zqxv of the", "a"]:
        ids = tok.encode(sent)
        assert close(lm.score_sequence(ids), oracle.total("prefix", pieces, ids), 1e-5), sent


# ------------------------------------------------------------------------------------ CLI
def test_cli_word_lm(capsys, tmp_path):
    from asrdecode.models.demo import ASSETS

    from test_cli import CLIP2, bad, run

    lm = ASSETS / "word-3gram.arpa.gz"
    tok_lm = ASSETS / "token-4gram.arpa.gz"
    code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam", "--beam", "4",
                       "--word-lm", lm, "--word-lm-weight", "0.5", "--word-bonus", "1.0", "--lm", tok_lm,
                       "--lm-weight", "0.2", "--boost", "ill disposed:1")
    assert code == 0 and out.split("\t")[1].strip()
    if (ASSETS / "demo-rnnt.pt").is_file():
        code, out, _ = run(capsys, "transcribe", CLIP2, "--model", "demo-rnnt", "--decoder", "beam", "--beam", "2",
                           "--word-lm", lm)
        assert code == 0 and out.split("\t")[1].strip()
    binary = tmp_path / "words.binary"
    binary.write_bytes(b"mmap lm http://kheafield.com/code\x00\x00rest")
    assert "KenLM binary" in bad(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam",
                                 "--word-lm", binary)
    assert "no such word LM file" in bad(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam",
                                         "--word-lm", tmp_path / "none.arpa")
    assert "--decoder beam" in bad(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--word-lm", lm)
    assert "WordNGramLM" in bad(capsys, "transcribe", CLIP2, "--model", "demo-ctc", "--decoder", "beam", "--lm", lm)


@pytest.mark.parametrize("name,options", [("demo-ctc", {"beam": 3}), ("demo-rnnt", {"beam": 2, "method": "alsd"})])
def test_streaming_sessions_with_word_lm_equal_offline(bundled, name, options):
    """StreamDecoder sessions fused with the word LM: every stream's final result equals offline decoding."""
    from asrdecode.models import load
    from asrdecode.streaming import StreamDecoder

    from test_stream_decoder import FRONT, _same as same_hyp, clips as clip_fixture, run_schedule

    tok, _, lm = bundled
    clips = clip_fixture.__wrapped__()
    dec = StreamDecoder(load(name), "beam", **FRONT, fusion=[(lm, 0.6)], **options)
    finals, _ = run_schedule(dec, clips, {}, seed=3)
    plain = StreamDecoder(load(name), "beam", **FRONT, **options)
    changed = False
    for i, wave in enumerate(clips):
        same_hyp(finals[i].hypothesis, dec.offline(wave))
        changed |= plain.offline(wave).score != pytest.approx(finals[i].hypothesis.score)
    assert changed  # the LM was applied


def test_distributed_pipeline_takes_the_word_lm():
    """``distributed.build_pipeline`` (Ray actors, ``asrdecode eval``) builds the word LM from decoder_options."""
    from asrdecode.audio import read_audio
    from asrdecode.distributed import build_pipeline
    from asrdecode.models.demo import ASSETS

    from test_cli import CLIP2

    opts = {"beam": 3, "word_lm": ASSETS / "word-3gram.arpa.gz", "word_lm_weight": 0.4, "word_bonus": 1.0}
    _, encode, decode = build_pipeline("demo-ctc", "beam", opts)
    hyps = decode(*encode([read_audio(CLIP2)]))
    assert len(hyps) == 1 and hyps[0].text
    with pytest.raises(DecodingInputError, match="word_lm_weight"):
        build_pipeline("demo-ctc", "beam", {"word_lm_weight": "high"})


# ------------------------------------------------------------------------------ issue 29 (defect 6)
def test_word_bonus_renamed_with_deprecation(tmp_path):
    """``word_bonus`` (model scale) is ``unweighted_word_bonus`` now; the old names warn and still work."""
    pieces, blank, words, text = random_case(3, "delimiter")
    path = tmp_path / "w.arpa"
    path.write_text(text)
    new = WordNGramLM.from_arpa(path, pieces, blank_id=blank, unweighted_word_bonus=0.75)
    with pytest.warns(DeprecationWarning, match="unweighted_word_bonus"):
        old = WordNGramLM.from_arpa(path, pieces, blank_id=blank, word_bonus=0.75)
    tokens = [i for i, p in enumerate(pieces) if p is not None][:5]
    assert close(old.score_sequence(tokens), new.score_sequence(tokens))
    with pytest.warns(DeprecationWarning):
        assert old.word_bonus == pytest.approx(0.75)
    with pytest.warns(DeprecationWarning):
        assert close(new.with_word_bonus(2.0).score_sequence(tokens),
                     new.with_unweighted_word_bonus(2.0).score_sequence(tokens))
    # weighted(): the bonus in the fused score (pyctcdecode's beta) is divided by the weight
    lm, w = new.weighted(0.5, word_bonus=1.5)
    assert w == 0.5 and lm.unweighted_word_bonus == pytest.approx(3.0)
    zero = new.with_unweighted_word_bonus(0.0)
    n_words = len(zero.boundaries.words(tokens))
    assert close(w * lm.score_sequence(tokens), w * zero.score_sequence(tokens) + 1.5 * n_words)
    for bad in ({"weight": 0.0, "word_bonus": 1.0}, {"weight": float("nan")}, {"weight": 1.0, "word_bonus": "x"}):
        with pytest.raises(DecodingInputError):
            new.weighted(**bad)
    with pytest.raises(DecodingInputError, match="unweighted_word_bonus"):
        new.with_unweighted_word_bonus(float("inf"))


def test_case_mismatch_warns(tmp_path):
    arpa = tmp_path / "lower.arpa"
    arpa.write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n-0.5\tcat\n-0.7\tdog\n\n\\end\\\n")
    upper = [None, "|"] + list("ACDGOT")
    with pytest.warns(UserWarning, match="upper-case letters only but the LM's words are lower-case"):
        WordNGramLM.from_arpa(arpa, upper, blank_id=0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WordNGramLM.from_arpa(arpa, [None, "|"] + list("acdgot"), blank_id=0)  # same case: no warning
        WordNGramLM.from_arpa(arpa, [None, "|"] + list("acdgotACDGOT"), blank_id=0)  # both cases: no warning


@pytest.mark.parametrize("engine", ["torch", "native"])
def test_lexicon_mode_never_returns_an_empty_nbest_list(tmp_path, engine):
    """Every prefix in the beam ends inside a lexicon word: one empty hypothesis scored -inf (``res[b][0]``
    exists) instead of an empty list; a complete word decodes as usual."""
    arpa = tmp_path / "w.arpa"
    arpa.write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n-0.5\tcat\n-0.7\tdog\n\n\\end\\\n")
    pieces = [None, "|"] + list("acdgot")
    lm = WordNGramLM.from_arpa(arpa, pieces, blank_id=0, lexicon=True)

    def emissions(text: str) -> torch.Tensor:
        x = torch.full((1, len(text), len(pieces)), -12.0)
        for t, c in enumerate(text):
            x[0, t, pieces.index(c)] = 0.0
        return x.log_softmax(-1)

    res = ctc.beam_search(emissions("cat|do"), None, 0, beam=2, nbest=2, fusion=[(lm, 1.0)], engine=engine)
    assert len(res[0]) == 1 and res[0][0].tokens == [] and res[0][0].score == float("-inf")
    best = ctc.beam_search(emissions("cat|dog"), None, 0, beam=2, nbest=2, fusion=[(lm, 1.0)], engine=engine)[0]
    assert best[0].tokens == [pieces.index(c) for c in "cat|dog"] and math.isfinite(best[0].score)


def test_state_error_names_states_outside_the_model(tmp_path):
    """``state_error`` (what a carried stream's fusion states are checked with, FusionScorer.check_states):
    ``None`` for the model's own states, a reason for a word-LM state or trie node out of range."""
    from asrdecode.errors import DecodingInputError
    from asrdecode.fusion import FusionScorer

    lm, _, pieces, _ = build(tmp_path, 3, "chars")
    start = lm.initial_states(3)
    _, nxt = lm.advance(start)
    assert lm.state_error(start) is None and lm.state_error(nxt.reshape(-1)) is None
    assert lm.state_error(start[:0]) is None
    if lm.num_nodes < (1 << lm.node_bits):  # a node past the trie that the state's bits can hold
        assert "trie nodes" in lm.state_error(start | lm.num_nodes)
    assert "word-LM states" in lm.state_error(torch.tensor([lm.word_lm.num_states << lm.node_bits]))
    assert "must be >= 0" in lm.state_error(torch.tensor([-1]))
    scorer = FusionScorer([(lm, 0.5)], len(pieces))
    scorer.check_states(start[:, None])
    with pytest.raises(DecodingInputError, match=r"lm_states\[:, 0\].*word-LM states"):
        scorer.check_states(torch.tensor([[lm.word_lm.num_states << lm.node_bits]]))
