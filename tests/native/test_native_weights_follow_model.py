"""The native engine's weight copies follow the model (DESIGN rule 7): after the joint or the
prediction network of an LSTMTransducer changes (in place, by ``load_state_dict``, by an optimizer
step), the C++ greedy, modified beam and NeMo beam searches decode the changed model, equal to the
tensor engine; an ONNX model's weights are re-read when its files change."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from asrdecode.native import available
from asrdecode.transducer import LSTMTransducer, greedy

pytestmark = pytest.mark.skipif(not available(), reason="no C++ compiler for the native engine")


def _model(seed: int = 0) -> LSTMTransducer:
    torch.manual_seed(seed)
    m = LSTMTransducer(12, 8, 10, 12, blank_id=11).eval()
    with torch.no_grad():
        m.joint_out.bias[11] += 1.0  # a few labels per utterance
    return m


def _enc(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 30, 8, generator=g) * 2, torch.tensor([30, 17, 5])


def _tokens(hyps) -> list[tuple[list[int], list[int]]]:
    return [(h.tokens, h.timestamps) for h in hyps]


def _blank_bias_up(m: LSTMTransducer) -> None:
    with torch.no_grad():
        m.joint_out.bias[m.blank_id] += 4.0


def _joint_state_dict(m: LSTMTransducer) -> None:
    other = _model(seed=7)
    m.joint_out.load_state_dict(other.joint_out.state_dict())
    m.enc_proj.load_state_dict(other.enc_proj.state_dict())


def _joint_sgd_step(m: LSTMTransducer) -> None:
    opt = torch.optim.SGD(m.joint_out.parameters(), lr=5.0)
    m.joint_out.weight.grad = torch.randn_like(m.joint_out.weight)
    m.joint_out.bias.grad = torch.randn_like(m.joint_out.bias)
    opt.step()


def _predictor_in_place(m: LSTMTransducer) -> None:
    with torch.no_grad():
        m.lstm.weight_hh_l0.mul_(-1.5)
        m.dec_proj.bias.add_(0.7)


def _whole_state_dict(m: LSTMTransducer) -> None:
    m.load_state_dict(_model(seed=9).state_dict())


CHANGES: dict[str, Callable[[LSTMTransducer], None]] = {
    "blank-bias": _blank_bias_up, "joint-load_state_dict": _joint_state_dict, "joint-sgd-step": _joint_sgd_step,
    "predictor-in-place": _predictor_in_place, "load_state_dict": _whole_state_dict}


def _greedy_follows(m: LSTMTransducer, enc: torch.Tensor, n: torch.Tensor, change: str) -> list:
    """Both engines decode ``m``, then ``m`` changes: both decode the changed model alike, not as before.
    Returns the torch engine's hypotheses after the change."""
    before = _tokens(greedy(m, enc, n, engine="native"))
    assert before == _tokens(greedy(m, enc, n, engine="torch"))
    CHANGES[change](m)
    want = greedy(m, enc, n, engine="torch")
    got = greedy(m, enc, n, engine="native")
    assert _tokens(got) == _tokens(want) and _tokens(want) != before
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-3)
    return want


@pytest.mark.parametrize("change", list(CHANGES))
def test_native_greedy_follows_a_changed_model(change) -> None:
    m, (enc, n) = _model(), _enc()
    with torch.no_grad():
        _greedy_follows(m, enc, n, change)


@pytest.mark.parametrize("change", ["blank-bias", "joint-sgd-step", "predictor-in-place"])
def test_native_beam_searches_follow_a_changed_model(change) -> None:
    from asrdecode.models.sherpa_nemo_search import nemo_beam_search
    from asrdecode.models.sherpa_search import modified_beam_search

    m, (enc, n) = _model(), _enc()
    searches = {"modified": lambda e: modified_beam_search(m, enc, n, beam=3, engine=e),
                "nemo": lambda e: nemo_beam_search(m, enc, n, beam=3, engine=e)}
    with torch.no_grad():
        for run in searches.values():
            run("native")  # fill the caches with the weights before the change
        CHANGES[change](m)
        for name, run in searches.items():
            got, want = run("native"), run("torch")
            assert [_tokens(r) for r in got] == [_tokens(r) for r in want], name
            for g, w in zip(got, want):
                assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-3), name


