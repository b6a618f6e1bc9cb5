"""sherpa-onnx's modified beam search with the prediction and joint networks run in C++
(transducer_modified_beam.cpp): the same search as :func:`asrdecode.models.sherpa_search.modified_beam_search`
(one symbol per frame, the ``beam`` best (hypothesis, token) pairs, equal label sequences merged by
log-add, ``<unk>`` extending like blank, float32 log-softmax scores), one C++ call per batch. Equal
scores in the top-k go to the lower ``hypothesis * V + token`` (torch.topk leaves their order open).

Weights: :class:`~asrdecode.native.transducer_greedy_lstm.LstmJointWeights` (NeMo layout,
:class:`~asrdecode.transducer.LSTMTransducer`) or
:class:`~asrdecode.native.transducer_greedy_lstm.StatelessJointWeights` (icefall layout), from
:func:`~asrdecode.native.transducer_greedy_lstm.native_greedy_weights`. Per frame the hypotheses of
all active utterances go through the joint as one matrix product; the prediction network runs only
for the hypotheses that emitted (the stateless decoder's outputs are cached per context).
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError, check_finite
from ..results import Hypothesis
from ._lib import check_status, load
from .abi import NetSearchArgs
from .transducer_greedy_lstm import LstmJointWeights, StatelessJointWeights, lengths_int32, project_encoder_output, net_struct

__all__ = ["modified_beam_lstm", "modified_beam_stateless", "native_modified_beam"]

def checked_inputs(encoder_output: object, width: int, lengths: Any, beam: object, vocab: int,
             ids: dict[str, Optional[int]]) -> tuple[torch.Tensor, np.ndarray]:
    """(encoder output ``[B, T, width]`` float32 CPU contiguous, finite; lengths ``[B]`` int32) or a named error."""
    if not isinstance(encoder_output, torch.Tensor) or encoder_output.dim() != 3 or encoder_output.shape[2] != width:
        raise DecodingInputError(f"encoder_output must be a tensor [B, T, {width}]")
    if encoder_output.device.type != "cpu":
        raise DecodingInputError(f"encoder_output must be on the CPU for the native search, got {encoder_output.device}")
    if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1 or beam * vocab >= 2 ** 31:
        raise DecodingInputError(f"beam must be an int >= 1 (beam * vocab < 2^31), got {beam!r}")
    for name, v in ids.items():
        if v is not None and not 0 <= v < vocab:
            raise DecodingInputError(f"{name} must be None or in 0..{vocab - 1}, got {v!r}")
    check_finite("encoder_output", encoder_output)
    b, t_max, _ = encoder_output.shape
    return encoder_output.detach().float().contiguous(), lengths_int32(lengths, b, t_max)


def output_buffers(b: int, beam: int, maxlen: int, durations: bool = False) -> list[np.ndarray]:
    """out_n [B], out_len [B, beam], out_score [B, beam], out_tokens / out_frames (/ out_durations with
    ``durations``) [B, beam, maxlen]; each at least one element."""
    cells = max(1, b * beam * maxlen)
    return [np.zeros(max(1, b), np.int32), np.zeros(max(1, b * beam), np.int32), np.zeros(max(1, b * beam), np.float64),
            *(np.zeros(cells, np.int32) for _ in range(3 if durations else 2))]


def hypotheses_from_outputs(out: list[np.ndarray], b: int, beam: int, maxlen: int, durations: bool = False) -> list[list[Hypothesis]]:
    """The C++ outputs (:func:`output_buffers`) as per utterance its hypotheses; ``durations``: read them from
    the third label array."""
    n, lens, scores = out[:3]
    tok, fr, *du = (a[: b * beam * maxlen].reshape(b, beam, maxlen) for a in out[3:])
    res = []
    for i in range(b):
        row = []
        for j in range(int(n[i])):
            k = int(lens[i * beam + j])
            row.append(Hypothesis(tok[i, j, :k].tolist(), fr[i, j, :k].tolist(), float(scores[i * beam + j]),
                                  du[0][i, j, :k].tolist() if durations else None))
        res.append(row)
    return res


#: the most label cells (utterances x beam x label slots) of one native call's output arrays (int32, two or
#: three of them): a larger batch runs in several calls, so a call's memory stays bounded
CALL_CELLS = 1 << 24


def in_groups(b: int, cells: int, call: Callable[[int, int], list[list[Hypothesis]]]) -> list[list[Hypothesis]]:
    """``call(lo, hi)``'s hypotheses for utterances ``lo..hi-1`` over the batch ``[0, b)`` in groups of
    ``CALL_CELLS // cells`` utterances (at least one); ``cells``: an utterance's output label cells."""
    step = max(1, CALL_CELLS // max(1, cells))
    if b == 0:
        return call(0, 0)
    return [hyps for lo in range(0, b, step) for hyps in call(lo, min(b, lo + step))]


def check_rc(rc: int, what: str) -> None:
    """0, or the named error of the C call's return code: guard.h's codes, or -1 (arguments refused)."""
    check_status(rc, what)
    if rc != 0:
        raise DecodingInputError(f"{what} refused its arguments")




def _beam_call(w: "LstmJointWeights | StatelessJointWeights", enc: np.ndarray, lens: np.ndarray, t_max: int,
               beam: int, unk_id: Optional[int], fold_unk_id: Optional[int], start: Optional[np.ndarray] = None
               ) -> Callable[[int, int], list[list[Hypothesis]]]:
    """The modified beam search of rows ``lo:hi`` of ``enc [B, T, H]`` (projected) as one engine call
    (``asrd_modified_beam``; abi.h's NetSearchArgs built by field name)."""
    fn = load().asrd_modified_beam

    def call(lo: int, hi: int) -> list[list[Hypothesis]]:
        out = output_buffers(hi - lo, beam, t_max)
        part, part_lens = np.ascontiguousarray(enc[lo:hi]), np.ascontiguousarray(lens[lo:hi])
        net = net_struct(w)
        if start is not None:
            net.start_ctx = start.ctypes.data
        args = NetSearchArgs(
            net=net, batch=hi - lo, frames=t_max, blank=w.blank_id, unk=-1 if unk_id is None else unk_id,
            fold=-1 if fold_unk_id is None else fold_unk_id, beam=beam, enc=part.ctypes.data,
            lengths=part_lens.ctypes.data, out_n=out[0].ctypes.data, out_len=out[1].ctypes.data,
            out_score=out[2].ctypes.data, out_tokens=out[3].ctypes.data, out_frames=out[4].ctypes.data)
        check_rc(fn(ctypes.byref(args)), "the native modified beam search")
        return hypotheses_from_outputs(out, hi - lo, beam, t_max)

    return call


@torch.no_grad()
def modified_beam_lstm(w: LstmJointWeights, encoder_output: torch.Tensor,
                       lengths: Optional[torch.Tensor | Sequence[int]] = None, *, beam: int = 4,
                       unk_id: Optional[int] = None, fold_unk_id: Optional[int] = None) -> list[list[Hypothesis]]:
    """Encoder output ``[B, T, D]`` (not projected) + ``lengths [B]`` -> per utterance its final hypotheses
    (at most ``beam``, in the search's order; raw scores). ``unk_id`` extends like blank; ``fold_unk_id``
    is folded into blank's logit by max first (``unk_as_blank="max"``).

    Raises:
        DecodingInputError: bad shapes / lengths / ids, ``beam < 1``, a TDT joint.
        NativeEngineUnavailable: no C++ compiler.
    """
    if w.durations:
        raise DecodingInputError("modified beam search is sherpa-onnx's RNN-T search; TDT joints are not supported")
    d, v = w.wenc.shape[1], w.vocab_size
    enc, lens = checked_inputs(encoder_output, d, lengths, beam, v, {"unk_id": unk_id, "fold_unk_id": fold_unk_id})
    b, t_max, _ = enc.shape
    proj_np = project_encoder_output(w, enc, lens)
    return in_groups(b, beam * t_max, _beam_call(w, proj_np, lens, t_max, beam, unk_id, fold_unk_id))


@torch.no_grad()
def modified_beam_stateless(w: StatelessJointWeights, encoder_output: torch.Tensor,
                            lengths: Optional[torch.Tensor | Sequence[int]] = None, *, beam: int = 4,
                            unk_id: Optional[int] = None, fold_unk_id: Optional[int] = None,
                            start_context: str = "blank") -> list[list[Hypothesis]]:
    """Projected encoder output ``[B, T, H]`` (icefall's ``encoder_out``) + ``lengths [B]`` -> per utterance
    its final hypotheses (raw scores, search order); ``start_context`` ``"blank"`` (``[blank] * C``) or
    ``"sherpa"`` (``[-1, ..., -1, blank]``); ``unk_id`` / ``fold_unk_id`` as in :func:`modified_beam_lstm`."""
    if start_context not in ("blank", "sherpa"):
        raise DecodingInputError(f"start_context must be 'blank' or 'sherpa', got {start_context!r}")
    h, v, c = w.wp.shape[0], w.vocab_size, w.context_size
    enc, lens = checked_inputs(encoder_output, h, lengths, beam, v, {"unk_id": unk_id, "fold_unk_id": fold_unk_id})
    b, t_max, _ = enc.shape
    start = np.full(c, w.blank_id, dtype=np.int32)
    if start_context == "sherpa":
        start[:-1] = -1
    call = _beam_call(w, enc.numpy(), lens, t_max, beam, unk_id, fold_unk_id, start)
    return in_groups(b, beam * t_max, call)


def native_modified_beam(model: Any, w: LstmJointWeights | StatelessJointWeights, encoder_output: torch.Tensor,
                         lengths: Optional[torch.Tensor | Sequence[int]], beam: int,
                         unk_id: Optional[int]) -> list[list[Hypothesis]]:
    """:func:`modified_beam_lstm` / :func:`modified_beam_stateless` of ``model``'s weights ``w`` (from
    :func:`~asrdecode.native.transducer_greedy_lstm.native_greedy_weights`) with the model's start
    context and ``<unk>`` fold: encoder output ``[B, T, D]`` as the model's ``project_encoder`` takes it."""
    fold = getattr(model, "unk_id", None) if getattr(model, "unk_as_blank", None) == "max" else None
    if isinstance(w, StatelessJointWeights):
        return modified_beam_stateless(w, encoder_output, lengths, beam=beam, unk_id=unk_id, fold_unk_id=fold,
                                       start_context=model.start_context)
    return modified_beam_lstm(w, encoder_output, lengths, beam=beam, unk_id=unk_id, fold_unk_id=fold)
