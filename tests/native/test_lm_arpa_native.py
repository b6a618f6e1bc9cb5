"""The native engine's ARPA reader (asrdecode.native.arpa, arpa.cpp) against the Python line reader:
the same arrays on random files (any block size, gzip, CRLF, numbers in every format Python prints),
the trie links equal to the lookups, the same LMs built from either, and the line reader's named error
for every file it does not take."""

from __future__ import annotations

import ctypes
import gzip
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.lm import NGramLM, TokenMap, WordNGramLM
from asrdecode.lm import arpa as arpa_mod
from asrdecode.lm._trie import NGramTrie, _links_hold
from asrdecode.native import _lib
from test_lm_word import random_word_arpa

pytestmark = pytest.mark.skipif(not _lib.available(), reason="the native engine is not available")

native_arpa = pytest.importorskip("asrdecode.native.arpa")


def _slow(path):
    return arpa_mod._parse(arpa_mod._bounded_lines(path, arpa_mod.MAX_ARPA_BYTES), str(path))


def _reads_as_the_line_reader(path) -> None:
    """The native ``read_arpa`` of ``path`` gives the line reader's model, or its error word for word."""
    try:
        expected = _slow(path)
    except FileFormatError as e:
        with pytest.raises(FileFormatError) as got:
            arpa_mod.read_arpa(path, engine="native")
        assert str(got.value) == str(e)
    else:
        _same(arpa_mod.read_arpa(path, engine="native"), expected)


def _same(a, b) -> None:
    assert a.vocab == b.vocab and a.order == b.order
    for k in range(a.order):
        for f in ("words", "logprob", "backoff", "has_backoff"):
            x, y = getattr(a, f)[k], getattr(b, f)[k]
            assert x.dtype == y.dtype and x.shape == y.shape, (k, f)
            assert np.array_equal(x, y), (k, f)
            if x.dtype == np.float32:  # bit for bit (signed zeros too)
                assert np.array_equal(x.view(np.int32), y.view(np.int32)), (k, f)
        # the lines, kept per n-gram (the Python readers) or as runs (the native reader)
        assert np.array_equal(a.line_numbers(k + 1), b.line_numbers(k + 1)), k


def _links_equal_lookups(model) -> None:
    """The native links name the same trie nodes as the searchsorted lookups."""
    assert _links_hold(model)
    linked = NGramTrie.build(model)
    plain_model = arpa_mod.ArpaModel(model.vocab, model.words, model.logprob, model.backoff, model.has_backoff,
                                     model.lines, model.path)
    looked = NGramTrie.build(plain_model)
    for k in range(1, model.order + 1):
        assert np.array_equal(linked.node_of[k - 1], looked.node_of[k - 1])
        assert np.array_equal(linked.parent[k - 1], looked.parent[k - 1])
        assert np.array_equal(linked.suffix_nodes(model.words[k - 1], k),
                              looked.suffix_nodes(model.words[k - 1], k))


def _number(rng: random.Random, x: float) -> str:
    """``x`` in one of the formats ARPA writers use (Python reads every one of them back)."""
    return rng.choice([repr(x), f"{x:.6f}", f"{x:e}", f"{x:E}", f"{x:g}", f"{x:.17g}", f"{x:+.3f}"])


def _reformat(text: str, rng: random.Random, values) -> str:
    """``text`` with every number of the n-gram lines replaced by a value of ``values`` in a random format."""
    out = []
    for line in text.split("\n"):
        parts = line.split("\t")
        if len(parts) >= 2 and not line.startswith("\\"):
            parts[0] = _number(rng, -abs(values.pop()) if values else float(parts[0]))
            if len(parts) == 3:
                parts[2] = _number(rng, values.pop() if values else float(parts[2]))
        out.append("\t".join(parts))
    return "\n".join(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), order=st.integers(1, 5), gap=st.sampled_from(["", "\n\n", "  \t\n"]),
       crlf=st.booleans(), chunk=st.sampled_from([1, 2, 7, 64, 1 << 24]),
       values=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_subnormal=False), max_size=80))
