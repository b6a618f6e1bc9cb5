"""Build and load the native engine: C++17 sources compiled by the system compiler, loaded with ctypes.

The library's file name holds a hash of the sources and the compile command, so a changed source
always gives a new library (never a stale one), and concurrent builds never see a half-written
file (each compiles to a temporary name and renames it into place). It lives next to the sources
(``_build/``) when that directory is writable, else in the per-user cache folder
(:func:`asrdecode.paths.user_cache_dir`: ``$ASRDECODE_CACHE``, ``$XDG_CACHE_HOME/asrdecode`` or ``~/.cache/asrdecode``). ``python -m asrdecode.native`` builds it ahead of time (``make install``
does); otherwise the first use builds it, saying so on stderr (a few seconds, once).
``ASRDECODE_NATIVE=0`` in the environment turns the engine off (``engine="auto"`` then uses torch).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..errors import NON_FINITE_JOINT_MESSAGE, AsrDecodeError, DecodingInputError, NonFiniteJointError
from ..paths import user_cache_dir
from ..progress import status

if TYPE_CHECKING:
    import torch

__all__ = ["NativeEngineUnavailable", "NativeEngineError", "NativeMemoryError", "check_status", "available", "load",
           "build", "library_path"]

_HERE = Path(__file__).resolve().parent
_SOURCES = ("abi.h", "abi.cpp", "abi_layout.inc", "engine.h", "ctc_beam.cpp", "tree.cpp", "wfst.cpp", "checks.cpp",
            "transducer_common.h", "transducer_beam.cpp", "transducer_beam_step.h", "transducer_beam_net.cpp",
            "transducer_pred.h", "transducer_wind_step.h", "transducer_wind.cpp", "transducer_greedy_lstm.cpp",
            "dense.h", "dense.cpp", "transducer_modified_beam.cpp", "transducer_nemo_beam.cpp", "guard.h", "arpa.cpp")
_COMPILE_UNITS = ("abi.cpp", "ctc_beam.cpp", "tree.cpp", "wfst.cpp", "checks.cpp", "transducer_beam.cpp",
                  "transducer_beam_net.cpp", "transducer_wind.cpp", "transducer_greedy_lstm.cpp", "dense.cpp",
                  "transducer_modified_beam.cpp", "transducer_nemo_beam.cpp", "arpa.cpp")
# -O3 without -march=native: the binary runs on any x86-64 CPU. No fast-math (IEEE arithmetic, the
# same results as the tensor engine); no FMA contraction except where the code asks for it.
_FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")
_ABI_VERSION = 4
# ASRDECODE_NATIVE_SANITIZE=1 (``make test-asan``): an AddressSanitizer + UBSan build in its own directory
# (``_build_asan``); the Python process then needs libasan preloaded (LD_PRELOAD, see the Makefile).
_SANITIZE_FLAGS = ("-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                   "-fno-sanitize-recover=undefined")


def _sanitize() -> bool:
    return os.environ.get("ASRDECODE_NATIVE_SANITIZE", "0") == "1"


def _flags() -> tuple[str, ...]:
    return _FLAGS + _SANITIZE_FLAGS if _sanitize() else _FLAGS


class NativeEngineUnavailable(AsrDecodeError, RuntimeError):
    """The native engine cannot be used here (no C++ compiler, or the build failed); the message says why."""


class NativeEngineError(AsrDecodeError, RuntimeError):
    """The native engine failed inside a call (a C++ exception, caught at the C ABI); the message says which."""


class NativeMemoryError(NativeEngineError, MemoryError):
    """The native engine ran out of memory inside a call (``std::bad_alloc``, caught at the C ABI)."""


#: guard.h's return codes: an exception caught at the C ABI; a joint row with NaN / +inf or no possible class
OUT_OF_MEMORY, INTERNAL_ERROR, NON_FINITE_JOINT = -2, -3, -4


def check_status(rc: int, what: str, message: str = "") -> None:
    """Raise the named error of an entry point's guard.h code ``rc`` (:data:`OUT_OF_MEMORY`:
    :class:`NativeMemoryError`; :data:`INTERNAL_ERROR`: :class:`NativeEngineError`; :data:`NON_FINITE_JOINT`:
    :class:`~asrdecode.errors.NonFiniteJointError`); other codes pass.
    ``what`` names the search, ``message`` is the engine's own text, if any."""
    detail = f": {message}" if message else ""
    if rc == NON_FINITE_JOINT:
        raise NonFiniteJointError(f"{what}: {NON_FINITE_JOINT_MESSAGE}")
    if rc == OUT_OF_MEMORY:
        raise NativeMemoryError(f"{what} ran out of memory{detail}; use a smaller batch, beam or input")
    if rc == INTERNAL_ERROR:
        raise NativeEngineError(f"{what} failed inside the C++ engine{detail}")


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_error: Optional[str] = None


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _digest(compiler: str) -> str:
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(name.encode())
        h.update((_HERE / name).read_bytes())
    h.update(" ".join((compiler, *_flags())).encode())
    return h.hexdigest()[:16]


