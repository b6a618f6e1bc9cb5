"""Driver of the WFST token passing on the native engine (``wfst.cpp``).

:func:`run_frames` runs one chunk of :meth:`asrdecode.ctc.wfst.WFSTDecoder.advance` on a
:class:`~asrdecode.ctc.wfst.WFSTStreamState`: the state's tokens go to the engine grouped by
utterance (each utterance's order kept: the search's tie rules depend only on it), the engine runs
every frame of every utterance, and the tokens, the new backpointer history entries and (when the
state records one) the lattice's new nodes and arcs come back into the same state, in the tensor
engine's formats. Argument checks, ``init_state``, the final 1-best / n-best and the lattice
reading are shared with the tensor engine; a stream may switch engines between chunks.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from ..errors import DecodingInputError
from ._lib import NativeMemoryError, load
from .abi import WfstArgs as _Args

__all__ = ["run_frames"]


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def run_frames(decoder: Any, state: Any, am: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor,
               e_max: torch.Tensor) -> None:
    """Advance ``state`` (a ``WFSTStreamState``) over ``am [B, T, V]`` (float32, already multiplied by
    the acoustic scale) with ``lengths [B]`` valid frames; ``rows`` are the graph's packed emitting arcs
    ``[A, 4]`` int32 and ``e_max [S]`` each state's best emitting arc score. Updates ``state`` in place
    (tokens, history, lattice; not the offset)."""
    lib = load()
    g = decoder.graph
    g.ensure_valid()
    B, T, V = am.shape
    A, S = g.e_src.shape[0], g.num_states
    if rows.dtype != torch.int32 or tuple(rows.shape) != (A, 4) or not rows.is_contiguous():
        raise DecodingInputError(f"graph arc rows must be a contiguous int32 tensor [{A}, 4], got {rows.dtype} "
                                 f"{tuple(rows.shape)}")
    if e_max.dtype != torch.float32 or tuple(e_max.shape) != (S,) or not e_max.is_contiguous():
        raise DecodingInputError(f"e_max must be a contiguous float32 tensor [{S}]")
    if V < g.vocab_size:
        raise DecodingInputError(f"am has {V} classes, the graph reads tokens up to {g.vocab_size - 1}")
    am = am.contiguous()
    toks, rec = state.toks, state.lattice
    order = torch.argsort(toks.b, stable=True)
    counts = torch.bincount(toks.b, minlength=B)
    tok_ptr = torch.zeros(B + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=tok_ptr[1:])
    tok_s = toks.s.index_select(0, order).long().contiguous()
    tok_score = toks.score.index_select(0, order).float().contiguous()
    tok_hid = toks.hid.index_select(0, order).long().contiguous()
    tok_nid = rec.nid.index_select(0, order).long().contiguous() if rec is not None else None
    lens = lengths.long().contiguous()
    offset = state.offset.long().contiguous()
    boost = state.boost.float().contiguous() if state.boost is not None else None
    p_ptr, p_dst, p_olabel = (x.long().contiguous() for x in (g.p_ptr, g.p_dst, g.p_olabel))
    p_score = g.p_score.float().contiguous()
    e_ptr = g.e_ptr.long().contiguous()
    args = _Args(
        batch=B, frames=T, vocab=V, num_states=g.num_states, eps_depth=g.eps_depth, max_active=decoder.max_active,
        boost_width=0 if boost is None else boost.shape[1], lattice=int(rec is not None), hist_base=state.hist.size,
        node_base=rec.num_nodes if rec is not None else 0, step_base=rec.step if rec is not None else 0,
        min_active=decoder.min_active,
        beam=decoder.beam, lattice_beam=decoder.lattice_beam,
        e_ptr=_ptr(e_ptr), e_rows=_ptr(rows), e_max=_ptr(e_max), p_ptr=_ptr(p_ptr), p_dst=_ptr(p_dst),
        p_olabel=_ptr(p_olabel), p_score=_ptr(p_score), am=_ptr(am), lengths=_ptr(lens), offset=_ptr(offset),
        boost=_ptr(boost), tok_ptr=_ptr(tok_ptr), tok_s=_ptr(tok_s), tok_score=_ptr(tok_score), tok_hid=_ptr(tok_hid),
        tok_nid=_ptr(tok_nid),
    )
    handle = lib.asrd_wfst_run(ctypes.byref(args))
    if not handle:
        raise NativeMemoryError("the native WFST search ran out of memory (or failed inside the C++ engine)")
    try:
        sizes = torch.zeros(5, dtype=torch.int64)
        lib.asrd_wfst_sizes(handle, sizes.data_ptr())
        n_tok, n_hist, n_nodes, n_arcs, steps = sizes.tolist()
        i64, f32, u8 = torch.int64, torch.float32, torch.uint8
        out = [torch.empty(B + 1, dtype=i64)]
        out += [torch.empty(n_tok, dtype=d) for d in (i64, f32, i64, i64)]
        out += [torch.empty(n_hist, dtype=d) for d in (i64, i64, i64, i64, u8)]
        out += [torch.empty(n_nodes, dtype=i64)]
        out += [torch.empty(n_arcs, dtype=d) for d in (i64, i64, i64, i64, i64, u8, i64, f32, f32, i64, u8)]
        ptrs = (ctypes.c_void_p * len(out))(*[x.data_ptr() for x in out])
        lib.asrd_wfst_copy(handle, ptrs)
    finally:
        lib.asrd_wfst_free(handle)
    new_ptr, s, score, hid, nid = out[:5]
    new_b = torch.repeat_interleave(torch.arange(B), new_ptr[1:] - new_ptr[:-1])
    state.toks = type(toks)(new_b, s, score, hid)  # the state's own token record (ctc.wfst.stream_state)
    if n_hist:
        prev, word, frame, token, start = out[5:10]
        state.hist.add(prev, word, frame, token, start.bool())
    if rec is not None:
        rec.nid = nid
        rec.num_nodes += n_nodes
        if n_nodes:
            rec.node_b.append(out[10])
        if n_arcs:
            vals = out[11:]
            for k, v in zip(("src", "dst", "b", "word", "token", "start", "frame", "graph", "am", "step", "eps"), vals):
                rec.arcs[k].append(v.bool() if v.dtype == u8 else v)
        rec.step += steps
