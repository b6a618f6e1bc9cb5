"""The ctypes mirrors of the engine's C ABI structs (``abi.h``), all in one place.

Each mirror names its C struct in ``_c_name_``; ``tests/test_native_abi.py`` checks every mirror against
the layout the library reports (:func:`c_layout`: field names in order, offsets, sizes, total size), so
a struct changed on one side only fails a test instead of corrupting memory.
"""

from __future__ import annotations

import ctypes

__all__ = ["Automaton", "WordLM", "FusionDesc", "CtcBeamArgs", "CollapseArgs", "CtcFinalArgs", "CtcDecodeArgs",
           "TransducerBeamArgs", "WindArgs", "WfstArgs", "ArpaArgs", "MIRRORS", "c_layout"]

_P = ctypes.c_void_p
_I = ctypes.c_int64
_D = ctypes.c_double
_F = ctypes.c_float


def _ints(*names: str) -> list[tuple[str, type]]:
    return [(n, _I) for n in names]


def _ptrs(*names: str) -> list[tuple[str, type]]:
    return [(n, _P) for n in names]


class Automaton(ctypes.Structure):
    _c_name_ = "Automaton"
    _fields_ = _ptrs("arc_offsets", "arc_label", "arc_weight", "arc_dest", "backoff_state", "backoff_weight",
                     "dense_index", "dense_scores", "dense_next", "final_weight") + _ints("num_states", "vocab", "blank")


class WordLM(ctypes.Structure):
    _c_name_ = "WordLM"
    _fields_ = [("lm", Automaton), ("trie", Automaton)] + _ptrs(
        "end_label", "end_const", "is_start", "start_node", "start_score") + [("node_bits", _I), ("lm_root_fill", _F)]


class FusionDesc(ctypes.Structure):
    """One fusion model of a CTC or transducer search (kind 0: automaton, 1: rows, 2: word LM)."""
    _c_name_ = "FusionDesc"
    _fields_ = [("kind", _I), ("weight", _D), ("nonpositive", _I), ("automaton", Automaton),
                ("rows_scores", _P), ("rows_next", _P), ("word", ctypes.POINTER(WordLM))]


class CtcBeamArgs(ctypes.Structure):
    _c_name_ = "CtcBeamArgs"
    _fields_ = _ints("batch", "beam", "vocab", "frames", "x_stride", "blank", "is_double", "num_tokens", "merge_all",
                     "num_models", "t_begin", "t_end") + [("beta", _D), ("threshold", _D)] + _ptrs(
        "x", "lengths", "p_b", "p_nb", "fscore", "length", "peak", "last", "hash", "parent_hash", "fstates",
        "tok_out", "par_out", "dat_out", "frame_index", "models")


class CollapseArgs(ctypes.Structure):
    _c_name_ = "CollapseArgs"
    _fields_ = _ints("batch", "frames", "vocab", "blank", "is_double", "weak") + [("threshold", _D)] + _ptrs(
        "x", "lengths", "offsets", "prev_blank", "pending", "pending_index", "pending_valid", "out_x", "out_len",
        "out_index")


class CtcFinalArgs(ctypes.Structure):
    _c_name_ = "CtcFinalArgs"
    _fields_ = _ints("batch", "beam", "is_double", "num_models", "with_final", "nbest", "steps") + [
        ("beta", _D)] + _ptrs("p_b", "p_nb", "fscore", "length", "fstates", "models", "tok", "par", "dat",
                              "out_score", "out_len", "out_tok", "out_dat")


class CtcDecodeArgs(ctypes.Structure):
    _c_name_ = "CtcDecodeArgs"
    _fields_ = _ints("batch", "beam", "vocab", "frames", "x_stride", "blank", "is_double", "num_tokens", "merge_all",
                     "num_models") + [("beta", _D), ("threshold", _D), ("collapse", _I), ("collapse_threshold", _D),
                                      ("nbest", _I)] + _ptrs(
        "x", "lengths", "init_fstates", "models", "out_score", "out_len", "out_tok", "out_dat")


