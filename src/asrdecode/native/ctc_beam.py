"""Driver of the CTC prefix beam search on the native engine (``ctc_beam.cpp``).

:func:`run_frames` runs the frames of one call of :func:`asrdecode.ctc.beam_search` on a
:class:`~asrdecode.ctc.beam.CTCBeamState`: the engine reads and writes the state's ``[B, K]``
tensors in place (their memory, no copy) and returns the tree records ``(token, parent)`` of every
frame, which are appended to the state's :class:`~asrdecode.beam_hyps.BeamTree` exactly as the
tensor engine records them. Argument checks, blank collapse, the state and the final n-best are
shared with the tensor engine (``ctc/beam.py``).

Fusion: the library's :class:`~asrdecode.lm.NGramLM` and :class:`~asrdecode.lm.BoostingTree` are
:class:`~asrdecode.lm._automaton.BackoffAutomaton` s, read natively (only the candidate tokens are
scored); so is :class:`~asrdecode.lm.WordNGramLM` (its word automaton, token trie and per-node /
per-token arrays, ``engine.h``'s ``WordLM``). Any other fusion model is called per frame (``advance`` on the beam's states) and its
``[B*K, V]`` rows are handed to the engine: still exact, one engine call per frame.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Optional

import torch

from ..errors import DecodingInputError
from ..fusion import FusionModel, FusionScorer, check_model_scores
from ..lm._automaton import BackoffAutomaton
from ._lib import check_status, load
from .abi import Automaton as _Automaton
from .abi import CollapseArgs as _CollapseArgs
from .abi import CtcBeamArgs as _Args
from .abi import CtcDecodeArgs as _DecodeArgs
from .abi import CtcFinalArgs as _FinalArgs
from .abi import FusionDesc as _Model
from .abi import WordLM as _WordLM

# The engine sits below ctc/: it takes the ``CTCBeamState`` / ``CollapseState`` objects of
# asrdecode.ctc.beam / .collapse by their fields, without importing them (no import circle).
BeamStateFields = Any
CollapseFields = Any

__all__ = ["run_frames", "finalize", "collapse", "decode", "native_automaton", "native_word_lm"]

def native_automaton(model: FusionModel) -> Optional[BackoffAutomaton]:
    """The CPU :class:`BackoffAutomaton` behind ``model`` (NGramLM, BoostingTree), or ``None``."""
    a = getattr(model, "automaton", None)
    if not isinstance(a, BackoffAutomaton) or a.arc_offsets.device.type != "cpu":
        return None
    if getattr(model, "advance", None) is None or type(model).advance is not _advance_of(type(model)):
        return None
    return a


def _advance_of(cls: type):
    """The library classes whose ``advance`` is exactly their automaton's (a subclass may override it)."""
    hit = _ADVANCE_OF.get(cls, _ADVANCE_OF)
    if hit is _ADVANCE_OF:
        from ..lm.boosting import BoostingTree
        from ..lm.ngram import NGramLM

        hit = next((base.advance for base in (NGramLM, BoostingTree) if issubclass(cls, base)), None)
        _ADVANCE_OF[cls] = hit
    return hit


_ADVANCE_OF: dict = {}


def _nonpositive(a: BackoffAutomaton) -> bool:
    """Whether every score of ``a`` is <= 0 (cached on the automaton with its validation mark)."""
    a.ensure_valid()
    hit = a.__dict__.get("_native_nonpositive")
    if hit is None or hit[0] is not a._mark:
        flag = bool((a.arc_weight <= 0).all()) and bool((a.backoff_weight <= 0).all()) and (
            a.dense_scores.numel() == 0 or bool((a.dense_scores <= 0).all()))
        hit = a.__dict__["_native_nonpositive"] = (a._mark, flag)
    return hit[1]


_STRUCTS: "weakref.WeakKeyDictionary[BackoffAutomaton, tuple[tuple[Any, ...], _Automaton]]" = weakref.WeakKeyDictionary()


def _automaton_struct(a: BackoffAutomaton, validated: bool = False) -> _Automaton:
    """The engine's view of ``a``'s arrays (validated here unless ``validated``: just now by the caller; cached
    while they stay where they are)."""
    if not validated:
        a.ensure_valid()
    key = (a.arc_offsets.data_ptr(), a.dense_scores.data_ptr(), a.dense_next.data_ptr(), a.arc_label.data_ptr(),
           a.final_weight.data_ptr(), a._mark)
    hit = _STRUCTS.get(a)
    if hit is not None and hit[0] == key:
        return hit[1]
    struct = _Automaton(
        arc_offsets=a.arc_offsets.data_ptr(), arc_label=a.arc_label.data_ptr(), arc_weight=a.arc_weight.data_ptr(),
        arc_dest=a.arc_dest.data_ptr(), backoff_state=a.backoff_state.data_ptr(),
        backoff_weight=a.backoff_weight.data_ptr(), dense_index=a.dense_index.data_ptr(),
        dense_scores=a.dense_scores.data_ptr(), dense_next=a.dense_next.data_ptr(),
        final_weight=a.final_weight.data_ptr(), num_states=a.num_states, vocab=a.vocab_size,
        blank=-1 if a.blank_id is None else a.blank_id,
    )
    _STRUCTS[a] = (key, struct)
    return struct


