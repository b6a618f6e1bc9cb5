"""Per-utterance reference greedy decoding (Algorithm 1 of the label-looping paper): the oracle.

Readable, one utterance, one decision at a time. Every batched greedy decoder must return
exactly what this returns, utterance by utterance.

Scoring rule (shared by all greedy decoders): the score is the sum of the log-probabilities of
every decision taken, blank decisions included: ``log_softmax`` over the token logits of the
chosen token, plus for TDT ``log_softmax`` over the duration logits of the chosen duration.
A forced advance after ``max_symbols`` labels on one frame takes no decision and adds nothing.
"""

from __future__ import annotations

import torch

from ..errors import check_emissions, check_finite
from ..results import Hypothesis
from . import _checks
from ..configs import TransducerGreedyConfig
from ._checks import DEFAULT_MAX_SYMBOLS, check_encoder_output, check_joint_logits, check_max_symbols
from .durations import DurationRule
from .model import TransducerModel, check_model

__all__ = ["reference_greedy"]


@torch.inference_mode()
def reference_greedy(
    model: TransducerModel, encoder_output: torch.Tensor, max_symbols: int | None = DEFAULT_MAX_SYMBOLS, *,
    config: TransducerGreedyConfig | None = None,
) -> Hypothesis:
    """Greedy-decode one utterance, encoder output ``[T, D]``.

    RNN-T: blank advances one frame, a label stays on the frame. TDT: every decision advances by
    its predicted duration value; a blank with duration 0 advances 1. ``max_symbols`` caps the
    labels emitted on one frame (the next label decision is replaced by a forced advance);
    ``None`` switches the cap off (a frame with over ``MAX_SYMBOLS_GUARD`` labels is then an error).
    ``config`` (a :class:`~asrdecode.configs.TransducerGreedyConfig`): its ``max_symbols`` instead (the
    oracle has no other setting).
    """
    if config is not None:
        max_symbols = TransducerGreedyConfig.build(config).max_symbols
    check_model(model)
    check_emissions("encoder_output", encoder_output, ndim=2)
    check_encoder_output(model, encoder_output)
    check_finite("encoder_output", encoder_output)
    max_symbols = check_max_symbols(max_symbols)
    V, blank, durations = model.vocab_size, model.blank_id, model.durations
    rule = DurationRule(durations)
    enc_proj = model.project_encoder(encoder_output)
    T = encoder_output.shape[0]
    state = model.initial_state(1, device=encoder_output.device, dtype=encoder_output.dtype)
    dec, state = model.predict(torch.tensor([blank], device=encoder_output.device), state)
    dec_proj = model.project_decoder(dec)[0]
    tokens: list[int] = []
    stamps: list[int] = []
    durs: list[int] = []
    score = 0.0
    t, symbols = 0, 0
    while t < T:
        logits = model.joint(enc_proj[t], dec_proj)
        check_joint_logits(logits, V)
        tok_logp = torch.log_softmax(logits[:V].double(), dim=-1)
        k = int(tok_logp.argmax())
        score += float(tok_logp[k])
        d = 0
        if durations is not None:
            dur_logp = torch.log_softmax(logits[V:].double(), dim=-1)
            j = int(dur_logp.argmax())
            score += float(dur_logp[j])
            d = durations[j]
        if k == blank:
            t += rule.blank_advance(d)
            symbols = 0
            continue
        tokens.append(k)
        stamps.append(t)
        durs.append(d)
        dec, state = model.predict(torch.tensor([k], device=encoder_output.device), state)
        dec_proj = model.project_decoder(dec)[0]
        if rule.label_advance(d) > 0:
            t += rule.label_advance(d)
            symbols = 0
        else:
            symbols += 1
            if max_symbols is not None and symbols >= max_symbols:
                t += 1
                symbols = 0
            elif symbols > _checks.MAX_SYMBOLS_GUARD:
                raise _checks.runaway_error()
    return Hypothesis(tokens=tokens, timestamps=stamps, score=score, durations=durs if durations is not None else None)
