"""ALSD++, AES++ and WIND on the native engine: the same hypotheses as the tensor engine and the per-utterance
oracles.

Random models in float64 with continuous random weights (no exact score ties). Both engines keep ties in
candidate-index order (the tensor engine through ``selection.ordered_topk``); test_engine_ties.py makes ties.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode.errors import DecodingInputError
from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import _lib
from asrdecode.transducer import _checks
from asrdecode.transducer.beam import beam_search
from asrdecode.transducer.reference_beam import reference_beam_search
from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search
from test_ctc_helpers import TableBigram
from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, random_model, tiny_lm

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

V, BLANK = FUSION_V, FUSION_BLANK
TDT = [0, 1, 2]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("native_beam_lm"))


def _fusion(kind: str, lm, seed: int, batch: int) -> list:
    if kind == "none":
        return []
    if kind == "lm":
        return [(lm, 0.6)]
    if kind == "dense_lm":  # every state a dense row: the tensor engine's LM step without a back-off chain
        return [(lm.with_dense_rows(), 0.6)]
    if kind == "user":  # the engine does not know it: its advance rows every step
        return [(TableBigram(V, BLANK, seed=seed), 0.7)]
    if kind == "boost":  # positive scores, one tree per utterance
        trees = [BoostingTree.from_token_sequences([[b % 4, 1], [3]], vocab_size=V, blank_id=BLANK, weight=1.2)
                 for b in range(batch)]
        return [(BoostingTree.stack(trees), 1.0)]
    return [(lm, 0.4), (TableBigram(V, BLANK, seed=seed), 0.3)]  # both


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(0, 9), st.integers(1, 5),
       st.sampled_from(["alsd", "aes", "wind"]), st.sampled_from(["late", "early"]),
       st.sampled_from(["lm_weighted", "none"]), st.sampled_from(["none", "lm", "dense_lm", "user", "boost", "both"]), st.booleans(),
       st.sampled_from([None, 2, 4]), st.sampled_from([0.0, 0.8]), st.integers(1, 4), st.sampled_from([None, 0.0, 1.5]))
def test_native_equals_torch_and_oracle(lm, seed, batch, frames, beam, method, pruning, blank_scoring, fusion_kind,
                                        tdt, cap, beta, window, gamma):
    """LSTM prediction networks: a stateless one gives different transcripts exactly equal scores, and which
    of them a full beam keeps is free (the engines' tie rules differ; test_transducer_beam.py runs the
    stateless model on both engines where ties cannot change the result)."""
    if cap is None and fusion_kind == "boost":
        cap = 3  # boosting bonuses can outweigh every blank: no search would end
    wind = method == "wind"
    if wind:
        cap = cap or 3  # a frame's list keeps receiving its labels' arrivals: WIND needs the cap to end
        tdt = False  # WIND is RNN-T only
    # without a cap, a strong blank so that every search ends
    m = random_model(seed, V, BLANK, TDT if tdt else None, kind="lstm",
                     blank_bias=3.0 if cap is None else 0.3 + (seed % 5) * 0.4)
    enc = random_encoder(seed, batch, frames)
    lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(seed))
    kw = dict(beam=beam, method=method, pruning=pruning, blank_scoring=blank_scoring, max_symbols=cap, beta=beta,
              fusion=_fusion(fusion_kind, lm, seed, batch))
    if wind:
        kw.update(window=window, expansion_gamma=gamma)
    # no cap: a beam with fewer distinct finished hypotheses than slots keeps extending one that never
    # leaves its frame (the search's nature, not an engine's; the oracle does the same): both engines
    # must stop with the runaway error, checked every 1024 steps (a low guard keeps that fast)
    with mock.patch.object(_checks, "MAX_SYMBOLS_GUARD", 200):
        try:
            native = beam_search(m, enc, lengths, nbest=beam, engine="native", **kw)
        except DecodingInputError as err:
            assert cap is None and "labels on one frame" in str(err), err
            with pytest.raises(DecodingInputError, match="labels on one frame"):
                beam_search(m, enc, lengths, nbest=beam, engine="torch", **kw)
            return
        tensor = beam_search(m, enc, lengths, nbest=beam, engine="torch", **kw)
    assert [hyp_key(r, 7) for r in native] == [hyp_key(r, 7) for r in tensor]
    if fusion_kind == "boost":
        return  # the oracle takes one model for every utterance
    b = seed % batch
    if wind:
        kw.pop("method")
        ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
    else:
        ref = reference_beam_search(m, enc[b, : int(lengths[b])], **kw)
    assert sorted(hyp_key(native[b], 7)) == sorted(hyp_key(ref, 7))


def _chunks(m, enc, lengths, bounds, engines, **kw):
    state, out = None, None
    edges = [0, *bounds, enc.shape[1]]
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        clen = (lengths - a).clamp(min=0, max=b - a)
        out, state = beam_search(m, enc[:, a:b], clen, state=state, return_state=True, final=lengths <= b,
                                 engine=engines[i % len(engines)], **kw)
    return out


@pytest.mark.parametrize("durations", [None, TDT])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_streaming_on_either_engine_equals_whole(lm, durations, method):
    """Chunked decoding on the native engine, and switching engines between chunks, equals the whole
    utterance on the tensor engine (the state is shared)."""
    if method == "wind" and durations is not None:
        pytest.skip("WIND is RNN-T only")
    gen = torch.Generator().manual_seed(3)
    for seed in range(4):
        m = random_model(900 + seed, V, BLANK, durations, blank_bias=0.5 + 0.4 * seed)
        T = 12
        enc = random_encoder(seed, 3, T)
        lengths = torch.tensor([T, 8, 2])
        kw = dict(beam=3, nbest=3, method=method, max_symbols=3, fusion=[(lm, 0.5)] if seed % 2 else [])
        if method == "wind":
            kw.update(window=1 + seed, expansion_gamma=(None, 1.0)[seed % 2])
        whole = beam_search(m, enc, lengths, engine="torch", **kw)
        for engines in (["native"], ["native", "torch"], ["torch", "native"]):
            k = int(torch.randint(1, 5, (1,), generator=gen))
            bounds = sorted(set(torch.randint(1, T, (k,), generator=gen).tolist()))
            got = _chunks(m, enc, lengths, bounds, engines, **kw)
            assert [hyp_key(r, 8) for r in got] == [hyp_key(r, 8) for r in whole], (seed, bounds, engines)


def test_float32_model_scores_agree():
    """A float32 model: the engines round differently (log-softmax sums), scores agree to 1e-5 relative."""
    m = random_model(7, V, BLANK, TDT, blank_bias=0.8).float()
    enc = random_encoder(7, 4, 15).float()
    for method in ("alsd", "aes"):
        a = beam_search(m, enc, beam=4, nbest=4, method=method, engine="native")
        b = beam_search(m, enc, beam=4, nbest=4, method=method, engine="torch")
        assert [hyp_key(r, 5) for r in a] == [hyp_key(r, 5) for r in b]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_half_precision_runs_on_the_tensor_engine(lm, dtype, method):
    """The engine reads float32 / float64 only. A float16 / bfloat16 model on engine="auto" (the default) ran the
    C++ steps over half-precision buffers read as float32: best scores of +5.8e4 and +5.3e14. Now "auto" (whole
    and streamed) is the tensor engine's search, and "native" a named error; the C++ guard refuses the dtype too."""
    from asrdecode.native.transducer_beam import _is_double
    from asrdecode.transducer.beam import BeamSearchDecoder

    m = random_model(3, V, BLANK, None).to(dtype)
    enc = random_encoder(3, 2, 10).to(dtype)
    kw = dict(beam=3, nbest=3, method=method, max_symbols=3, fusion=[(lm, 0.5)])
    want = beam_search(m, enc, engine="torch", **kw)
    assert all(h.score < 0 for row in want for h in row)
    assert [hyp_key(r, 5) for r in beam_search(m, enc, **kw)] == [hyp_key(r, 5) for r in want]

    def streamed(**engine: str) -> list:
        dec = BeamSearchDecoder(m, **kw, **engine)
        state = dec.advance(dec.init_state(2, dtype=dtype), enc[:, :4])
        return dec.finalize(dec.advance(state, enc[:, 4:], final=True))

    # (not compared with the whole call: half-precision projections of a chunk and of the whole round apart)
    assert [hyp_key(r, 5) for r in streamed()] == [hyp_key(r, 5) for r in streamed(engine="torch")]
    with pytest.raises(DecodingInputError, match=f"encoder output is {dtype}; the C.. beam search is float32 or float64"):
        beam_search(m, enc, engine="native", **kw)
    with pytest.raises(DecodingInputError, match="float32 or float64 scores"):
        _is_double(dtype)


def test_engine_argument_errors():
    m = random_model(0, V, BLANK, None)
    enc = random_encoder(0, 1, 4)
    for bad in ("c++", None, 1):
        with pytest.raises(DecodingInputError, match="engine"):
            beam_search(m, enc, beam=2, engine=bad)
    with pytest.raises(DecodingInputError, match="eager"):
        beam_search(m, enc, beam=2, engine="native", acceleration="compile")


def test_invalid_fusion_state_is_an_error(lm):
    """A carried state whose LM states are out of range is refused by the engine, not read."""
    m = random_model(1, V, BLANK, None)
    enc = random_encoder(1, 1, 6)
    _, st = beam_search(m, enc[:, :3], beam=2, fusion=[(lm, 0.5)], return_state=True, final=False, engine="native")
    st.hyps["lm_states"] = torch.full_like(st.hyps["lm_states"], 10**9)
    with pytest.raises(DecodingInputError, match="fusion state out of range"):
        beam_search(m, enc[:, 3:], beam=2, fusion=[(lm, 0.5)], state=st, engine="native")
