"""Greedy RNN-T / TDT decoding with the LSTM prediction network and the joint run in C++
(transducer_greedy_lstm.cpp): no Python, torch or onnxruntime call per step.

Fits the common shapes: an L-layer LSTM prediction network over an embedding, a joint
``W_out act(W_enc e + b_enc + W_dec h + b_dec) + b_out`` with ``act`` tanh or relu. Weights come from
an :class:`~asrdecode.transducer.LSTMTransducer` (:func:`weights_from_lstm_transducer`) or from the
initializers of a NeMo-layout ``decoder.onnx`` / ``joiner.onnx`` (:func:`weights_from_nemo_onnx`; ``None``
when the graphs do not have that shape). The encoder projection is one matrix product (the engine's,
over the valid frames) before the loop. Decisions equal :func:`asrdecode.transducer.greedy`'s (same
tokens, frames, durations; scores to float rounding). CPU, one C++ call per batch; a hypothesis never
depends on the batch it was decoded in (scores included). The kernels and the frame blocking:
``native/dense.cpp``, ``native/transducer_greedy_lstm.cpp``.
"""

from __future__ import annotations

import ctypes
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from .._validation import weights_versions
from ..configs import MaxSymbolsSetting, default_of
from ..errors import DecodingInputError
from ..results import Hypothesis
from ._lib import check_status, load
from .abi import NetSearchArgs, TransducerNet

__all__ = ["LstmJointWeights", "weights_from_lstm_transducer", "weights_from_nemo_onnx", "greedy_lstm",
           "StatelessJointWeights", "weights_from_icefall_onnx", "greedy_stateless", "native_greedy_weights",
           "native_greedy"]

ACTS = ("tanh", "relu")

#: the greedy searches' cap (the config's, :class:`~asrdecode.configs.MaxSymbolsSetting`)
_MAX_SYMBOLS: Optional[int] = default_of(MaxSymbolsSetting, "max_symbols")


@dataclass
class LstmJointWeights:
    """float32 contiguous arrays (``V`` labels incl. blank, ``P`` LSTM width, ``L`` layers, ``D`` encoder
    width, ``H`` joint width, ``O = V (+K)`` outputs): ``table [V, 4P]`` (first layer's input projection +
    both biases per label), ``whh0 [4P, P]``, ``wup [L-1, 4P, 2P]``, ``bup [L-1, 4P]``, ``wenc [H, D]``,
    ``benc [H]``, ``wdec [H, P]``, ``bdec [H]``, ``wout [O, H]``, ``bout [O]``; gates in torch's order i, f, g, o."""

    table: np.ndarray
    whh0: np.ndarray
    wup: np.ndarray
    bup: np.ndarray
    wenc: np.ndarray
    benc: np.ndarray
    wdec: np.ndarray
    bdec: np.ndarray
    wout: np.ndarray
    bout: np.ndarray
    act: str
    blank_id: int
    vocab_size: int
    durations: Optional[list[int]] = None

    def __post_init__(self) -> None:
        for name in ("table", "whh0", "wup", "bup", "wenc", "benc", "wdec", "bdec", "wout", "bout"):
            setattr(self, name, np.array(getattr(self, name), dtype=np.float32, order="C"))
        v, g = self.table.shape
        p = g // 4
        o = self.vocab_size + (len(self.durations) if self.durations else 0)
        ok = (v == self.vocab_size and g == 4 * p and self.whh0.shape == (g, p) and self.wup.shape[1:] == (g, 2 * p)
              and self.bup.shape == (self.wup.shape[0], g) and self.wdec.shape[1] == p
              and self.wenc.shape[0] == self.wdec.shape[0] == self.wout.shape[1] and self.wout.shape[0] == o
              and self.bout.shape == (o,) and self.act in ACTS and 0 <= self.blank_id < v)
        if not ok:
            raise DecodingInputError("LstmJointWeights: inconsistent shapes (see the class docstring)")


