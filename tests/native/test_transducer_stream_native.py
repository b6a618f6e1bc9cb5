"""Streaming ALSD++ / AES++ / WIND with the networks in C++: one engine call per chunk
(asrdecode.native.transducer_search.search_chunk through BeamSearchDecoder.advance / finalize).

- property (hypothesis): random chunkings, lengths and final flags of a batch equal whole-utterance decoding
  on the one-call engine (the same arithmetic: tokens, timestamps, durations and scores);
- fixed seeds: the chunked new path equals the per-step streaming path (torch networks between native
  steps) and the tensor engine, final results and ``partial()`` after every chunk (scores to float32
  rounding of the networks);
- the state is one ``BeamState``: it moves between the paths and engines chunk by chunk, joins and splits;
- sherpa-onnx's icefall (stateless) and NeMo (LSTM RNN-T / TDT) layouts stream on the new path too.

The models are float32 with continuous random weights (no two candidates within float32 rounding at the
fixed seeds of the comparisons across paths).
"""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.errors import DecodingInputError
from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import _lib
from asrdecode.native import transducer_search as ts
from asrdecode.transducer import BeamState, _checks
from asrdecode.transducer.beam import BeamSearchDecoder
from transducer_models import FUSION_BLANK, FUSION_V, engine_calls, hyp_key, random_encoder, random_model, tiny_lm

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

V, BLANK = FUSION_V, FUSION_BLANK
TDT = [0, 1, 2]
T = 12


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("stream_native_lm"))


def chunk_calls():
    """Count the chunks the one-call path searched (``calls``) and declined (``declined``)."""
    return engine_calls(ts, "search_chunk")


@contextmanager
def per_step():
    """Every chunk on the per-step path (the one-call path declines)."""
    with mock.patch.object(ts, "search_chunk", lambda *a, **k: None):
        yield


def _fusion(kind: str, lm, batch: int) -> list:
    if kind == "none":
        return []
    if kind == "lm":
        return [(lm, 0.6)]
    trees = [BoostingTree.from_token_sequences([[b % 4, 1], [3]], vocab_size=V, blank_id=BLANK, weight=1.2)
             for b in range(batch)]
    return [(lm, 0.4), (BoostingTree.stack(trees), 1.0)]  # a token LM and one boosting tree per utterance


def _stream(dec: BeamSearchDecoder, enc: torch.Tensor, lengths: torch.Tensor, bounds, mark=None,
            partials: bool = False):
    """Chunks of ``enc`` split at ``bounds``; utterance b's chunk holding its last frame is final where
    ``mark[b]`` (default all; else ``finalize`` ends it). Returns the final n-best lists and, with
    ``partials``, ``partial()`` after every chunk."""
    B = enc.shape[0]
    mark = torch.ones(B, dtype=torch.bool) if mark is None else torch.as_tensor(mark)
    state, seen = dec.init_state(B, enc.shape[2]), []
    edges = [0, *bounds, enc.shape[1]]
    for a, b in zip(edges, edges[1:]):
        clen = (lengths - a).clamp(min=0, max=b - a)
        state = dec.advance(state, enc[:, a:b], clen, final=(lengths <= b) & mark)
        if partials:
            seen.append(dec.partial(state))
    return dec.finalize(state), seen


def _keys(nbest, digits: int = 5) -> list:
    return [hyp_key(r, digits) for r in nbest]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 40), method=st.sampled_from(["alsd", "aes", "wind"]), tdt=st.booleans(),
       fusion=st.sampled_from(["none", "lm", "boost"]),
       bounds=st.lists(st.integers(1, T - 1), max_size=6).map(lambda b: sorted(set(b))),
       lengths=st.lists(st.integers(0, T), min_size=3, max_size=3), mark=st.lists(st.booleans(), min_size=3, max_size=3),
       window=st.integers(1, 5), beam=st.integers(1, 4), pruning=st.sampled_from(["late", "early"]),
       cap=st.sampled_from([2, 3, None]))
def test_random_chunkings_equal_whole_utterances(lm, seed, method, tdt, fusion, bounds, lengths, mark, window, beam,
                                                 pruning, cap):
    """Any chunking of a batch of different lengths, each utterance's last chunk marked final or not (RNN-T;
    TDT marks it): every chunk is one engine call and the n-best lists equal whole-utterance decoding."""
    tdt = tdt and method != "wind"  # WIND is RNN-T only
    bias = 3.0 if cap is None else 0.5 + 0.1 * (seed % 8)  # no cap: a blank-leaning model (no runaway)
    m = random_model(seed, V, BLANK, TDT if tdt else None, blank_bias=bias).float()
    enc = random_encoder(seed, 3, T).float()
    lengths = torch.tensor(lengths)
    kw = dict(beam=beam, nbest=beam, method=method, pruning=pruning, max_symbols=cap, fusion=_fusion(fusion, lm, 3))
    if method == "wind":
        kw["window"] = window
    dec = BeamSearchDecoder(m, engine="native", **kw)
    with mock.patch.object(_checks, "MAX_SYMBOLS_GUARD", 60):  # no cap: a runaway is found fast, by both
        try:
            whole = dec.decode(enc, lengths)
        except DecodingInputError:
            whole = None
        with chunk_calls() as seen:
            if whole is None:  # the same steps: the same runaway
                with pytest.raises(DecodingInputError, match="labels on one frame"):
                    _stream(dec, enc, lengths, bounds, mark=[True] * 3 if tdt else mark)
                return
            got, _ = _stream(dec, enc, lengths, bounds, mark=[True] * 3 if tdt else mark)
    assert seen["declined"] == 0 and seen["calls"] >= len(bounds) + 2  # init_state and every chunk
    assert _keys(got, 6) == _keys(whole, 6)


CASES = [  # seed, method, pruning, fusion, TDT, beam
    (0, "alsd", "late", "lm", False, 4),
    (1, "alsd", "early", "boost", True, 3),
    (2, "aes", "late", "none", False, 4),
    (3, "aes", "early", "lm", True, 3),
    (4, "wind", "late", "lm", False, 3),
    (5, "alsd", "late", "none", True, 2),
]


@pytest.mark.parametrize("seed,method,pruning,fusion,tdt,beam", CASES)
def test_new_path_equals_the_per_step_path_and_its_partials(lm, seed, method, pruning, fusion, tdt, beam):
    """The chunked one-call path against the per-step streaming path (native steps, torch networks) and the
    tensor engine on the same chunks: final n-best lists and ``partial()`` after every chunk."""
    m = random_model(seed, V, BLANK, TDT if tdt else None, blank_bias=0.8).float()
    enc = random_encoder(seed, 3, T).float()
    lengths = torch.tensor([T, 8, 5])
    kw = dict(beam=beam, nbest=beam, method=method, pruning=pruning, max_symbols=3, blank_scoring="lm_weighted",
              fusion=_fusion(fusion, lm, 3))
    if method == "wind":
        kw.update(window=2, blank_scoring="none")
    bounds = [3, 4, 9]
    dec = BeamSearchDecoder(m, engine="native", **kw)
    with chunk_calls() as seen:
        got, got_partial = _stream(dec, enc, lengths, bounds, partials=True)
    assert seen == {"calls": len(bounds) + 2, "declined": 0}
    with per_step():
        steps, steps_partial = _stream(dec, enc, lengths, bounds, partials=True)
    tensor, tensor_partial = _stream(BeamSearchDecoder(m, engine="torch", **kw), enc, lengths, bounds, partials=True)
    assert _keys(got, 4) == _keys(steps, 4) == _keys(tensor, 4)
    assert any(h.tokens for r in got for h in r)
    for a, b, c in zip(got_partial, steps_partial, tensor_partial):
        assert _keys(a, 4) == _keys(b, 4) == _keys(c, 4)


def test_the_state_moves_between_paths_and_engines(lm):
    """Chunks alternate between the one-call path, the per-step path and the tensor engine (one BeamState:
    the model's prediction state and ``dec_proj`` in it are the model's own): the whole-utterance result."""
    for seed, tdt in ((0, False), (1, True)):
        m = random_model(seed, V, BLANK, TDT if tdt else None, blank_bias=0.8).float()
        enc = random_encoder(seed, 2, T).float()
        lengths = torch.tensor([T, 7])
        kw = dict(beam=3, nbest=3, max_symbols=3, fusion=[(lm, 0.5)])
        native, tensor = BeamSearchDecoder(m, engine="native", **kw), BeamSearchDecoder(m, engine="torch", **kw)
        whole = tensor.decode(enc, lengths)
        for order in (["call", "step", "torch", "call"], ["torch", "call", "step", "call"]):
            state = native.init_state(2)
            for i, (a, b) in enumerate(zip(range(0, T, 3), range(3, T + 3, 3))):
                clen = (lengths - a).clamp(min=0, max=b - a)
                how = order[i % len(order)]
                if how == "step":
                    with per_step():
                        state = native.advance(state, enc[:, a:b], clen, final=lengths <= b)
                else:
                    state = (native if how == "call" else tensor).advance(state, enc[:, a:b], clen, final=lengths <= b)
            assert _keys(native.finalize(state), 4) == _keys(whole, 4), (seed, order)