def _build_dirs() -> list[Path]:
    sub = "_build_asan" if _sanitize() else "_build"
    cache = user_cache_dir()
    return [_HERE / sub, cache / sub.lstrip("_") if _sanitize() else cache]


def library_path(compiler: Optional[str] = None) -> Optional[Path]:
    """Where the library for the current sources is (or would be) built; ``None`` without a compiler."""
    compiler = compiler or _compiler()
    if compiler is None:
        return None
    name = f"libasrdecode_native-{_digest(compiler)}.so"
    for d in _build_dirs():
        if (d / name).exists():
            return d / name
    for d in _build_dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d / name
        except OSError:
            continue
    return None


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeEngineUnavailable(f"compiling the native engine failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")


def _compile_units(compiler: str, out_dir: Path) -> list[str]:
    """Compile every unit to an object file in ``out_dir``, as many at once as there are CPUs (the
    largest first); returns the object files in unit order."""
    jobs = [(u, str(out_dir / (Path(u).stem + ".o"))) for u in _COMPILE_UNITS]
    order = sorted(jobs, key=lambda j: -(_HERE / j[0]).stat().st_size)
    width = max(1, min(len(jobs), os.cpu_count() or 1))
    running: list[tuple[list[str], subprocess.Popen]] = []
    failures: list[str] = []

    def reap(block: bool) -> None:
        for item in list(running):
            cmd, proc = item
            if block or proc.poll() is not None:
                _, err = proc.communicate()
                running.remove(item)
                if proc.returncode != 0:
                    failures.append(f"({' '.join(cmd)}):\n{err[-2000:]}")

    for unit, obj in order:
        while len(running) >= width:  # a slot frees when any job ends
            reap(block=False)
            if len(running) >= width:
                time.sleep(0.01)
        cmd = [compiler, *(f for f in _flags() if f != "-shared"), "-c", str(_HERE / unit), "-o", obj]
        running.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    reap(block=True)
    if failures:
        raise NativeEngineUnavailable("compiling the native engine failed " + failures[0])
    return [obj for _, obj in jobs]


def build(verbose: bool = True) -> Path:
    """Compile the library for the current sources (if not built yet); return its path."""
    compiler = _compiler()
    if compiler is None:
        raise NativeEngineUnavailable("no C++ compiler found (c++, g++ or clang++; or set CXX)")
    path = library_path(compiler)
    if path is None:
        raise NativeEngineUnavailable("no writable directory for the native library")
    if path.exists():
        return path
    if verbose:
        status(f"asrdecode: compiling the native search engine ({path.name}), once ...")
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.so", dir=path.parent)
    os.close(fd)
    objects = tempfile.mkdtemp(prefix=path.stem + ".", suffix=".objs", dir=path.parent)
    try:
        objs = _compile_units(compiler, Path(objects))
        _run([compiler, *_flags(), *objs, "-o", tmp])
        os.replace(tmp, path)
    finally:
        shutil.rmtree(objects, ignore_errors=True)
        if os.path.exists(tmp):
            os.unlink(tmp)
    # stale libraries of older sources in the same directory
    for old in path.parent.glob("libasrdecode_native-*.so"):
        if old != path:
            try:
                old.unlink()
            except OSError:
                pass
    return path


