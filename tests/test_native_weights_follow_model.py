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


@pytest.mark.parametrize("change", list(CHANGES))
def test_native_greedy_follows_a_changed_model(change) -> None:
    m, (enc, n) = _model(), _enc()
    with torch.no_grad():
        before = _tokens(greedy(m, enc, n, engine="native"))
        assert before == _tokens(greedy(m, enc, n, engine="torch"))
        CHANGES[change](m)
        want = greedy(m, enc, n, engine="torch")
        got = greedy(m, enc, n, engine="native")
    assert _tokens(got) == _tokens(want) and _tokens(want) != before
    assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-3)


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


def test_paper_model_calibrates_to_its_target() -> None:
    """benchmarks/paper_model.make_paper_model tunes the blank bias in place and measures the label rate
    with the default (native) greedy: it reaches its target only if the native weights follow."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from paper_model import labels_per_frame, make_encoder_output, make_paper_model

    m = make_paper_model(seed=0, target=0.3)
    enc, n = make_encoder_output(4, 50, seed=1)
    with torch.no_grad():
        rate = labels_per_frame(m, enc, n)
        assert _tokens(greedy(m, enc, n, engine="native")) == _tokens(greedy(m, enc, n, engine="torch"))
    assert 0.15 < rate < 0.45, rate