def native_word_lm(model: FusionModel) -> Optional[Any]:
    """``model`` when it is a CPU :class:`~asrdecode.lm.WordNGramLM` whose ``advance`` / ``final`` are the
    library's own (the engine then reads its arrays), else ``None``."""
    from ..lm.word import WordNGramLM

    if not isinstance(model, WordNGramLM) or model.end_label.device.type != "cpu":
        return None
    cls = type(model)
    for name in ("advance", "final", "score_tokens", "_word_end", "_word_score"):
        if getattr(cls, name) is not getattr(WordNGramLM, name):
            return None
    if not (model.is_start.dtype == torch.bool and model.end_const.dtype == torch.float32
            and model.start_score.dtype == torch.float32):
        return None
    return model


_WORD_STRUCTS: "weakref.WeakKeyDictionary[Any, tuple[tuple[int, ...], _WordLM, bool]]" = weakref.WeakKeyDictionary()


def _word_lm_struct(w: Any) -> tuple[_WordLM, bool]:
    """The engine's view of a WordNGramLM's arrays and whether every score it gives is <= 0 (validated; cached)."""
    w.ensure_valid()
    parts = (w.end_label, w.end_const, w.is_start, w.start_node, w.start_score)
    for name, t in zip(("end_label", "end_const", "is_start", "start_node", "start_score"), parts):
        if not t.is_contiguous():
            setattr(w, name, t.contiguous())
    parts = (w.end_label, w.end_const, w.is_start, w.start_node, w.start_score)
    key = tuple(t.data_ptr() for t in parts) + (w.word_lm.automaton._mark, w.trie._mark)
    hit = _WORD_STRUCTS.get(w)
    if hit is not None and hit[0] == key:
        return hit[1], hit[2]
    lm, trie = w.word_lm.automaton, w.trie
    struct = _WordLM(lm=_automaton_struct(lm), trie=_automaton_struct(trie), node_bits=w.node_bits,
                     lm_root_fill=lm.root_fill,
                     **{name: t.data_ptr() for name, t in zip(("end_label", "end_const", "is_start", "start_node",
                                                                "start_score"), parts)})
    finite_end = w.end_const[torch.isfinite(w.end_const)]
    nonpositive = (_nonpositive(lm) and _nonpositive(trie) and bool((w.start_score <= 0).all())
                   and bool((finite_end <= 0).all()) and lm.root_fill <= 0)
    _WORD_STRUCTS[w] = (key, struct, nonpositive)
    return struct, nonpositive


def describe_fusion(desc: _Model, model: FusionModel, weight: float) -> bool:
    """Fill ``desc`` for a model the engine reads natively (automaton or word LM); False: it is not one
    (the driver hands its rows over)."""
    desc.weight = weight
    a = native_automaton(model)
    if a is not None:
        desc.kind = 0
        desc.nonpositive = int(_nonpositive(a))  # (validates a)
        desc.automaton = _automaton_struct(a, validated=True)
        return True
    w = native_word_lm(model)
    if w is not None:
        struct, nonpositive = _word_lm_struct(w)
        desc.kind = 2
        desc.nonpositive = int(nonpositive)
        desc.word = ctypes.pointer(struct)
        return True
    desc.kind = 1
    return False


_FIELDS = ("p_b", "p_nb", "fscore", "length", "last", "hash", "parent_hash", "peak", "fstates")


def _contiguous(st: BeamStateFields) -> None:
    """Make every state array the engine reads contiguous (a state the tensor engine made may not be)."""
    d = st.__dict__
    for name in _FIELDS:
        t = d[name]
        if not t.is_contiguous():
            d[name] = t.contiguous()


def run_frames(st: BeamStateFields, x: torch.Tensor, lengths: torch.Tensor, frame_index: torch.Tensor,
               scorer: FusionScorer, *, beam: int, blank: int, beta: float, beam_threshold: float,
               token_beam: Optional[int]) -> None:
    """Run every frame of ``x [B, T, V]`` (``lengths [B]`` valid per utterance) on ``st`` in place.

    ``frame_index [B, T]``: the original frame of each frame (stored in the tree as its time).
    Settings as in :func:`asrdecode.ctc.beam_search` (already checked).
    """
    lib = load()
    B, T, V = x.shape
    K = beam
    if T == 0:
        return
    if x.stride(2) != 1 or x.stride(1) != V:  # rows of frames must be contiguous; utterances may be strided
        x = x.contiguous()
    lengths = lengths.to(torch.int64).contiguous()
    _contiguous(st)
    fusion = scorer.fusion
    # candidate tokens per frame, as the tensor step chooses them
    if token_beam is not None:
        m: Optional[int] = min(token_beam, V - 1)
    elif not fusion:
        m = min(2 * K, V - 1)
    else:
        m = None
    num_tokens = m if (m is not None and m < V - 1) else 0
    merge_all = token_beam is None or token_beam >= V - 1
    models = (_Model * max(len(fusion), 1))()
    rows = [i for i, (model, weight) in enumerate(fusion) if not describe_fusion(models[i], model, weight)]
    frame_index = frame_index.to(torch.int64).contiguous()
    views = st.tree.open_steps_native(T, B, K, x.device)
    out = None if views is not None else tuple(torch.empty((T, B, K), dtype=torch.int64) for _ in range(3))
    ptrs = views if views is not None else tuple(o.data_ptr() for o in out)  # type: ignore[union-attr]  # out: set when views is None
    args = _Args(
        batch=B, beam=K, vocab=V, frames=T, x_stride=x.stride(0), blank=blank, is_double=int(x.dtype == torch.float64),
        num_tokens=num_tokens, merge_all=int(merge_all), num_models=len(fusion), t_begin=0, t_end=T,
        beta=beta, threshold=beam_threshold, x=x.data_ptr(), lengths=lengths.data_ptr(),
        p_b=st.p_b.data_ptr(), p_nb=st.p_nb.data_ptr(), fscore=st.fscore.data_ptr(), length=st.length.data_ptr(),
        peak=st.peak.data_ptr(), last=st.last.data_ptr(), hash=st.hash.data_ptr(),
        parent_hash=st.parent_hash.data_ptr(), fstates=st.fstates.data_ptr(),
        tok_out=ptrs[0], par_out=ptrs[1], dat_out=ptrs[2],
        frame_index=frame_index.data_ptr(), models=models,
    )
    err = ctypes.create_string_buffer(512)
    done = 0  # frames run (and recorded)
    try:
        if not rows:
            _call(lib, args, err)
            done = T
        else:  # a fusion model the engine does not know: its rows, one frame at a time
            row_bytes = B * K * 8
            for t in range(T):
                keep = []
                for i in rows:
                    sc, nx = fusion[i][0].advance(st.fstates[:, :, i].reshape(B * K))
                    check_model_scores(i, fusion[i][0], sc)
                    sc = sc.to(x.dtype).contiguous()
                    nx = nx.to(torch.int64).contiguous()
                    if sc.shape != (B * K, V) or nx.shape != (B * K, V):
                        raise DecodingInputError(f"fusion[{i}].advance returned shapes {tuple(sc.shape)}, "
                                                 f"{tuple(nx.shape)}; expected ({B * K}, {V})")
                    keep.append((sc, nx))
                    models[i].rows_scores = sc.data_ptr()
                    models[i].rows_next = nx.data_ptr()
                args.t_begin, args.t_end = t, t + 1
                args.tok_out = ptrs[0] + t * row_bytes
                args.par_out = ptrs[1] + t * row_bytes
                args.dat_out = ptrs[2] + t * row_bytes
                _call(lib, args, err)
                done = t + 1
    except BaseException:
        if views is not None:  # keep the tree in step with the state arrays
            st.tree.close_steps(done)
        raise
    if out is None:
        st.tree.close_steps(T)
    else:
        st.tree.record_steps(*out)