@pytest.mark.parametrize("change", ["blank-bias", "predictor-in-place", "load_state_dict"])
def test_a_model_made_under_inference_mode_is_followed_too(change) -> None:
    """Tensors made under ``torch.inference_mode`` keep no version counter (reading it raised) and can be
    changed in place there: the native copies and the tensor engine's step-weight cache key them by a
    checksum of their contents, so both engines decode the changed model."""
    with torch.inference_mode():
        m, (enc, n) = _model(), _enc()
        assert m.joint_out.weight.is_inference()
        want = _greedy_follows(m, enc, n, change)
    with torch.no_grad():
        fresh = _model()
        CHANGES[change](fresh)
        assert _tokens(greedy(fresh, enc.clone(), n.clone(), engine="torch")) == _tokens(want)


def test_paper_model_calibrates_to_its_target() -> None:
    """benchmarks/paper_model.make_paper_model tunes the blank bias in place and measures the label rate
    with the default (native) greedy: it reaches its target only if the native weights follow."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from paper_model import labels_per_frame, make_encoder_output, make_paper_model

    m = make_paper_model(seed=0, target=0.3)
    enc, n = make_encoder_output(4, 50, seed=1)
    with torch.no_grad():
        rate = labels_per_frame(m, enc, n)
        assert _tokens(greedy(m, enc, n, engine="native")) == _tokens(greedy(m, enc, n, engine="torch"))
    assert 0.15 < rate < 0.45, rate


# ----------------------------------------------------------------- ONNX graphs with ops the reader skips
def _insert(path, where: str, op: str, value) -> None:
    """Insert ``op`` (Add / Mul with the constant ``value``) into the ONNX graph at ``path``: after the graph's
    first output (``where="output"``) or before the input of its activation, Tanh or Relu (``"act"``)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(path))
    g = m.graph
    if where == "output":
        name = g.output[0].name
        for n in g.node:
            n.output[:] = [f"{name}_raw" if o == name else o for o in n.output]
        src, dst, at = f"{name}_raw", name, len(g.node)
    else:
        act = next(n for n in g.node if n.op_type in ("Tanh", "Relu"))
        src, dst, at = act.input[0], act.input[0] + "_scaled", list(g.node).index(act)
        act.input[0] = dst
    g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), f"extra_{where}"))
    g.node.insert(at, helper.make_node(op, [src, f"extra_{where}"], [dst]))
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


EDITS = {"joiner-output-add": ("joiner.onnx", "output", "Add", "ramp"),
         "joiner-mul-before-activation": ("joiner.onnx", "act", "Mul", 2.5),
         "decoder-output-scaled": ("decoder.onnx", "output", "Mul", 1.7)}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("layout", ["nemo", "icefall"])
