"""ALSD++ / AES++ / WIND beam search of whole utterances in one engine call per batch, with the prediction and
joint networks in C++ (``transducer_beam_net.cpp``).

The engine runs the whole search of :class:`~asrdecode.transducer.BeamSearchDecoder` (``method="alsd"`` /
``"aes"`` / ``"wind"``): the steps are the per-step engine's (:mod:`.transducer_beam`, :mod:`.transducer_wind`),
the networks those of the native greedy search (the weights
:func:`~.transducer_greedy_lstm.native_greedy_weights` reads and caches: an
:class:`~asrdecode.transducer.LSTMTransducer`, NeMo-layout ONNX LSTM RNN-T / TDT, icefall-layout stateless
ONNX RNN-T), the fusion models read natively (token n-gram LM, boosting trees, word LM). Hypotheses equal the
tensor engine's (tokens, timestamps, durations; scores to float32 rounding of the networks).

:func:`search` returns ``None`` where this path does not apply (another model or dtype, a fusion model the
engine does not read); the caller then takes the per-step path. Streaming chunks take the per-step path
too (their state carries the model's own prediction-network state).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Optional

import numpy as np
import torch

from ..errors import DecodingInputError
from ..results import Hypothesis
from ._lib import check_status, load
from .abi import FusionDesc, TransducerSearchArgs
from .ctc_beam import describe_fusion
from .transducer_greedy_lstm import (LstmJointWeights, StatelessJointWeights, lengths_int32, project_encoder_output,
                                     native_greedy_weights, net_struct)

__all__ = ["search", "search_weights", "last_counts", "FULL_WINDOW_ENV"]

_ERR = threading.local()

#: Set to 1: WIND reads every window frame (the lazy window off; its check in the tests and benchmarks).
FULL_WINDOW_ENV = "ASRDECODE_WIND_FULL_WINDOW"


def last_counts() -> dict[str, int]:
    """This thread's last engine search: its ``steps`` and the ``joint_rows`` it computed (empty before one)."""
    return dict(getattr(_ERR, "counts", {}))