def weights_from_lstm_transducer(t: Any) -> LstmJointWeights:
    """An :class:`~asrdecode.transducer.LSTMTransducer`'s weights (tanh joint)."""
    with torch.no_grad():
        p = t.pred_dim

        def ifgo(w: torch.Tensor) -> torch.Tensor:  # gate columns (i, f, o, g) of the step weights -> nn.LSTM's (i, f, g, o)
            return torch.cat([w[..., : 2 * p], w[..., 3 * p :], w[..., 2 * p : 3 * p]], dim=-1)

        table, whh0, upper = t._step_weights()
        table, whh0, upper = ifgo(table), ifgo(whh0), [(ifgo(w), ifgo(b)) for w, b in upper]
        wup = torch.stack([w.t() for w, _ in upper]) if upper else torch.zeros(0, 4 * p, 2 * p)
        bup = torch.stack([b for _, b in upper]) if upper else torch.zeros(0, 4 * p)
        return LstmJointWeights(table.numpy(), whh0.t().numpy(), wup.numpy(), bup.numpy(),
                                t.enc_proj.weight.numpy(), t.enc_proj.bias.numpy(), t.dec_proj.weight.numpy(),
                                t.dec_proj.bias.numpy(), t.joint_out.weight.numpy(), t.joint_out.bias.numpy(),
                                "tanh", t.blank_id, t.vocab_size, t.durations)


def _ancestors(graph: Any, name: str, producers: dict[str, Any]) -> set[str]:
    seen, stack = set(), [name]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        node = producers.get(n)
        if node is not None:
            stack.extend(node.input)
    return seen


def weights_from_nemo_onnx(decoder: str | Path, joiner: str | Path, blank_id: int, vocab_size: int,
                           durations: Optional[Sequence[int]] = None) -> Optional[LstmJointWeights]:
    """Weights read from NeMo-layout ONNX graphs (embedding ``Gather`` + ``LSTM`` nodes; joiner
    ``MatMul`` / ``Gemm`` + bias ``Add`` with one ``Tanh`` or ``Relu``); ``None`` when they have another shape."""
    import onnx
    from onnx import numpy_helper

    try:
        dec, joi = onnx.load(str(decoder)), onnx.load(str(joiner))
    except Exception:  # unreadable graphs: the onnxruntime path reports them
        return None
    init = {i.name: numpy_helper.to_array(i) for i in dec.graph.initializer}
    emb = [init[n.input[0]] for n in dec.graph.node if n.op_type == "Gather" and n.input[0] in init
           and init[n.input[0]].ndim == 2]
    lstms = [n for n in dec.graph.node if n.op_type == "LSTM"]
    if len(emb) != 1 or not lstms or any(len(n.input) < 4 or n.input[1] not in init or n.input[2] not in init
                                         or n.input[3] not in init for n in lstms):
        return None
    def order(a: np.ndarray) -> np.ndarray:  # gate blocks iofc -> ifgo
        return np.concatenate([a[0:1], a[2:3], a[3:4], a[1:2]]).reshape(-1, *a.shape[2:])

    layers = []
    for n in lstms:
        w, r, b = init[n.input[1]][0], init[n.input[2]][0], init[n.input[3]][0]
        p = r.shape[1]
        w4, r4 = order(w.reshape(4, p, -1)), order(r.reshape(4, p, p))
        bias = order(b[: 4 * p].reshape(4, p, 1)).reshape(-1) + order(b[4 * p:].reshape(4, p, 1)).reshape(-1)
        layers.append((w4, r4, bias))
    e = emb[0]
    if e.shape[0] != vocab_size or layers[0][0].shape[1] != e.shape[1]:
        return None
    table = e @ layers[0][0].T + layers[0][2]
    p = layers[0][1].shape[1]
    wup = np.stack([np.concatenate([w, r], axis=1) for w, r, _ in layers[1:]]) if len(layers) > 1 \
        else np.zeros((0, 4 * p, 2 * p), np.float32)
    bup = np.stack([b for _, _, b in layers[1:]]) if len(layers) > 1 else np.zeros((0, 4 * p), np.float32)
    # the joiner: classify each matrix by which graph input it reads
    g = joi.graph
    jinit = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    enc_in, dec_in = g.input[0].name, g.input[1].name
    acts = [n.op_type for n in g.node if n.op_type in ("Tanh", "Relu")]
    if len(acts) != 1:
        return None
    mats: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for n in g.node:
        if n.op_type not in ("MatMul", "Gemm") or n.input[1] not in jinit:
            continue
        w = jinit[n.input[1]]
        if n.op_type == "Gemm":
            attrs = {a.name: a.i for a in n.attribute}
            w = w.T if attrs.get("transB", 0) else w
            bias = jinit.get(n.input[2]) if len(n.input) > 2 else None
        else:
            adds = [m for m in g.node if m.op_type == "Add" and n.output[0] in m.input]
            bias = next((jinit[x] for m in adds for x in m.input if x in jinit), None)
        if bias is None:
            bias = np.zeros(w.shape[1], np.float32)
        up = _ancestors(g, n.input[0], producers)
        role = "out" if enc_in in up and dec_in in up else "enc" if enc_in in up else "dec" if dec_in in up else None
        if role is None or role in mats:
            return None
        mats[role] = (w.T, bias.reshape(-1))
    if set(mats) != {"enc", "dec", "out"}:
        return None
    try:
        return LstmJointWeights(table, layers[0][1], wup, bup, *mats["enc"], *mats["dec"], *mats["out"],
                                acts[0].lower(), blank_id, vocab_size, list(durations) if durations else None)
    except DecodingInputError:
        return None


# array arguments go as addresses (c_void_p): a cast per argument would cost about a microsecond each,
# per call; the arrays are float32 / int32 / float64 C-contiguous as each function's comment says


def _f(a: np.ndarray) -> int:
    return a.ctypes.data


@torch.no_grad()
def greedy_lstm(w: LstmJointWeights, encoder_output: torch.Tensor, lengths: Optional[torch.Tensor | Sequence[int]] = None,
                max_symbols: Optional[int] = _MAX_SYMBOLS) -> list[Hypothesis]:
    """Encoder output ``[B, T, D]`` (not projected) + ``lengths [B]`` -> one greedy hypothesis per utterance.

    Raises:
        DecodingInputError: bad shapes / lengths or ``max_symbols`` < 1.
        NativeEngineUnavailable: no C++ compiler.
    """
    if not isinstance(encoder_output, torch.Tensor) or encoder_output.dim() != 3 \
            or encoder_output.shape[2] != w.wenc.shape[1]:
        raise DecodingInputError(f"encoder_output must be a tensor [B, T, {w.wenc.shape[1]}]")
    if max_symbols is not None and (not isinstance(max_symbols, int) or max_symbols < 1):
        raise DecodingInputError(f"max_symbols must be an int >= 1 or None, got {max_symbols!r}")
    b, t_max, _ = encoder_output.shape
    lens32 = lengths_int32(lengths, b, t_max)
    proj = project_encoder_output(w, encoder_output.detach().cpu().float(), lens32)
    fn = load().asrd_transducer_greedy
    dur = np.asarray(w.durations or [0], dtype=np.int32)
    k = len(w.durations) if w.durations else 0
    cap = max(16, t_max * (max_symbols or 64))
    while True:  # one C++ call decodes the batch (joint and prediction network batched per step)
        tok, fr, du = (np.zeros((b, cap), np.int32) for _ in range(3))
        counts, scores = np.zeros(b, np.int32), np.zeros(b, np.float64)
        args = NetSearchArgs(
            net=net_struct(w), batch=b, frames=t_max, blank=w.blank_id, unk=-1, max_symbols=max_symbols or 0,
            num_durations=k, capacity=cap, enc=_f(proj), lengths=lens32.ctypes.data, durations=dur.ctypes.data,
            out_tokens=tok.ctypes.data, out_frames=fr.ctypes.data, out_durs=du.ctypes.data,
            counts=counts.ctypes.data, scores=scores.ctypes.data)
        got = fn(ctypes.byref(args))
        check_status(got, "the native greedy search")
        if got >= 0:
            break
        cap *= 4  # -1: an utterance needs more than cap labels
    return [Hypothesis(tok[i, :n].tolist(), fr[i, :n].tolist(), float(scores[i]), du[i, :n].tolist() if k else None)
            for i, n in enumerate(counts.tolist())]


def lengths_int32(lengths: Optional[torch.Tensor | Sequence[int]], b: int, t_max: int) -> np.ndarray:
    """``lengths`` (``None``: all ``t_max``) as int32 ``[b]``, checked in ``0..t_max`` (numpy: a few
    microseconds a call, where the tensor checks took tens)."""
    if lengths is None:
        return np.full(b, t_max, np.int32)
    got = np.asarray(lengths.detach().cpu() if isinstance(lengths, torch.Tensor) else lengths)
    if got.ndim != 1 or got.dtype.kind not in "iu":
        raise DecodingInputError(f"lengths must be 1-D integers [{b}], got dtype {got.dtype}, shape {got.shape}")
    if got.size != b or (got.size and (got.min() < 0 or got.max() > t_max)):
        raise DecodingInputError(f"lengths must be {b} values in 0..{t_max}")
    return got.astype(np.int32)


