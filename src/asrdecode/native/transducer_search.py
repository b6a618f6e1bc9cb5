"""ALSD++ / AES++ / WIND beam search of whole utterances in one engine call per batch, with the prediction and
joint networks in C++ (``transducer_beam_net.cpp``).

The engine runs the whole search of :class:`~asrdecode.transducer.BeamSearchDecoder` (``method="alsd"`` /
``"aes"`` / ``"wind"``): the steps are the per-step engine's (:mod:`.transducer_beam`, :mod:`.transducer_wind`),
the networks those of the native greedy search (the weights
:func:`~.transducer_greedy_lstm.native_greedy_weights` reads and caches: an
:class:`~asrdecode.transducer.LSTMTransducer`, NeMo-layout ONNX LSTM RNN-T / TDT, icefall-layout stateless
ONNX RNN-T), the fusion models read natively (token n-gram LM, boosting trees, word LM). Hypotheses equal the
tensor engine's (tokens, timestamps, durations; scores to float32 rounding of the networks).

:func:`search_chunk` runs one chunk of streams the same way (one engine call per chunk): the carried
:class:`~asrdecode.transducer.BeamState` goes in (hypothesis arrays, the prediction network's rows as the
engine holds them: LSTM ``h, c`` per layer, a stateless decoder's context, the fusion states), the search
runs until no hypothesis can step without frames not received yet (the per-step path's rule), and the state
after it comes back as a ``BeamState`` in the model's own layout (``pred_state``, ``dec_proj``), the
chunk's tree records appended to its tree: chunked decoding equals whole-utterance decoding when each
utterance's last chunk is final, and the state moves freely between this path and the per-step one.

Both return ``None`` where this path does not apply (another model or dtype, a fusion model the engine
does not read, a prediction state of another layout); the caller then takes the per-step path.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Optional

import numpy as np
import torch

from ..errors import DecodingInputError
from ..recent import RecentValues
from ..results import Hypothesis
from ._lib import check_status, load
from .abi import FusionDesc, TransducerChunkArgs, TransducerNet, TransducerSearchArgs
from .ctc_beam import describe_fusion
from .transducer_greedy_lstm import (LstmJointWeights, StatelessJointWeights, lengths_int32, project_encoder_output,
                                     native_greedy_weights, net_struct)

__all__ = ["search", "search_chunk", "search_weights", "last_counts", "FULL_WINDOW_ENV"]

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


def _fusion(settings: Any, batch: int, fresh: bool = True) -> Optional[tuple[Any, torch.Tensor, int]]:
    """The fusion descriptors, the fresh hypotheses' states ``[B*S, M]`` (int64; ``S`` slots per utterance;
    not ``fresh``: ``[0, M]``, the caller has states) and ``M``; ``None`` when a model is not read natively."""
    scorer = settings.scorer
    fusion = scorer.fusion
    models = (FusionDesc * max(len(fusion), 1))()
    for i, (m, wt) in enumerate(fusion):
        if not describe_fusion(models[i], m, wt):
            return None
    if not fresh:
        return models, torch.zeros((0, len(fusion)), dtype=torch.int64), len(fusion)
    slots = _slots(settings)
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


#: abi.h's TransducerNet over the arrays of each live weights object, by its id (the weights are read-only; a
#: new read of the model is a new object; an entry goes with its object)
_NETS: dict[int, TransducerNet] = {}


def _net(w: LstmJointWeights | StatelessJointWeights) -> TransducerNet:
    """``net_struct(w)``, made once per weights object (a copy goes into each call's arguments)."""
    net = _NETS.get(id(w))
    if net is None:
        net = _NETS[id(w)] = net_struct(w)
        weakref.finalize(w, _NETS.pop, id(w), None)
    return net


#: the fields of TransducerSearchArgs that the weights, the model's ids and the settings fix, by those values
#: (weights by id, checked through a weak reference), with the arrays they point to: a call copies one
#: (a few microseconds less than filling every field) and fills its own (the last 32 kept)
_FIXED: RecentValues[tuple[Any, TransducerSearchArgs, tuple[np.ndarray, np.ndarray]]] = RecentValues(32)


def _fixed_args(model: Any, w: LstmJointWeights | StatelessJointWeights, settings: Any, rule: Any,
                symbol_guard: int, num_models: int) -> tuple[TransducerSearchArgs, tuple[np.ndarray, np.ndarray]]:
    """A fresh copy of the ``TransducerSearchArgs`` fields fixed by ``w``, ``model``'s ids and ``settings`` (the
    per-call ones zero), and the arrays it points to (durations, the stateless decoder's start context)."""
    fold, start = _fold_id(model, w), _start_context(model, w)
    lam = float(sum(settings.scorer.weights))
    # WIND: 1 reads the window lazily, 2 every frame (FULL_WINDOW_ENV)
    wind = (2 if os.environ.get(FULL_WINDOW_ENV) == "1" else 1) if settings.method == "wind" else 0
    key = (id(w), fold, start.tobytes(), settings.beam, settings.method, wind, settings.pruning, settings.blank_scoring,
           lam, settings.max_symbols, settings.window, settings.gamma, settings.beta, symbol_guard, num_models,
           tuple(rule.values), rule.tdt, rule.pack)
    hit = _FIXED.get(key)
    if hit is None or hit[0]() is not w:
        durations = np.asarray(rule.values, dtype=np.int64)
        args = TransducerSearchArgs(
            net=_net(w), beam=settings.beam, num_durations=len(rule.values), blank=w.blank_id, tdt=int(rule.tdt),
            aes=int(settings.method == "aes"), early=int(settings.pruning == "early"),
            lm_weighted=int(settings.blank_scoring == "lm_weighted" and lam != 0.0),
            max_symbols=-1 if settings.max_symbols is None else settings.max_symbols, symbol_guard=symbol_guard,
            num_models=num_models, pack=rule.pack, capacity=0, fold=fold, lam=lam, wind=wind,
            window=settings.window if wind else 0, has_gamma=int(settings.gamma is not None),
            gamma=0.0 if settings.gamma is None else float(settings.gamma), beta=float(settings.beta),
            durations=_addr(durations))
        args.net.start_ctx = _addr(start)  # (a copy of the cached net struct: this entry's field)
        hit = _FIXED.put(key, (weakref.ref(w), args, (durations, start)))
    return TransducerSearchArgs.from_buffer_copy(hit[1]), hit[2]


def _search_args(model: Any, w: LstmJointWeights | StatelessJointWeights, settings: Any, rule: Any,
                 enc: np.ndarray, lens: np.ndarray, init: torch.Tensor, models: Any, symbol_guard: int,
                 keep: list) -> TransducerSearchArgs:
    """abi.h's ``TransducerSearchArgs`` of a search of ``enc [B, T, H]`` (projected, float32) with ``lens [B]``
    (int64) frames and fresh fusion states ``init [B*S, M]``; the arrays it borrows are appended to ``keep``."""
    args, arrays = _fixed_args(model, w, settings, rule, symbol_guard, init.shape[1])
    keep += [*arrays, enc, lens, init, models]
    args.batch, args.frames = enc.shape[0], enc.shape[1]
    args.enc, args.lengths, args.init_states = _addr(enc), _addr(lens), init.data_ptr()
    args.models = models
    return args


def _call(fn: Any, args: Any) -> None:
    """Run the engine entry point ``fn`` on ``args``; its error as the named error."""
    err = getattr(_ERR, "buf", None) or ctypes.create_string_buffer(512)
    _ERR.buf = err
    rc = fn(ctypes.byref(args), err, len(err))
    if rc != 0:
        message = err.value.decode(errors="replace")
        check_status(rc, "native transducer beam search", message)
        raise DecodingInputError(f"native transducer beam search: {message}")


def _fits(model: Any, settings: Any, width: Optional[int]) -> Optional[tuple[Any, Any]]:
    """``(weights, duration rule)`` when the engine runs ``model`` with ``settings`` on encoder output of
    ``width`` features (None: projected frames, not checked), else None."""
    from ..transducer.durations import DurationRule

    w = search_weights(model)
    if w is None:
        return None
    rule = DurationRule.of(model)
    if settings.method == "wind" and rule.tdt:
        return None  # WIND is RNN-T only (the decoder refuses it before)
    if width is not None and width != (w.wenc.shape[1] if isinstance(w, LstmJointWeights) else w.wp.shape[0]):
        return None
    return w, rule


def _project(w: LstmJointWeights | StatelessJointWeights, encoder_output: torch.Tensor,
             lens32: np.ndarray) -> np.ndarray:
    """The engine's frames ``[B, T, H]`` (float32) of ``encoder_output [B, T, D]``: the joint's encoder
    projection by the engine's matrix product (LSTM weights), icefall's output as it is (projected already)."""
    if isinstance(w, LstmJointWeights):
        return project_encoder_output(w, encoder_output.detach().cpu().float(), lens32)
    return np.ascontiguousarray(encoder_output.detach().cpu().float().numpy())


def search(model: Any, settings: Any, encoder_output: torch.Tensor, lengths: torch.Tensor, nbest: int,
           symbol_guard: int) -> Optional[list[list[Hypothesis]]]:
    """The n-best lists of whole utterances ``encoder_output [B, T, D]`` (checked; as the model's
    ``project_encoder`` takes it) with ``lengths [B]``, searched with ``settings``
    (:class:`~asrdecode.transducer.beam_loop.SearchSettings`) in one engine call; ``None`` where this path
    does not apply. ``symbol_guard``: without a label cap, more labels than this on one frame is the
    runaway error."""
    from ..transducer import _checks

    if encoder_output.dtype != torch.float32:
        return None
    fit = _fits(model, settings, encoder_output.shape[2])
    if fit is None:
        return None
    w, rule = fit
    fusion = _fusion(settings, encoder_output.shape[0])
    if fusion is None:
        return None
    models, init, _ = fusion
    B, T, _ = encoder_output.shape
    if B == 0:
        return []
    lens32 = lengths_int32(lengths, B, T)
    keep: list = []
    args = _search_args(model, w, settings, rule, _project(w, encoder_output, lens32), lens32.astype(np.int64), init,
                        models, symbol_guard, keep)
    S = _slots(settings)
    cap = max(16, T * (settings.max_symbols or 4))
    while True:
        args.capacity = cap
        # written by the engine: every score and length, the labels up to each length (not zeroed: the label
        # arrays are large and mostly unread)
        out_score = np.empty((B, S), np.float32)
        out_len = np.empty((B, S), np.int64)
        out_tok = np.empty((B, S, cap), np.int64)
        out_dat = np.empty((B, S, cap), np.int64)
        counts = np.zeros(4, np.int64)
        args.out_score, args.out_len = _addr(out_score), _addr(out_len)
        args.out_tok, args.out_dat, args.counts = _addr(out_tok), _addr(out_dat), _addr(counts)
        _call(load().asrd_transducer_beam_search, args)
        _ERR.counts = {"steps": int(counts[0]), "joint_rows": int(counts[3])}
        if counts[2]:
            raise _checks.runaway_error()
        if counts[1] <= cap:
            break
        cap = int(counts[1])  # a hypothesis longer than the outputs held: once more with room for it
    return _hypotheses(out_score, out_len, out_tok, out_dat, rule, min(nbest, settings.beam))


def _slots(settings: Any) -> int:
    """Hypothesis slots per utterance: the beam, WIND its ring of ``window + 1`` frame lists of it."""
    return (settings.window + 1) * settings.beam if settings.method == "wind" else settings.beam


def search_chunk(model: Any, settings: Any, state: Any, frames: torch.Tensor, lengths: torch.Tensor,
                 final: torch.Tensor, symbol_guard: int, *, projected: bool = False) -> Any:
    """One chunk of ``B`` streams in one engine call: ``frames [B, T, D]`` (encoder output as the model's
    ``project_encoder`` takes it; ``projected``: as it gives them, the state's tail frames) with
    ``lengths [B]`` valid frames, ``final [B]`` (the chunk ends those utterances), from ``state`` (a
    :class:`~asrdecode.transducer.BeamState`; None: fresh streams). Returns the state after the chunk (the
    passed one is consumed: its tree is extended), or ``None`` where this path does not apply."""
    from ..transducer import _checks
    from ..transducer.beam_state import chunk_buffer

    B = frames.shape[0]
    if frames.dtype != torch.float32 or frames.device.type != "cpu" or B == 0:
        return None
    fit = _fits(model, settings, None if projected else frames.shape[2])
    fusion = None if fit is None else _fusion(settings, B, fresh=state is None)
    if fit is None or fusion is None:
        return None
    w, rule = fit
    models, init, M = fusion
    S, H = _slots(settings), w.wdec.shape[0] if isinstance(w, LstmJointWeights) else w.wp.shape[0]
    carried = _carried_arrays(w, state, B * S, M)
    if carried is None and (state is not None or not _fresh_layout(model, w)):
        return None
    if carried is not None:
        init = torch.from_numpy(carried["lm_states"])  # (the engine reads the carried states)
    # the state's tail holds the frames as the model's project_encoder gives them; the engine reads the joint's
    # projection of the encoder output: the same frames (an LSTMTransducer's projection, made by the engine;
    # icefall: projected already), or (NeMo: project_encoder is the identity, the joint projects) the
    # buffer of encoder frames projected by the engine (each row as the whole-utterance call projects it)
    later = _projects_buffer(model, w)
    if projected or later:
        x = frames
    else:
        x = torch.from_numpy(_project(w, frames, lengths_int32(lengths, B, frames.shape[1])))
    buf, buf_len, offset, received = chunk_buffer(x, lengths, state)
    enc = (_project(w, buf, lengths_int32(buf_len, B, buf.shape[1])) if later
           else np.ascontiguousarray(buf.numpy()))
    keep: list = []
    args = _search_args(model, w, settings, rule, enc, buf_len.numpy().astype(np.int64), init, models,
                        symbol_guard, keep)
    hyps = carried if carried is not None else _fresh_arrays(w, B * S, M)
    off = np.ascontiguousarray(offset.numpy(), dtype=np.int64)
    fin = np.ascontiguousarray(final.numpy(), dtype=np.uint8)
    g = np.empty((B * S, H), np.float32)
    counts = np.zeros(4, np.int64)  # steps, longest, runaway, joint rows
    args.counts = _addr(counts)
    room = record_room(enc.shape[1], settings.max_symbols)
    while True:
        records = np.empty((room, 3, B * S), np.int64)
        chunk = TransducerChunkArgs(search=args, carried=int(carried is not None), offset=_addr(off),
                                    final_chunk=_addr(fin), pred_g=_addr(g), records=_addr(records),
                                    record_capacity=room, **{k: _addr(v) for k, v in hyps.items()})
        _call(load().asrd_transducer_beam_chunk, chunk)
        if counts[2]:
            raise _checks.runaway_error()
        steps = int(counts[0])
        if steps <= room:
            break
        room = steps  # more steps than the records held: once more with room for them (nothing was written)
    return _state_after(model, settings, state, hyps, g, records[:steps], buf, buf_len, offset, received, B, S)


def record_room(frames: int, max_symbols: Optional[int]) -> int:
    """Steps a chunk of ``frames`` frames gets tree-record room for at first (a chunk that takes more steps is
    searched again with room for them): a few steps per frame and label."""
    return max(64, 4 * (frames + 1) * (1 + (max_symbols or 2)))


def _projects_buffer(model: Any, w: LstmJointWeights | StatelessJointWeights) -> bool:
    """Whether the engine projects the encoder frames that the model's ``project_encoder`` passes as they are
    (a NeMo-layout model: its joint projects them), so a chunk's buffer is projected after it is assembled."""
    from ..transducer.model import LSTMTransducer

    return isinstance(w, LstmJointWeights) and not isinstance(model, LSTMTransducer)


def _fresh_layout(model: Any, w: LstmJointWeights | StatelessJointWeights) -> bool:
    """Whether ``model``'s prediction state is the engine's rows: LSTM ``(h, c)`` ``[L, N, P]``, or a stateless
    decoder's ``(context,)`` only."""
    st = model.initial_state(1)
    if isinstance(w, LstmJointWeights):
        L, P = w.wup.shape[0] + 1, w.whh0.shape[1]
        return isinstance(st, tuple) and len(st) == 2 and all(tuple(x.shape) == (L, 1, P) for x in st)
    return isinstance(st, tuple) and len(st) == 1 and tuple(st[0].shape) == (1, w.context_size)


def _fresh_arrays(w: LstmJointWeights | StatelessJointWeights, N: int, M: int) -> dict[str, np.ndarray]:
    """Room for the state the engine writes after a fresh chunk (``N`` slots, ``M`` fusion models)."""
    out = {name: np.empty(N, np.int64) for name in ("time", "symbols", "hash", "nlabels", "last")}
    out["score"] = np.empty(N, np.float32)
    out["lm_states"] = np.empty((N, M), np.int64)
    if isinstance(w, LstmJointWeights):
        L, P = w.wup.shape[0] + 1, w.whh0.shape[1]
        out["pred_h"], out["pred_c"] = np.empty((N, L, P), np.float32), np.empty((N, L, P), np.float32)
    else:
        out["pred_ctx"] = np.empty((N, w.context_size), np.int32)
    return out


def _carried_arrays(w: LstmJointWeights | StatelessJointWeights, state: Any, N: int,
                    M: int) -> Optional[dict[str, np.ndarray]]:
    """The engine's copies of ``state``'s hypotheses (``N`` slots, ``M`` fusion models; written back in place
    by the call), or ``None``: no state, or one the engine does not read (another dtype, device or layout)."""
    if state is None:
        return None
    hyps = state.hyps
    if hyps["score"].dtype != torch.float32 or hyps["score"].device.type != "cpu" or hyps["score"].numel() != N \
            or tuple(hyps["lm_states"].shape) != (N, M) or any(t.dtype != torch.float32 for t in state.tail):
        return None
    out = {name: np.array(hyps[name].reshape(-1).numpy(), dtype=np.int64) for name in
           ("time", "symbols", "hash", "nlabels", "last")}
    out["score"] = np.array(hyps["score"].reshape(-1).numpy(), dtype=np.float32)
    out["lm_states"] = np.array(hyps["lm_states"].numpy(), dtype=np.int64)
    pred = hyps["pred_state"]
    if isinstance(w, LstmJointWeights):
        L, P = w.wup.shape[0] + 1, w.whh0.shape[1]
        if not (isinstance(pred, tuple) and len(pred) == 2 and all(tuple(x.shape) == (L, N, P) for x in pred)):
            return None
        out["pred_h"], out["pred_c"] = (np.ascontiguousarray(x.detach().float().permute(1, 0, 2).numpy())
                                        for x in pred)
    else:
        if not (isinstance(pred, tuple) and len(pred) == 1 and tuple(pred[0].shape) == (N, w.context_size)):
            return None
        out["pred_ctx"] = np.ascontiguousarray(pred[0].numpy(), dtype=np.int32)
    return out


def _state_after(model: Any, settings: Any, state: Any, hyps: dict[str, np.ndarray], g: np.ndarray,
                 records: np.ndarray, buf: torch.Tensor, buf_len: torch.Tensor, offset: torch.Tensor,
                 received: torch.Tensor, B: int, S: int) -> Any:
    """The :class:`~asrdecode.transducer.BeamState` after a chunk from the engine's arrays ``hyps`` (its rows of
    the prediction network, in the model's layout: ``pred_state`` and ``dec_proj``, as ``model.predict`` /
    ``project_decoder`` give them), the prediction outputs ``g [B*S, H]`` and the chunk's tree ``records
    [steps, 3, B*S]``."""
    from ..beam_hyps import BeamTree
    from ..transducer.beam_state import state_after
    from ..transducer.model import LSTMTransducer

    t = {k: torch.from_numpy(v) for k, v in hyps.items()}
    out: dict[str, Any] = {name: t[name].view(B, S) for name in ("score", "time", "symbols", "hash", "nlabels", "last")}
    out["lm_states"] = t["lm_states"]
    g_t = torch.from_numpy(g)
    if "pred_h" in t:  # LSTM: the model's (h, c) [L, N, P]; its output is the top layer's h
        h, c = t["pred_h"].permute(1, 0, 2).contiguous(), t["pred_c"].permute(1, 0, 2).contiguous()
        out["pred_state"] = (h, c)
        # an LSTMTransducer's project_decoder is the joint's decoder layer, the engine's g to float rounding (no
        # product here); NeMo's joint projects itself (project_decoder: the identity of the output)
        out["dec_proj"] = g_t if isinstance(model, LSTMTransducer) else model.project_decoder(h[-1])
    else:  # stateless: the model's (context,); its output is the engine's g (project_decoder: the identity)
        out["pred_state"], out["dec_proj"] = (t["pred_ctx"].long(),), model.project_decoder(g_t)
    tree = state.tree if state is not None else BeamTree()
    if len(records):  # the steps appended as the per-step path records them (a list tree stays one)
        rec = torch.from_numpy(records.copy()).view(len(records), 3, B, S)
        tree.extend(BeamTree(*(list(rec[:, i].unbind(0)) for i in range(3))))
    return state_after(out, tree, buf, buf_len, offset, received, settings.config)


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