def load() -> ctypes.CDLL:
    """The loaded library (built first if needed); raises :class:`NativeEngineUnavailable`."""
    global _lib, _error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        if _error is not None:
            raise NativeEngineUnavailable(_error)
        if disabled():
            _error = "disabled by ASRDECODE_NATIVE=0"
            raise NativeEngineUnavailable(_error)
        try:
            lib = ctypes.CDLL(str(build()))
            if lib.asrd_abi_version() != _ABI_VERSION:
                raise NativeEngineUnavailable("the native library's ABI version does not match")
        except NativeEngineUnavailable as err:
            _error = str(err)
            raise
        except OSError as err:
            _error = f"loading the native engine failed: {err}"
            raise NativeEngineUnavailable(_error) from None
        from .exports import bind

        _lib = bind(lib)  # every export's signature, from one table
        return lib


def loaded() -> bool:
    """Whether the library is loaded already (nothing is built or loaded by asking)."""
    return _lib is not None


def backtrack(tok: "torch.Tensor", par: "torch.Tensor", dat: "torch.Tensor",
              slots: "torch.Tensor") -> list[list[tuple[list[int], list[int]]]]:
    """:meth:`asrdecode.beam_hyps.BeamTree.backtrack` on the engine: int64 CPU ``tok, par, dat [S, B, K]``,
    ``slots [B, N]`` (negative: none)."""
    import torch

    lib = load()
    tok, par, dat, slots = (t.contiguous() for t in (tok, par, dat, slots))
    steps, batch, k = tok.shape
    n = slots.shape[1]
    out = torch.empty((2, batch, n, steps), dtype=torch.int64)
    out_len = torch.empty((batch, n), dtype=torch.int64)
    if lib.asrd_backtrack(tok.data_ptr(), par.data_ptr(), dat.data_ptr(), steps, batch, k, slots.data_ptr(), n,
                          out[0].data_ptr(), out[1].data_ptr(), out_len.data_ptr()) != 0:
        raise DecodingInputError("backpointer tree holds a parent slot out of range")
    lens = out_len.tolist()
    seqs = out.tolist()
    return [[(seqs[0][b][j][: lens[b][j]], seqs[1][b][j][: lens[b][j]]) for j in range(n)] for b in range(batch)]


def log_prob_extremes(x: "torch.Tensor", lengths: "Optional[torch.Tensor]") -> Optional[tuple[float, float]]:
    """``(largest |logsumexp|, smallest value)`` over the valid frames of CPU ``x [B, T, V]`` (float32 or
    float64, frames contiguous; ``lengths [B]`` int64 or ``None``: every frame), computed by the engine;
    ``None`` when the engine is not loaded or ``x`` does not fit (the caller then uses torch)."""
    import torch

    if _lib is None or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return None
    B, T, V = x.shape
    if x.stride(2) != 1 or x.stride(1) != V:
        return None
    if lengths is not None:
        lengths = lengths.to(torch.int64).contiguous()
    out = (ctypes.c_double * 2)()
    _lib.asrd_check_log_probs(x.data_ptr(), int(x.dtype == torch.float64), B, T, V, x.stride(0),
                              None if lengths is None else lengths.data_ptr(), out)
    return out[0], out[1]


def disabled() -> bool:
    """Whether ``ASRDECODE_NATIVE=0`` turns the engine off."""
    return os.environ.get("ASRDECODE_NATIVE", "1") == "0"


def available() -> bool:
    """Whether the native engine can be used (builds it on first call if needed)."""
    try:
        load()
        return True
    except NativeEngineUnavailable:
        return False


def unavailable_reason() -> Optional[str]:
    """Why the engine is unavailable (after a failed :func:`load`), else ``None``."""
    return _error