def project_encoder_output(w: LstmJointWeights, enc: torch.Tensor, lens: np.ndarray) -> np.ndarray:
    """The joint's encoder projection ``[B, T, H]`` of ``enc [B, T, D]`` by the engine's matrix product
    (each frame's row the same whatever the batch), over the frames within ``lens`` only (padding rows
    stay zero, never read)."""
    b, t_max, d = enc.shape
    h = w.wenc.shape[0]
    full = not lens.size or int(lens.min()) == t_max  # every frame valid (one clip): no row selection
    valid = None if full else (np.arange(t_max)[None, :] < lens[:, None]).reshape(-1)
    rows = np.ascontiguousarray(enc.reshape(-1, d).numpy() if valid is None else enc.reshape(-1, d).numpy()[valid])
    got = np.empty((len(rows), h), np.float32)
    load().asrd_dense_matmat(_f(w.wenc), _f(w.benc), _f(rows), len(rows), h, d, _f(got))
    if valid is None:
        return got.reshape(b, t_max, h)
    out = np.zeros((b * t_max, h), np.float32)
    out[valid] = got
    return out.reshape(b, t_max, h)


def net_struct(w: "LstmJointWeights | StatelessJointWeights") -> TransducerNet:
    """abi.h's ``TransducerNet`` over ``w``'s arrays (borrowed: ``w`` must outlive the call)."""
    if isinstance(w, LstmJointWeights):
        return TransducerNet(
            kind=0, hidden=w.wdec.shape[0], vocab=w.vocab_size, outputs=w.wout.shape[0], act=ACTS.index(w.act),
            pred_dim=w.whh0.shape[1], pred_layers=w.wup.shape[0] + 1, table=_f(w.table), whh0=_f(w.whh0),
            wup=_f(w.wup), bup=_f(w.bup), wdec=_f(w.wdec), bdec=_f(w.bdec), wout=_f(w.wout), bout=_f(w.bout))
    return TransducerNet(
        kind=1, hidden=w.wp.shape[0], vocab=w.vocab_size, outputs=w.wout.shape[0], act=0, embed_dim=w.emb.shape[1],
        groups=w.groups, context=w.context_size, emb=_f(w.emb), convw=_f(w.convw),
        convb=_f(w.convb) if w.convb is not None else None, wp=_f(w.wp), bp=_f(w.bp), wout=_f(w.wout),
        bout=_f(w.bout))