def test_join_and_split_streams(lm):
    """Two streams searched alone, then as one batch (``BeamState.join`` with the batch's prediction state),
    split again and finished alone: each equals its whole-utterance result."""
    m = random_model(2, V, BLANK, None, pred_layers=2, blank_bias=0.8).float()
    enc = random_encoder(2, 2, T).float()
    dec = BeamSearchDecoder(m, beam=3, nbest=3, max_symbols=3, fusion=[(lm, 0.5)], engine="native")
    whole = dec.decode(enc)
    with chunk_calls() as seen:
        alone = [dec.advance(dec.init_state(1), enc[b:b + 1, :4]) for b in range(2)]
        preds = [s.hyps["pred_state"] for s in alone]
        batch = BeamState.join(alone, pred_state=tuple(torch.cat(x, dim=1) for x in zip(*preds)))
        batch = dec.advance(batch, enc[:, 4:9])
        pred = batch.split_into(alone)
        S = dec.settings.beam
        got = []
        for b, s in enumerate(alone):
            s.hyps["pred_state"] = tuple(x[:, b * S:(b + 1) * S] for x in pred)
            s = dec.advance(s, enc[b:b + 1, 9:], final=True)
            got += dec.finalize(s)
    assert seen["declined"] == 0 and seen["calls"] == 7
    assert _keys(got, 5) == _keys(whole, 5)


def test_bundled_word_lm_streams_on_the_new_path():
    """The bundled word 3-gram (its states: word-LM state and trie node, read natively) with the token 4-gram on a
    random float32 model of the demo vocabulary: chunked on the new path = whole utterances in one call."""
    from asrdecode.lm import NGramLM, WordNGramLM
    from asrdecode.models.demo import ASSETS
    from asrdecode.tokenizers import SentencePieceTokenizer
    from asrdecode.transducer import LSTMTransducer

    tok = SentencePieceTokenizer(ASSETS / "tokenizer.model", blank_id=256)
    token_lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=257, blank_id=256)
    word_lm = WordNGramLM.from_arpa(ASSETS / "word-3gram.arpa.gz", tok, vocab_size=257, blank_id=256)
    torch.manual_seed(5)
    m = LSTMTransducer(257, 8, 16, 16, blank_id=256).eval()
    with torch.no_grad():
        m.joint_out.weight.mul_(3.0)
        m.joint_out.bias[256] += 1.0
    enc = torch.randn(2, 12, 8, generator=torch.Generator().manual_seed(5))
    lengths = torch.tensor([12, 9])
    dec = BeamSearchDecoder(m, beam=4, nbest=4, max_symbols=3, fusion=[(token_lm, 0.3), (word_lm, 0.3)],
                            engine="native")
    with chunk_calls() as seen:
        got, _ = _stream(dec, enc, lengths, [4, 7])
    assert seen == {"calls": 4, "declined": 0}
    assert _keys(got, 6) == _keys(dec.decode(enc, lengths), 6)
    assert any(h.tokens for r in got for h in r)


def test_records_room_is_grown(lm):
    """A chunk that takes more steps than its tree-record room is searched again with room for them."""
    m = random_model(3, V, BLANK, TDT, blank_bias=0.8).float()
    enc = random_encoder(3, 2, T).float()
    lengths = torch.tensor([T, 9])
    dec = BeamSearchDecoder(m, beam=3, nbest=3, max_symbols=3, fusion=[(lm, 0.5)], engine="native")
    want, _ = _stream(dec, enc, lengths, [5])
    with mock.patch.object(ts, "record_room", lambda frames, cap: 1):
        got, _ = _stream(dec, enc, lengths, [5])
    assert _keys(got, 6) == _keys(want, 6)


