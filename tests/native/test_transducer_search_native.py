"""ALSD++ / AES++ / WIND with the networks in C++ (asrdecode.native.transducer_search: one engine call per batch)
against the tensor engine and the per-utterance oracle, on LSTMTransducer weights and on sherpa-onnx's
icefall (stateless) and NeMo (LSTM RNN-T / TDT) ONNX layouts, with the fusion models the engine reads.

The models are float32 (the engine's networks are); their weights are continuous random, so no two
candidates are within the networks' float32 rounding of each other at these fixed seeds. Exact ties are
made where both engines compute the same logits bit for bit (a joint whose output weights are zero).
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.lm.boosting import BoostingTree
from asrdecode.native import _lib
from asrdecode.native import transducer_search as ts
from asrdecode.transducer import LSTMTransducer, _checks
from asrdecode.transducer.beam import BeamSearchDecoder, beam_search
from asrdecode.transducer.reference_beam import reference_beam_search
from test_ctc_helpers import TableBigram
from transducer_models import FUSION_BLANK, FUSION_V, engine_calls, hyp_key, random_encoder, random_model, tiny_lm

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")

V, BLANK = FUSION_V, FUSION_BLANK
TDT = [0, 1, 2]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("search_native_lm"))


def whole_searches():
    """Count the searches the one-call path ran (``calls``) and the ones it declined (``declined``)."""
    return engine_calls(ts, "search")


def _fusion(kind: str, lm, batch: int) -> list:
    if kind == "none":
        return []
    if kind == "lm":
        return [(lm, 0.6)]
    trees = [BoostingTree.from_token_sequences([[b % 4, 1], [3]], vocab_size=V, blank_id=BLANK, weight=1.2)
             for b in range(batch)]
    return [(lm, 0.4), (BoostingTree.stack(trees), 1.0)]  # "boost": a token LM and one tree per utterance


CASES = [  # seed, method, pruning, blank scoring, fusion, TDT, symbol cap, beta, beam
    (0, "alsd", "late", "lm_weighted", "lm", False, 3, 0.0, 4),
    (1, "alsd", "early", "lm_weighted", "lm", True, 2, 0.0, 3),
    (2, "aes", "late", "none", "none", False, 4, 0.8, 4),
    (3, "aes", "early", "lm_weighted", "boost", True, 3, 0.0, 2),
    (4, "alsd", "late", "none", "boost", False, 2, 0.8, 5),
    (5, "aes", "late", "lm_weighted", "lm", True, 3, 0.8, 4),
    (6, "alsd", "late", "lm_weighted", "none", True, None, 0.0, 3),
    (7, "alsd", "early", "none", "lm", False, None, 0.0, 1),
]


@pytest.mark.parametrize("seed,method,pruning,scoring,fusion,tdt,cap,beta,beam", CASES)
def test_lstm_transducer_equals_the_tensor_engine_and_the_oracle(lm, seed, method, pruning, scoring, fusion, tdt,
                                                                 cap, beta, beam):
    m = random_model(seed, V, BLANK, TDT if tdt else None, blank_bias=3.0 if cap is None else 0.6).float()
    enc = random_encoder(seed, 3, 10).float()
    lengths = torch.tensor([10, 7, 0])
    kw = dict(beam=beam, method=method, pruning=pruning, blank_scoring=scoring, max_symbols=cap, beta=beta,
              fusion=_fusion(fusion, lm, 3))
    with whole_searches() as seen:
        got = beam_search(m, enc, lengths, nbest=beam, engine="native", **kw)
    assert seen == {"calls": 1, "declined": 0}
    want = beam_search(m, enc, lengths, nbest=beam, engine="torch", **kw)
    assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want]
    assert got[2] == [] or (got[2][0].tokens == [] and len(got[2]) == 1)  # a zero-length utterance: empty
    if fusion == "boost":
        return  # the oracle takes one model for every utterance
    for b in range(2):
        ref = reference_beam_search(m, enc[b, : int(lengths[b])], **kw)
        assert sorted(hyp_key(got[b], 5)) == sorted(hyp_key(ref, 5)), b


WIND_CASES = [  # seed, window, pruning, fusion, gamma, beam
    (0, 1, "late", "none", None, 3),
    (1, 2, "early", "lm", None, 4),
    (2, 4, "late", "lm", 1.0, 3),
    (3, 2, "late", "boost", None, 2),
    (4, 8, "early", "none", 0.5, 4),
    (5, 16, "late", "lm", None, 3),  # a window past the longest utterance
]


@pytest.mark.parametrize("seed,window,pruning,fusion,gamma,beam", WIND_CASES)
def test_wind_equals_the_tensor_engine_and_the_oracle(lm, seed, window, pruning, fusion, gamma, beam):
    """WIND beam search (RNN-T) in one call: the per-step engine's WIND step with the networks in C++."""
    from asrdecode.transducer.reference_wind_beam import reference_wind_beam_search

    m = random_model(seed, V, BLANK, None, blank_bias=0.6).float()
    enc = random_encoder(seed, 3, 10).float()
    lengths = torch.tensor([10, 6, 0])
    kw = dict(beam=beam, window=window, pruning=pruning, max_symbols=3, expansion_gamma=gamma,
              fusion=_fusion(fusion, lm, 3))
    with whole_searches() as seen:
        got = beam_search(m, enc, lengths, nbest=beam, method="wind", engine="native", **kw)
    assert seen == {"calls": 1, "declined": 0}
    want = beam_search(m, enc, lengths, nbest=beam, method="wind", engine="torch", **kw)
    assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want]
    if fusion == "boost":
        return
    for b in range(2):
        ref = reference_wind_beam_search(m, enc[b, : int(lengths[b])], **kw)
        assert sorted(hyp_key(got[b], 5)) == sorted(hyp_key(ref, 5)), b