# ------------------------------------------------------------------------------ stateless (icefall) decoders
@dataclass
class StatelessJointWeights:
    """icefall's stateless decoder + tanh joint, float32: ``emb [V, E]``, ``convw [E, E/G, C]`` (grouped
    conv over the ``C`` context labels, ``groups`` G), ``convb [E]`` or None, ``wp [H, E]``, ``bp [H]``
    (decoder projection), ``wout [V, H]``, ``bout [V]``. The encoder output is already projected."""

    emb: np.ndarray
    convw: np.ndarray
    convb: Optional[np.ndarray]
    groups: int
    wp: np.ndarray
    bp: np.ndarray
    wout: np.ndarray
    bout: np.ndarray
    blank_id: int
    vocab_size: int

    def __post_init__(self) -> None:
        for name in ("emb", "convw", "wp", "bp", "wout", "bout"):
            setattr(self, name, np.array(getattr(self, name), dtype=np.float32, order="C"))
        if self.convb is not None:
            self.convb = np.array(self.convb, dtype=np.float32, order="C")
        v, e = self.emb.shape
        ok = (v == self.vocab_size and self.groups >= 1 and e % self.groups == 0
              and self.convw.shape[:2] == (e, e // self.groups) and self.wp.shape[1] == e
              and self.wout.shape == (v, self.wp.shape[0]) and self.bout.shape == (v,) and 0 <= self.blank_id < v
              and (self.convb is None or self.convb.shape == (e,)))
        if not ok:
            raise DecodingInputError("StatelessJointWeights: inconsistent shapes (see the class docstring)")

    @property
    def context_size(self) -> int:
        return int(self.convw.shape[2])

    def decoder_out(self, ctx: np.ndarray) -> np.ndarray:
        """numpy reference of the decoder: ``ctx [N, C]`` int -> ``[N, H]`` (``-1`` embeds as zeros)."""
        x = np.where((ctx >= 0)[..., None], self.emb[np.clip(ctx, 0, None)], 0.0).astype(np.float32)  # [N, C, E]
        e, per = self.emb.shape[1], self.emb.shape[1] // self.groups
        xg = x.transpose(0, 2, 1).reshape(len(ctx), self.groups, per, -1)  # [N, G, per, C]
        w = self.convw.reshape(self.groups, per, per, -1)  # [G, out, in, C]
        mid = np.einsum("ngic,goic->ngo", xg, w).reshape(len(ctx), e)
        if self.convb is not None:
            mid = mid + self.convb
        return np.maximum(mid, 0) @ self.wp.T + self.bp


def weights_from_icefall_onnx(decoder: str | Path, joiner: str | Path, blank_id: int, vocab_size: int,
                              context_size: int) -> Optional[StatelessJointWeights]:
    """Weights of an icefall stateless ``decoder.onnx`` (``Gather`` embedding, grouped ``Conv``, ``Relu``,
    ``MatMul``/``Gemm`` projection) and ``joiner.onnx`` (``Tanh``, one ``MatMul``/``Gemm``); checked
    against onnxruntime on a few contexts (``-1`` included). ``None`` when the graphs are another shape."""
    import onnx
    from onnx import numpy_helper

    try:
        dec, joi = onnx.load(str(decoder)), onnx.load(str(joiner))
    except Exception:
        return None
    init = {i.name: numpy_helper.to_array(i) for i in dec.graph.initializer}
    ops = [n.op_type for n in dec.graph.node]
    emb = [init[n.input[0]] for n in dec.graph.node if n.op_type == "Gather" and n.input[0] in init
           and init[n.input[0]].ndim == 2]
    convs = [n for n in dec.graph.node if n.op_type == "Conv" and n.input[1] in init]
    lin = [n for n in dec.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in init]
    if len(emb) != 1 or len(convs) != 1 or len(lin) != 1 or "Relu" not in ops or "LSTM" in ops:
        return None
    conv = convs[0]
    groups = next((a.i for a in conv.attribute if a.name == "group"), 1)
    convw = init[conv.input[1]]
    convb = init.get(conv.input[2]) if len(conv.input) > 2 else None
    wp, bp = _linear(dec.graph, lin[0], init)
    jinit = {i.name: numpy_helper.to_array(i) for i in joi.graph.initializer}
    jlin = [n for n in joi.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in jinit]
    if len(jlin) != 1 or [n.op_type for n in joi.graph.node if n.op_type in ("Tanh", "Relu")] != ["Tanh"]:
        return None
    wout, bout = _linear(joi.graph, jlin[0], jinit)
    try:
        w = StatelessJointWeights(emb[0], convw, convb, groups, wp, bp, wout, bout, blank_id, vocab_size)
    except DecodingInputError:
        return None
    if w.context_size != context_size or not _matches_onnxruntime(w, decoder):
        return None
    return w


def _linear(graph: Any, node: Any, init: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(W [out, in], b [out]) of a MatMul (+ Add) or Gemm node."""
    w = init[node.input[1]]
    if node.op_type == "Gemm":
        trans = {a.name: a.i for a in node.attribute}.get("transB", 0)
        w = w if trans else w.T
        b = init.get(node.input[2]) if len(node.input) > 2 else None
        return w, (b if b is not None else np.zeros(w.shape[0], np.float32)).reshape(-1)
    adds = [m for m in graph.node if m.op_type == "Add" and node.output[0] in m.input]
    b = next((init[x] for m in adds for x in m.input if x in init), None)
    return w.T, (b if b is not None else np.zeros(w.shape[1], np.float32)).reshape(-1)


def _matches_onnxruntime(w: StatelessJointWeights, decoder: str | Path) -> bool:
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(decoder), providers=["CPUExecutionProvider"])
        c, v = w.context_size, w.vocab_size
        ctx = np.array([[-1] * (c - 1) + [w.blank_id], [w.blank_id] * c, [(3 * k + 1) % v for k in range(c)],
                        [v - 1 - k for k in range(c)]], dtype=np.int64)
        want = sess.run(None, {sess.get_inputs()[0].name: ctx})[0]
        return want.shape == (4, w.wp.shape[0]) and bool(np.allclose(w.decoder_out(ctx), want, atol=1e-4, rtol=1e-4))
    except Exception:  # any failure to check means: keep onnxruntime
        return False


@torch.no_grad()
def greedy_stateless(w: StatelessJointWeights, encoder_output: torch.Tensor,
                     lengths: Optional[torch.Tensor | Sequence[int]] = None, max_symbols: Optional[int] = _MAX_SYMBOLS,
                     start_context: str = "blank", unk_id: Optional[int] = None) -> list[Hypothesis]:
    """Projected encoder output ``[B, T, H]`` (icefall's ``encoder_out``) -> one greedy hypothesis per
    utterance; ``start_context`` / ``unk_id`` (``<unk>`` counted as blank, max fold) as in
    :class:`~asrdecode.models.onnx_transducer.OnnxTransducer`."""
    h = w.wp.shape[0]
    if not isinstance(encoder_output, torch.Tensor) or encoder_output.dim() != 3 or encoder_output.shape[2] != h:
        raise DecodingInputError(f"encoder_output must be a tensor [B, T, {h}]")
    if max_symbols is not None and (not isinstance(max_symbols, int) or max_symbols < 1):
        raise DecodingInputError(f"max_symbols must be an int >= 1 or None, got {max_symbols!r}")
    if start_context not in ("blank", "sherpa"):
        raise DecodingInputError(f"start_context must be 'blank' or 'sherpa', got {start_context!r}")
    b, t_max, _ = encoder_output.shape
    lens32 = lengths_int32(lengths, b, t_max)
    fn = load().asrd_transducer_greedy
    c = w.context_size
    start = np.full(c, w.blank_id, dtype=np.int32)
    if start_context == "sherpa":
        start[:-1] = -1
    enc = encoder_output.detach().cpu().float().contiguous().numpy()
    cap = max(16, t_max * (max_symbols or 64))
    while True:  # one C++ call decodes the batch (the joint batched per step)
        tok, fr = np.zeros((b, cap), np.int32), np.zeros((b, cap), np.int32)
        counts, scores = np.zeros(b, np.int32), np.zeros(b, np.float64)
        net = net_struct(w)
        net.start_ctx = start.ctypes.data
        args = NetSearchArgs(
            net=net, batch=b, frames=t_max, blank=w.blank_id, unk=-1 if unk_id is None else int(unk_id),
            max_symbols=max_symbols or 0, capacity=cap, enc=_f(enc), lengths=lens32.ctypes.data,
            out_tokens=tok.ctypes.data, out_frames=fr.ctypes.data, counts=counts.ctypes.data,
            scores=scores.ctypes.data)
        got = fn(ctypes.byref(args))
        check_status(got, "the native greedy search")
        if got >= 0:
            break
        cap *= 4  # -1: an utterance needs more than cap labels
    return [Hypothesis(tok[i, :n].tolist(), fr[i, :n].tolist(), float(scores[i])) for i, n in enumerate(counts.tolist())]


# ------------------------------------------------------------------------- the engine choice of transducer.greedy
#: weights read per model, with the key of what they were read from (:func:`_source_key`): an
#: LSTMTransducer's every parameter and buffer (address, in-place version, dtype, shape), an ONNX model's
#: files (size, mtime); any change of them re-reads the weights
_WEIGHTS: "weakref.WeakKeyDictionary[Any, tuple[Any, Any]]" = weakref.WeakKeyDictionary()


def _module_tensors(module: torch.nn.Module, prefix: str, out: list[tuple[str, torch.Tensor]]) -> None:
    """``module``'s own parameters and buffers by name, then its children's (depth first): what
    ``named_parameters`` / ``named_buffers`` walk, read from the modules' dicts directly (their generators
    cost ~0.2 ms a call, paid by every native search call; a per-chunk cost when streaming)."""
    for name, p in module._parameters.items():
        if p is not None:
            out.append((prefix + name, p))
    for name, b in module._buffers.items():
        if b is not None:
            out.append((prefix + name, b))
    for name, child in module._modules.items():
        if child is not None:
            _module_tensors(child, prefix + name + ".", out)


def _source_key(model: Any) -> tuple[Any, ...]:
    """What the native weights of ``model`` derive from: every named parameter and buffer of a
    ``torch.nn.Module`` (``load_state_dict``, an optimizer step or an in-place edit changes the version, an
    inference tensor's checksum or the address), else the ONNX files' (path, size, mtime_ns)."""
    if isinstance(model, torch.nn.Module):
        named: list[tuple[str, torch.Tensor]] = []
        _module_tensors(model, "", named)
        versions = weights_versions([t for _, t in named])
        return tuple((name, t.data_ptr(), v, t.dtype, t.device, tuple(t.shape)) for (name, t), v in zip(named, versions))
    out = []
    for f in model.onnx_files:
        try:
            st = Path(f).stat()
            out.append((str(f), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(f), -1, -1))
    return tuple(out)


#: methods of the transducer protocol the engine computes itself from the weights: a model that replaces one
#: (a subclass's override, or an attribute set on the instance) computes something else, so the engine
#: must not decode it
PROTOCOL_METHODS = ("joint", "predict", "project_encoder", "project_decoder", "initial_state", "select_state",
                    "replace_state")


def replaced_method(model: Any, base: type) -> Optional[str]:
    """The first of :data:`PROTOCOL_METHODS` that ``model`` (an instance of ``base``) computes otherwise than
    ``base`` does, or ``None``."""
    own = getattr(model, "__dict__", {})
    for name in PROTOCOL_METHODS:
        if name in own or getattr(type(model), name, None) is not getattr(base, name, None):
            return name
    return None


def native_greedy_weights(model: Any) -> tuple[Optional[LstmJointWeights | StatelessJointWeights], str]:
    """``(weights, "")`` when the C++ greedy can decode ``model`` exactly as the tensor greedy does, else
    ``(None, why not)``: an :class:`~asrdecode.transducer.LSTMTransducer` (float32), a NeMo-layout
    ONNX transducer (``<unk>`` not folded), an icefall-layout stateless one (RNN-T; ``<unk>`` folded by
    max or not at all), loaded from files whose graphs have the shapes the readers know."""
    from ..models.nemo_onnx import NemoOnnxTransducer
    from ..models.onnx_transducer import OnnxTransducer
    from ..transducer.model import LSTMTransducer

    base = next((c for c in (LSTMTransducer, NemoOnnxTransducer, OnnxTransducer) if isinstance(model, c)), None)
    replaced = replaced_method(model, base) if base is not None else None
    if replaced is not None:
        return None, (f"{type(model).__name__} replaces {base.__name__}.{replaced} (the C++ engine computes "  # type: ignore[union-attr]
                      "the plain networks)")
    if isinstance(model, LSTMTransducer):
        if model.joint_out.weight.dtype != torch.float32:
            return None, f"the model's parameters are {model.joint_out.weight.dtype}, the C++ greedy float32"
        key = _source_key(model)
        got = _WEIGHTS.get(model)
        if got is None or got[0] != key:
            got = (key, weights_from_lstm_transducer(model))
            _WEIGHTS[model] = got
        return got[1], ""
    if not isinstance(model, (NemoOnnxTransducer, OnnxTransducer)):
        return None, f"the C++ greedy reads LSTMTransducer and sherpa-onnx ONNX weights, not {type(model).__name__}"
    if model.onnx_files is None:
        return None, "the ONNX model was not loaded from files (load_onnx_transducer)"
    if model.unk_as_blank not in (None, "max") or (isinstance(model, NemoOnnxTransducer)
                                                      and model.unk_as_blank is not None and model.unk_id is not None):
        return None, f"unk_as_blank={model.unk_as_blank!r} is folded by the tensor engine only"
    if isinstance(model, OnnxTransducer) and model.durations is not None:
        return None, "icefall-layout TDT joints are decoded by the tensor engine only"
    source = _source_key(model)
    entry = _WEIGHTS.get(model)
    if entry is None or entry[0] != source:
        dec, joi = model.onnx_files
        if isinstance(model, NemoOnnxTransducer):
            w: Any = weights_from_nemo_onnx(dec, joi, model.blank_id, model.vocab_size, model.durations)
        else:
            w = weights_from_icefall_onnx(dec, joi, model.blank_id, model.vocab_size, model.context_size)
        if w is not None and not _agrees_with_onnxruntime(w, model):
            warnings.warn("asrdecode: the C++ engine's reading of this model's decoder.onnx / joiner.onnx differs from "
                          "what onnxruntime computes (an op it does not know?): decoding with onnxruntime instead",
                          RuntimeWarning, stacklevel=3)
            w = False
        entry = (source, w)
        _WEIGHTS[model] = entry
    if entry[1] is False:
        return None, "the weights it reads from decoder.onnx / joiner.onnx do not compute what onnxruntime does"
    if entry[1] is None:
        return None, "its decoder / joiner graphs are not a shape the C++ greedy reads"
    return entry[1], ""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_step(w: LstmJointWeights, labels: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy reference of the prediction network's step: ``labels [N]``, states ``[L, N, P]`` -> new states."""
    hs, cs, x = [], [], None
    for layer in range(h.shape[0]):
        if layer == 0:
            gates = w.table[labels] + h[0] @ w.whh0.T
        else:
            gates = np.concatenate([x, h[layer]], axis=1) @ w.wup[layer - 1].T + w.bup[layer - 1]
        i, f, g, o = np.split(gates.astype(np.float64), 4, axis=1)
        cn = _sigmoid(f) * c[layer] + _sigmoid(i) * np.tanh(g)
        x = _sigmoid(o) * np.tanh(cn)
        hs.append(x)
        cs.append(cn)
    return np.stack(hs), np.stack(cs)


def _probe_logits(w: LstmJointWeights | StatelessJointWeights, enc: np.ndarray, dec: np.ndarray) -> np.ndarray:
    """numpy reference of the joint: ``enc [N, D]`` (model input), ``dec [N, P]`` (LSTM output or icefall
    decoder output) -> logits ``[N, O]``."""
    if isinstance(w, StatelessJointWeights):
        return np.tanh(enc + dec) @ w.wout.T + w.bout
    z = enc @ w.wenc.T + w.benc + dec @ w.wdec.T + w.bdec
    return (np.tanh(z) if w.act == "tanh" else np.maximum(z, 0.0)) @ w.wout.T + w.bout


def _agrees_with_onnxruntime(w: LstmJointWeights | StatelessJointWeights, model: Any, steps: int = 2) -> bool:
    """Whether the weights read from ``model``'s ONNX files compute what the model (onnxruntime) does on
    probe inputs: ``steps`` prediction-network steps from the start state over four label rows, the joint
    of each output with random encoder rows (every graph the C++ searches replace: decoder and joiner)."""
    from ..models.onnx_common import fold_unk

    try:
        v, rng = w.vocab_size, np.random.default_rng(0)
        rows = [w.blank_id, 0, v - 1, v // 2]
        state = model.initial_state(len(rows))
        enc_width = (w.wout.shape[1] if isinstance(w, StatelessJointWeights) else w.wenc.shape[1])
        layers = w.wup.shape[0] + 1 if isinstance(w, LstmJointWeights) else 1
        h = np.zeros((layers, len(rows), w.whh0.shape[1] if isinstance(w, LstmJointWeights) else 1))
        c = h.copy()
        for step in range(steps):
            labels = np.array([(r + 3 * step) % v for r in rows])
            dec, state = model.predict(torch.from_numpy(labels), state)
            enc = rng.standard_normal((len(rows), enc_width)).astype(np.float32)
            got = model.joint(torch.from_numpy(enc), dec).detach().cpu().double().numpy()
            if isinstance(w, StatelessJointWeights):
                ref_dec = w.decoder_out(state[0].cpu().numpy())
            else:
                h, c = _lstm_step(w, labels, h, c)
                ref_dec = h[-1]
            want = fold_unk(torch.from_numpy(_probe_logits(w, enc.astype(np.float64), np.asarray(ref_dec, np.float64))),
                            model.blank_id, model.unk_id, model.unk_as_blank, model.vocab_size).numpy()
            if got.shape != want.shape or not np.allclose(got, want, atol=2e-3, rtol=2e-3):
                return False
        return True
    except Exception:  # any failure to check means: keep onnxruntime
        return False


def native_greedy(model: Any, w: LstmJointWeights | StatelessJointWeights, encoder_output: torch.Tensor,
                  lengths: torch.Tensor, max_symbols: int) -> list[Hypothesis]:
    """:func:`greedy_lstm` / :func:`greedy_stateless` of ``model``'s weights ``w`` (from
    :func:`native_greedy_weights`), with the model's start context and ``<unk>`` fold: encoder output
    ``[B, T, D]`` (as the model's ``project_encoder`` takes it) + ``lengths [B]`` -> one hypothesis each."""
    if isinstance(w, StatelessJointWeights):
        unk = model.unk_id if model.unk_as_blank == "max" else None
        return greedy_stateless(w, encoder_output, lengths, max_symbols, start_context=model.start_context, unk_id=unk)
    return greedy_lstm(w, encoder_output, lengths, max_symbols)