def test_native_reader_equals_the_line_reader(tmp_path_factory, monkeypatch, seed, order, gap, crlf, chunk, values):
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("abcé<>") for _ in range(rng.randint(1, 5))) for _ in range(14)})
    text = _reformat(random_word_arpa(rng, words, order), rng, list(values))
    text = text.replace("\n\n", "\n" + gap + "\n")
    if crlf:
        text = text.replace("\n", "\r\n")
    path = tmp_path_factory.mktemp("a") / "w.arpa"
    path.write_bytes(text.encode("utf-8"))
    monkeypatch.setattr(native_arpa, "CHUNK", chunk)
    native = arpa_mod._read_native(path, arpa_mod.MAX_ARPA_BYTES)
    assert native is not None
    _same(native, _slow(path))
    _links_equal_lookups(native)
    _same(arpa_mod.read_arpa(path, engine="native"), native)


def test_gzip_is_read_block_by_block(tmp_path, monkeypatch):
    text = random_word_arpa(random.Random(3), ["ab", "ba", "c", "cab"], 3)
    plain, gz = tmp_path / "w.arpa", tmp_path / "w.arpa.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(native_arpa, "CHUNK", 5)
    native = arpa_mod._read_native(gz, arpa_mod.MAX_ARPA_BYTES)
    assert native is not None
    _same(native, _slow(plain))
    trunc = tmp_path / "t.arpa.gz"
    trunc.write_bytes(gz.read_bytes()[:-6])
    assert arpa_mod._read_native(trunc, arpa_mod.MAX_ARPA_BYTES) is None
    with pytest.raises(FileFormatError, match="truncated or corrupt gzip"):
        arpa_mod.read_arpa(trunc, engine="native")
    assert arpa_mod._read_native(plain, 100) is None
    with pytest.raises(FileFormatError, match="max_bytes"):
        arpa_mod.read_arpa(plain, max_bytes=100, engine="native")


BASE = random_word_arpa(random.Random(5), ["ab", "ba", "c"], 3)
MUTATIONS = [
    ("ngram 2=", "ngram 2=9"),  # count disagrees
    ("ngram 2=", "ngram  2 = "),  # spaces the line reader accepts too
    ("ngram 2=", "ngram 2=0"),
    ("\\2-grams:", "\\3-grams:"),  # section names
    ("\\2-grams:", "\\2-grams: x"),
    ("\\end\\", "\\fin\\"),
    ("\\end\\\n", "\\end\\\nanything after the end\n"),
    ("\\data\\", "junk\n\\data\\"),
    ("-0.", "x0."),  # a non-numeric log prob
    ("-0.", "0."),  # a positive one (when followed by a digit > 0) or zero
    ("-0.", "-inf"),  # numbers only the line reader reads
    ("-0.", "-1_0"),
    ("-0.", "-nan"),
    ("\t<s>", "\t<s> extra fields here"),
    ("<unk>", "<s>"),  # duplicate 1-gram
    ("\tc ba\n", "\tba c\n"),  # duplicate 2-gram (the reader's own check)
    ("\tab ba ba\n", "\tc ba ba\n"),  # duplicate 3-gram, the highest order (read_arpa's sorted keys)
    ("\tab ba ba\n", "\tab ab ba ba\n"),  # a 4-gram in the 3-grams
    ("\tc\n", "\tc\t-1e999\n"),  # an infinite backoff
    ("\tc\n", "\tc\t-inf\n"),
    ("\tc\n", "\tc\t1e999\n"),
    ("\tc\n", "\t\xff\n"),  # not UTF-8 (written as latin-1 below)
    ("\tc\n", "\tc\t-1.5\n"),  # a backoff on a 1-gram: fine
]


@pytest.mark.parametrize("old,new", MUTATIONS)
def test_what_the_native_reader_does_not_take_gets_the_line_readers_answer(tmp_path, old, new):
    assert old in BASE, old
    path = tmp_path / "m.arpa"
    path.write_bytes(BASE.replace(old, new, 1).encode("latin-1" if "\xff" in new else "utf-8"))
    _reads_as_the_line_reader(path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10**6), st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=3)), min_size=1, max_size=4))
