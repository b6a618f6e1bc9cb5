"""The NeMo adapter: same outputs as NeMo's own modules, same weights in both, same greedy results.

Tests that need NeMo are skipped when it is not importable (CI does not install it); run them with
the NeMo virtual environment of ``benchmarks/results_nemo.md``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.transducer import LSTMTransducer

HAVE_NEMO = importlib.util.find_spec("nemo") is not None and importlib.util.find_spec("nemo.collections") is not None
needs_nemo = pytest.mark.skipif(not HAVE_NEMO, reason="NeMo (nemo_toolkit[asr]) is not installed")

DURATIONS = [0, 1, 2, 4]
V = 12  # 11 labels + blank (last)
ENC, PRED, JOINT = 10, 16, 14


def _bench_module():
    """benchmarks/nemo_models.py (not a package module): loaded from its path."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "nemo_models.py"
    spec = importlib.util.spec_from_file_location("_asrdecode_bench_nemo_models", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _our_model(tdt: bool, seed: int, layers: int = 1) -> LSTMTransducer:
    """A small random model whose blank bias makes it emit a label on roughly a third of the steps."""
    torch.manual_seed(seed)
    m = LSTMTransducer(V, ENC, PRED, JOINT, blank_id=V - 1, durations=DURATIONS if tdt else None, pred_layers=layers)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
        m.joint_out.bias[V - 1] += 2.0
    return m.eval()


def _inputs(seed: int, batch: int = 5, frames: int = 13) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(batch, frames, ENC, generator=g)
    lengths = torch.randint(0, frames + 1, (batch,), generator=g)
    lengths[0] = frames
    return enc, lengths


def _protocol_greedy(model, enc: torch.Tensor, lengths: torch.Tensor, max_symbols: int) -> list[tuple[list, list]]:
    """Per-utterance greedy search that drives only the TransducerModel protocol (RNN-T and TDT)."""
    out = []
    k = 0 if model.durations is None else len(model.durations)
    for b in range(enc.shape[0]):
        state = model.initial_state(1)
        dec, state = model.predict(torch.tensor([model.blank_id]), state)
        dec = model.project_decoder(dec)
        f = model.project_encoder(enc[b : b + 1])
        t, emitted, tokens, frames = 0, 0, [], []
        while t < int(lengths[b]):
            logits = model.joint(f[:, t], dec)[0]
            label = int(logits[: model.vocab_size].argmax())
            # RNN-T: a label keeps the frame, a blank advances it; TDT: the predicted duration.
            if k == 0:
                step = 1 if label == model.blank_id else 0
            else:
                step = model.durations[int(logits[model.vocab_size :].argmax())]
            if label == model.blank_id:
                t, emitted = t + max(step, 1), 0
                continue
            tokens.append(label)
            frames.append(t)
            dec, state = model.predict(torch.tensor([label]), state)
            dec = model.project_decoder(dec)
            emitted = emitted + 1 if step == 0 else 0
            t += step
            if emitted >= max_symbols:
                t, emitted = t + 1, 0
        out.append((tokens, frames))
    return out


def test_missing_nemo_gives_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import asrdecode.models.nemo as adapter  # importable without NeMo

    monkeypatch.setitem(sys.modules, "nemo.collections.asr", None)
    with pytest.raises(ImportError, match="nemo_toolkit"):
        adapter.require_nemo()


@pytest.mark.parametrize("tdt", [False, True])
def test_with_blank_last_is_the_same_model_relabelled(tdt: bool) -> None:
    bench = _bench_module()
    torch.manual_seed(5)
    m = LSTMTransducer(V, ENC, PRED, JOINT, blank_id=0, durations=DURATIONS if tdt else None)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
        m.joint_out.bias[0] += 2.0
    m.eval()
    moved, old_id = bench.with_blank_last(m)
    assert moved.blank_id == V - 1 and old_id[-1] == 0 and sorted(old_id) == list(range(V))
    enc, lengths = _inputs(5)
    with torch.no_grad():
        want = _protocol_greedy(m, enc, lengths, max_symbols=4)
        got = _protocol_greedy(moved, enc, lengths, max_symbols=4)
    assert sum(len(t) for t, _ in want) > 0
    assert [([old_id[x] for x in t], f) for t, f in got] == want
    assert bench.with_blank_last(moved)[0] is moved


@needs_nemo
@pytest.mark.parametrize("tdt", [False, True])
def test_adapter_equals_nemo_modules(tdt: bool) -> None:
    from nemo.collections.asr.modules import RNNTDecoder, RNNTJoint

    from asrdecode.models.nemo import NeMoTransducer
    from asrdecode.transducer import check_model

    torch.manual_seed(0)
    n_extra = len(DURATIONS) if tdt else 0
    dec = RNNTDecoder(prednet={"pred_hidden": PRED, "pred_rnn_layers": 2}, vocab_size=V - 1).eval()
    joint = RNNTJoint(
        jointnet={"encoder_hidden": ENC, "pred_hidden": PRED, "joint_hidden": JOINT, "activation": "relu"},
        num_classes=V - 1,
        num_extra_outputs=n_extra,
    ).eval()
    m = check_model(NeMoTransducer(dec, joint, durations=DURATIONS if tdt else None))
    assert (m.vocab_size, m.blank_id, m.durations) == (V, V - 1, DURATIONS if tdt else None)

    with torch.no_grad():
        labels = torch.tensor([V - 1, 0, 3, V - 2])  # blank = start of sequence
        state = m.initial_state(4)
        assert all(s.shape == (2, 4, PRED) and not s.any() for s in state)
        g, state = m.predict(labels, state)
        g_ref, state_ref = dec.predict(labels[:, None], None, add_sos=False, batch_size=4)
        torch.testing.assert_close(g, g_ref[:, 0])
        torch.testing.assert_close(state, tuple(state_ref))
        g2, state2 = m.predict(torch.tensor([1, 2, V - 1, 5]), state)
        g2_ref, state2_ref = dec.predict(torch.tensor([[1], [2], [V - 1], [5]]), state_ref, add_sos=False)
        torch.testing.assert_close(g2, g2_ref[:, 0])

        enc = torch.randn(4, 6, ENC)
        f = m.project_encoder(enc)
        torch.testing.assert_close(f, joint.project_encoder(enc))
        p = m.project_decoder(g2)
        logits = m.joint(f, p[:, None, :])  # [4, 6, V + K]
        assert logits.shape == (4, 6, V + n_extra)
        ref = joint.joint_after_projection(f, p[:, None, :])[:, :, 0]  # NeMo log-softmaxes on CPU
        torch.testing.assert_close(logits.log_softmax(-1), ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(logits[..., :V].argmax(-1), ref[..., :V].argmax(-1))

        # state helpers agree with NeMo's own masked replace
        mask = torch.tensor([True, False, True, False])
        merged = m.replace_state(state, state2, mask)
        dst = tuple(s.clone() for s in state_ref)
        dec.batch_replace_states_mask(src_states=state2_ref, dst_states=dst, mask=mask)
        torch.testing.assert_close(merged, dst, rtol=0, atol=0)
        picked = m.select_state(merged, torch.tensor([2, 0]))
        torch.testing.assert_close(picked, tuple(s[:, [2, 0]] for s in dst), rtol=0, atol=0)


@needs_nemo
def test_adapter_rejects_what_it_cannot_decode() -> None:
    from nemo.collections.asr.modules import RNNTDecoder, RNNTJoint

    from asrdecode.models.nemo import NeMoTransducer

    dec = RNNTDecoder(prednet={"pred_hidden": PRED, "pred_rnn_layers": 1}, vocab_size=V - 1)
    joint = RNNTJoint(
        jointnet={"encoder_hidden": ENC, "pred_hidden": PRED, "joint_hidden": JOINT, "activation": "tanh"},
        num_classes=V - 1,
        num_extra_outputs=len(DURATIONS),
    )
    with pytest.raises(DecodingInputError, match="durations"):
        NeMoTransducer(dec, joint)  # TDT joint without durations
    with pytest.raises(DecodingInputError, match="durations"):
        NeMoTransducer(dec, joint, durations=[0, 1])
    no_pad = RNNTDecoder(prednet={"pred_hidden": PRED, "pred_rnn_layers": 1}, vocab_size=V - 1, blank_as_pad=False)
    with pytest.raises(DecodingInputError, match="blank_as_pad"):
        NeMoTransducer(no_pad, joint, durations=DURATIONS)
    other = RNNTDecoder(prednet={"pred_hidden": PRED, "pred_rnn_layers": 1}, vocab_size=V)
    with pytest.raises(DecodingInputError, match="blank index"):
        NeMoTransducer(other, joint, durations=DURATIONS)
    with pytest.raises(DecodingInputError, match="RNNTDecoder"):
        NeMoTransducer(torch.nn.LSTM(2, 2), joint, durations=DURATIONS)


@needs_nemo
@pytest.mark.parametrize("tdt", [False, True])
def test_weight_transfer_gives_same_logits(tdt: bool) -> None:
    bench = _bench_module()
    ours = _our_model(tdt, seed=1, layers=2)
    dec, joint = bench.nemo_modules_from_lstm(ours)
    back = bench.lstm_from_nemo(dec, joint, durations=ours.durations)
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name

    with torch.no_grad():
        labels = torch.tensor([[V - 1, 4, 4, 0, 7], [V - 1, 2, V - 2, 1, 1]])  # blank first = SOS
        ours_out, _ = ours.predict_sequence(labels, ours.initial_state(2))
        nemo_out, _ = dec.predict(labels, None, add_sos=False)
        torch.testing.assert_close(ours_out, nemo_out, rtol=1e-5, atol=1e-6)
        enc = torch.randn(2, 7, ENC)
        ours_logits = ours.joint(ours.project_encoder(enc)[:, :, None], ours.project_decoder(ours_out)[:, None])
        nemo_logp = joint.joint_after_projection(joint.project_encoder(enc), joint.project_prednet(nemo_out))
        torch.testing.assert_close(ours_logits.log_softmax(-1), nemo_logp, rtol=1e-5, atol=1e-5)

    # the other direction: a fresh NeMo pair -> our model
    torch.manual_seed(3)
    fresh_dec, fresh_joint = bench.nemo_modules_from_lstm(_our_model(tdt, seed=3))
    torch.nn.init.normal_(fresh_joint.joint_net[-1].weight)
    twin = bench.lstm_from_nemo(fresh_dec, fresh_joint, durations=DURATIONS if tdt else None)
    with torch.no_grad():
        h = torch.randn(3, JOINT)
        torch.testing.assert_close(twin.joint(h, h), fresh_joint.joint_net(h + h))


@needs_nemo
@pytest.mark.parametrize("tdt", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adapter_protocol_greedy_equals_nemo_greedy(tdt: bool, seed: int) -> None:
    """A plain per-utterance greedy over the adapter's protocol reproduces NeMo's batched greedy."""
    from asrdecode.models.nemo import NeMoTransducer

    bench = _bench_module()
    dec, joint = bench.nemo_modules_from_lstm(_our_model(tdt, seed))
    durations = DURATIONS if tdt else None
    adapter = NeMoTransducer(dec, joint, durations=durations)
    enc, lengths = _inputs(seed)
    with torch.no_grad():
        expected = _protocol_greedy(adapter, enc, lengths, max_symbols=4)
    assert sum(len(t) for t, _ in expected) > 0
    loops = [True] if tdt else [True, False]
    for loop_labels in loops:
        infer = bench.make_nemo_greedy(dec, joint, loop_labels=loop_labels, durations=durations, max_symbols=4)
        assert bench.run_nemo_greedy(infer, enc, lengths) == expected, f"loop_labels={loop_labels}"


def _our_greedy():
    try:
        from asrdecode.transducer import greedy
    except ImportError:
        return None
    return greedy


@needs_nemo
@pytest.mark.skipif(_our_greedy() is None, reason="asrdecode.transducer.greedy is not available yet")
@pytest.mark.parametrize("tdt", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_our_greedy_on_adapter_equals_nemo_greedy(tdt: bool, seed: int) -> None:
    from asrdecode.models.nemo import NeMoTransducer

    greedy = _our_greedy()
    bench = _bench_module()
    ours = _our_model(tdt, seed)
    dec, joint = bench.nemo_modules_from_lstm(ours)
    durations = DURATIONS if tdt else None
    adapter = NeMoTransducer(dec, joint, durations=durations)
    enc, lengths = _inputs(seed + 10, batch=6, frames=17)
    nemo = bench.run_nemo_greedy(
        bench.make_nemo_greedy(dec, joint, loop_labels=True, durations=durations, max_symbols=4), enc, lengths
    )
    variants = [("labels", 1), ("frames", 1)] + ([] if tdt else [("labels", 3), ("labels", 8)])  # WIND: RNN-T
    with torch.no_grad():
        from asrdecode.transducer import reference_greedy

        for b in range(enc.shape[0]):
            ref = reference_greedy(adapter, enc[b, : int(lengths[b])], max_symbols=4)
            assert (list(ref.tokens), list(ref.timestamps)) == nemo[b], f"reference_greedy, utterance {b}"
        for model in (adapter, ours):
            for loop, window in variants:
                hyps = greedy(model, enc, lengths, loop=loop, window=window, max_symbols=4)
                got = [(list(h.tokens), list(h.timestamps)) for h in hyps]
                assert got == nemo, f"{type(model).__name__} loop={loop} window={window}"


def _nemo_asr_model(tdt: bool):
    """A tiny character EncDecRNNTModel (Conformer encoder, LSTM decoder), RNN-T or TDT, built from a config."""
    from nemo.collections.asr.models import EncDecRNNTModel
    from omegaconf import OmegaConf

    durations = [0, 1, 2, 3]
    cfg = {
        "labels": list("abcdefgh"),
        "sample_rate": 16000,
        "model_defaults": {"enc_hidden": 32, "pred_hidden": 24},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "features": 16,
            "n_fft": 512,
            "dither": 0.0,
            "pad_to": 0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 16,
            "n_layers": 1,
            "d_model": 32,
            "n_heads": 2,
            "subsampling": "striding",
            "subsampling_factor": 4,
            "subsampling_conv_channels": 8,
            "ff_expansion_factor": 2,
            "conv_kernel_size": 3,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "prednet": {"pred_hidden": 24, "pred_rnn_layers": 1},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint",
            "jointnet": {"joint_hidden": 20, "activation": "relu", "encoder_hidden": 32, "pred_hidden": 24},
        },
        "decoding": {"strategy": "greedy_batch", "greedy": {"max_symbols": 5}},
        "loss": {"loss_name": "default"},
    }
    if tdt:
        cfg["model_defaults"]["tdt_durations"] = durations
        cfg["joint"]["num_extra_outputs"] = len(durations)
        cfg["decoding"].update(model_type="tdt", durations=durations)
        cfg["loss"] = {"loss_name": "tdt", "tdt_kwargs": {"durations": durations, "sigma": 0.02, "omega": 0.1}}
    torch.manual_seed(7)
    model = EncDecRNNTModel(cfg=OmegaConf.create(cfg)).eval()
    with torch.no_grad():  # a mixture of labels and blanks rather than max_symbols labels on every frame
        model.joint.joint_net[-1].weight.mul_(5.0)
        model.joint.joint_net[-1].bias[8] += 2.0 if tdt else 2.5
    return model


@needs_nemo
@pytest.mark.skipif(_our_greedy() is None, reason="asrdecode.transducer.greedy is not available yet")
@pytest.mark.parametrize("tdt", [False, True])
def test_whole_nemo_model_audio_to_tokens(tdt: bool) -> None:
    """Waveforms -> NeMo preprocessor + encoder -> our greedy on the wrapped model == NeMo's own decoding."""
    from asrdecode.models.nemo import NeMoTransducer, encoder_output

    nemo_model = _nemo_asr_model(tdt)
    adapter = NeMoTransducer.from_model(nemo_model)
    assert (adapter.vocab_size, adapter.blank_id) == (9, 8)
    assert adapter.durations == ([0, 1, 2, 3] if tdt else None)

    g = torch.Generator().manual_seed(0)
    audio = torch.randn(3, 16000, generator=g)
    lengths = torch.tensor([16000, 9000, 12000])
    enc, enc_lengths = encoder_output(nemo_model, audio, lengths)
    with torch.inference_mode():
        enc_ref, len_ref = nemo_model(input_signal=audio, input_signal_length=lengths)
    assert enc.shape == (3, enc_ref.shape[2], 32)
    torch.testing.assert_close(enc, enc_ref.transpose(1, 2))
    assert torch.equal(enc_lengths, len_ref)

    nemo_hyps = nemo_model.decoding.rnnt_decoder_predictions_tensor(
        encoder_output=enc.transpose(1, 2), encoded_lengths=enc_lengths
    )
    nemo_tokens = [h.y_sequence.tolist() for h in nemo_hyps]
    ours = _our_greedy()(adapter, enc, enc_lengths, max_symbols=5)
    assert [list(h.tokens) for h in ours] == nemo_tokens
    n = sum(len(t) for t in nemo_tokens)
    assert 0 < n < 5 * int(enc_lengths.sum())

    with pytest.raises(DecodingInputError, match="lengths"):
        encoder_output(nemo_model, audio, lengths[:2])
    with pytest.raises(DecodingInputError, match="lengths"):
        encoder_output(nemo_model, audio, torch.tensor([16001, 1, 1]))


@needs_nemo
@pytest.mark.parametrize("tdt", [False, True])
def test_stateless_nemo_decoder(tdt: bool) -> None:
    """NeMo's stateless (last-labels embedding) decoder: state [[B, C-1]] with the batch on dim 0."""
    from nemo.collections.asr.modules import RNNTJoint, StatelessTransducerDecoder

    from asrdecode.models.nemo import NeMoTransducer

    bench = _bench_module()
    torch.manual_seed(0)
    dec = StatelessTransducerDecoder(prednet={"pred_hidden": PRED}, vocab_size=V - 1, context_size=2).eval()
    joint = RNNTJoint(
        jointnet={"encoder_hidden": ENC, "pred_hidden": PRED, "joint_hidden": JOINT, "activation": "tanh"},
        num_classes=V - 1,
        num_extra_outputs=len(DURATIONS) if tdt else 0,
    ).eval()
    with torch.no_grad():
        for p in [*dec.parameters(), *joint.parameters()]:
            p.mul_(3.0)
        joint.joint_net[-1].bias[V - 1] += 2.0
    durations = DURATIONS if tdt else None
    adapter = NeMoTransducer(dec, joint, durations=durations)
    state = adapter.initial_state(3)
    assert isinstance(state, list) and state[0].shape == (3, 1) and bool((state[0] == V - 1).all())
    with torch.no_grad():
        _, s1 = adapter.predict(torch.tensor([V - 1, 2, 5]), state)
        merged = adapter.replace_state(state, s1, torch.tensor([False, True, True]))
        assert merged[0][:, -1].tolist() == [V - 1, 2, 5]
        assert adapter.select_state(merged, torch.tensor([2]))[0].tolist() == [[5]]

    enc, lengths = _inputs(0)
    nemo = bench.run_nemo_greedy(
        bench.make_nemo_greedy(dec, joint, durations=durations, max_symbols=4), enc, lengths
    )
    assert sum(len(t) for t, _ in nemo) > 0
    with torch.no_grad():
        assert _protocol_greedy(adapter, enc, lengths, max_symbols=4) == nemo
        greedy = _our_greedy()
        if greedy is not None:
            for loop in ("labels", "frames"):
                hyps = greedy(adapter, enc, lengths, loop=loop, max_symbols=4)
                assert [(list(h.tokens), list(h.timestamps)) for h in hyps] == nemo, loop


@needs_nemo
def test_hat_joint_goes_through_nemo_joint() -> None:
    """A joint subclass with its own joint_after_projection (HAT: separate blank) is used as NeMo defines it."""
    from nemo.collections.asr.modules import RNNTDecoder
    from nemo.collections.asr.modules.hybrid_autoregressive_transducer import HATJoint

    from asrdecode.models.nemo import NeMoTransducer

    bench = _bench_module()
    torch.manual_seed(0)
    dec = RNNTDecoder(prednet={"pred_hidden": PRED, "pred_rnn_layers": 1}, vocab_size=V - 1).eval()
    joint = HATJoint(
        jointnet={"encoder_hidden": ENC, "pred_hidden": PRED, "joint_hidden": JOINT, "activation": "tanh"},
        num_classes=V - 1,
    ).eval()
    with torch.no_grad():
        for p in [*dec.parameters(), *joint.parameters()]:
            p.mul_(3.0)
    adapter = NeMoTransducer(dec, joint)
    with torch.no_grad():
        f, g = torch.randn(2, 3, JOINT), torch.randn(2, 1, JOINT)
        torch.testing.assert_close(adapter.joint(f, g), joint.joint_after_projection(f, g)[:, :, 0])
    enc, lengths = _inputs(0)
    nemo = bench.run_nemo_greedy(bench.make_nemo_greedy(dec, joint, max_symbols=4), enc, lengths)
    assert sum(len(t) for t, _ in nemo) > 0
    with torch.no_grad():
        assert _protocol_greedy(adapter, enc, lengths, max_symbols=4) == nemo