def test_runaway_and_bad_carried_states_are_named_errors():
    """No symbol cap and a model that never emits blank: the chunk stops at the guard (the per-step path's
    error); a carried hypothesis on a negative frame is refused by the engine; the state passed in is
    unchanged by a failed chunk."""
    m = random_model(0, V, BLANK, None, blank_bias=-30.0).float()
    enc = random_encoder(0, 1, 4).float()
    dec = BeamSearchDecoder(m, beam=2, max_symbols=None, engine="native")
    with mock.patch.object(_checks, "MAX_SYMBOLS_GUARD", 50), chunk_calls() as seen:
        with pytest.raises(DecodingInputError, match="labels on one frame"):
            dec.advance(dec.init_state(1), enc[:, :2])
    assert seen["declined"] == 0
    m = random_model(1, V, BLANK, None).float()
    dec = BeamSearchDecoder(m, beam=2, max_symbols=2, engine="native")
    state = dec.advance(dec.init_state(1), enc[:, :2])
    state.hyps["time"] = state.hyps["time"].clone()  # (an inference tensor: a copy to edit)
    state.hyps["time"][0, 0] = -1  # slot 0: the best hypothesis
    before = [t.clone() for t in (state.hyps["score"], state.hyps["time"])], len(state.tree)
    with pytest.raises(DecodingInputError, match="carried frames"):
        dec.advance(state, enc[:, 2:])
    assert len(state.tree) == before[1]
    assert all(torch.equal(a, b) for a, b in zip(before[0], (state.hyps["score"], state.hyps["time"])))


def test_what_the_engine_does_not_read_streams_per_step(lm):
    """A float64 model, or a state of another dtype, declines the one-call path: the per-step path streams it
    (same results as the tensor engine)."""
    m64 = random_model(4, V, BLANK, None, blank_bias=0.8)
    enc64 = random_encoder(4, 2, T)
    dec = BeamSearchDecoder(m64, beam=3, nbest=3, max_symbols=3, engine="native")
    with chunk_calls() as seen:
        got, _ = _stream(dec, enc64, torch.tensor([T, 6]), [5])
    assert seen["calls"] == 0
    want = BeamSearchDecoder(m64, beam=3, nbest=3, max_symbols=3, engine="torch").decode(enc64, torch.tensor([T, 6]))
    assert _keys(got, 8) == _keys(want, 8)


# ------------------------------------------------------------------------------ sherpa-onnx layouts
@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from sherpa_models import build_small_layouts

    return build_small_layouts(tmp_path_factory.mktemp("stream_native_onnx"))


@pytest.mark.parametrize("name,options", [("icefall", {}), ("icefall", dict(start_context="sherpa", unk_as_blank="max")),
                                          ("nemo", {}), ("nemo-tdt", {})])
def test_sherpa_onnx_layouts_stream_on_the_new_path(onnx_models, name, options):
    """icefall's stateless decoder (its context carried) and NeMo's LSTM (h, c carried): chunked on the new
    path equals the whole utterance on the one-call engine and on the tensor engine."""
    from asrdecode.models.onnx_transducer import load_onnx_transducer

    model = load_onnx_transducer(str(onnx_models[name]), **options).model
    w = ts.search_weights(model)
    width = w.wp.shape[0] if name == "icefall" else w.wenc.shape[1]
    enc = torch.tanh(torch.randn(2, 9, width, generator=torch.Generator().manual_seed(1)))
    lengths = torch.tensor([9, 6])
    for method in ("alsd", "aes"):
        kw = dict(beam=3, nbest=3, method=method, max_symbols=3)
        dec = BeamSearchDecoder(model, engine="native", **kw)
        with chunk_calls() as seen:
            got, _ = _stream(dec, enc, lengths, [2, 5])
        assert seen == {"calls": 4, "declined": 0}, (name, options, method)
        assert _keys(got, 6) == _keys(dec.decode(enc, lengths), 6)
        want = BeamSearchDecoder(model, engine="torch", **kw).decode(enc, lengths)
        assert _keys(got, 4) == _keys(want, 4), (name, options, method)
        assert any(h.tokens for r in got for h in r)
    # the state in the model's layout (NeMo: (h, c) and the decoder output as dec_proj; icefall: the context):
    # chunks alternating between the one-call path and the per-step path (onnxruntime's networks)
    dec = BeamSearchDecoder(model, engine="native", beam=3, nbest=3, max_symbols=3)
    state = dec.init_state(2, width)
    for i, (a, b) in enumerate(((0, 2), (2, 5), (5, 7), (7, 9))):
        clen = (lengths - a).clamp(min=0, max=b - a)
        if i % 2:
            with per_step():
                state = dec.advance(state, enc[:, a:b], clen, final=lengths <= b)
        else:
            state = dec.advance(state, enc[:, a:b], clen, final=lengths <= b)
    assert _keys(dec.finalize(state), 4) == _keys(dec.decode(enc, lengths), 4), (name, options)