@example(7588, [(651256, b"\x00")])  # "\end\" then a NUL: the numpy reader took it for the end marker
def test_damaged_files_read_as_the_line_reader_reads_them(tmp_path_factory, seed, edits):
    data = bytearray(random_word_arpa(random.Random(seed), ["ab", "b", "ca"], 1 + seed % 3).encode())
    for at, new in edits:
        i = at % (len(data) + 1)
        data[i:i + len(new) % 2 + 1] = new
    path = tmp_path_factory.mktemp("d") / "d.arpa"
    path.write_bytes(bytes(data))
    _reads_as_the_line_reader(path)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), order=st.integers(1, 4), with_unk=st.booleans())
def test_lms_built_from_either_reader_are_equal(tmp_path_factory, seed, order, with_unk):
    rng = random.Random(seed)
    words = ["a", "b", "ab", "ba", "abc", "ca"]
    path = tmp_path_factory.mktemp("lm") / "w.arpa"
    path.write_text(random_word_arpa(rng, words, order, with_unk=with_unk))
    native = arpa_mod.read_arpa(path, engine="native")
    python = arpa_mod.read_arpa(path, engine="torch")
    assert native.context and not python.context and _links_hold(native)
    tmap = TokenMap(len(words) + 1, 0, [None] + words)
    for a, b in [(NGramLM.from_arpa_model(native, token_map=tmap), NGramLM.from_arpa_model(python, token_map=tmap))]:
        for name in ("arc_offsets", "arc_label", "arc_weight", "arc_dest", "backoff_state", "backoff_weight",
                     "final_weight", "dense_scores", "dense_next"):
            assert torch.equal(getattr(a.automaton, name), getattr(b.automaton, name)), name
    pieces = [None, " "] + list("abc")
    wa = WordNGramLM.from_arpa_model(native, pieces, blank_id=0)
    wb = WordNGramLM.from_arpa_model(python, pieces, blank_id=0)
    for name in ("end_label", "end_const", "start_node", "start_score"):
        assert torch.equal(getattr(wa, name), getattr(wb, name)), name
    for part in ("word_lm.automaton", "trie"):
        a_, b_ = wa, wb
        for attr in part.split("."):
            a_, b_ = getattr(a_, attr), getattr(b_, attr)
        for name in ("arc_offsets", "arc_label", "arc_weight", "arc_dest", "backoff_state", "backoff_weight",
                     "final_weight"):
            assert torch.equal(getattr(a_, name), getattr(b_, name)), (part, name)


def test_stale_links_are_not_used(tmp_path):
    path = tmp_path / "w.arpa"
    path.write_text(random_word_arpa(random.Random(9), ["a", "b", "ab"], 3))
    model = arpa_mod.read_arpa(path, engine="native")
    assert _links_hold(model)
    model.words[1] = model.words[1][::-1].copy()  # edited after reading: the links no longer name its words
    assert not _links_hold(model)


def test_engine_is_checked(tmp_path):
    path = tmp_path / "w.arpa"
    path.write_text(BASE)
    with pytest.raises(DecodingInputError, match="engine"):
        arpa_mod.read_arpa(path, engine="fast")
    _same(arpa_mod.read_arpa(path, engine="torch"), arpa_mod.read_arpa(path, engine="auto"))


def test_the_c_entry_points_refuse_bad_arguments():
    from asrdecode.native.abi import ArpaArgs

    lib = _lib.load()
    err = ctypes.create_string_buffer(64)
    assert lib.asrd_arpa_open(0) is None
    assert lib.asrd_arpa_feed(None, ctypes.byref(ArpaArgs()), err, 64) == -1
    reader = lib.asrd_arpa_open(1 << 20)
    try:
        text = np.frombuffer(b"\\data\\\nngram 1=2\n\\1-grams:\n-1 a\n-1 b\n\\end\\\n", dtype=np.uint8).copy()
        counts = np.zeros(4, dtype=np.int64)
        args = ArpaArgs(data=text.ctypes.data, length=-1, max_order=4, counts=counts.ctypes.data)
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == -1  # a negative length
        args.length = text.size
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == 1 and counts[0] == 2
        args.data, args.length = text.ctypes.data + args.consumed, text.size - args.consumed
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == -1  # no outputs bound
        out = native_arpa._Outputs([1])  # one n-gram fewer than the header declares
        out.bind(args)
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == -1
    finally:
        lib.asrd_arpa_close(reader)


