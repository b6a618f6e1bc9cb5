"""The CTC prefix beam search on the native engine: the same hypotheses as the tensor engine and the oracle.

Emissions are continuous random values (no exact score ties, so the engines' different tie rules
never matter: the native engine keeps ties in candidate-index order, torch's topk in its own).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.ctc import beam as beam_mod
from asrdecode.errors import DecodingInputError
from asrdecode.lm import NGramLM
from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import NativeEngineUnavailable, _lib, choice
from test_ctc_helpers import TableBigram, peaky_log_probs, random_lengths, random_log_probs, random_token_arpa

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

SETTINGS = settings(max_examples=30, deadline=None)


def assert_same(got, want, tol=1e-5):
    assert len(got) == len(want)
    for g_list, w_list in zip(got, want):
        assert [h.tokens for h in g_list] == [h.tokens for h in w_list]
        assert [h.timestamps for h in g_list] == [h.timestamps for h in w_list]
        for g, w in zip(g_list, w_list):
            assert g.score == pytest.approx(w.score, abs=tol)


def make_lm(tmp_path_factory, seed: int, vocab: int, blank: int, order: int = 3) -> NGramLM:
    path = tmp_path_factory.mktemp("arpa") / f"lm_{seed}_{vocab}_{blank}_{order}.arpa"
    path.write_text(random_token_arpa(seed, vocab, blank, order=order))
    return NGramLM.from_arpa(path, vocab_size=vocab, blank_id=blank)


def boosting(seed: int, batch: int, vocab: int, blank: int) -> BoostingTree:
    g = torch.Generator().manual_seed(seed)
    non_blank = [t for t in range(vocab) if t != blank]
    trees = []
    for _ in range(batch):
        phrases = [[non_blank[int(i)] for i in torch.randint(0, len(non_blank), (int(torch.randint(1, 4, (1,), generator=g)),),
                                                              generator=g)] for _ in range(2)]
        trees.append(BoostingTree.from_token_sequences(phrases, vocab_size=vocab, blank_id=blank, weight=1.5))
    return BoostingTree.stack(trees)


dims = st.tuples(
    st.integers(0, 100_000),  # seed
    st.integers(1, 3),  # batch
    st.integers(0, 14),  # frames
    st.integers(2, 9),  # vocabulary
    st.integers(1, 8),  # beam
)


@SETTINGS
@given(dims, st.booleans(), st.sampled_from([0.0, 0.7, -0.5]), st.sampled_from([math.inf, 20.0, 3.0]),
       st.sampled_from([None, None, 1, 2, 3]), st.sampled_from([None, "weak", 0.9]), st.booleans())
def test_native_equals_torch_and_oracle(d, user_model, beta, thr, token_beam, collapse, peaky):
    """Without fusion, or with a fusion model the engine does not know (called per frame)."""
    seed, batch, frames, vocab, beam = d
    blank = seed % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank, peak=5.0) if peaky
          else random_log_probs(seed, batch, frames, vocab, scale=2.0))
    lens = random_lengths(seed, batch, frames)
    fusion = [(TableBigram(vocab, blank, seed=seed), 0.8)] if user_model else []
    kw = dict(beam=beam, fusion=fusion, beta=beta, beam_threshold=thr, nbest=1 + seed % beam, token_beam=token_beam,
              blank_collapse=collapse)
    native = ctc.beam_search(lp, lens, blank, engine="native", **kw)
    assert_same(native, ctc.beam_search(lp, lens, blank, engine="torch", **kw))
    assert_same(native, ctc.reference_beam_search(lp, lens, blank, **kw), tol=1e-4)


@SETTINGS
@given(dims, st.sampled_from([None, 2, 4]), st.sampled_from([None, 0.9]), st.booleans(), st.sampled_from([20.0, 4.0]))
def test_native_ngram_and_boosting_equal_torch_and_oracle(tmp_path_factory, d, token_beam, collapse, with_boost, thr):
    """NGramLM and per-utterance BoostingTree read natively from their automaton arrays."""
    seed, batch, frames, vocab, beam = d
    vocab = max(vocab, 3)
    blank = seed % vocab
    lm = make_lm(tmp_path_factory, seed, vocab, blank, order=1 + seed % 3)
    fusion = [(lm, 0.7)]
    if with_boost:
        fusion.append((boosting(seed, batch, vocab, blank), 1.0))
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=4.0)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, fusion=fusion, beta=0.5, token_beam=token_beam, blank_collapse=collapse, nbest=beam,
              beam_threshold=thr)
    native = ctc.beam_search(lp, lens, blank, engine="native", **kw)
    assert_same(native, ctc.beam_search(lp, lens, blank, engine="torch", **kw))
    assert_same(native, ctc.reference_beam_search(lp, lens, blank, **kw), tol=1e-4)


@SETTINGS
@given(dims, st.integers(1, 5), st.integers(0, 10_000), st.sampled_from([None, "weak", 0.9]),
       st.sampled_from(["native", "mixed"]))
def test_native_streaming_equals_whole(tmp_path_factory, d, n_chunks, cut_seed, collapse, engines):
    """Chunked == whole; with "mixed" the chunks alternate between the engines on one state."""
    seed, batch, frames, vocab, beam = d
    vocab = max(vocab, 3)
    blank = seed % vocab
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=5.0, blank_rate=0.6)
    lens = random_lengths(seed, batch, frames)
    lm = make_lm(tmp_path_factory, seed, vocab, blank)
    kw = dict(beam=beam, fusion=[(lm, 0.6)], beta=0.3, blank_collapse=collapse, nbest=beam)
    whole = ctc.beam_search(lp, lens, blank, engine="torch", **kw)
    g = torch.Generator().manual_seed(cut_seed)
    cuts = sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist())
    bounds = [0, *cuts, frames]
    state = None
    for i, (a, z) in enumerate(zip(bounds[:-1], bounds[1:])):
        engine = "native" if engines == "native" or i % 2 == 0 else "torch"
        chunk_lens = (lens - a).clamp(min=0, max=z - a)
        state = ctc.beam_search(lp[:, a:z], chunk_lens, blank, state=state, final=i == len(bounds) - 2,
                                engine=engine, **kw)
    assert_same(state, whole)


def test_float32_matches_torch_engine(tmp_path_factory):
    vocab, blank = 30, 29
    lm = make_lm(tmp_path_factory, 3, vocab, blank, order=3)
    lp = peaky_log_probs(3, 4, 60, vocab, blank, peak=4.0, dtype=torch.float32)
    lens = torch.tensor([60, 41, 7, 0])
    for kw in (dict(beam=6, fusion=[(lm, 0.5)], beta=1.0, nbest=3), dict(beam=8, token_beam=5, fusion=[(lm, 0.5)]),
               dict(beam=4, blank_collapse=0.99)):
        native = ctc.beam_search(lp, lens, blank, engine="native", **kw)
        assert_same(native, ctc.beam_search(lp, lens, blank, engine="torch", **kw), tol=1e-4)


def test_state_is_updated_in_place_and_partial_hypotheses_agree():
    lp = peaky_log_probs(4, 2, 30, 7, 6, peak=5.0)
    lens = torch.tensor([30, 21])
    states = {}
    for engine in ("native", "torch"):
        s = ctc.beam_search(lp, lens, 6, beam=4, beta=0.3, final=False, engine=engine)
        states[engine] = s
        assert isinstance(s, ctc.CTCBeamState) and len(s.tree) == 30
    assert_same(states["native"].hypotheses(nbest=3), states["torch"].hypotheses(nbest=3))
    valid = states["torch"].hash >= 0
    assert torch.equal(valid, states["native"].hash >= 0)
    for name in ("hash", "parent_hash", "last"):
        assert torch.equal(getattr(states["native"], name)[valid], getattr(states["torch"], name)[valid])


def test_bad_inputs_give_the_same_errors_for_both_engines():
    lp = random_log_probs(0, 2, 5, 4, dtype=torch.float32)
    cases = [
        (dict(beam=0), "beam"), (dict(beam=2, nbest=3), "nbest"), (dict(token_beam=0), "token_beam"),
        (dict(beam_threshold=0.0), "beam_threshold"), (dict(blank_collapse="strong"), "blank_collapse"),
        (dict(fusion=[(TableBigram(5, 0), 1.0)]), "vocab_size"), (dict(fusion=[(object(), 1.0)]), "fusion"),
    ]
    for kw, match in cases:
        for engine in ("native", "torch", "auto"):
            with pytest.raises(DecodingInputError, match=match):
                ctc.beam_search(lp, None, 0, engine=engine, **kw)
    for engine in ("native", "torch"):
        with pytest.raises(DecodingInputError, match="normalised"):
            ctc.beam_search(lp * 2, None, 0, engine=engine)
        with pytest.raises(DecodingInputError, match="lengths"):
            ctc.beam_search(lp, torch.tensor([3]), 0, engine=engine)
    for bad in ("cuda", "Native", None, 1):
        with pytest.raises(DecodingInputError, match="engine"):
            ctc.beam_search(lp, None, 0, engine=bad)
    from asrdecode.native.choice import use_native  # the one place that picks the engine

    with pytest.raises(DecodingInputError, match="CPU"):
        use_native("native", torch.device("meta"), "log_probs")
    assert use_native("auto", torch.device("meta"), "log_probs") is False


def test_user_model_with_wrong_row_shape_is_an_error():
    class Broken(TableBigram):
        def advance(self, states):
            sc, nx = super().advance(states)
            return sc[:, :-1], nx[:, :-1]

    lp = random_log_probs(1, 1, 4, 5)
    with pytest.raises(DecodingInputError, match="advance"):
        ctc.beam_search(lp, None, 0, fusion=[(Broken(5, 0), 1.0)], engine="native")


def test_without_a_compiler_auto_falls_back_and_native_raises(monkeypatch):
    lp = random_log_probs(2, 2, 6, 5)
    want = ctc.beam_search(lp, None, 0, beam=3, engine="torch")
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setattr(_lib, "_error", None)
    monkeypatch.setattr(_lib, "_compiler", lambda: None)
    monkeypatch.setattr(choice, "_warned_fallback", False)
    with pytest.raises(NativeEngineUnavailable, match="compiler"):
        ctc.beam_search(lp, None, 0, beam=3, engine="native")
    with pytest.warns(RuntimeWarning, match="native engine unavailable"):
        got = ctc.beam_search(lp, None, 0, beam=3, engine="auto")
    assert_same(got, want)


def test_library_name_follows_the_sources(tmp_path, monkeypatch):
    for name in _lib._SOURCES:
        (tmp_path / name).write_bytes((_lib._HERE / name).read_bytes())
    monkeypatch.setattr(_lib, "_HERE", tmp_path)
    monkeypatch.setattr(_lib, "_build_dirs", lambda: [tmp_path / "_build"])
    first = _lib.library_path("c++")
    (tmp_path / "engine.h").write_bytes((tmp_path / "engine.h").read_bytes() + b"\n// changed\n")
    second = _lib.library_path("c++")
    assert first is not None and second is not None and first.name != second.name
    assert first.name.startswith("libasrdecode_native-") and first.suffix == ".so"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_finalize_equals_tensor_finalize(tmp_path_factory, monkeypatch, dtype):
    """The n-best of a state (end-of-sentence scores of native and user models, beta) computed both ways."""
    from asrdecode.fusion import FusionScorer

    vocab, blank = 7, 0
    lm = make_lm(tmp_path_factory, 11, vocab, blank)
    fusion = [(lm, 0.5), (TableBigram(vocab, blank, seed=2), 0.3), (boosting(4, 2, vocab, blank), 1.0)]
    lp = peaky_log_probs(9, 2, 25, vocab, blank, peak=4.0, dtype=dtype)
    lens = torch.tensor([25, 13])
    for engine in ("torch", "native"):
        state = ctc.beam_search(lp, lens, blank, beam=6, fusion=fusion, beta=0.4, final=False, engine=engine)
        scorer = FusionScorer(fusion, vocab, blank)
        native = [beam_mod._finalize(state, scorer, 0.4, 4, None), state.hypotheses(nbest=5)]
        with monkeypatch.context() as m:
            m.setattr(_lib, "loaded", lambda: False)
            tensor = [beam_mod._finalize(state, scorer, 0.4, 4, None), state.hypotheses(nbest=5)]
        for a, b in zip(native, tensor):
            assert_same(a, b, tol=1e-6 if dtype == torch.float64 else 1e-4)


def test_environment_switch_turns_the_engine_off(monkeypatch):
    import warnings

    lp = random_log_probs(3, 1, 6, 5)
    want = ctc.beam_search(lp, None, 0, beam=3, engine="native")
    monkeypatch.setenv("ASRDECODE_NATIVE", "0")
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setattr(_lib, "_error", None)
    monkeypatch.setattr(choice, "_warned_fallback", False)
    with pytest.raises(NativeEngineUnavailable, match="ASRDECODE_NATIVE"):
        ctc.beam_search(lp, None, 0, beam=3, engine="native")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # turned off on purpose: no warning
        got = ctc.beam_search(lp, None, 0, beam=3)
    assert_same(got, want)


@SETTINGS
@given(dims, st.sampled_from(["weak", 0.9, 0.5]), st.integers(1, 4), st.integers(0, 1000))
def test_native_blank_collapse_equals_stream_collapse(d, threshold, n_chunks, cut_seed):
    """Chunk by chunk: the same kept frames, lengths, original indices and carried state."""
    from asrdecode.ctc.collapse import CollapseState, stream_collapse
    from asrdecode.native.ctc_beam import collapse as native_collapse

    seed, batch, frames, vocab, _ = d
    blank = seed % vocab
    th = None if threshold == "weak" else threshold
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=4.0, blank_rate=0.7)
    lens = random_lengths(seed, batch, frames)
    g = torch.Generator().manual_seed(cut_seed)
    bounds = [0, *sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist()), frames]
    s_t = CollapseState.initial(batch, vocab, lp.dtype, lp.device)
    s_n = CollapseState.initial(batch, vocab, lp.dtype, lp.device)
    offsets = torch.zeros(batch, dtype=torch.long)
    for a, z in zip(bounds[:-1], bounds[1:]):
        chunk_lens = (lens - a).clamp(min=0, max=z - a)
        x_t, l_t, i_t, s_t = stream_collapse(lp[:, a:z], chunk_lens, offsets, blank, th, s_t)
        x_n, l_n, i_n, s_n = native_collapse(lp[:, a:z], chunk_lens, offsets, blank, th, s_n)
        assert torch.equal(l_t, l_n) and torch.equal(i_t, i_n)
        valid = i_t >= 0
        assert torch.equal(x_t[valid], x_n[valid])
        for name in ("prev_blank", "pending_index", "pending_valid"):
            assert torch.equal(getattr(s_t, name), getattr(s_n, name)), name
        has = s_t.pending_valid
        assert torch.equal(s_t.pending[has], s_n.pending[has])
        offsets = offsets + chunk_lens


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(0, 6), st.integers(1, 7), st.integers(0, 10_000),
       st.sampled_from(["ok", "nan", "inf", "-inf", "scaled", "all-inf"]), st.booleans(), st.booleans())
def test_native_log_prob_check_gives_the_torch_verdict(batch, frames, vocab, seed, damage, padded, double):
    """The engine's one-pass normalisation check accepts and rejects exactly what the torch check does
    (damage in a padding frame is not inspected by either)."""
    from asrdecode.ctc._checks import prepare_log_probs

    g = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(batch, frames, vocab, generator=g) * 3, dim=-1)
    x = x.double() if double else x
    lens = random_lengths(seed, batch, frames) if padded else None
    if frames and damage != "ok":
        b, t = seed % batch, seed % frames
        if damage == "scaled":
            x[b, t] = x[b, t] * 1.5 - 0.01
        elif damage == "all-inf":
            x[b, t] = -math.inf
        else:
            x[b, t, seed % vocab] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[damage]

    def verdict():
        try:
            prepare_log_probs(x, lens)
            return None
        except DecodingInputError as err:
            return str(err).split(";")[0].split("(")[0]

    _lib.load()
    assert _lib.log_prob_extremes(x, lens if lens is not None else None) is not None
    native = verdict()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_lib, "log_prob_extremes", lambda *a: None)
        torch_verdict = verdict()
    assert native == torch_verdict


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 100_000), st.sampled_from([1, 6, 24]), st.sampled_from([None, 0.9, "weak"]),
       st.sampled_from([0.5, 3.0]), st.booleans())
def test_one_call_path_equals_state_path_on_wide_vocabularies(tmp_path_factory, seed, beam, collapse, scale, double):
    """The one-engine-call decode (no state, final) against the state path and the tensor engine, with a
    vocabulary and beam wide enough for the lazy token scan to go past its head (flat and peaky frames)."""
    vocab, batch, frames = 45, 3, 12
    blank = seed % vocab
    lm = make_lm(tmp_path_factory, seed, vocab, blank, order=1 + seed % 3)
    lp = random_log_probs(seed, batch, frames, vocab, scale=scale, dtype=torch.float64 if double else torch.float32)
    lens = random_lengths(seed, batch, frames)
    kw = dict(beam=beam, fusion=[(lm, 0.6)], beta=0.3, blank_collapse=collapse, nbest=min(beam, 3))
    one_call = ctc.beam_search(lp, lens, blank, engine="native", **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(beam_mod, "native_decode", lambda *a, **k: None)  # the state path (run_frames + finalize)
        assert_same(one_call, ctc.beam_search(lp, lens, blank, engine="native", **kw), tol=0.0)
    assert_same(one_call, ctc.beam_search(lp, lens, blank, engine="torch", **kw), tol=1e-5 if double else 1e-3)