def test_bundled_lms_on_a_demo_sized_vocabulary():
    """The bundled token 4-gram and word 3-gram (257 labels, the demo models' pieces) on a random float32
    LSTMTransducer of that vocabulary: the engine reads both natively and equals the tensor engine."""
    from asrdecode.lm import NGramLM, WordNGramLM
    from asrdecode.models.demo import ASSETS
    from asrdecode.tokenizers import SentencePieceTokenizer

    tok = SentencePieceTokenizer(ASSETS / "tokenizer.model", blank_id=256)
    token_lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=257, blank_id=256)
    word_lm = WordNGramLM.from_arpa(ASSETS / "word-3gram.arpa.gz", tok, vocab_size=257, blank_id=256)
    torch.manual_seed(5)
    m = LSTMTransducer(257, 8, 16, 16, blank_id=256).eval()
    with torch.no_grad():
        m.joint_out.weight.mul_(3.0)
        m.joint_out.bias[256] += 1.0
    enc = torch.randn(2, 12, 8, generator=torch.Generator().manual_seed(5))
    for fusion in ([(token_lm, 0.5)], [(word_lm, 0.5)], [(token_lm, 0.3), (word_lm, 0.3)]):
        kw = dict(beam=4, nbest=4, fusion=fusion, max_symbols=3)
        with whole_searches() as seen:
            got = beam_search(m, enc, engine="native", **kw)
        assert seen["calls"] == 1
        want = beam_search(m, enc, engine="torch", **kw)
        assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want]


def test_exact_ties_follow_the_shared_rule(lm):
    """A joint whose output weights are zero gives every row the logits of its bias, bit for bit on both
    engines (0 * x summed is 0), rounded to halves: candidates of different hypotheses tie exactly, and the
    engines keep the same ones (higher score first, then the lower candidate index)."""
    for seed, durations in ((0, None), (1, TDT), (2, None)):
        m = random_model(seed, V, BLANK, durations).float()
        with torch.no_grad():
            m.joint_out.weight.zero_()
            m.joint_out.bias.copy_(torch.round(m.joint_out.bias * 2) / 2)
            m.joint_out.bias[BLANK] = 0.5
        enc = random_encoder(seed, 2, 8).float()
        for method in ("alsd", "aes") if durations else ("alsd", "aes", "wind"):
            kw = dict(beam=4, nbest=4, method=method, max_symbols=2, fusion=[(lm, 0.5)] if seed else [])
            if method == "wind":
                kw["window"] = 2
            with whole_searches() as seen:
                got = beam_search(m, enc, engine="native", **kw)
            assert seen["calls"] == 1
            want = beam_search(m, enc, engine="torch", **kw)
            assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want], (seed, method)


