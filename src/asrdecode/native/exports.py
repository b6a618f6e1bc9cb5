"""Every C export of the native library with its ctypes signature, in one table: :func:`bind` sets them
when :func:`~asrdecode.native._lib.load` opens the library, so a driver calls ``load().asrd_x(...)``
and never declares a signature itself. ``tests/native/test_native_abi.py`` checks the table against
the sources' ``extern "C"`` functions (every export listed, nothing else) and against the library."""

from __future__ import annotations

import ctypes
from typing import Any

from .abi import ArpaArgs, NetSearchArgs, WfstArgs

__all__ = ["EXPORTS", "bind"]

_P, _I, _C, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int
_WITH_ERROR = [_P, _C, _I]  # (the argument struct, an error message buffer, its size)

#: name -> (return type, argument types)
EXPORTS: dict[str, tuple[Any, list[Any]]] = {
    # the library itself (abi.cpp, ctc_beam.cpp)
    "asrd_abi_version": (_INT, []),
    "asrd_abi_field": (_INT, [_I, ctypes.POINTER(_C), ctypes.POINTER(_C), ctypes.POINTER(_I), ctypes.POINTER(_I)]),
    # CTC prefix beam search and blank collapse (ctc_beam.cpp), emissions check (checks.cpp), tree (tree.cpp)
    "asrd_ctc_beam_run": (_INT, _WITH_ERROR),
    "asrd_ctc_finalize": (_INT, _WITH_ERROR),
    "asrd_ctc_beam_decode": (_INT, _WITH_ERROR),
    "asrd_ctc_collapse": (_INT, [_P]),
    "asrd_check_log_probs": (None, [_P, _I, _I, _I, _I, _I, _P, _P]),
    "asrd_backtrack": (_INT, [_P] * 3 + [_I] * 3 + [_P, _I] + [_P] * 3),
    # transducer searches: one step (transducer_beam.cpp, transducer_wind.cpp), the whole search with the
    # networks and one streaming chunk of it (transducer_beam_net.cpp), greedy / sherpa-onnx's searches (transducer_*.cpp)
    "asrd_transducer_beam_step": (_INT, _WITH_ERROR),
    "asrd_transducer_joint_rows": (_I, [_I, _I, _I, _P, _P, _P, _P, _P]),
    "asrd_wind_pop": (_I, [_P]),
    "asrd_wind_active": (_I, [_P]),
    "asrd_wind_step": (_INT, _WITH_ERROR),
    "asrd_transducer_beam_search": (_INT, _WITH_ERROR),
    "asrd_transducer_beam_chunk": (_INT, _WITH_ERROR),
    "asrd_transducer_greedy": (_INT, [ctypes.POINTER(NetSearchArgs)]),
    "asrd_modified_beam": (_INT, [ctypes.POINTER(NetSearchArgs)]),
    "asrd_nemo_beam": (_INT, [ctypes.POINTER(NetSearchArgs)]),
    # dense kernels (dense.cpp): the encoder projection, and one kernel level for the tests
    "asrd_dense_matmat": (None, [_P, _P, _P, _INT, _INT, _INT, _P]),
    "asrd_dense_matmat_on": (_INT, [_INT, _P, _P, _P, _INT, _INT, _INT, _P]),
    "asrd_dense_log_softmax_on": (_INT, [_INT, _P, _INT, _P]),
    # WFST token passing (wfst.cpp)
    "asrd_wfst_run": (_P, [ctypes.POINTER(WfstArgs)]),
    "asrd_wfst_sizes": (None, [_P, _P]),
    "asrd_wfst_copy": (None, [_P, _P]),
    "asrd_wfst_free": (None, [_P]),
    # ARPA reader (arpa.cpp)
    "asrd_arpa_open": (_P, [_I]),
    "asrd_arpa_close": (None, [_P]),
    "asrd_arpa_feed": (_INT, [_P, ctypes.POINTER(ArpaArgs), _C, _I]),
    "asrd_arpa_vocab": (_I, [_P, _P, _I]),
    "asrd_arpa_lines": (_I, [_P, _I, _P, _I]),
}


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """``lib`` with every export's return and argument types set from :data:`EXPORTS`."""
    for name, (restype, argtypes) in EXPORTS.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib
