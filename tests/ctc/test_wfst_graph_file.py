"""Graph files: format 2 (word table as bytes, read into memory, attached search index), format 1
still read, a loaded graph independent of its file, and malformed files refused with FileFormatError."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import WFSTDecoder, attach_search_index, build_tlg, load_graph  # noqa: E402
from asrdecode.ctc.wfst.graph import FORMAT, FORMAT_1  # noqa: E402
from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.lm import ArpaModel  # noqa: E402

V, BLANK = 6, 5
WORDS = {"a": [0], "b": [1], "ab": [0, 1], "ba": [1, 0], "cd": [2, 3], "dc": [3, 2], "abc": [0, 1, 2], "e": [4],
         "ée": [4, 4], "ce": [2, 4], "da": [3, 0]}


@pytest.fixture(scope="module")
def graph():
    d = {("<s>",): (-99.0, -0.3), ("</s>",): (-1.0, None)}
    for i, w in enumerate(WORDS):
        d[(w,)] = (-0.5 - 0.1 * i, -0.2 - 0.05 * (i % 3))
    d.update({("<s>", "ab"): (-0.2, None), ("ab", "cd"): (-0.3, None), ("cd", "</s>"): (-0.1, None)})
    return build_tlg(V, WORDS, ArpaModel.from_dict(d), topology="compact", blank_id=BLANK)


def _hyps(graph, seed=0, **kw):
    gen = torch.Generator().manual_seed(seed)
    lp = (torch.randn(3, 14, V, generator=gen) * 3).log_softmax(-1)
    hyps = WFSTDecoder(graph, beam=6.0, max_active=20, dense_min_degree=1, **kw)(lp, torch.tensor([14, 9, 0]))
    return [(h.words, h.tokens, h.timestamps, round(h.score, 4)) for h in hyps]


def test_format_2_round_trip_with_search_index(graph, tmp_path):
    plain = _hyps(graph)
    g = attach_search_index(graph.to("cpu"), dense_min_degree=1)
    g.save(tmp_path / "g.pt")
    raw = torch.load(tmp_path / "g.pt", weights_only=True)
    assert raw["format"] == FORMAT and raw["words"].dtype == torch.uint8 and "search_index" in raw
    back = load_graph(tmp_path / "g.pt")
    assert back.words == graph.words and back.word_lengths == graph.word_lengths  # "ée": UTF-8 kept
    assert back._search_index is not None
    for name in ("e_src", "e_dst", "e_ilabel", "e_score", "p_ptr", "final_score"):
        assert torch.equal(getattr(back, name), getattr(graph, name))
    dec = WFSTDecoder(back, dense_min_degree=1)
    assert dec._arc_rows(back) is back._search_index["arc_rows"]  # used, not recomputed
    assert _hyps(back) == plain
    # a decoder with other dense settings ignores the saved index and computes its own
    other = WFSTDecoder(back, dense_min_degree=2)
    assert other._dense_rows(back) is not back._search_index["dense"]
    before = (tmp_path / "g.pt").read_bytes()
    assert _hyps(back, seed=1) == _hyps(graph, seed=1)
    assert (tmp_path / "g.pt").read_bytes() == before  # decoding writes nothing


def test_format_1_files_still_load(graph, tmp_path):
    d = {k: v for k, v in graph._fields().items()}
    d["format"] = FORMAT_1
    torch.save(d, tmp_path / "old.pt")
    old = load_graph(tmp_path / "old.pt")
    assert old.words == graph.words and old._search_index is None
    assert _hyps(old) == _hyps(graph)


def _saved(graph, tmp_path, **changes):
    g = attach_search_index(graph.to("cpu"), dense_min_degree=1)
    g.save(tmp_path / "g.pt")
    d = torch.load(tmp_path / "g.pt", weights_only=True)
    for k, v in changes.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v(d) if callable(v) else v
    torch.save(d, tmp_path / "bad.pt")
    return tmp_path / "bad.pt"


@pytest.mark.parametrize("changes,match", [
    ({"n_words": 3}, "word table has"),
    ({"n_words": None}, "bad decoding graph"),
    ({"words": torch.zeros(3, dtype=torch.int64)}, "uint8"),
    ({"words": torch.tensor([0xFF, 0xFE], dtype=torch.uint8)}, "bad decoding graph"),  # not UTF-8
    ({"search_index": [1, 2]}, "search_index"),
    ({"search_index": lambda d: {**d["search_index"], "arc_rows": d["search_index"]["arc_rows"][:-1]}}, "arc_rows"),
    ({"search_index": lambda d: {**d["search_index"], "dense": (d["search_index"]["dense"][0][:-1],)
                                 + d["search_index"]["dense"][1:]}}, "dense"),
    ({"search_index": lambda d: {**d["search_index"], "dense": d["search_index"]["dense"][:2]
                                 + (d["search_index"]["dense"][2] + 10**6, d["search_index"]["dense"][3])}}, "dense"),
    ({"search_index": lambda d: {**d["search_index"], "dense_min_degree": "1"}}, "dense_min_degree"),
    ({"format": "asrdecode.DecodingGraph/9"}, "format tag"),
])
def test_malformed_graph_files_are_refused(graph, tmp_path, changes, match):
    with pytest.raises(FileFormatError, match=match):
        load_graph(_saved(graph, tmp_path, **changes))


def test_a_word_with_a_newline_cannot_be_saved(graph, tmp_path):
    g = graph.to("cpu")
    g.words = list(g.words[:-1]) + ["two\nlines"]
    with pytest.raises(DecodingInputError, match="newline"):
        g.save(tmp_path / "g.pt")
    assert not (tmp_path / "g.pt").exists()


def test_a_loaded_graph_survives_its_file_rewritten_or_truncated(graph, tmp_path):
    """A graph file rewritten in place (truncated, then other bytes) while loaded: the loaded graph decodes
    as before (a memory-mapped graph died of SIGBUS at its next page); reloading it is a named error."""
    path = tmp_path / "g.pt"
    attach_search_index(graph.to("cpu"), dense_min_degree=1).save(path)
    g = load_graph(path)
    with open(path, "r+b") as f:  # in place, same inode: what `cp other.pt g.pt` does
        f.truncate(0)
        f.write(b"PK\x03\x04 a torch zip file of another graph, cut short")
    assert _hyps(g, seed=2) == _hyps(graph, seed=2)
    with pytest.raises(FileFormatError, match="not a decoding graph file"):
        load_graph(path)
    path.unlink()
    assert _hyps(g, seed=3) == _hyps(graph, seed=3)
    with pytest.raises(FileFormatError, match="cannot read the decoding graph file"):
        load_graph(path)
    with pytest.raises(FileFormatError, match="cannot read the decoding graph file"):
        load_graph(tmp_path)  # a directory


def test_legacy_serialisation_loads(graph, tmp_path):
    d = {k: v for k, v in graph._fields().items()}
    d["format"] = FORMAT_1
    torch.save(d, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert load_graph(tmp_path / "legacy.pt").words == graph.words
    (tmp_path / "junk.pt").write_bytes(b"not a graph at all")
    with pytest.raises(FileFormatError, match="not a decoding graph file"):
        load_graph(tmp_path / "junk.pt")
