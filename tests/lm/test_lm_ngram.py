"""Tensor n-gram LM (asrdecode.lm.NGramLM) against an independent dictionary ARPA scorer and KenLM.

The scorer below parses the ARPA text itself and applies the textbook back-off rule; it shares no
code with asrdecode. KenLM's Python module is a second, independent checker where installed.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.lm import NGramLM, TokenMap, read_arpa, write_arpa

LN10 = math.log(10.0)
OFFSET = 100


class DictArpaScorer:
    """Back-off scoring straight from an ARPA text: ``p(w|h) = p(h w)`` or ``bo(h) + p(w|h[1:])``."""

    def __init__(self, text: str) -> None:
        self.prob: dict[tuple[str, ...], float] = {}
        self.bo: dict[tuple[str, ...], float] = {}
        self.order = 0
        section = 0
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("ngram ") or line == "\\data\\" or line == "\\end\\":
                continue
            if line.startswith("\\") and line.endswith("-grams:"):
                section = int(line[1:].split("-")[0])
                self.order = max(self.order, section)
                continue
            parts = line.split()
            words = tuple(parts[1 : 1 + section])
            self.prob[words] = float(parts[0])
            if len(parts) == section + 2:
                self.bo[words] = float(parts[-1])
        if ("<unk>",) not in self.prob:
            self.prob[("<unk>",)] = -100.0  # KenLM's substitute

    def word(self, w: str) -> str:
        return w if (w,) in self.prob else "<unk>"

    def log10p(self, history: list[str], w: str) -> float:
        w = self.word(w)
        h = tuple(history[-(self.order - 1):]) if self.order > 1 else ()
        acc = 0.0
        while True:
            if h + (w,) in self.prob:
                return acc + self.prob[h + (w,)]
            if not h:
                raise KeyError(w)
            acc += self.bo.get(h, 0.0)
            h = h[1:]

    def score(self, words: list[str], bos: bool = True, eos: bool = True) -> float:
        """Natural-log score of a word sequence."""
        hist = ["<s>"] if bos else []
        total = 0.0
        for w in words:
            total += self.log10p(hist, w)
            hist.append(self.word(w))
        if eos:
            total += self.log10p(hist, "</s>")
        return total * LN10


def random_arpa(rng: random.Random, n_words: int, order: int, *, with_unk: bool = True,
                p_backoff: float = 0.7, max_per_order: int = 40, suffix_closed: bool = False) -> str:
    """A random, prefix-closed ARPA text over words chr(100 + i), i < n_words.

    ``suffix_closed`` also keeps every suffix of an n-gram in the model, as lmplz output does
    (KenLM's probing hash table assumes it).
    """
    words = [chr(100 + i) for i in range(n_words)]
    grams: list[dict[tuple[str, ...], tuple[float, float | None]]] = [dict() for _ in range(order)]
    uni = ["<s>", "</s>"] + (["<unk>"] if with_unk else []) + words

    def bo() -> float | None:
        return round(rng.uniform(-1.5, 0.5), 4) if rng.random() < p_backoff else None

    for w in uni:
        lp = -99.0 if w == "<s>" else round(rng.uniform(-3.0, -0.05), 4)
        grams[0][(w,)] = (lp, None if w == "</s>" or order == 1 else bo())
    for k in range(2, order + 1):
        contexts = [g for g in grams[k - 2] if g[-1] != "</s>"]
        for _ in range(rng.randint(0, max_per_order)):
            if not contexts:
                break
            ctx = rng.choice(contexts)
            if "</s>" in ctx or ("<s>" in ctx[1:]):
                continue
            nxt = rng.choice(words + ["</s>"] + (["<unk>"] if with_unk else []))
            g = ctx + (nxt,)
            if g in grams[k - 1] or (suffix_closed and g[1:] not in grams[k - 2]):
                continue
            b = None if (k == order or nxt == "</s>") else bo()
            grams[k - 1][g] = (round(rng.uniform(-3.0, -0.01), 4), b)
    lines = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, start=1)]
    for k, g in enumerate(grams, start=1):
        lines += ["", f"\\{k}-grams:"]
        for key, (lp, b) in g.items():
            text = " ".join(key)
            lines.append(f"{lp}\t{text}" + ("" if b is None else f"\t{b}"))
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- helpers
def _token_word(t: int) -> str:
    return chr(OFFSET + t)


def _check_lm(lm: NGramLM, ref: DictArpaScorer, rng: random.Random, vocab_size: int, blank_id: int | None,
              n_seqs: int = 6, max_len: int = 8) -> None:
    """score_sequence and every advance row (scores and next states) against the reference."""
    non_blank = [t for t in range(vocab_size) if t != blank_id]
    for _ in range(n_seqs):
        seq = [rng.choice(non_blank) for _ in range(rng.randint(0, max_len))]
        if blank_id is not None and seq and rng.random() < 0.5:
            seq.insert(rng.randint(0, len(seq)), blank_id)
        words = [_token_word(t) for t in seq if t != blank_id]
        for bos in (True, False):
            got = lm.score_sequence(seq, bos=bos, eos=True)
            exp = ref.score(words, bos=bos, eos=True)
            assert got == pytest.approx(exp, abs=1e-4), (seq, bos)
        # walk the sequence with advance; compare the whole row at every step
        state = lm.initial_states(1)
        hist = ["<s>"]
        for t in seq + [None]:
            scores, nxt = lm.advance(state)
            assert scores.shape == (1, vocab_size) and nxt.shape == (1, vocab_size)
            assert scores.dtype == torch.float32 and nxt.dtype == torch.int64
            exp_row = [0.0 if v == blank_id else ref.log10p(hist, _token_word(v)) * LN10 for v in range(vocab_size)]
            torch.testing.assert_close(scores[0], torch.tensor(exp_row, dtype=torch.float32), atol=1e-4, rtol=0)
            if blank_id is not None:
                assert int(nxt[0, blank_id]) == int(state[0])
            # score_tokens (binary-search path) agrees with advance (dense/scatter path)
            toks = torch.arange(vocab_size)[None]
            s2, n2 = lm.score_tokens(state, toks)
            torch.testing.assert_close(s2, scores, atol=1e-5, rtol=0)
            assert torch.equal(n2, nxt)
            assert float(lm.final(state)[0]) == pytest.approx(ref.log10p(hist, "</s>") * LN10, abs=1e-4)
            if t is None:
                break
            state = nxt[:, t]
            if t != blank_id:
                hist.append(ref.word(_token_word(t)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(1, 5), n_words=st.integers(1, 7),
       extra_tokens=st.integers(0, 2), with_unk=st.booleans(), dense=st.sampled_from(["root", "auto", "all"]))
def test_matches_dictionary_scorer(seed, order, n_words, extra_tokens, with_unk, dense, tmp_path_factory):
    rng = random.Random(seed)
    text = random_arpa(rng, n_words, order, with_unk=with_unk)
    path = tmp_path_factory.mktemp("arpa") / "lm.arpa"
    path.write_text(text, encoding="utf-8")
    ref = DictArpaScorer(text)
    # model vocabulary: the LM's words, some tokens the LM does not know (-> <unk>), and a blank
    vocab_size = n_words + extra_tokens + 1
    blank_id = rng.choice([vocab_size - 1, 0, None]) if extra_tokens == 0 else vocab_size - 1
    if blank_id == 0:
        # shift: token t is word chr(100 + t); keep the words at ids 0..n_words-1 by putting blank last
        blank_id = vocab_size - 1
    kwargs = {"root": dict(dense_memory_mb=0.0), "auto": dict(min_dense_degree=2),
              "all": dict(min_dense_degree=0, dense_memory_mb=64.0)}[dense]
    lm = NGramLM.from_arpa(path, vocab_size=vocab_size, blank_id=blank_id, **kwargs)
    _check_lm(lm, ref, rng, vocab_size, blank_id)


def test_batched_advance_equals_rowwise():
    rng = random.Random(3)
    text = random_arpa(rng, 6, 4, max_per_order=60)
    ref = DictArpaScorer(text)
    model_path = _write_tmp(text)
    lm = NGramLM.from_arpa(model_path, vocab_size=8, blank_id=7, dense_memory_mb=0.0)
    # collect many states by random walks, then advance them all at once
    states = []
    for _ in range(30):
        s = lm.initial_states(1)
        for _ in range(rng.randint(0, 6)):
            s = lm.advance(s)[1][:, rng.randrange(7)]
        states.append(s)
    batch = torch.cat(states)
    scores, nxt = lm.advance(batch)
    for i, s in enumerate(states):
        s1, n1 = lm.advance(s)
        torch.testing.assert_close(scores[i : i + 1], s1)  # float scores: a tolerance, never ==
        assert torch.equal(nxt[i : i + 1], n1)
    assert ref.order == 4



def _write_tmp(text: str):
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="lm_test_"))
    p = d / "lm.arpa"
    p.write_text(text, encoding="utf-8")
    return p


def test_hand_computed_trigram():
    text = "\n".join([
        "\\data\\", "ngram 1=6", "ngram 2=5", "ngram 3=2", "",
        "\\1-grams:", "-1.0\t<unk>\t0", "-99\t<s>\t-0.5", "-0.7\t</s>", "-0.6\td\t-0.3", "-0.8\te\t-0.2", "-0.9\tf",
        "", "\\2-grams:", "-0.3\t<s> d\t-0.1", "-0.4\td e\t-0.2", "-0.2\te </s>", "-0.5\te d", "-0.6\t<s> e",
        "", "\\3-grams:", "-0.1\t<s> d e", "-0.15\td e </s>", "", "\\end\\", "",
    ])
    lm = NGramLM.from_arpa(_write_tmp(text), vocab_size=5, blank_id=4)
    # d e </s>: p(d|<s>) p(e|<s> d) p(</s>|d e)
    assert lm.score_sequence([0, 1]) == pytest.approx((-0.3 - 0.1 - 0.15) * LN10, abs=1e-5)
    # token 3 ('g') is not in the LM: <unk> after backing off from <s>
    assert lm.score_sequence([3], eos=False) == pytest.approx((-0.5 - 1.0) * LN10, abs=1e-5)
    # f has no backoff weight (missing = 0): p(</s> | f) = p(</s>)
    assert lm.score_sequence([2], bos=False) == pytest.approx((-0.9 - 0.7) * LN10, abs=1e-5)
    scores, nxt = lm.advance(lm.initial_states(3))
    assert scores.shape == (3, 5)
    assert torch.all(scores[:, 4] == 0)


def test_blank_first_and_no_blank():
    rng = random.Random(11)
    text = random_arpa(rng, 4, 3)
    ref = DictArpaScorer(text)
    p = _write_tmp(text)
    # blank at id 0: token t >= 1 is word chr(100 + t - 1) under an explicit word list
    words = [None] + [chr(100 + i) for i in range(4)]
    lm = NGramLM.from_arpa(p, token_map=TokenMap.from_words(words, blank_id=0))
    for seq in ([1, 2, 3], [4, 4, 1], []):
        exp = ref.score([chr(100 + t - 1) for t in seq])
        assert lm.score_sequence(seq) == pytest.approx(exp, abs=1e-4)
    s, n = lm.advance(lm.initial_states(2))
    assert torch.all(s[:, 0] == 0) and torch.all(n[:, 0] == lm.bos_state)
    # no blank at all
    lm2 = NGramLM.from_arpa(p, vocab_size=4, blank_id=None)
    assert lm2.score_sequence([0, 1, 2]) == pytest.approx(ref.score([chr(100), chr(101), chr(102)]), abs=1e-4)


def test_save_load_roundtrip(tmp_path):
    rng = random.Random(5)
    text = random_arpa(rng, 6, 4, max_per_order=50)
    p = tmp_path / "lm.arpa"
    p.write_text(text)
    lm = NGramLM.from_arpa(p, vocab_size=8, blank_id=7)
    lm.save(tmp_path / "lm.bin")
    lm2 = NGramLM.load(tmp_path / "lm.bin")
    assert lm2.order == lm.order and lm2.vocab_size == 8 and lm2.blank_id == 7
    st_ = torch.arange(lm.num_states)
    a, b = lm.advance(st_), lm2.advance(st_)
    torch.testing.assert_close(a[0], b[0])
    assert torch.equal(a[1], b[1])
    torch.testing.assert_close(lm.final(st_), lm2.final(st_))
    assert lm2.token_map.words() == lm.token_map.words()
    # arpa -> ArpaModel -> arpa keeps every value
    m = read_arpa(p)
    write_arpa(m, tmp_path / "again.arpa")
    m2 = read_arpa(tmp_path / "again.arpa")
    assert m2.vocab == m.vocab and m2.counts() == m.counts()
    for k in range(m.order):
        assert (m2.words[k] == m.words[k]).all() and (m2.logprob[k] == m.logprob[k]).all()
        assert (m2.backoff[k] == m.backoff[k]).all() and (m2.has_backoff[k] == m.has_backoff[k]).all()


def test_load_rejects_other_files(tmp_path):
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(FileFormatError, match="x.bin"):
        NGramLM.load(bad)
    torch.save({"format": "something else"}, tmp_path / "y.bin")
    with pytest.raises(FileFormatError, match="not an asrdecode"):
        NGramLM.load(tmp_path / "y.bin")


# --------------------------------------------------------------------------- bad input
GOOD = ["\\data\\", "ngram 1=4", "ngram 2=1", "", "\\1-grams:", "-1\t<s>\t-0.1", "-1\t</s>", "-1\td\t-0.2",
        "-1\t<unk>", "", "\\2-grams:", "-0.5\t<s> d", "", "\\end\\", ""]


def _bad(lines, tmp_path):
    p = tmp_path / "bad.arpa"
    p.write_text("\n".join(lines))
    return p


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda L: L[1:], r"bad.arpa:1: expected the '\\data\\' header"),
        (lambda L: L[:2] + ["ngram 2=2"] + L[3:], r"bad.arpa:11: the header declares 2 2-grams but the section has 1 \(lines 12-13\)"),
        (lambda L: L[:1] + ["ngram 1=5"] + L[2:], r"bad.arpa:5: the header declares 5 1-grams but the section has 4"),
        (lambda L: L[:10], r"ends inside the 1-grams section"),
        (lambda L: L[:10] + ["\\end\\"], r"bad.arpa:11: missing section '\\2-grams:'"),
        (lambda L: L[:7] + ["-1.x\td\t-0.2"] + L[8:], r"bad.arpa:8: log probability '-1.x' is not a number"),
        (lambda L: L[:7] + ["-1\td\tabc"] + L[8:], r"bad.arpa:8: backoff weight 'abc' is not a number"),
        (lambda L: L[:7] + ["0.5\td"] + L[8:], r"bad.arpa:8: log10 probability 0.5 must be <= 0"),
        (lambda L: L[:11] + ["-0.5\t<s> d e f"] + L[12:], r"bad.arpa:12: .*longer than 2 words"),
        (lambda L: L[:11] + ["-0.5\t<s> zz"] + L[12:], r"bad.arpa:12: word 'zz' of this 2-gram is not among the 1-grams"),
        (lambda L: ["\\data\\", "ngram 1=4", "ngram 2=1", "ngram 3=1"] + L[3:13] + ["\\3-grams:", "-0.1\td d d", "", "\\end\\"],
         r"bad.arpa:16: the 3-gram 'd d d' has no 2-gram for its context 'd d'"),
        (lambda L: L[:12] + ["", "\\3-grams:", "-1\t<s> d d", "", "\\end\\"], r"beyond the declared order 2"),
        (lambda L: L[:6] + ["-1\t<s>"] + L[7:], r"bad.arpa:7: duplicate 1-gram '<s>'"),
        (lambda L: L[:11] + ["-0.5\t<s> d\t-0.3"] + L[12:], r"bad.arpa:12: .*highest order cannot have a backoff"),
        (lambda L: L[:13], r"expected '\\end\\'|ends inside"),
        (lambda L: ["\\data\\", "ngram 1=x"] + L[2:], r"bad.arpa:2: malformed count line"),
        (lambda L: ["\\data\\", "ngram 2=1", ""] + L[4:], r"declares orders \[2\]"),
    ],
)
def test_malformed_arpa(edit, match, tmp_path):
    p = _bad(edit(list(GOOD)), tmp_path)
    with pytest.raises(FileFormatError, match=match):
        NGramLM.from_arpa(p, vocab_size=2, blank_id=1)


def test_good_fixture_loads(tmp_path):
    lm = NGramLM.from_arpa(_bad(GOOD, tmp_path), vocab_size=2, blank_id=1)
    assert lm.score_sequence([0], eos=False) == pytest.approx(-0.5 * LN10, abs=1e-5)


def test_duplicate_bigram_and_missing_markers(tmp_path):
    dup = GOOD[:1] + ["ngram 1=4", "ngram 2=2"] + GOOD[3:12] + ["-0.4\t<s> d"] + GOOD[12:]
    with pytest.raises(FileFormatError, match=r"bad.arpa:13: duplicate 2-gram '<s> d'"):
        NGramLM.from_arpa(_bad(dup, tmp_path), vocab_size=2, blank_id=1)
    no_eos = ["\\data\\", "ngram 1=2", "", "\\1-grams:", "-1\t<s>", "-1\td", "", "\\end\\"]
    with pytest.raises(FileFormatError, match="no </s>"):
        NGramLM.from_arpa(_bad(no_eos, tmp_path), vocab_size=2, blank_id=1)


def test_word_outside_model_vocabulary(tmp_path):
    # 'd' is token 0; with vocab_size 1 (+ no blank) a 2-char word cannot be a token
    lines = GOOD[:7] + ["-1\tdd\t-0.2"] + GOOD[8:11] + ["-0.5\t<s> dd"] + GOOD[12:]
    with pytest.raises(FileFormatError, match=r"bad.arpa:8: the LM word 'dd' names no model token"):
        NGramLM.from_arpa(_bad(lines, tmp_path), vocab_size=3, blank_id=2)
    lm = NGramLM.from_arpa(_bad(lines, tmp_path), vocab_size=3, blank_id=2, ignore_unmapped_words=True)
    assert lm.num_arcs > 0


def test_bad_arguments(tmp_path):
    p = _bad(GOOD, tmp_path)
    with pytest.raises(DecodingInputError, match="vocab_size is required"):
        NGramLM.from_arpa(p)
    with pytest.raises(DecodingInputError, match="blank_id"):
        NGramLM.from_arpa(p, vocab_size=2, blank_id=5)
    with pytest.raises(DecodingInputError, match="disagrees"):
        NGramLM.from_arpa(p, vocab_size=3, token_map=TokenMap.offset(2, 1))
    with pytest.raises(FileNotFoundError):
        NGramLM.from_arpa(tmp_path / "missing.arpa", vocab_size=2)
    lm = NGramLM.from_arpa(p, vocab_size=2, blank_id=1)
    with pytest.raises(DecodingInputError, match=r"tokens\[1\] = 2 is outside the vocabulary 0..1"):
        lm.score_sequence([0, 2])
    with pytest.raises(DecodingInputError, match=r"tokens\[0\] = -1"):
        lm.score_sequence([-1])
    with pytest.raises(DecodingInputError, match="must be an int"):
        lm.score_sequence([0.5])
    with pytest.raises(DecodingInputError, match="1-D integer tensor"):
        lm.score_sequence(torch.zeros(2, 2, dtype=torch.long))


def test_token_map():
    tm = TokenMap.offset(5, blank_id=4)
    assert tm.encode_line([0, 3, 1]) == "d g e"
    assert tm.decode_line("d g e\n") == [0, 3, 1]
    with pytest.raises(DecodingInputError, match="blank"):
        tm.encode_line([4])
    with pytest.raises(DecodingInputError, match="outside"):
        tm.word(7)
    with pytest.raises(DecodingInputError, match="not a model token"):
        tm.decode_line("d zz")
    with pytest.raises(DecodingInputError, match="offset must be"):
        TokenMap.offset(5, 4, offset=10)
    with pytest.raises(DecodingInputError, match="surrogate"):
        TokenMap.offset(60000, None)
    with pytest.raises(DecodingInputError, match="whitespace"):
        TokenMap.from_words(["a b", "c"])
    with pytest.raises(DecodingInputError, match="reserved"):
        TokenMap.from_words(["<s>", "c"])
    with pytest.raises(DecodingInputError, match="both id"):
        TokenMap.from_words(["a", "a"])
    # U+0085 (NEL) and U+00A0 are words, not separators (ids 33 and 60 with offset 100)
    tm2 = TokenMap.offset(70, None)
    assert tm2.decode_line(tm2.encode_line([33, 60, 1])) == [33, 60, 1]


def test_unicode_space_like_words(tmp_path):
    """Ids whose offset characters are Unicode whitespace (U+0085, U+00A0) must stay words."""
    w85, wa0 = chr(0x85), chr(0xA0)
    lines = ["\\data\\", "ngram 1=5", "ngram 2=1", "", "\\1-grams:", "-1\t<s>\t-0.1", "-1\t</s>",
             f"-0.5\t{w85}\t-0.2", f"-0.6\t{wa0}", "-2\t<unk>", "", "\\2-grams:", f"-0.1\t<s> {w85}", "", "\\end\\", ""]
    p = tmp_path / "u.arpa"
    p.write_text("\n".join(lines), encoding="utf-8")
    lm = NGramLM.from_arpa(p, vocab_size=61, blank_id=None)
    assert lm.score_sequence([33], eos=False) == pytest.approx(-0.1 * LN10, abs=1e-5)
    assert lm.score_sequence([60], eos=False) == pytest.approx((-0.1 - 0.6) * LN10, abs=1e-5)


# --------------------------------------------------------------------------- KenLM as a second checker
@pytest.mark.parametrize("order", [2, 3, 5])
def test_matches_kenlm(order, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    rng = random.Random(100 + order)
    for trial in range(4):
        text = random_arpa(rng, 6, order, max_per_order=80, with_unk=trial % 2 == 0, suffix_closed=True)
        p = tmp_path / f"lm{trial}.arpa"
        p.write_text(text)
        km = kenlm.Model(str(p))
        lm = NGramLM.from_arpa(p, vocab_size=9, blank_id=8)
        for _ in range(10):
            seq = [rng.randrange(8) for _ in range(rng.randint(0, 8))]
            st_in, st_out = kenlm.State(), kenlm.State()
            km.BeginSentenceWrite(st_in)
            total = 0.0
            state = lm.initial_states(1)
            for t in seq:
                scores, nxt = lm.advance(state)
                for v in range(8):  # the whole row
                    tmp = kenlm.State()
                    exp = km.BaseScore(st_in, _token_word(v), tmp) * LN10
                    assert float(scores[0, v]) == pytest.approx(exp, abs=1e-4)
                total += km.BaseScore(st_in, _token_word(t), st_out)
                st_in, st_out = st_out, st_in
                state = nxt[:, t]
            total += km.BaseScore(st_in, "</s>", st_out)
            assert lm.score_sequence(seq) == pytest.approx(total * LN10, abs=1e-4)


def test_step_functions_are_sync_free():
    """advance / score_tokens / final run on the meta device, where any host read of a value fails."""
    rng = random.Random(9)
    lm = NGramLM.from_arpa(_write_tmp(random_arpa(rng, 6, 4, max_per_order=60)), vocab_size=8, blank_id=7,
                           dense_memory_mb=0.001, min_dense_degree=1)
    assert lm.automaton.max_chain > 0 and lm.automaton.light_degree > 0  # light scatter path exercised
    meta = lm.to("meta")
    s = torch.zeros(5, dtype=torch.long, device="meta")
    sc, nx = meta.advance(s)
    assert sc.shape == (5, 8) and nx.shape == (5, 8) and sc.device.type == "meta"
    sc, nx = meta.score_tokens(s, torch.zeros(5, 3, dtype=torch.long, device="meta"))
    assert sc.shape == (5, 3)
    assert meta.final(s).shape == (5,)


def test_score_sequences_batched_and_gzip(tmp_path):
    import gzip

    rng = random.Random(21)
    text = random_arpa(rng, 5, 3, max_per_order=30)
    p = tmp_path / "lm.arpa.gz"
    with gzip.open(p, "wt") as f:
        f.write(text)
    lm = NGramLM.from_arpa(p, vocab_size=7, blank_id=6)
    seqs = [[rng.randrange(7) for _ in range(rng.randint(0, 6))] for _ in range(9)]
    L = max(len(s) for s in seqs)
    labels = torch.tensor([s + [0] * (L - len(s)) for s in seqs])
    lengths = torch.tensor([len(s) for s in seqs])
    for bos in (True, False):
        got = lm.score_sequences(labels, lengths, bos=bos)
        exp = torch.tensor([lm.score_sequence(s, bos=bos) for s in seqs])
        torch.testing.assert_close(got, exp, atol=1e-4, rtol=0)
    with pytest.raises(DecodingInputError, match=rf"lengths must be in 0..{L}"):
        lm.score_sequences(labels, lengths + 10)
    with pytest.raises(DecodingInputError, match="outside the vocabulary"):
        lm.score_sequences(labels + 7, lengths)


def test_arpa_model_from_dict_roundtrip(tmp_path):
    from asrdecode.lm import ArpaModel

    d = {("<s>",): (-99.0, -0.4), ("</s>",): (-0.8, None), ("d",): (-0.5, -0.2), ("e",): (-0.9, None),
         ("<s>", "d"): (-0.1, None), ("d", "e"): (-0.3, None)}
    m = ArpaModel.from_dict(d)
    path = write_arpa(m, tmp_path / "m.arpa")
    ref = DictArpaScorer(path.read_text())
    lm = NGramLM.from_arpa(path, vocab_size=3, blank_id=2)
    for seq in ([0, 1], [1, 0], [], [0, 0, 1]):
        assert lm.score_sequence(seq) == pytest.approx(ref.score([chr(100 + t) for t in seq]), abs=1e-5)
    with pytest.raises(DecodingInputError, match="has no 1-gram"):
        ArpaModel.from_dict({("a", "b"): (-1.0, None), ("a",): (-1.0, None)})