def collapse(x: torch.Tensor, lengths: torch.Tensor, offsets: torch.Tensor, blank: int, threshold: Optional[float],
             state: CollapseFields) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, CollapseFields]:
    """:func:`asrdecode.ctc.collapse.stream_collapse` on the engine (CPU; same result; the state is
    updated in place and returned)."""
    lib = load()
    B, T, V = x.shape
    if T == 0:
        return x, torch.zeros(B, dtype=torch.long), torch.zeros((B, 0), dtype=torch.long), state
    x = x.contiguous()
    lengths = lengths.to(torch.int64).contiguous()
    offsets = offsets.to(torch.int64).contiguous()
    for name in ("prev_blank", "pending", "pending_index", "pending_valid"):
        t = getattr(state, name)
        if not t.is_contiguous() or (name == "pending" and t.dtype != x.dtype):
            setattr(state, name, t.to(x.dtype if name == "pending" else t.dtype).contiguous())
    out_x = torch.empty((B, T + 1, V), dtype=x.dtype)
    out_len = torch.empty(B, dtype=torch.int64)
    out_index = torch.empty((B, T + 1), dtype=torch.int64)
    args = _CollapseArgs(
        batch=B, frames=T, vocab=V, blank=blank, is_double=int(x.dtype == torch.float64), weak=int(threshold is None),
        threshold=0.0 if threshold is None else threshold, x=x.data_ptr(), lengths=lengths.data_ptr(),
        offsets=offsets.data_ptr(), prev_blank=state.prev_blank.data_ptr(), pending=state.pending.data_ptr(),
        pending_index=state.pending_index.data_ptr(), pending_valid=state.pending_valid.data_ptr(),
        out_x=out_x.data_ptr(), out_len=out_len.data_ptr(), out_index=out_index.data_ptr(),
    )
    check_status(lib.asrd_ctc_collapse(ctypes.byref(args)), "native blank collapse")
    n = int(out_len.max()) if B else 0
    return out_x[:, :n], out_len, out_index[:, :n], state


def finalize(st: BeamStateFields, scorer: Optional[FusionScorer], beta: float,
             nbest: int) -> list[list[tuple[list[int], list[int], float]]]:
    """The n-best ``(tokens, timestamps, score)`` per utterance of a CPU state, best first (see
    ``ctc.beam._finalize``, which it serves: the same scores, computed in one engine call).
    ``scorer``: add its end-of-sentence scores (``None``: don't)."""
    lib = load()
    _contiguous(st)
    B, K = st.p_b.shape
    n = min(nbest, K)
    tree = st.tree
    steps = len(tree)
    keep: list[object] = []  # references held while the engine reads them
    if tree.is_preallocated:
        tree_ptrs = tree.step_pointers(0)
    elif steps:
        stacked = [torch.stack(x) for x in (tree.tokens, tree.parents, tree.data)]
        keep.append(stacked)
        tree_ptrs = tuple(t.data_ptr() for t in stacked)
    else:
        tree_ptrs = (0, 0, 0)
    fusion = scorer.fusion if scorer is not None else []
    models = (_Model * max(len(fusion), 1))()
    for i, (model, weight) in enumerate(fusion):
        if not describe_fusion(models[i], model, weight):
            f = model.final(st.fstates[:, :, i].reshape(B * K))
            check_model_scores(i, model, f)
            f = f.to(st.p_b.dtype).contiguous()
            keep.append(f)
            models[i].rows_scores = f.data_ptr()
    out_score = torch.empty((B, n), dtype=torch.float64)
    out_ints = torch.empty(B * n * (1 + 2 * steps), dtype=torch.int64)  # lengths | tokens | times
    base = out_ints.data_ptr()
    fstates = st.fstates.contiguous()
    args = _FinalArgs(
        batch=B, beam=K, is_double=int(st.p_b.dtype == torch.float64), num_models=len(fusion),
        with_final=int(scorer is not None), nbest=n, steps=steps, beta=beta, p_b=st.p_b.data_ptr(),
        p_nb=st.p_nb.data_ptr(), fscore=st.fscore.data_ptr(), length=st.length.data_ptr(),
        fstates=fstates.data_ptr(), models=models, tok=tree_ptrs[0], par=tree_ptrs[1],
        dat=tree_ptrs[2], out_score=out_score.data_ptr(), out_len=base, out_tok=base + 8 * B * n,
        out_dat=base + 8 * B * n * (1 + steps),
    )
    err = ctypes.create_string_buffer(512)
    _raise_for(lib.asrd_ctc_finalize(ctypes.byref(args), err, len(err)), err)
    scores = out_score.tolist()
    ints = out_ints.tolist()
    off_tok, off_dat = B * n, B * n * (1 + steps)
    result = []
    for b in range(B):
        row = []
        for j in range(n):
            o = b * n + j
            m = ints[o]
            if m < 0:
                continue
            a_t, a_d = off_tok + o * steps, off_dat + o * steps
            row.append((ints[a_t : a_t + m], ints[a_d : a_d + m], scores[b][j]))
        result.append(row)
    return result


def _call(lib: ctypes.CDLL, args: _Args, err: ctypes.Array) -> None:
    _raise_for(lib.asrd_ctc_beam_run(ctypes.byref(args), err, len(err)), err)


