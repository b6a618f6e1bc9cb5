"""Bench-only helpers: the same weights in our ``LSTMTransducer`` and in NeMo modules, and NeMo's greedy.

Needs NeMo (``nemo_toolkit[asr]``); see ``benchmarks/results_nemo.md`` for the install commands.
Nothing here downloads anything: NeMo modules are built from configs in code.

Correspondence of parameters (ours -> NeMo), blank being the last index on both sides:

=====================  ==============================================
``embedding``          ``decoder.prediction["embed"]`` (blank row = padding, zero)
``lstm``               ``decoder.prediction["dec_rnn"].lstm`` (same names; NeMo's is time-major)
``enc_proj``           ``joint.enc``
``dec_proj``           ``joint.pred``
``joint_out``          ``joint.joint_net[-1]`` (after a ``Tanh``; TDT duration logits last)
=====================  ==============================================
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from asrdecode.models.nemo import require_nemo
from asrdecode.transducer import LSTMTransducer

__all__ = ["with_blank_last", "nemo_modules_from_lstm", "lstm_from_nemo", "make_nemo_greedy", "run_nemo_greedy"]


def _check_blank_last(model: LSTMTransducer) -> None:
    if model.blank_id != model.vocab_size - 1:
        raise ValueError(
            f"NeMo puts blank last: the model's blank_id must be {model.vocab_size - 1}, got {model.blank_id}"
        )


def with_blank_last(model: LSTMTransducer) -> tuple[LSTMTransducer, list[int]]:
    """The same model with blank moved to the last index (NeMo's layout), and ``old_id`` per new id.

    Labels keep their order; ``old_id[new]`` maps the new model's token ids back to ``model``'s.
    Returns ``model`` itself when its blank is already last.
    """
    v, blank = model.vocab_size, model.blank_id
    order = [i for i in range(v) if i != blank] + [blank]
    if blank == v - 1:
        return model, order
    out = LSTMTransducer(
        vocab_size=v,
        enc_dim=model.enc_proj.in_features,
        pred_dim=model.pred_dim,
        joint_dim=model.enc_proj.out_features,
        blank_id=v - 1,
        durations=model.durations,
        pred_layers=model.pred_layers,
    )
    out.load_state_dict(model.state_dict())
    idx = torch.tensor(order)
    with torch.no_grad():
        out.embedding.weight.copy_(model.embedding.weight[idx])
        out.joint_out.weight[:v].copy_(model.joint_out.weight[:v][idx])
        out.joint_out.bias[:v].copy_(model.joint_out.bias[:v][idx])
    return out.eval(), order


def nemo_modules_from_lstm(model: LSTMTransducer) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Build a NeMo ``RNNTDecoder`` + ``RNNTJoint`` (tanh) holding ``model``'s weights; both in eval mode."""
    modules = require_nemo()
    _check_blank_last(model)
    n_labels = model.vocab_size - 1
    pred_dim = model.pred_dim
    enc_dim = model.enc_proj.in_features
    joint_dim = model.enc_proj.out_features
    n_extra = 0 if model.durations is None else len(model.durations)
    decoder = modules.RNNTDecoder(
        prednet={"pred_hidden": pred_dim, "pred_rnn_layers": model.pred_layers, "dropout": 0.0},
        vocab_size=n_labels,
        blank_as_pad=True,
    )
    joint = modules.RNNTJoint(
        jointnet={"encoder_hidden": enc_dim, "pred_hidden": pred_dim, "joint_hidden": joint_dim, "activation": "tanh"},
        num_classes=n_labels,
        num_extra_outputs=n_extra,
    )
    with torch.no_grad():
        decoder.prediction["embed"].weight.copy_(model.embedding.weight)
        decoder.prediction["dec_rnn"].lstm.load_state_dict(model.lstm.state_dict())
        joint.enc.load_state_dict(model.enc_proj.state_dict())
        joint.pred.load_state_dict(model.dec_proj.state_dict())
        joint.joint_net[-1].load_state_dict(model.joint_out.state_dict())
    return decoder.eval(), joint.eval()


def lstm_from_nemo(
    decoder: torch.nn.Module, joint: torch.nn.Module, durations: Sequence[int] | None = None
) -> LSTMTransducer:
    """Build our ``LSTMTransducer`` holding the weights of a NeMo LSTM ``RNNTDecoder`` + tanh ``RNNTJoint``."""
    modules = require_nemo()
    if not isinstance(decoder, modules.RNNTDecoder) or not decoder.blank_as_pad:
        raise ValueError("decoder must be a NeMo RNNTDecoder with blank_as_pad=True")
    if decoder.prediction["dec_rnn"].lstm.proj_size:
        raise ValueError("LSTM decoders with a projection (rnn_hidden_size > pred_hidden) have no LSTMTransducer twin")
    if not isinstance(joint.joint_net[0], torch.nn.Tanh):
        raise ValueError("only a tanh joint (activation='tanh') matches LSTMTransducer")
    n_extra = int(joint.num_extra_outputs)
    if (durations is None and n_extra) or (durations is not None and len(durations) != n_extra):
        raise ValueError(f"the joint has {n_extra} duration outputs; durations={durations}")
    vocab = int(joint.num_classes_with_blank) - n_extra
    model = LSTMTransducer(
        vocab_size=vocab,
        enc_dim=joint.enc.in_features,
        pred_dim=decoder.pred_hidden,
        joint_dim=joint.enc.out_features,
        blank_id=vocab - 1,
        durations=durations,
        pred_layers=decoder.pred_rnn_layers,
    )
    with torch.no_grad():
        model.embedding.weight.copy_(decoder.prediction["embed"].weight)
        model.lstm.load_state_dict(decoder.prediction["dec_rnn"].lstm.state_dict())
        model.enc_proj.load_state_dict(joint.enc.state_dict())
        model.dec_proj.load_state_dict(joint.pred.state_dict())
        model.joint_out.load_state_dict(joint.joint_net[-1].state_dict())
    return model.eval()


def make_nemo_greedy(
    decoder: torch.nn.Module,
    joint: torch.nn.Module,
    *,
    loop_labels: bool = True,
    durations: Sequence[int] | None = None,
    max_symbols: int | None = None,
) -> Any:
    """NeMo's batched greedy decoder (CUDA graphs off): RNN-T label- or frame-looping, or TDT label-looping."""
    require_nemo()
    from nemo.collections.asr.parts.submodules import rnnt_greedy_decoding as g  # noqa: PLC0415

    blank = int(decoder.blank_idx)
    if durations is not None:
        if not loop_labels:
            raise ValueError("NeMo's batched TDT greedy decoder is label-looping only")
        return g.GreedyBatchedTDTInfer(
            decoder,
            joint,
            blank_index=blank,
            durations=list(durations),
            max_symbols_per_step=max_symbols,
            include_duration=True,
            use_cuda_graph_decoder=False,
        )
    return g.GreedyBatchedRNNTInfer(
        decoder,
        joint,
        blank_index=blank,
        max_symbols_per_step=max_symbols,
        loop_labels=loop_labels,
        use_cuda_graph_decoder=False,
    )


def run_nemo_greedy(infer: Any, enc: torch.Tensor, lengths: torch.Tensor) -> list[tuple[list[int], list[int]]]:
    """Decode ``enc [B, T, D]`` (our layout) with a NeMo greedy decoder -> per utterance (tokens, frames)."""
    (hyps,) = infer(encoder_output=enc.transpose(1, 2), encoded_lengths=lengths)
    out = []
    for h in hyps:
        tokens = [int(x) for x in torch.as_tensor(h.y_sequence).tolist()]
        frames = [int(x) for x in torch.as_tensor(h.timestamp).tolist()] if len(tokens) else []
        out.append((tokens, frames))
    return out