def test_what_the_engine_does_not_read_takes_the_per_step_path(lm):
    """float64, a fusion model without a native reader, a subclass with its own joint: the one-call path
    declines and the per-step engine gives the tensor engine's results; a stream is not a whole-utterance
    call (its chunks take the one-call chunk path: test_transducer_stream_native.py)."""
    m32 = random_model(3, V, BLANK, None).float()
    enc32 = random_encoder(3, 2, 6).float()

    class OwnJoint(LSTMTransducer):
        def joint(self, enc_proj, dec_proj):
            return super().joint(enc_proj, dec_proj) * 0.5

    torch.manual_seed(3)
    own = OwnJoint(V, 5, 6, 8, blank_id=BLANK).eval()
    cases = [
        (random_model(3, V, BLANK, None), random_encoder(3, 2, 6), {}),
        (m32, enc32, dict(fusion=[(TableBigram(V, BLANK, seed=3), 0.5)])),
        (own, enc32, {}),
    ]
    for model, enc, extra in cases:
        kw = dict(beam=3, nbest=3, max_symbols=3, **extra)
        with whole_searches() as seen:
            got = beam_search(model, enc, engine="native", **kw)
        assert seen["calls"] == 0
        want = beam_search(model, enc, engine="torch", **kw)
        assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want]
    dec = BeamSearchDecoder(m32, beam=3, nbest=3, max_symbols=3, engine="native")
    with whole_searches() as seen:
        st = dec.advance(dec.init_state(2), enc32[:, :4], final=False)
        st = dec.advance(st, enc32[:, 4:], final=True)
        streamed = dec.finalize(st)
    assert seen["calls"] == 0  # chunks are searched by ts.search_chunk
    assert [hyp_key(r, 5) for r in streamed] == [hyp_key(r, 5) for r in dec.decode(enc32)]


def test_runaway_without_a_cap_is_the_named_error():
    """No symbol cap and a model that never emits blank: the engine stops at the guard, as the per-step path."""
    m = random_model(0, V, BLANK, None, blank_bias=-30.0).float()
    enc = random_encoder(0, 1, 3).float()
    with mock.patch.object(_checks, "MAX_SYMBOLS_GUARD", 50), whole_searches() as seen:
        with pytest.raises(DecodingInputError, match="labels on one frame"):
            beam_search(m, enc, beam=2, max_symbols=None, engine="native")
    assert seen == {"calls": 0, "declined": 0}  # raised inside the call


def test_weights_follow_the_model():
    """An in-place weight update is a new weight copy (the greedy's cache, keyed by parameter versions)."""
    m = random_model(4, V, BLANK, None).float()
    enc = random_encoder(4, 2, 6).float()
    before = beam_search(m, enc, beam=3, max_symbols=3, engine="native")
    with torch.no_grad():
        m.joint_out.bias[BLANK] -= 2.0
    after = beam_search(m, enc, beam=3, max_symbols=3, engine="native")
    want = beam_search(m, enc, beam=3, max_symbols=3, engine="torch")
    assert [hyp_key(r, 5) for r in after] == [hyp_key(r, 5) for r in want]
    assert [hyp_key(r, 5) for r in after] != [hyp_key(r, 5) for r in before]


# ------------------------------------------------------------------------------ sherpa-onnx layouts
@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from sherpa_models import build_small_layouts

    return build_small_layouts(tmp_path_factory.mktemp("search_native_onnx"))


@pytest.mark.parametrize("name,options", [("icefall", {}), ("icefall", dict(start_context="sherpa", unk_as_blank="max")),
                                          ("nemo", {}), ("nemo-tdt", {})])
def test_sherpa_onnx_layouts_equal_the_tensor_engine(onnx_models, name, options):
    from asrdecode.models.onnx_transducer import load_onnx_transducer

    model = load_onnx_transducer(str(onnx_models[name]), **options).model
    w = ts.search_weights(model)
    assert w is not None, name
    width = w.wp.shape[0] if name == "icefall" else w.wenc.shape[1]
    enc = torch.tanh(torch.randn(2, 9, width, generator=torch.Generator().manual_seed(1)))
    for method, pruning in (("alsd", "late"), ("aes", "early")):
        kw = dict(beam=3, nbest=3, method=method, pruning=pruning, max_symbols=3)
        with whole_searches() as seen:
            got = beam_search(model, enc, torch.tensor([9, 6]), engine="native", **kw)
        assert seen["calls"] == 1, (name, options)
        want = beam_search(model, enc, torch.tensor([9, 6]), engine="torch", **kw)
        assert [hyp_key(r, 4) for r in got] == [hyp_key(r, 4) for r in want], (name, options, method)
        assert any(h.tokens for r in got for h in r)


def test_empty_batch_and_no_frames(lm):
    """No utterance, or utterances of no frames: the one-call path gives what the tensor engine gives (the
    empty hypothesis with the fusion end-of-sentence score)."""
    m = random_model(1, V, BLANK, None).float()
    for enc in (random_encoder(1, 0, 5).float(), random_encoder(1, 2, 0).float()):
        for fusion in ([], [(lm, 0.5)]):
            with whole_searches() as seen:
                got = beam_search(m, enc, beam=3, nbest=3, fusion=fusion, engine="native")
            assert seen["calls"] == 1
            want = beam_search(m, enc, beam=3, nbest=3, fusion=fusion, engine="torch")
            assert [hyp_key(r) for r in got] == [hyp_key(r) for r in want]
            assert all(h.tokens == [] for r in got for h in r)