def _raise_for(rc: int, err: ctypes.Array) -> None:
    """The named error of an entry point's return code (0: none; 1: bad input; guard.h's codes)."""
    if rc == 0:
        return
    message = err.value.decode(errors="replace")
    check_status(rc, "native CTC beam search", message)
    raise DecodingInputError(f"native CTC beam search: {message}")


_ERR = threading.local()


def _err_buffer() -> ctypes.Array:
    """A per-thread buffer for the engine's error message."""
    buf = getattr(_ERR, "buf", None)
    if buf is None:
        buf = _ERR.buf = ctypes.create_string_buffer(512)
    return buf


def decode(x: torch.Tensor, lengths: torch.Tensor, scorer: FusionScorer, *, beam: int, blank: int, beta: float,
           beam_threshold: float, token_beam: Optional[int], collapse: int, collapse_threshold: Optional[float],
           nbest: int) -> Optional[list[list[tuple[list[int], list[int], float]]]]:
    """A whole search in one engine call: what :func:`run_frames` on a fresh state and :func:`finalize` (with
    the end-of-sentence scores) give, with blank collapse (``collapse``: 0 off, 1 threshold, 2 weak) done
    in the engine's frame loop. ``x [B, T, V]`` checked emissions, ``lengths [B]``. Returns the n-best
    ``(tokens, timestamps, score)`` per utterance, or ``None`` when a fusion model is not read natively
    (the caller then takes the general path)."""
    lib = load()
    B, T, V = x.shape
    K = beam
    fusion = scorer.fusion
    M = len(fusion)
    models = (_Model * max(M, 1))()
    for i, (model, weight) in enumerate(fusion):
        if not describe_fusion(models[i], model, weight):
            return None
    # the fresh state's fusion states: FusionScorer.initial's columns, [B * K] each (not stacked)
    utterances = (torch.arange(B).repeat_interleave(K) if any(scorer.takes_utterances) else None)
    cols = []
    for model, takes in zip(scorer.models, scorer.takes_utterances):
        col = (model.initial_states(B * K, device=x.device, utterances=utterances) if takes  # type: ignore[call-arg]  # optional extension (takes)
               else model.initial_states(B * K, device=x.device)).to(torch.int64)
        if col.shape != (B * K,):
            raise DecodingInputError(f"{type(model).__name__}.initial_states returned shape {tuple(col.shape)}, "
                                     f"expected ({B * K},)")
        cols.append(col if col.is_contiguous() else col.contiguous())
    init = (ctypes.c_void_p * max(M, 1))(*(c.data_ptr() for c in cols))
    if x.stride(2) != 1 or x.stride(1) != V:
        x = x.contiguous()
    if lengths.dtype != torch.int64 or not lengths.is_contiguous():
        lengths = lengths.to(torch.int64).contiguous()
    if token_beam is not None:
        m: Optional[int] = min(token_beam, V - 1)
    elif not fusion:
        m = min(2 * K, V - 1)
    else:
        m = None
    n = min(nbest, K)
    out_score = (ctypes.c_double * (B * n))()
    out_ints = (ctypes.c_int64 * (B * n * (1 + 2 * T)))()  # lengths | tokens | times
    base = ctypes.addressof(out_ints)
    args = _DecodeArgs(
        batch=B, beam=K, vocab=V, frames=T, x_stride=x.stride(0), blank=blank, is_double=int(x.dtype == torch.float64),
        num_tokens=m if (m is not None and m < V - 1) else 0, merge_all=int(token_beam is None or token_beam >= V - 1),
        num_models=M, beta=beta, threshold=beam_threshold, collapse=collapse,
        collapse_threshold=0.0 if collapse_threshold is None else collapse_threshold, nbest=n,
        x=x.data_ptr(), lengths=lengths.data_ptr(), init_fstates=ctypes.addressof(init),
        models=models, out_score=ctypes.addressof(out_score), out_len=base,
        out_tok=base + 8 * B * n, out_dat=base + 8 * B * n * (1 + T),
    )
    err = _err_buffer()
    _raise_for(lib.asrd_ctc_beam_decode(ctypes.byref(args), err, len(err)), err)
    scores = out_score[:]
    ints = out_ints[:]
    off_tok, off_dat = B * n, B * n * (1 + T)
    result = []
    for b in range(B):
        row = []
        for j in range(n):
            o = b * n + j
            cnt = ints[o]
            if cnt < 0:
                continue
            a_t, a_d = off_tok + o * T, off_dat + o * T
            row.append((ints[a_t : a_t + cnt], ints[a_d : a_d + cnt], scores[o]))
        result.append(row)
    return result
