"""The C++ greedy over LSTM prediction networks (asrdecode.native.transducer_greedy_lstm) against the
tensor greedy: same tokens, frames and durations, scores within float tolerance, on random
LSTMTransducers (RNN-T / TDT, 1-2 layers, several max_symbols) and on NeMo-layout ONNX files whose
weights it reads from the initializers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.native import available
from asrdecode.transducer import LSTMTransducer, greedy

pytestmark = pytest.mark.skipif(not available(), reason="no C++ compiler for the native engine")

from asrdecode.native.transducer_greedy_lstm import (LstmJointWeights, greedy_lstm,  # noqa: E402
                                                      weights_from_lstm_transducer, weights_from_nemo_onnx)


def _same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.tokens == w.tokens and g.timestamps == w.timestamps and g.durations == w.durations
        assert g.score == pytest.approx(w.score, abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
def test_equals_the_tensor_greedy_on_random_models(seed) -> None:
    g = torch.Generator().manual_seed(seed)
    durations = [[0, 1, 2, 4], None, [0, 1, 2, 3], None, [1, 2], None][seed]
    layers, vocab = 1 + seed % 2, int(torch.randint(3, 30, (1,), generator=g))
    blank = [vocab - 1, 0, vocab // 2][seed % 3]
    torch.manual_seed(seed)
    t = LSTMTransducer(vocab, 10, 8 + 4 * (seed % 3), 12, blank, durations=durations, pred_layers=layers).eval()
    with torch.no_grad():
        t.joint_out.bias[blank] += float(torch.rand(1, generator=g)) * 2 - 1.0
    enc = torch.randn(5, 40, 10, generator=g) * 2
    lengths = torch.tensor([40, 23, 0, 1, 7])
    w = weights_from_lstm_transducer(t)
    emitted = 0
    for max_symbols in (1, 3, 10):
        got = greedy_lstm(w, enc, lengths, max_symbols=max_symbols)
        with torch.no_grad():
            want = greedy(t, enc, lengths, max_symbols=max_symbols)
        _same(got, want)
        emitted += sum(len(h.tokens) for h in got)
        assert got[2].tokens == []
    assert emitted > 0


def test_weights_from_nemo_onnx_equal_the_onnxruntime_path(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from sherpa_models import build_nemo

    from asrdecode.audio import read_audio
    from asrdecode.models.onnx_transducer import load_onnx_transducer

    root = Path(__file__).resolve().parents[2]
    waves = [read_audio(p) for p in sorted((root / "data/real").glob("*.wav"))[:4]]
    emitted = 0
    for tdt, layers in ((False, 2), (True, 1)):
        d = build_nemo(tmp_path / f"m{tdt}", tdt=tdt, layers=layers)
        b = load_onnx_transducer(str(d))
        w = weights_from_nemo_onnx(d / "decoder.onnx", d / "joiner.onnx", b.blank_id, b.model.vocab_size,
                                   b.model.durations)
        assert w is not None and w.act == "relu" and w.wup.shape[0] == layers - 1
        enc, elen = b.encode_features(*b.features(waves))
        ms = 5 if tdt else 10
        got, want = greedy_lstm(w, enc, elen, max_symbols=ms), greedy(b.model, enc, elen, max_symbols=ms)
        _same(got, want)
        emitted += sum(len(h.tokens) for h in got)
    assert emitted > 20
    # an icefall-layout graph (no LSTM) is not this shape: None, the caller keeps onnxruntime
    assert weights_from_nemo_onnx(d / "joiner.onnx", d / "joiner.onnx", 0, 10) is None
    assert weights_from_nemo_onnx(tmp_path / "missing.onnx", d / "joiner.onnx", 0, 10) is None


def test_bad_input() -> None:
    torch.manual_seed(0)
    t = LSTMTransducer(6, 4, 8, 8, 5).eval()
    w = weights_from_lstm_transducer(t)
    with pytest.raises(DecodingInputError, match=r"encoder_output must be a tensor \[B, T, 4\]"):
        greedy_lstm(w, torch.zeros(1, 3, 5))
    with pytest.raises(DecodingInputError, match="lengths must be 1 values in 0..3"):
        greedy_lstm(w, torch.zeros(1, 3, 4), [4])
    with pytest.raises(DecodingInputError, match="max_symbols must be an int >= 1"):
        greedy_lstm(w, torch.zeros(1, 3, 4), max_symbols=0)
    with pytest.raises(DecodingInputError, match="inconsistent shapes"):
        LstmJointWeights(w.table, w.whh0, w.wup, w.bup, w.wenc, w.benc, w.wdec, w.bdec, w.wout[:-1], w.bout, "tanh",
                         5, 6)
    with pytest.raises(DecodingInputError, match="inconsistent shapes"):
        LstmJointWeights(w.table, w.whh0, w.wup, w.bup, w.wenc, w.benc, w.wdec, w.bdec, w.wout, w.bout, "gelu", 5, 6)
    assert greedy_lstm(w, torch.zeros(0, 3, 4)) == []


@pytest.mark.parametrize("context", [2, 3])
def test_stateless_icefall_onnx_equals_the_onnxruntime_path(tmp_path, context) -> None:
    pytest.importorskip("onnxruntime")
    from sherpa_models import build_icefall, build_nemo

    from asrdecode.audio import read_audio
    from asrdecode.models.onnx_transducer import load_onnx_transducer
    from asrdecode.native.transducer_greedy_lstm import greedy_stateless, weights_from_icefall_onnx

    root = Path(__file__).resolve().parents[2]
    waves = [read_audio(p) for p in sorted((root / "data/real").glob("*.wav"))[:3]] + [torch.zeros(100)]
    d = build_icefall(tmp_path / "ice", seed=context, context=context)
    emitted = 0
    for start, unk, ms in (("sherpa", "max", 1), ("blank", None, 4)):
        b = load_onnx_transducer(str(d), start_context=start, unk_as_blank=unk)
        w = weights_from_icefall_onnx(d / "decoder.onnx", d / "joiner.onnx", b.blank_id, b.model.vocab_size, context)
        assert w is not None and w.context_size == context
        enc, elen = b.encode_features(*b.features(waves))
        got = greedy_stateless(w, enc, elen, max_symbols=ms, start_context=start,
                               unk_id=b.model.unk_id if unk else None)
        _same(got, greedy(b.model, enc, elen, max_symbols=ms))
        emitted += sum(len(h.tokens) for h in got)
    assert emitted > 20
    # wrong context size or another layout: None (the caller keeps onnxruntime)
    assert weights_from_icefall_onnx(d / "decoder.onnx", d / "joiner.onnx", 0, 500, context + 1) is None
    n = build_nemo(tmp_path / "nemo")
    assert weights_from_icefall_onnx(n / "decoder.onnx", n / "joiner.onnx", 128, 129, 2) is None
    with pytest.raises(DecodingInputError, match="start_context must be"):
        greedy_stateless(w, enc, elen, start_context="zeros")
    with pytest.raises(DecodingInputError, match=r"encoder_output must be a tensor \[B, T, 64\]"):
        greedy_stateless(w, enc[..., :3], elen)


# ------------------------------------------------------------------- transducer.greedy(engine=...)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from asrdecode.transducer import GreedyDecoder  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), vocab=st.integers(2, 24), layers=st.integers(1, 2), tdt=st.booleans(),
       lengths=st.lists(st.integers(0, 30), min_size=1, max_size=5), max_symbols=st.integers(1, 6),
       blank_shift=st.floats(-2, 3), loop=st.sampled_from(["labels", "frames"]))
def test_engines_agree_on_random_models(seed, vocab, layers, tdt, lengths, max_symbols, blank_shift, loop) -> None:
    torch.manual_seed(seed)
    blank = seed % vocab
    durations = [0, 1, 2, 4] if tdt else None
    t = LSTMTransducer(vocab, 7, 6 + 2 * (seed % 3), 9, blank, durations=durations, pred_layers=layers).eval()
    with torch.no_grad():
        t.joint_out.bias[blank] += blank_shift
    enc = torch.randn(len(lengths), max(lengths), 7) * 2
    native = greedy(t, enc, lengths, max_symbols=max_symbols, loop=loop, engine="native")
    tensor = greedy(t, enc, lengths, max_symbols=max_symbols, loop=loop, engine="torch")
    _same(native, tensor)
    assert greedy(t, enc, lengths, max_symbols=max_symbols, engine="auto") == native  # auto: native on CPU


def test_engine_auto_falls_back_and_native_names_why() -> None:
    torch.manual_seed(1)
    t = LSTMTransducer(9, 4, 6, 8, 0).eval()
    with torch.no_grad():
        t.joint_out.bias[0] += 1.5  # ends frames without a cap too
    enc = torch.randn(2, 12, 4)
    torch_hyps = greedy(t, enc, max_symbols=3, engine="torch")
    # float64: auto keeps the tensor engine (same results bit for bit), native refuses
    t64 = LSTMTransducer(9, 4, 6, 8, 0).double().eval()
    assert greedy(t64, enc.double(), engine="auto") == greedy(t64, enc.double(), engine="torch")
    with pytest.raises(DecodingInputError, match="engine='native' cannot decode this call: .*float64"):
        greedy(t64, enc.double(), engine="native")
    with pytest.raises(DecodingInputError, match="engine='native' cannot decode this call: max_symbols=None"):
        greedy(t, enc, max_symbols=None, engine="native")
    assert greedy(t, enc, max_symbols=None, engine="auto") == greedy(t, enc, max_symbols=None, engine="torch")
    with pytest.raises(DecodingInputError, match="engine must be one of"):
        GreedyDecoder(t, engine="cuda")
    # streaming is the tensor engine's: auto streams there, native says so
    dec = GreedyDecoder(t, max_symbols=3)
    st_ = dec.advance(dec.init_state(2), enc[:, :5])
    st_ = dec.advance(st_, enc[:, 5:])
    _same(dec.finalize(st_), torch_hyps)
    native = GreedyDecoder(t, max_symbols=3, engine="native")
    _same(native.decode(enc), torch_hyps)
    with pytest.raises(DecodingInputError, match="streaming \\(advance\\) runs on"):
        native.advance(native.init_state(2), enc)
    # a model whose weights the C++ greedy does not read: auto keeps the tensor engine, native names it
    from asrdecode.transducer import StatelessTransducer

    other = StatelessTransducer(9, 4, 6, 8, blank_id=0).eval()
    assert greedy(other, enc, engine="auto") == greedy(other, enc, engine="torch")
    with pytest.raises(DecodingInputError, match="the C\\+\\+ greedy reads LSTMTransducer .* not StatelessTransducer"):
        greedy(other, enc, engine="native")


def test_engines_agree_on_onnx_layouts(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    from sherpa_models import build_icefall, build_nemo

    from asrdecode.audio import read_audio
    from asrdecode.models.onnx_transducer import load_onnx_transducer

    root = Path(__file__).resolve().parents[2]
    waves = [read_audio(p) for p in sorted((root / "data/real").glob("*.wav"))[:3]] + [torch.zeros(100)]
    dirs = {"icefall": build_icefall(tmp_path / "ice"), "rnnt": build_nemo(tmp_path / "rnnt"),
            "tdt": build_nemo(tmp_path / "tdt", tdt=True)}
    emitted = 0
    for name, d in dirs.items():
        for start, unk in (("blank", None), ("sherpa", "max")) if name == "icefall" else (("blank", None),):
            b = load_onnx_transducer(str(d), start_context=start, unk_as_blank=unk)
            enc, elen = b.encode_features(*b.features(waves))
            got = greedy(b.model, enc, elen, max_symbols=3, engine="native")
            _same(got, greedy(b.model, enc, elen, max_symbols=3, engine="torch"))
            emitted += sum(len(h.tokens) for h in got)
    assert emitted > 20
    b = load_onnx_transducer(str(dirs["icefall"]), unk_as_blank="sum")  # the beam search's fold: tensors only
    enc, elen = b.encode_features(*b.features(waves[:1]))
    with pytest.raises(DecodingInputError, match="unk_as_blank='sum' is folded by the tensor engine only"):
        greedy(b.model, enc, elen, engine="native")
    assert greedy(b.model, enc, elen, engine="auto") == greedy(b.model, enc, elen, engine="torch")


def test_engine_native_needs_eager_cpu() -> None:
    torch.manual_seed(2)
    t = LSTMTransducer(7, 4, 6, 8, 0).eval()
    enc = torch.randn(1, 6, 4)
    with pytest.raises(DecodingInputError, match="engine='native' needs CPU tensors and eager execution"):
        greedy(t, enc, engine="native", acceleration="compile")
    if torch.cuda.is_available():  # a GPU tensor: auto keeps the tensor engine
        import copy

        g = copy.deepcopy(t).cuda()
        assert [h.tokens for h in greedy(g, enc.cuda())] == [h.tokens for h in greedy(t, enc, engine="torch")]
