"""The native CPU search engine: C++17 hypothesis bookkeeping behind a plain C ABI, loaded with ctypes.

The tensor engine (PyTorch) runs every search on GPU and for large batches; on CPU each of its
steps is a chain of ~100 small tensor operations, which dominates at batch 1. The native engine
runs the same algorithms' frame loops in C++ over the same state tensors (in place), so results
are identical and a stream can move between engines. First user: the CTC prefix beam search
(:func:`asrdecode.ctc.beam_search` with ``engine="native"``, the default on CPU).

``python -m asrdecode.native`` builds the library ahead of time (see :mod:`asrdecode.native._lib`).
"""

from ._lib import NativeEngineUnavailable, available, build, load

__all__ = ["NativeEngineUnavailable", "available", "build", "load"]