class TransducerBeamArgs(ctypes.Structure):
    _c_name_ = "TransducerBeamArgs"
    _fields_ = _ints("batch", "beam", "vocab", "num_durations", "logit_stride", "frames", "blank", "tdt", "aes",
                     "early", "lm_weighted", "max_symbols", "num_models", "is_double", "pack") + [
        ("lam", _D), ("beta", _D), ("durations", _P), ("logits", _P), ("logit_rows", _I), ("logit_cols", _I)] + _ptrs(
        "lengths", "offset", "final_chunk", "score", "time", "symbols", "hash", "nlabels", "last", "lm_states",
        "active", "parent_flat", "emitted", "labels", "emit_rows", "frame_rows", "joint_rows", "logit_pos",
        "tok_out", "par_out", "dat_out", "selected_ok", "counts", "models")


class WindArgs(ctypes.Structure):
    _c_name_ = "WindArgs"
    _fields_ = _ints("batch", "beam", "vocab", "window", "frames", "blank", "early", "lm_weighted", "max_symbols",
                     "num_models", "is_double") + [("lam", _D), ("beta", _D), ("logits", _P), ("logit_rows", _I),
                                                   ("logit_cols", _I)] + _ptrs(
        "lengths", "offset", "final_chunk", "score", "time", "symbols", "hash", "nlabels", "last", "lm_states",
        "active", "tmin", "row_of", "enc_rows", "dec_rows", "parent_flat", "emitted", "labels", "emit_rows",
        "tok_out", "par_out", "dat_out", "counts", "models") + [("has_gamma", _I), ("gamma", _D)]


class WfstArgs(ctypes.Structure):
    _c_name_ = "WfstArgs"
    _fields_ = _ints("batch", "frames", "vocab", "num_states", "eps_depth", "max_active", "boost_width", "lattice",
                     "hist_base", "node_base", "step_base", "min_active") + [("beam", _F), ("lattice_beam", _F)] + _ptrs(
        "e_ptr", "e_rows", "e_max", "p_ptr", "p_dst", "p_olabel", "p_score", "am", "lengths", "offset", "boost",
        "tok_ptr", "tok_s", "tok_score", "tok_hid", "tok_nid")


class ArpaArgs(ctypes.Structure):
    """One chunk of an ARPA file for ``asrd_arpa_feed`` and the arrays it fills (``asrdecode.native.arpa``)."""
    _c_name_ = "ArpaArgs"
    _fields_ = [("data", _P)] + _ints("length", "final_chunk", "consumed", "max_order", "order") + _ptrs(
        "counts", "capacity", "words", "logprob", "backoff", "has_backoff", "lines", "context", "suffix")


#: every mirror, by C struct name
MIRRORS: dict[str, type] = {cls._c_name_: cls for cls in (Automaton, WordLM, FusionDesc, CtcBeamArgs, CollapseArgs,
                                                          CtcFinalArgs, CtcDecodeArgs, TransducerBeamArgs, WindArgs,
                                                          WfstArgs, ArpaArgs)}


def c_layout(lib: ctypes.CDLL) -> dict[str, tuple[int, list[tuple[str, int, int]]]]:
    """The library's layout table: per C struct, ``(sizeof, [(field, offset, size), ...])`` in declaration order."""
    fn = lib.asrd_abi_field
    fn.restype = ctypes.c_int
    fn.argtypes = [_I, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_I),
                   ctypes.POINTER(_I)]
    out: dict[str, tuple[int, list[tuple[str, int, int]]]] = {}
    t, f, off, size = ctypes.c_char_p(), ctypes.c_char_p(), _I(), _I()
    i = 0
    while fn(i, ctypes.byref(t), ctypes.byref(f), ctypes.byref(off), ctypes.byref(size)):
        name, field = (t.value or b"").decode(), (f.value or b"").decode()
        if not field:
            out[name] = (size.value, [])
        else:
            out[name][1].append((field, off.value, size.value))
        i += 1
    return out
