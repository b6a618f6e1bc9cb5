"""sherpa-onnx's NeMo modified beam search with the LSTM prediction network and the joint run in C++
(transducer_nemo_beam.cpp): the same search as :func:`asrdecode.models.sherpa_nemo_search.nemo_beam_search`
(frame-asynchronous, each hypothesis's top ``beam`` tokens, TDT's best duration only, a cap of
``max_symbols`` labels a frame, ``std::partial_sort`` of the candidates, sherpa-onnx's float32
log-softmax), one C++ call per batch, utterance after utterance.

Weights: :class:`~asrdecode.native.transducer_greedy_lstm.LstmJointWeights` (NeMo-layout ONNX files,
:class:`~asrdecode.transducer.LSTMTransducer`), from
:func:`~asrdecode.native.transducer_greedy_lstm.native_greedy_weights`. The encoder projection is the
engine's matrix product over the valid frames before the call. Hypotheses equal the Python search's; scores to float rounding
(the networks' arithmetic differs from onnxruntime's / torch's in the last bits).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError
from ..results import Hypothesis
from .abi import NetSearchArgs
from ._lib import load
from .modified_beam import check_rc, checked_inputs, hypotheses_from_outputs, output_buffers, in_groups
from .transducer_greedy_lstm import LstmJointWeights, project_encoder_output, net_struct

__all__ = ["nemo_beam_lstm"]



@torch.no_grad()
def nemo_beam_lstm(w: LstmJointWeights, encoder_output: torch.Tensor,
                   lengths: Optional[torch.Tensor | Sequence[int]] = None, *, beam: int = 4,
                   unk_id: Optional[int] = None, max_symbols: int = 10) -> list[list[Hypothesis]]:
    """Encoder output ``[B, T, D]`` (not projected) + ``lengths [B]`` -> per utterance its final hypotheses
    (at most ``beam``, best first by raw score; TDT: with ``durations``). ``unk_id`` extends like blank.

    Raises:
        DecodingInputError: bad shapes / lengths / ids, ``beam < 1``, ``max_symbols < 1``, NaN / inf frames.
        NativeEngineUnavailable: no C++ compiler.
    """
    if not isinstance(max_symbols, int) or isinstance(max_symbols, bool) or max_symbols < 1:
        raise DecodingInputError(f"max_symbols must be an int >= 1, got {max_symbols!r}")
    d, v = w.wenc.shape[1], w.vocab_size
    enc, lens = checked_inputs(encoder_output, d, lengths, beam, v, {"unk_id": unk_id})
    b, t_max, _ = enc.shape
    if t_max * max_symbols * beam >= 2 ** 31:
        raise DecodingInputError("T * max_symbols * beam must be < 2^31 (an utterance's output buffers)")
    proj_np = project_encoder_output(w, enc, lens)
    durs = np.array(w.durations or [0], dtype=np.int32)
    maxlen = t_max * max_symbols
    fn = load().asrd_nemo_beam

    def call(lo: int, hi: int) -> list[list[Hypothesis]]:
        out = output_buffers(hi - lo, beam, maxlen, durations=True)
        enc_part, lens_part = np.ascontiguousarray(proj_np[lo:hi]), np.ascontiguousarray(lens[lo:hi])
        args = NetSearchArgs(
            net=net_struct(w), batch=hi - lo, frames=t_max, blank=w.blank_id, unk=-1 if unk_id is None else unk_id,
            max_symbols=max_symbols, beam=beam, num_durations=len(w.durations or []), enc=enc_part.ctypes.data,
            lengths=lens_part.ctypes.data, durations=durs.ctypes.data, out_n=out[0].ctypes.data,
            out_len=out[1].ctypes.data, out_score=out[2].ctypes.data, out_tokens=out[3].ctypes.data,
            out_frames=out[4].ctypes.data, out_durs=out[5].ctypes.data)
        rc = fn(ctypes.byref(args))
        check_rc(rc, "the native NeMo beam search")
        return hypotheses_from_outputs(out, hi - lo, beam, maxlen, durations=bool(w.durations))

    return in_groups(b, beam * maxlen, call)