def test_onnx_ops_the_native_reader_skips_keep_onnxruntime(tmp_path, layout, edit) -> None:
    """An extra op in decoder.onnx / joiner.onnx that the C++ weight reader does not model: found at load by
    probing against onnxruntime, a warning, and every search decodes with onnxruntime (engine="native" is
    refused naming why); the unedited model runs natively."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("kaldi_native_fbank")
    import warnings

    import numpy as np
    from sherpa_models import build_icefall, build_nemo

    from asrdecode.errors import DecodingInputError
    from asrdecode.models.onnx_transducer import load_onnx_transducer
    from asrdecode.models.sherpa_search import modified_beam_search
    from asrdecode.native.transducer_greedy_lstm import native_greedy_weights

    d = build_nemo(tmp_path / "m", normalize_type="NA", blank_bias=1.0) if layout == "nemo" \
        else build_icefall(tmp_path / "m", blank_bias=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for the unedited files
        assert native_greedy_weights(load_onnx_transducer(str(d)).model)[0] is not None
    edit_file, where, op, value = EDITS[edit]
    if value == "ramp":
        out = load_onnx_transducer(str(d)).model._out_width
        value = np.linspace(-6.0, 6.0, out)
    _insert(d / edit_file, where, op, value)
    b = load_onnx_transducer(str(d))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        weights, why = native_greedy_weights(b.model)
        assert native_greedy_weights(b.model)[0] is None  # said once: the answer is kept with the files' key
    assert weights is None
    if layout == "icefall" and edit_file == "decoder.onnx":  # the reader's own decoder probe refuses it
        assert "not a shape" in why and not said
    else:
        assert "onnxruntime" in why and len(said) == 1 and "differs from what onnxruntime computes" in str(said[0].message)
    g = torch.Generator().manual_seed(0)
    width = b.model.enc_dim if layout == "nemo" else b.model._dec_width  # icefall: encoder_out as wide as decoder_out
    enc = torch.randn(2, 12, width, generator=g) * 2
    n = torch.tensor([12, 7])
    with pytest.raises(DecodingInputError, match="engine='native' cannot decode"):
        greedy(b.model, enc, n, engine="native")
    with torch.no_grad():
        assert _tokens(greedy(b.model, enc, n, engine="auto")) == _tokens(greedy(b.model, enc, n, engine="torch"))
    kw = {"beam": 3, "unk_id": b.model.unk_id}
    if layout == "icefall":
        kw["context_size"] = b.model.context_size
    got = modified_beam_search(b.model, enc, n, engine="auto", **kw)
    want = modified_beam_search(b.model, enc, n, engine="torch", **kw)
    assert [_tokens(r) for r in got] == [_tokens(r) for r in want]


@pytest.mark.parametrize("cap", [2, 10])
def test_alsd_engines_agree_when_the_cap_ends_every_frame(cap) -> None:
    """Issue 35: a blank so unlikely that max_symbols ends every frame: ALSD++ beam 4 gives the same n-best
    (tokens, frames; scores within float tolerance) on both engines."""
    from asrdecode.transducer.beam import beam_search

    torch.manual_seed(3)
    m = LSTMTransducer(64, 16, 24, 32, blank_id=63).eval()
    with torch.no_grad():
        m.joint_out.bias[63] -= 40.0
    enc = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(8))
    n = torch.tensor([9, 5])
    with torch.no_grad():
        got = beam_search(m, enc, n, beam=4, max_symbols=cap, nbest=4, engine="native")
        want = beam_search(m, enc, n, beam=4, max_symbols=cap, nbest=4, engine="torch")
    for g, w, frames in zip(got, want, n.tolist()):
        assert all(len(h.tokens) == cap * frames for h in w)  # the cap ends every frame
        assert [h.tokens for h in g] == [h.tokens for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-3)


class _ShiftedJoint(LSTMTransducer):
    """A subclass whose joint is not the plain one (the C++ engine computes only the plain networks)."""

    def joint(self, enc, pred):  # type: ignore[no-untyped-def]
        out = super().joint(enc, pred)
        return out + torch.linspace(0.0, 3.0, out.shape[-1])


@pytest.mark.parametrize("how", ["subclass", "instance"])
def test_a_replaced_joint_keeps_every_search_off_the_native_networks(how) -> None:
    """A model whose joint is replaced (by a subclass or on the instance) is decoded by the tensor engine
    under engine="auto" (the C++ greedy and the one-call beam search read the weights, not the method),
    and engine="native" is refused with the reason."""
    from asrdecode.native.transducer_greedy_lstm import native_greedy_weights
    from asrdecode.transducer import beam_search

    torch.manual_seed(3)
    if how == "subclass":
        m = _ShiftedJoint(12, 8, 10, 12, blank_id=11).eval()
    else:
        m = LSTMTransducer(12, 8, 10, 12, blank_id=11).eval()
        plain_joint = m.joint
        m.joint = lambda enc, pred: plain_joint(enc, pred) + torch.linspace(0.0, 3.0, 12)  # type: ignore[method-assign]
    enc = torch.randn(3, 20, 8) * 2
    lengths = torch.tensor([20, 13, 7])
    weights, why = native_greedy_weights(m)
    assert weights is None and "replaces LSTMTransducer.joint" in why
    with torch.inference_mode():
        want = greedy(m, enc, lengths, engine="torch")
        assert [h.tokens for h in greedy(m, enc, lengths)] == [h.tokens for h in want]
        assert any(h.tokens for h in want)  # the shifted joint emits labels
        beams = beam_search(m, enc, lengths, beam=2)
        ref = beam_search(m, enc, lengths, beam=2, engine="torch")
    assert [b[0].tokens for b in beams] == [b[0].tokens for b in ref]
    with pytest.raises(ValueError, match="replaces LSTMTransducer.joint"):
        greedy(m, enc, lengths, engine="native")