def test_a_model_without_unk_keeps_its_links(tmp_path):
    from asrdecode.lm.ngram import _with_unk

    path = tmp_path / "w.arpa"
    path.write_text(random_word_arpa(random.Random(4), ["a", "b", "ab"], 3, with_unk=False))
    model = arpa_mod.read_arpa(path, engine="native")
    assert "<unk>" not in model.vocab and _links_hold(_with_unk(model, -100.0))
    tmap = TokenMap(4, 0, [None, "a", "b", "ab"])
    a = NGramLM.from_arpa_model(model, token_map=tmap)
    b = NGramLM.from_arpa_model(arpa_mod.read_arpa(path, engine="torch"), token_map=tmap)
    assert torch.equal(a.automaton.arc_dest, b.automaton.arc_dest)
    assert torch.equal(a.automaton.backoff_state, b.automaton.backoff_state)


def _with_blank_lines(text: str, rng: random.Random) -> str:
    """``text`` with whitespace-only lines put between random n-gram lines (the line reader skips them)."""
    out = []
    for line in text.split("\n"):
        out.append(line)
        if line and not line.startswith(("\\", "ngram")) and rng.random() < 0.3:
            out += [rng.choice(["", " ", "\t \t"])] * rng.randint(1, 3)
    return "\n".join(out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), order=st.integers(1, 4), wide=st.booleans())
def test_compact_arrays_have_the_narrow_dtypes(tmp_path_factory, monkeypatch, seed, order, wide):
    """float32 scores, int32 ids and links (int64 past NARROW_LINKS n-grams of an order), no line per
    n-gram: the runs of lines, which give the line reader's lines, blank lines inside sections too."""
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("n") / "w.arpa"
    path.write_text(_with_blank_lines(random_word_arpa(rng, ["a", "b", "ab", "ba", "abc"], order), rng))
    with monkeypatch.context() as patch:  # the examples share the fixture: undo it after each
        if wide:
            patch.setattr(native_arpa, "NARROW_LINKS", 1)
        model = arpa_mod.read_arpa(path, engine="native")
    python = _slow(path)
    _same(model, python)
    assert model.lines == [] and len(model.line_runs) == order
    links = np.int64 if wide and order > 2 else np.int32
    for k in range(order):
        assert model.words[k].dtype == np.int32
        assert model.logprob[k].dtype == np.float32 and model.backoff[k].dtype == np.float32
        assert python.logprob[k].dtype == np.float32 and python.backoff[k].dtype == np.float32
        if k >= 2:
            assert model.context[k].dtype == links and model.suffix[k].dtype == links
        runs = model.line_runs[k]
        breaks = int(np.count_nonzero(np.diff(python.lines[k]) != 1)) + 1 if python.lines[k].size else 0
        assert runs.dtype == np.int64 and runs.shape == (breaks + 1, 2)  # one row per run, then the end
    _links_equal_lookups(model)


def test_scores_are_the_floats_rounded_to_float32(tmp_path):
    """Each score is Python's float() of the text rounded to float32; a backoff past float32's range is
    the line reader's named error."""
    text = BASE.replace("\tc\n", "\tc\t-0.30103000000000001\n", 1)
    path = tmp_path / "f.arpa"
    path.write_text(text)
    model = arpa_mod.read_arpa(path, engine="native")
    c = model.vocab.index("c")
    assert model.backoff[0][c] == np.float32(-0.30103000000000001)
    assert model.backoff[0][c].tobytes() == np.float64(-0.30103).astype(np.float32).tobytes()
    path.write_text(BASE.replace("\tc\n", "\tc\t1e39\n", 1))
    with pytest.raises(FileFormatError, match=r"f\.arpa:\d+: backoff weight 1e\+39 is beyond float32"):
        arpa_mod.read_arpa(path, engine="native")


