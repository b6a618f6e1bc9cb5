"""The word LM's load path: ARPA parsed in vectorised blocks (equal to the line reader, the same errors)
and built word LMs cached per user (keyed by the file's SHA-256), loaded memory-mapped."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.compat import build_ctcdecoder
from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.lm import WordNGramLM, cached_word_lm, load_word_lm, save_word_lm
from asrdecode.lm import arpa as arpa_mod
from test_lm_word import close, random_case, random_word_arpa

LABELS = ["", " "] + list("abcdefghijklmnopqrstuvwxyz") + ["'"]


def _slow(path):
    lines = arpa_mod._bounded_lines(path, arpa_mod.MAX_ARPA_BYTES)
    return arpa_mod._parse(lines, str(path))


def _same(a, b) -> None:
    assert a.vocab == b.vocab and a.order == b.order
    for k in range(a.order):
        for f in ("words", "logprob", "backoff", "has_backoff"):
            x, y = getattr(a, f)[k], getattr(b, f)[k]
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), (k, f)
        # per n-gram (the Python readers) or as runs (the native reader)
        assert np.array_equal(a.line_numbers(k + 1), b.line_numbers(k + 1)), k


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 4), st.sampled_from(["", "\n\n", "  \t\n"]), st.booleans())
def test_fast_parse_equals_the_line_reader(tmp_path_factory, seed, order, gap, crlf):
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("abcé") for _ in range(rng.randint(1, 4))) for _ in range(12)})
    text = random_word_arpa(rng, words, order).replace("\n\n", "\n" + gap + "\n")
    if crlf:
        text = text.replace("\n", "\r\n")
    path = tmp_path_factory.mktemp("a") / "w.arpa"
    path.write_bytes(text.encode("utf-8"))
    data = arpa_mod._bounded_bytes(path, arpa_mod.MAX_ARPA_BYTES)
    fast = arpa_mod._parse_fast(data, str(path))
    assert fast is not None
    _same(fast, _slow(path))
    _same(arpa_mod.read_arpa(path), fast)


MUTATIONS = [
    ("ngram 2=", "ngram 2=9"),  # count disagrees
    ("\\2-grams:", "\\3-grams:"),  # section names
    ("\\end\\", "\\fin\\"),
    ("-0.", "x0."),  # a non-numeric log prob
    ("-0.", "0."),  # a positive one (when followed by a digit > 0) or zero
    ("\t<s>", "\t<s> extra fields here"),
    ("<unk>", "<s>"),  # duplicate 1-gram
]


@pytest.mark.parametrize("old,new", MUTATIONS)
def test_malformed_files_get_the_line_readers_error(tmp_path, old, new):
    rng = random.Random(5)
    text = random_word_arpa(rng, ["ab", "ba", "c"], 2)
    assert old in text
    bad = text.replace(old, new, 1)
    path = tmp_path / "bad.arpa"
    path.write_text(bad, encoding="utf-8")
    try:
        _slow(path)
    except FileFormatError as e:
        expected = str(e)
    else:
        expected = None
    if expected is None:
        _same(arpa_mod.read_arpa(path), _slow(path))
    else:
        with pytest.raises(FileFormatError) as got:
            arpa_mod.read_arpa(path)
        assert str(got.value) == expected


def test_gzip_and_limits_go_through_the_line_reader(tmp_path):
    import gzip

    text = random_word_arpa(random.Random(2), ["ab", "ba", "c"], 3)
    gz = tmp_path / "w.arpa.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    plain = tmp_path / "w.arpa"
    plain.write_text(text)
    _same(arpa_mod.read_arpa(gz), _slow(plain))
    with pytest.raises(FileFormatError, match="max_bytes"):
        arpa_mod.read_arpa(plain, max_bytes=100)
    trunc = tmp_path / "t.arpa.gz"
    trunc.write_bytes(gz.read_bytes()[:-6])
    with pytest.raises(FileFormatError, match="truncated or corrupt gzip"):
        arpa_mod.read_arpa(trunc)


# ------------------------------------------------------------------------------------ the cache
def _case(tmp_path, seed=11):
    pieces, blank, words, text = random_case(seed, "delimiter")
    path = tmp_path / "w.arpa"
    path.write_text(text)
    return path, pieces, blank


def _tokens(pieces, seed=0, n=30):
    rng = random.Random(seed)
    ids = [i for i, p in enumerate(pieces) if p is not None]
    return [[rng.choice(ids) for _ in range(rng.randint(0, 12))] for _ in range(n)]


@pytest.mark.parametrize("lexicon", [False, True])
def test_saved_word_lm_scores_as_the_built_one(tmp_path, lexicon):
    path, pieces, blank = _case(tmp_path)
    lm = WordNGramLM.from_arpa(path, pieces, blank_id=blank, lexicon=lexicon, unweighted_word_bonus=0.3)
    save_word_lm(lm, tmp_path / "lm.pt")
    back = load_word_lm(tmp_path / "lm.pt")
    assert back.words == lm.words and back.lexicon == lexicon and back.unweighted_word_bonus == pytest.approx(0.3)
    for toks in _tokens(pieces):
        assert close(back.score_sequence(toks), lm.score_sequence(toks))
    with pytest.raises(FileFormatError, match="not a word LM file"):
        load_word_lm(path)
    with pytest.raises(DecodingInputError, match="WordNGramLM"):
        save_word_lm("nope", tmp_path / "x.pt")


def test_cache_builds_once_keys_on_contents_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    path, pieces, blank = _case(tmp_path)
    msgs: list[str] = []
    a = cached_word_lm(path, pieces, blank_id=blank, log=msgs.append)
    assert any("building the word LM" in m for m in msgs)
    msgs.clear()
    b = cached_word_lm(path, pieces, blank_id=blank, log=msgs.append)
    assert msgs == []  # from the cache
    ref = WordNGramLM.from_arpa(path, pieces, blank_id=blank)
    for toks in _tokens(pieces, 1):
        assert close(a.score_sequence(toks), ref.score_sequence(toks))
        assert close(b.score_sequence(toks), ref.score_sequence(toks))
    # other options, other words kept, an edited file: new entries
    cached_word_lm(path, pieces, blank_id=blank, lexicon=True, log=msgs.append)
    cached_word_lm(path, pieces, blank_id=blank, keep_words=ref.words[:2], log=msgs.append)
    assert sum("building" in m for m in msgs) == 2
    msgs.clear()
    _, _, _, other = random_case(12, "delimiter")
    path.write_text(other)
    c = cached_word_lm(path, pieces, blank_id=blank, log=msgs.append)
    assert any("building" in m for m in msgs)
    ref2 = WordNGramLM.from_arpa(path, pieces, blank_id=blank)
    assert all(close(c.score_sequence(t), ref2.score_sequence(t)) for t in _tokens(pieces, 2))
    # a corrupt entry is rebuilt, never used
    entry = sorted((tmp_path / "cache" / "graphs").glob("word-lm-*.pt"))
    for e in entry:
        data = bytearray(e.read_bytes())
        data[len(data) // 2] ^= 0xFF
        e.write_bytes(bytes(data))
    msgs.clear()
    d = cached_word_lm(path, pieces, blank_id=blank, log=msgs.append)
    assert any("not usable" in m for m in msgs)
    assert all(close(d.score_sequence(t), ref2.score_sequence(t)) for t in _tokens(pieces, 3))
    with pytest.raises(FileFormatError, match="no such word LM file"):
        cached_word_lm(tmp_path / "missing.arpa", pieces, blank_id=blank)
    with pytest.raises(DecodingInputError, match="keep_words"):
        cached_word_lm(path, pieces, blank_id=blank, keep_words="abc")


def test_pyctcdecode_facade_loads_from_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    rng = random.Random(3)
    words = ["cat", "dog", "cab", "do"]
    arpa = tmp_path / "w.arpa"
    arpa.write_text(random_word_arpa(rng, words, 3))
    first = build_ctcdecoder(LABELS, str(arpa), alpha=0.7, beta=1.1)
    assert "building the word LM" in capsys.readouterr().err
    again = build_ctcdecoder(LABELS, str(arpa), alpha=0.7, beta=1.1)
    assert capsys.readouterr().err == ""
    x = np.random.default_rng(0).normal(size=(20, len(LABELS))).astype(np.float32)
    assert first.decode_beams(x, beam_width=8)[0][4] == pytest.approx(again.decode_beams(x, beam_width=8)[0][4])
    again.reset_params(unk_score_offset=-5.0)  # another offset: another cached build
    assert "building the word LM" in capsys.readouterr().err


def test_cached_word_lm_fusion_is_word_lm_fusion(tmp_path, monkeypatch):
    from asrdecode.lm.word import word_lm_fusion
    from asrdecode.lm.word_cache import cached_word_lm_fusion

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    path, pieces, blank = _case(tmp_path)
    for _ in range(2):  # built, then from the cache
        got, w = cached_word_lm_fusion(path, pieces, vocab_size=len(pieces), blank_id=blank, weight=0.5, word_bonus=1.0,
                                       log=lambda m: None)
        want, w2 = word_lm_fusion(path, pieces, vocab_size=len(pieces), blank_id=blank, weight=0.5, word_bonus=1.0)
        assert w == w2 == 0.5 and got.unweighted_word_bonus == pytest.approx(2.0)
        assert all(close(got.score_sequence(t), want.score_sequence(t)) for t in _tokens(pieces, 4))
    with pytest.raises(DecodingInputError, match="non-zero"):
        cached_word_lm_fusion(path, pieces, vocab_size=len(pieces), blank_id=blank, weight=0.0, word_bonus=1.0)
    with pytest.raises(FileFormatError, match="no such word LM file"):
        cached_word_lm_fusion(tmp_path / "nope.arpa", pieces, vocab_size=len(pieces), blank_id=blank, weight=0.5)


def test_cached_word_lm_with_zeroed_arc_weights_is_rebuilt(tmp_path, monkeypatch):
    """The cache file's arc weights zeroed in place, size and modification time kept (a fault between
    the blocks a sampled check reads): the whole-file check reports it and rebuilds, never scores with it."""
    import os

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    rng = random.Random(5)
    pieces, blank, _, _ = random_case(5, "delimiter")
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 8))) for _ in range(7000)})
    path = tmp_path / "big.arpa"
    path.write_text(random_word_arpa(rng, words, 2))
    ref = WordNGramLM.from_arpa(path, pieces, blank_id=blank)
    cached_word_lm(path, pieces, blank_id=blank, log=lambda m: None)
    (entry,) = (tmp_path / "cache" / "graphs").glob("word-lm-*.pt")
    weights = ref.word_lm.automaton.arc_weight.numpy().tobytes()
    data = bytearray(entry.read_bytes())
    at = data.find(weights)
    assert at > 0 and len(weights) > 1000 and len(data) > 16 * 2**16  # sampling would not read every byte
    size, block = len(data), 2**16
    sampled = {i for k in range(16) for i in range((size - block) * k // 15, (size - block) * k // 15 + block)}
    zeroed = [i for i in range(at, at + len(weights)) if i not in sampled]
    assert len(zeroed) > 1000
    for i in zeroed:  # only bytes no sampled block reads
        data[i] = 0
    st = entry.stat()
    entry.write_bytes(bytes(data))
    os.utime(entry, ns=(st.st_atime_ns, st.st_mtime_ns))
    msgs: list[str] = []
    got = cached_word_lm(path, pieces, blank_id=blank, log=msgs.append)
    assert any("not usable" in m and "CRC-32" in m for m in msgs), msgs
    assert all(close(got.score_sequence(t), ref.score_sequence(t)) for t in _tokens(pieces, 4))
