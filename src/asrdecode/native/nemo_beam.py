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
from .modified_beam import _check_rc, _checked, _f, _fn, _hypotheses, _i, _outputs, in_groups
from .transducer_greedy_lstm import ACTS, LstmJointWeights, _project

__all__ = ["nemo_beam_lstm"]

_F = ctypes.POINTER(ctypes.c_float)
_IP = ctypes.POINTER(ctypes.c_int)
_DP = ctypes.POINTER(ctypes.c_double)
_TYPES = ([_F, _IP, ctypes.c_int, ctypes.c_int, ctypes.c_int, _F, _F, ctypes.c_int, ctypes.c_int, _F, _F, _F, _F, _F,
           _F] + [ctypes.c_int] * 4 + [_IP] + [ctypes.c_int] * 3 + [_IP, _IP, _DP, _IP, _IP, _IP])


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
    enc, lens = _checked(encoder_output, d, lengths, beam, v, {"unk_id": unk_id})
    b, t_max, _ = enc.shape
    if t_max * max_symbols * beam >= 2 ** 31:
        raise DecodingInputError("T * max_symbols * beam must be < 2^31 (an utterance's output buffers)")
    h = w.wenc.shape[0]
    proj_np = _project(w, enc, lens)
    durs = np.array(w.durations or [0], dtype=np.int32)
    maxlen = t_max * max_symbols
    fn = _fn("asr_lstm_nemo_beam", _TYPES)

    def call(lo: int, hi: int) -> list[list[Hypothesis]]:
        out = _outputs(hi - lo, beam, maxlen, durations=True)
        rc = fn(_f(np.ascontiguousarray(proj_np[lo:hi])), _i(lens[lo:hi]), hi - lo, t_max, h, _f(w.table),
                _f(w.whh0), w.whh0.shape[1], w.wup.shape[0] + 1, _f(w.wup), _f(w.bup), _f(w.wdec), _f(w.bdec),
                _f(w.wout), _f(w.bout), ACTS.index(w.act), w.blank_id, v, len(w.durations or []), _i(durs),
                -1 if unk_id is None else unk_id, max_symbols, beam,
                _i(out[0]), _i(out[1]), out[2].ctypes.data_as(_DP), _i(out[3]), _i(out[4]), _i(out[5]))
        _check_rc(rc, "the native NeMo beam search")
        return _hypotheses(out, hi - lo, beam, maxlen, durations=bool(w.durations))

    return in_groups(b, beam * maxlen, call)