@pytest.mark.parametrize("with_unk", [True, False])
def test_an_error_found_after_reading_names_the_line(tmp_path, with_unk):
    """A check after reading (a word no model token spells) names the file and the word's line from the
    native reader's line runs, blank lines inside the section and a model without <unk> included."""
    text = random_word_arpa(random.Random(2), ["a", "b", "zz"], 3, with_unk=with_unk)
    text = text.replace("\\1-grams:\n", "\\1-grams:\n\n  \n", 1)
    lines = text.split("\n")
    at = lines.index(next(ln for ln in lines if ln.split("\t")[1:2] == ["zz"])) + 1
    path = tmp_path / "w.arpa"
    path.write_text(text)
    model = arpa_mod.read_arpa(path, engine="native")
    assert model.lines == [] and model.line_of(1, model.vocab.index("zz")) == at
    tmap = TokenMap(3, 0, [None, "a", "b"])
    with pytest.raises(FileFormatError, match=rf"w\.arpa:{at}: the LM word 'zz' names no model token"):
        NGramLM.from_arpa_model(model, token_map=tmap)
    dropped = arpa_mod.drop_words(model, ["a"])  # the runs follow the n-grams kept
    assert dropped.line_of(1, dropped.vocab.index("zz")) == at


def test_int32_links_are_refused_for_an_order_past_their_range():
    """The C++ reader binds int32 links only while every order below the highest stays under 2^25."""
    from asrdecode.native.abi import ArpaArgs

    lib = _lib.load()
    err = ctypes.create_string_buffer(64)
    reader = lib.asrd_arpa_open(1 << 20)
    try:
        head = f"\\data\\\nngram 1=2\nngram 2={native_arpa.NARROW_LINKS}\nngram 3=1\n\\1-grams:\n"
        text = np.frombuffer(head.encode(), dtype=np.uint8).copy()
        counts = np.zeros(4, dtype=np.int64)
        args = ArpaArgs(data=text.ctypes.data, length=text.size, max_order=4, counts=counts.ctypes.data)
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == 1
        out = native_arpa._Outputs([int(c) for c in counts[:3]])  # np.empty / np.zeros: no page touched
        assert out.link_bytes == 8 and out.context[2].dtype == np.int64
        out.bind(args)
        args.link_bytes = 4
        args.data, args.length = text.ctypes.data + args.consumed, text.size - args.consumed
        assert lib.asrd_arpa_feed(reader, ctypes.byref(args), err, 64) == -1
    finally:
        lib.asrd_arpa_close(reader)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(min_value=-2.0**100, max_value=0, allow_nan=False, width=32), min_size=1, max_size=40))
def test_written_scores_read_back_bit_for_bit(tmp_path_factory, values):
    """write_arpa's float32 scores: 7 digits where they read back to the same float32, else the exact repr."""
    ngrams = {(f"w{i}",): (v, -v / 2 if i % 2 else None) for i, v in enumerate(values)}
    ngrams.update({("<s>",): (-99.0, 0.0), ("</s>",): (-1.0, None), ("<s>", "w0"): (-0.5, None)})  # order 2
    model = arpa_mod.ArpaModel.from_dict(ngrams)
    path = arpa_mod.write_arpa(model, tmp_path_factory.mktemp("w") / "w.arpa")
    _same(arpa_mod.read_arpa(path, engine="native"), arpa_mod.read_arpa(path, engine="torch"))
    back = arpa_mod.read_arpa(path)
    for f in ("logprob", "backoff"):
        assert getattr(back, f)[0].tobytes() == getattr(model, f)[0].tobytes(), f
    assert "-99\t<s>" in path.read_text()  # the short form where it is exact


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2, 5]), max_size=30))
def test_line_runs_give_back_the_lines(steps):
    """runs_of_lines / lines_of_runs / ArpaModel.line_of agree with the per n-gram lines (0: unknown)."""
    lines = np.cumsum(steps).astype(np.int64) * (np.arange(len(steps)) % 7 != 3)  # some lines unknown
    runs = arpa_mod.runs_of_lines(lines)
    assert np.array_equal(arpa_mod.lines_of_runs(runs, len(lines)), lines)
    model = arpa_mod.ArpaModel([f"w{i}" for i in range(len(lines))], [np.arange(len(lines), dtype=np.int32)[:, None]],
                               [np.zeros(len(lines))], [np.zeros(len(lines))], [np.zeros(len(lines), bool)],
                               line_runs=[runs])
    assert [model.line_of(1, i) for i in range(len(lines) + 1)] == [int(x) or None for x in lines] + [None]