def _addr(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else int(a.ctypes.data)


def search_weights(model: Any) -> Optional[LstmJointWeights | StatelessJointWeights]:
    """The network weights the engine runs ``model`` with (cached per model, re-read when its parameters or
    files change), or ``None``: a model it does not read (the per-step path decodes it)."""
    return native_greedy_weights(model)[0]  # None for a model whose protocol methods are replaced


def _fold_id(model: Any, w: LstmJointWeights | StatelessJointWeights) -> int:
    """The ``<unk>`` id the model's joint folds into blank by max (:func:`~asrdecode.models.onnx_common.fold_unk`),
    -1 for none."""
    unk = getattr(model, "unk_id", None)
    if getattr(model, "unk_as_blank", None) != "max" or unk is None or unk == w.blank_id \
            or not 0 <= int(unk) < w.vocab_size:
        return -1
    return int(unk)


def _fusion(settings: Any, batch: int) -> Optional[tuple[Any, torch.Tensor, int]]:
    """The fusion descriptors, the fresh hypotheses' states ``[B*S, M]`` (int64; ``S`` slots per utterance)
    and ``M``; ``None`` when a model is not read natively."""
    scorer = settings.scorer
    fusion = scorer.fusion
    models = (FusionDesc * max(len(fusion), 1))()
    for i, (m, wt) in enumerate(fusion):
        if not describe_fusion(models[i], m, wt):
            return None
    slots = (settings.window + 1) * settings.beam if settings.method == "wind" else settings.beam
    n = batch * slots
    utt = torch.arange(batch).repeat_interleave(slots) if any(scorer.takes_utterances) else None
    init = scorer.initial(n, torch.device("cpu"), utterances=utt).to(torch.int64).contiguous()
    if init.shape != (n, len(fusion)):
        raise DecodingInputError(f"fusion initial states have shape {tuple(init.shape)}, expected ({n}, {len(fusion)})")
    return models, init, len(fusion)


def _start_context(model: Any, w: LstmJointWeights | StatelessJointWeights) -> np.ndarray:
    """The empty hypothesis's context ``[C]`` (int32) of a stateless decoder (the model's ``start_context``)."""
    if not isinstance(w, StatelessJointWeights):
        return np.zeros(1, np.int32)
    start = np.full(w.context_size, w.blank_id, dtype=np.int32)
    if getattr(model, "start_context", "blank") == "sherpa":
        start[:-1] = -1
    return start


def search(model: Any, settings: Any, encoder_output: torch.Tensor, lengths: torch.Tensor, nbest: int,
           symbol_guard: int) -> Optional[list[list[Hypothesis]]]:
    """The n-best lists of whole utterances ``encoder_output [B, T, D]`` (checked; as the model's
    ``project_encoder`` takes it) with ``lengths [B]``, searched with ``settings``
    (:class:`~asrdecode.transducer.beam_loop.SearchSettings`) in one engine call; ``None`` where this path
    does not apply. ``symbol_guard``: without a label cap, more labels than this on one frame is the
    runaway error."""
    from ..transducer import _checks
    from ..transducer.durations import DurationRule

    wind = settings.method == "wind"
    if encoder_output.dtype != torch.float32:
        return None
    w = search_weights(model)
    if w is None:
        return None
    fusion = _fusion(settings, encoder_output.shape[0])
    if fusion is None:
        return None
    models, init, num_models = fusion
    rule = DurationRule.of(model)
    if wind and rule.tdt:
        return None  # WIND is RNN-T only (the decoder refuses it before)
    B, T, D = encoder_output.shape
    if D != (w.wenc.shape[1] if isinstance(w, LstmJointWeights) else w.wp.shape[0]):
        return None
    if B == 0:
        return []
    lens32 = lengths_int32(lengths, B, T)
    if isinstance(w, LstmJointWeights):  # the joint's encoder projection, by the engine's matrix product
        enc = project_encoder_output(w, encoder_output.detach().cpu().float(), lens32)
    else:  # icefall's encoder output is projected already
        enc = np.ascontiguousarray(encoder_output.detach().cpu().float().numpy())
    lens = lens32.astype(np.int64)
    durations = np.asarray(rule.values, dtype=np.int64)
    start = _start_context(model, w)
    lam = float(sum(settings.scorer.weights))
    K = settings.beam
    S = (settings.window + 1) * K if wind else K  # slots per utterance (WIND: its ring of frame lists)
    cap = max(16, T * (settings.max_symbols or 4))
    while True:
        net = net_struct(w)
        net.start_ctx = _addr(start)
        args = TransducerSearchArgs(
            net=net, batch=B, beam=K, num_durations=len(rule.values), frames=T,
            blank=w.blank_id, tdt=int(rule.tdt), aes=int(settings.method == "aes"),
            early=int(settings.pruning == "early"),
            lm_weighted=int(settings.blank_scoring == "lm_weighted" and lam != 0.0),
            max_symbols=-1 if settings.max_symbols is None else settings.max_symbols, symbol_guard=symbol_guard,
            num_models=num_models, pack=rule.pack, capacity=cap, fold=_fold_id(model, w), lam=lam,
            wind=(2 if os.environ.get(FULL_WINDOW_ENV) == "1" else 1) if wind else 0, window=settings.window if wind else 0, has_gamma=int(settings.gamma is not None),
            gamma=0.0 if settings.gamma is None else float(settings.gamma),
            beta=float(settings.beta), durations=_addr(durations), enc=_addr(enc), lengths=_addr(lens),
            init_states=init.data_ptr(), models=models)
        # written by the engine: every score and length, the labels up to each length (not zeroed: the label
        # arrays are large and mostly unread)
        out_score = np.empty((B, S), np.float32)
        out_len = np.empty((B, S), np.int64)
        out_tok = np.empty((B, S, cap), np.int64)
        out_dat = np.empty((B, S, cap), np.int64)
        counts = np.zeros(4, np.int64)
        args.out_score, args.out_len = _addr(out_score), _addr(out_len)
        args.out_tok, args.out_dat, args.counts = _addr(out_tok), _addr(out_dat), _addr(counts)
        err = getattr(_ERR, "buf", None) or ctypes.create_string_buffer(512)
        _ERR.buf = err
        rc = load().asrd_transducer_beam_search(ctypes.byref(args), err, len(err))
        if rc != 0:
            message = err.value.decode(errors="replace")
            check_status(rc, "native transducer beam search", message)
            raise DecodingInputError(f"native transducer beam search: {message}")
        _ERR.counts = {"steps": int(counts[0]), "joint_rows": int(counts[3])}
        if counts[2]:
            raise _checks.runaway_error()
        if counts[1] <= cap:
            break
        cap = int(counts[1])  # a hypothesis longer than the outputs held: once more with room for it
    return _hypotheses(out_score, out_len, out_tok, out_dat, rule, min(nbest, K))


def _hypotheses(score: np.ndarray, length: np.ndarray, tok: np.ndarray, dat: np.ndarray, rule: Any,
                nbest: int) -> list[list[Hypothesis]]:
    """The ``nbest`` best of the engine's slots (final scores ``[B, K]``, label counts ``[B, K]``, labels and
    data ``[B, K, cap]``) per utterance, ranked by ``torch.topk`` as :meth:`BeamLoop.results` ranks them."""
    vals, slots = torch.from_numpy(score).topk(nbest, dim=1)
    out: list[list[Hypothesis]] = []
    for b, (row_v, row_s) in enumerate(zip(vals.tolist(), slots.tolist())):
        row = []
        for val, k in zip(row_v, row_s):
            cnt = int(length[b, k])
            if val == float("-inf") or cnt < 0:
                continue
            frames, durations = rule.unpack_data(dat[b, k, :cnt].tolist())
            row.append(Hypothesis(tokens=tok[b, k, :cnt].tolist(), timestamps=frames, score=float(val),
                                  durations=durations))
        out.append(row)
    return out
