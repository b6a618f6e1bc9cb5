"""One validation step before either engine reads a structure (issue 30): crafted graphs, LMs, word LMs,
boosting trees and joints give a named error (FileFormatError / DecodingInputError), never a crash or a
silent wrong answer; a structure changed in place after validation is validated again."""

from __future__ import annotations

import random

import pytest
import torch

from asrdecode import ctc
from asrdecode.ctc.wfst import DecodingGraph, WFSTDecoder, attach_search_index, load_graph
from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.lm import NGramLM
from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import _lib
from test_lm_ngram import _write_tmp, random_arpa
from test_wfst_native import random_graph

ENGINES = ["torch"] + (["native"] if _lib.available() else [])


def _graph(seed: int = 3) -> DecodingGraph:
    for s in range(seed, seed + 50):  # one with emitting and epsilon arcs
        g = random_graph(s)
        if g.e_src.numel() > 3 and g.p_src.numel() > 1:
            return g
    raise AssertionError("no graph")


def _decode(g: DecodingGraph, engine: str):
    V = g.vocab_size
    lp = torch.randn(2, 6, V, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    return WFSTDecoder(g, beam=8.0, max_active=30, dense_min_degree=1, engine=engine)(lp, torch.tensor([6, 4]))


# ------------------------------------------------------------------------------------------ graph files
GRAPH_EDITS = {
    "arc_rows token out of range": lambda d: d["search_index"]["arc_rows"][:, 0].fill_(2**30),
    "arc_rows destination 2**30": lambda d: d["search_index"]["arc_rows"][:, 1].fill_(2**30),
    "arc_rows destination -10**6": lambda d: d["search_index"]["arc_rows"][:, 1].fill_(-10**6),
    "e_ptr entries of 10**10": lambda d: d["e_ptr"][1:-1].fill_(10**10),
    "reversed e_ptr": lambda d: d.__setitem__("e_ptr", d["e_ptr"].flip(0)),
    "truncated p_dst": lambda d: d.__setitem__("p_dst", d["p_dst"][:-1]),
    "e_dst (d+1) % 1000": lambda d: d["e_dst"].copy_((d["e_dst"] + 1) % 1000 + d["final_score"].numel()),
    "e_dst -10**6": lambda d: d["e_dst"].fill_(-10**6),
    "e_ilabel - 1": lambda d: d["e_ilabel"].sub_(d["e_ilabel"].min() + 1),
    "e_ilabel = -100000": lambda d: d["e_ilabel"].fill_(-100000),
    "eps_depth = -5": lambda d: d.__setitem__("eps_depth", -5),
    "eps_depth too small": lambda d: d.__setitem__("eps_depth", 0),
    "negative e_olabel": lambda d: d["e_olabel"].fill_(-3),
    "p_olabel beyond the words": lambda d: d["p_olabel"].fill_(10**6),
    "NaN e_score": lambda d: d["e_score"].__setitem__(0, float("nan")),
    "inf p_score": lambda d: d["p_score"].__setitem__(0, float("inf")),
    "NaN final_score": lambda d: d["final_score"].__setitem__(0, float("nan")),
    "e_src out of order": lambda d: d["e_src"].copy_(d["e_src"].flip(0)),
    "start out of range": lambda d: d.__setitem__("start", 10**9),
    "dense arcs out of range": lambda d: d["search_index"]["dense"][2].fill_(10**9),
    "dense ptr decreasing": lambda d: d["search_index"]["dense"][1][1:-1].fill_(-1),
    "dense e_max too small": lambda d: d["search_index"].__setitem__(
        "dense", (*d["search_index"]["dense"][:3], -1e9)),
}


@pytest.mark.parametrize("edit", sorted(GRAPH_EDITS))
def test_crafted_graph_files_are_refused(edit, tmp_path):
    g = attach_search_index(_graph(), dense_min_degree=1)
    assert g._search_index["dense"] is not None
    g.save(tmp_path / "g.pt")
    d = torch.load(tmp_path / "g.pt", weights_only=True)
    GRAPH_EDITS[edit](d)
    torch.save(d, tmp_path / "bad.pt")
    with pytest.raises(FileFormatError):
        load_graph(tmp_path / "bad.pt")


def test_untouched_graph_file_loads_and_decodes(tmp_path):
    g = attach_search_index(_graph(), dense_min_degree=1)
    g.save(tmp_path / "g.pt")
    back = load_graph(tmp_path / "g.pt")
    for engine in ENGINES:
        assert [h.words for h in _decode(back, engine)] == [h.words for h in _decode(g, engine)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("edit", ["e_ptr", "e_dst", "e_ilabel", "p_dst", "e_score", "final_score", "rows"])
def test_graph_changed_in_place_after_validation_is_refused(engine, edit):
    g = attach_search_index(_graph(), dense_min_degree=1)
    _decode(g, engine)  # validated and used once
    if edit == "e_ptr":
        g.e_ptr[1:-1] *= 1000
    elif edit in ("e_dst", "p_dst"):
        getattr(g, edit).fill_(g.num_states + 7)
    elif edit == "e_ilabel":
        g.e_ilabel.fill_(-100000)
    elif edit == "rows":
        g._search_index["arc_rows"][:, 1] = 2**30
    else:
        getattr(g, edit)[0] = float("nan")
    with pytest.raises(DecodingInputError):
        _decode(g, engine)


def test_graph_field_replaced_after_validation_is_validated_again():
    g = _graph()
    g.validate()
    g.e_dst = g.e_dst.clone()  # same values: passes again
    g.ensure_valid()
    g.e_dst = torch.full_like(g.e_dst, -1)
    with pytest.raises(DecodingInputError, match="e_dst"):
        g.ensure_valid()


# ------------------------------------------------------------------------------------------- n-gram LMs
@pytest.fixture(scope="module")
def lm() -> NGramLM:
    rng = random.Random(5)
    return NGramLM.from_arpa(_write_tmp(random_arpa(rng, 6, 3, max_per_order=40)), vocab_size=8, blank_id=7,
                             dense_memory_mb=0.001, min_dense_degree=1)


def _copy(lm: NGramLM) -> NGramLM:
    return NGramLM.load(_saved(lm))


def _saved(lm: NGramLM):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "lm.pt"
    lm.save(path)
    return path


def _ctc(lm, engine):
    lp = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
    return ctc.beam_search(lp, None, 7, beam=4, fusion=[(lm, 0.5)], engine=engine)


LM_TAMPER = {
    "arc_offsets *= 1000": lambda a: a.arc_offsets.mul_(1000),
    "backoff_state out of range": lambda a: a.backoff_state.fill_(10**6),
    "backoff_state negative": lambda a: a.backoff_state.fill_(-5),
    "arc_dest out of range": lambda a: a.arc_dest.fill_(10**9),
    "arc_label negative": lambda a: a.arc_label.fill_(-1),
    "dense_next out of range": lambda a: a.dense_next.fill_(10**9),
    "dense_index out of range": lambda a: a.dense_index.fill_(10**6),
    "arc_weight NaN": lambda a: a.arc_weight.fill_(float("nan")),
    "final_weight NaN": lambda a: a.final_weight.fill_(float("nan")),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("edit", sorted(LM_TAMPER))
def test_lm_changed_in_memory_is_refused_or_rebuilt(lm, engine, edit):
    mine = _copy(lm)
    want = _ctc(mine, engine)
    LM_TAMPER[edit](mine.automaton)
    if edit.startswith("dense"):  # derived rows: rebuilt from the (valid) arcs, same result
        got = _ctc(mine, engine)
        assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
    else:
        with pytest.raises(DecodingInputError):
            _ctc(mine, engine)


LM_FILE_EDITS = {
    "negative arc label": lambda a: a["arc_label"].__setitem__(0, -1),
    "arc label beyond vocab": lambda a: a["arc_label"].__setitem__(0, 10**6),
    "NaN final weight": lambda a: a["final_weight"].__setitem__(0, float("nan")),
    "+inf arc weight": lambda a: a["arc_weight"].__setitem__(0, float("inf")),
    "NaN backoff weight": lambda a: a["backoff_weight"].__setitem__(0, float("nan")),
    "arc offsets not monotone": lambda a: a["arc_offsets"].__setitem__(1, 10**10),
    "truncated arc_dest": lambda a: a.__setitem__("arc_dest", a["arc_dest"][:-1]),
    "backoff cycle, no terminal": lambda a: a["terminal"].fill_(False),
    "unsorted labels": lambda a: a["arc_label"].copy_(a["arc_label"].flip(0)),
}


@pytest.mark.parametrize("edit", sorted(LM_FILE_EDITS))
def test_crafted_lm_files_are_refused(lm, edit, tmp_path):
    path = _saved(lm)
    d = torch.load(path, weights_only=True)
    LM_FILE_EDITS[edit](d["automaton"])
    torch.save(d, tmp_path / "bad.pt")
    with pytest.raises(FileFormatError):
        NGramLM.load(tmp_path / "bad.pt")


def test_bos_state_out_of_range_is_refused(lm, tmp_path):
    d = torch.load(_saved(lm), weights_only=True)
    d["bos_state"] = 10**6
    torch.save(d, tmp_path / "bad.pt")
    with pytest.raises(FileFormatError, match="bos_state"):
        NGramLM.load(tmp_path / "bad.pt")


# ----------------------------------------------------------------------------------- boosting and word LMs
@pytest.mark.parametrize("engine", ENGINES)
def test_boosting_tree_changed_in_place_is_refused(engine):
    tree = BoostingTree.from_token_sequences([[1, 2], [3, 1, 4]], vocab_size=8, blank_id=7, weight=1.5)
    _ctc(tree, engine)
    tree.automaton.arc_dest.fill_(10**7)
    with pytest.raises(DecodingInputError):
        _ctc(tree, engine)


def test_boosting_tree_roots_out_of_range_are_refused():
    tree = BoostingTree.from_token_sequences([[1, 2]], vocab_size=8, blank_id=7, weight=1.0)
    with pytest.raises(DecodingInputError, match="roots"):
        BoostingTree(tree.automaton, torch.tensor([10**6]), tree.phrases)


@pytest.fixture(scope="module")
def word_lm(tmp_path_factory):
    from test_lm_word import STYLES, build

    return build(tmp_path_factory.mktemp("w"), 4, STYLES[0])[0]


@pytest.mark.parametrize("edit", ["end_label", "start_node", "end_const", "start_score", "dtype"])
def test_word_lm_changed_in_place_is_refused(word_lm, edit):
    import copy

    w = copy.copy(word_lm)
    for name in ("end_label", "end_const", "is_start", "start_node", "start_score"):
        setattr(w, name, getattr(word_lm, name).clone())
    w.validate()
    if edit in ("end_label", "start_node"):
        getattr(w, edit).fill_(10**9)
    elif edit == "dtype":
        w.start_node = w.start_node.int()
    else:
        getattr(w, edit).fill_(float("nan"))
    with pytest.raises(DecodingInputError):
        w.ensure_valid()
    states = w.initial_states(3)
    with pytest.raises(DecodingInputError):
        w.advance(states)


# ------------------------------------------------------------------------------------------------ joints
@pytest.mark.parametrize("engine", ["native", "torch"])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind", "greedy"])
def test_joint_returning_fewer_columns_later_is_a_named_error(method, engine):
    """Both engines (and greedy) refuse a joint that changes its output width after its first call."""
    if engine == "native" and not _lib.available():
        pytest.skip("native engine unavailable")
    if method == "greedy" and engine == "native":
        pytest.skip("greedy has one engine")
    from transducer_models import random_encoder, random_model

    from asrdecode.transducer import greedy

    from asrdecode.transducer.beam import beam_search

    m = random_model(3, 6, 5, None)
    joint = m.joint
    calls = [0]

    def narrow_joint(enc, dec):
        calls[0] += 1
        out = joint(enc, dec)
        return out if calls[0] == 1 else out[..., :-2]

    m.joint = narrow_joint
    enc = random_encoder(3, 2, 6)
    with pytest.raises(DecodingInputError, match="joint"):
        if method == "greedy":
            greedy(m, enc, torch.tensor([6, 5]))
        else:
            beam_search(m, enc, torch.tensor([6, 5]), beam=3, method=method, engine=engine)


def test_eps_depth_equals_a_plain_relaxation():
    import numpy as np

    from asrdecode.ctc.wfst.graph import _eps_depth

    rng = np.random.default_rng(0)
    for _ in range(200):
        S, P = int(rng.integers(1, 30)), int(rng.integers(0, 60))
        src = rng.integers(0, S, P)
        dst = np.minimum(src + rng.integers(1, 4, P), S - 1)
        src, dst = src[dst > src], dst[dst > src]
        depth = np.zeros(S, dtype=np.int64)
        for _ in range(S + 1):
            new = depth.copy()
            np.maximum.at(new, src, depth[dst] + 1)
            if np.array_equal(new, depth):
                break
            depth = new
        order = rng.permutation(src.size)  # any arc order
        assert _eps_depth(S, src[order], dst[order]) == (int(depth.max()) if src.size else 0)
    with pytest.raises(DecodingInputError, match="cycle"):
        _eps_depth(3, np.array([0, 1]), np.array([1, 0]))


# --------------------------------------------------------------------- arcs against the lexicon
def _tlg() -> DecodingGraph:
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import build_tlg
    from asrdecode.lm import ArpaModel

    rng = random.Random(0)
    lexicon = {f"w{i}": [[rng.randrange(19) for _ in range(rng.randint(1, 4))]] for i in range(40)}
    grams: dict = {("<s>",): (-99.0, -0.3), ("</s>",): (-1.0, None)}
    grams.update({(w,): (-rng.uniform(1, 3), -0.2) for w in lexicon})
    return build_tlg(21, lexicon, ArpaModel.from_dict(grams), blank_id=20)  # tokens 0..18 used, blank 20


@pytest.mark.parametrize("shift", [1, -1])
def test_graph_whose_token_ids_are_shifted_is_refused(shift, tmp_path):
    """Every non-blank emitting label moved by one (all still in range): the arcs contradict the lexicon's
    pronunciations stored with the graph; validation, loading and decoding say so."""
    g = _tlg()
    g.validate()
    g.save(tmp_path / "g.pt")
    assert load_graph(tmp_path / "g.pt").num_arcs == g.num_arcs
    tokens = g.e_ilabel != g.blank_id
    g.e_ilabel[tokens] = (g.e_ilabel[tokens] + shift) % 20  # 0..19: every label a token id, none blank
    with pytest.raises(DecodingInputError, match="e_ilabel contradicts the lexicon's pronunciations"):
        g.validate()
    for engine in ENGINES:  # changed in place after validation: validated again before use
        with pytest.raises(DecodingInputError, match="contradicts the lexicon"):
            _decode(g, engine)
    d = torch.load(tmp_path / "g.pt", weights_only=True)
    keep = d["e_ilabel"] != 20
    d["e_ilabel"][keep] = (d["e_ilabel"][keep] + shift) % 20
    torch.save(d, tmp_path / "bad.pt")
    with pytest.raises(FileFormatError, match="contradicts the lexicon"):
        load_graph(tmp_path / "bad.pt")
