"""Acceleration layers over sync-free step functions: eager, ``torch.compile`` and CUDA graphs.

Decoders are written as a loop state (an object whose attributes are tensors, or pytrees of
tensors) plus step functions ``step(state) -> None`` that replace those attributes with new
tensors computed by masked tensor operations only (no host synchronisation, no Python
branching on tensor values). The driver loop checks one flag tensor between steps.

:class:`StepRunner` runs such steps in one of three modes, always the same step functions:

- ``"eager"``: call the function (CPU tests cover this path);
- ``"compile"``: call ``torch.compile(function)`` (optional; costs seconds per function cold);
- ``"cuda_graphs"``: capture the function once per (state layout) in a CUDA graph and replay
  it. Capture needs fixed memory addresses, so the captured callable copies every attribute the
  step replaced back into the tensors it read (the state is updated in place) — the step's
  logic is unchanged. A state layout change (e.g. hypotheses storage doubled) re-captures.

Device-resident loops (DESIGN rule 3): :func:`run_until_done` replays a round of steps and reads the
loop's flag on the host only at a few check points (O(log) per call); :class:`LoopCache` keeps a
loop's static buffers and captured graphs between calls, keyed by :func:`bucket`-padded shapes and
:func:`parameters_key`; :func:`count_host_reads` counts the host reads of any code on the CPU.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Hashable, Iterator

import torch
import torch.utils._python_dispatch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ._validation import weights_versions
from .errors import DecodingInputError
from .round_check import CompiledRoundMismatch, first_difference, state_leaves, state_twin

__all__ = [
    "StepRunner", "resolve_mode", "HostReadCounter", "count_host_reads", "run_until_done", "LoopStats",
    "LoopCache", "bucket", "parameters_key", "EmulatedGraphRunner", "DeviceSyncCounter", "count_device_syncs",
    "strict_syncs", "compiled_graphs", "compiles", "mark_lengths_dynamic", "PureStep", "copy_all", "ROUND_CHECKS",
]

MODES = ("eager", "compile", "cuda_graphs")


def resolve_mode(mode: str | None, device: torch.device) -> str:
    """``None``/"auto" -> CUDA graphs on a CUDA device, eager elsewhere; validate explicit modes (an unknown
    mode, or CUDA graphs off CUDA: :class:`~asrdecode.errors.DecodingInputError`, a ``ValueError``)."""
    if mode in (None, "auto"):
        return "cuda_graphs" if device.type == "cuda" else "eager"
    if mode not in MODES:
        raise DecodingInputError(f"acceleration mode must be one of {MODES} or 'auto', got {mode!r}")
    if mode == "cuda_graphs" and device.type != "cuda":
        raise DecodingInputError("acceleration mode 'cuda_graphs' needs tensors on a CUDA device")
    return mode


class PureStep:
    """A round written for ``torch.compile`` as a pure function, attached to the in-place round it equals
    (``round_fn.pure = PureStep(...)``): ``body(*inputs(state))`` reads its input tensors and writes only
    tensors it makes (scratch and the new state), then ``write(state, outputs)`` copies the new state into
    the loop's buffers, eagerly, outside the compiled code.

    Compiled this way, a graph has no mutated and no aliased inputs: no kernel writes a buffer that it (or
    a kernel fused with it) also gathers from, and AOTAutograd passes every input as itself (no synthetic
    bases rebuilt by ``as_strided``). Those are the paths where a compiled in-place round can race on a
    GPU while its CPU build is exact (the CTC prefix round left eager's on CUDA in its first round).
    Eager mode runs the in-place round; a compiled round costs one copy per state buffer more."""

    def __init__(self, inputs: Callable[[Any], tuple], body: Callable[..., Any],
                 write: Callable[[Any, Any], None]) -> None:
        self.inputs, self.body, self.write = inputs, body, write


def copy_all(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    """``dst.copy_(src)`` for every pair, one multi-tensor (``_foreach_copy_``) call per destination dtype and
    device: a pure round's write-back in a few kernel launches instead of one per state tensor."""
    groups: dict[tuple[torch.dtype, torch.device], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for dst, src in zip(dsts, srcs, strict=True):
        to, fro = groups.setdefault((dst.dtype, dst.device), ([], []))
        to.append(dst)
        fro.append(src)
    for to, fro in groups.values():
        torch._foreach_copy_(to, fro)


def _compiled_step(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """``fn`` under ``torch.compile``: its :class:`PureStep` compiled, with the eager write-back, when it
    has one; else ``fn`` itself compiled (its in-place writes become the graph's input mutations)."""
    pure: PureStep | None = getattr(fn, "pure", None)
    # the backend: torch.compile's default (Inductor), or the one ``python -m torch._inductor.compiler_bisector
    # run ...`` is testing
    backend = os.environ.get("TORCH_COMPILE_BACKEND")
    body = fn if pure is None else pure.body
    target = torch.compile(body, dynamic=False) if not backend else torch.compile(body, dynamic=False, backend=backend)

    def run(state: Any) -> None:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            if pure is None:
                target(state)
            else:
                pure.write(state, target(*pure.inputs(state)))

    return run


#: graphs Dynamo keeps per round function (its default, 8, is shared by every loop that compiles the same
#: round: past it a loop's round would run eagerly, silently): one per search setting and batch bucket (the
#: lengths are symbolic where a round reads them; the batch stays static: ``dynamic=None`` would make it
#: symbolic after the second bucket, but Dynamo cannot trace the rounds' ``gather(..., out=)`` on symbolic
#: sizes)
RECOMPILE_LIMIT = 64


class StepRunner:
    """Runs step functions over a loop state in the chosen mode.

    Args:
        mode: "eager", "compile" or "cuda_graphs".
        state_names: the state attributes the steps read and replace (tensors or pytrees of
            tensors); for CUDA graphs these are the static buffers.
    """

    def __init__(self, mode: str, state_names: tuple[str, ...]) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.state_names = state_names
        self._compiled: dict[Callable, Callable] = {}
        self._graphs: dict[tuple, Any] = {}
        self.captures = 0  # CUDA graphs captured by this runner (a warm call of a cached loop adds none)
        # rounds whose compiled form was checked against eager (run_until_done): equal, or not (then they
        # run uncompiled in this runner)
        self.verified: set[Callable] = set()
        self.rejected: set[Callable] = set()

    def check_key(self, fn: Callable, state: Any) -> tuple:
        """What a compiled round's check holds for (:data:`ROUND_CHECKS`): the round, whether it is compiled
        inside CUDA graphs, and its state's shapes, dtypes and devices (what its compiled graph is traced for)."""
        return (fn, self.mode, _COMPILE_IN_GRAPHS["on"],
                tuple((tuple(x.shape), x.dtype, x.device) for x in state_leaves(state, self.state_names)))

    def compiles(self, fn: Callable) -> bool:
        """Whether ``fn`` runs compiled here now: a compiling mode (:func:`compiles`) and not rejected."""
        return compiles(self.mode) and fn not in self.rejected

    def __call__(self, fn: Callable[..., None], state: Any, *args: Any) -> None:
        """Run ``fn(state, *args)``; extra arguments (e.g. a row subset) exist in eager mode only."""
        if self.mode == "eager":
            fn(state, *args)
        elif any(a is not None for a in args):
            raise ValueError(f"step arguments are not supported in {self.mode} mode")
        elif self.mode == "compile":
            self.bound(fn, state)()
        else:
            self._replay(fn, state)

    def bound(self, fn: Callable[[Any], None], state: Any) -> Callable[[], None]:
        """A zero-argument callable that runs ``fn(state)`` once per call in this runner's mode, with the
        per-call work (graph lookup, capture) done here once: what a loop replaying a step many times
        between two checks calls. Valid while the state's tensors keep their addresses."""
        if self.mode == "eager" or (self.mode == "compile" and fn in self.rejected):
            return lambda: fn(state)
        if self.mode == "compile":
            compiled = self._compiled_fn(fn)
            return lambda: compiled(state)
        return self._graph(fn, state).replay  # pragma: no cover - needs CUDA

    def _compiled_fn(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """``fn`` compiled (once per runner and function): see :func:`_compiled_step`."""
        compiled = self._compiled.get(fn)
        if compiled is None:
            compiled = self._compiled[fn] = _compiled_step(fn)
        return compiled

    def _in_place(self, fn: Callable[[Any], None], state: Any) -> Callable[[], None]:
        """Wrap ``fn`` so that the state's tensors are updated in place (fixed addresses)."""

        def run() -> None:
            before = {name: getattr(state, name) for name in self.state_names}
            fn(state)
            for name, old in before.items():
                new = getattr(state, name)
                old_leaves, _ = tree_flatten(old)
                new_leaves, _ = tree_flatten(new)
                for o, n in zip(old_leaves, new_leaves):
                    if isinstance(o, torch.Tensor) and o is not n:
                        o.copy_(n)
                setattr(state, name, old)

        return run

    def _replay(self, fn: Callable[[Any], None], state: Any) -> None:  # pragma: no cover - needs CUDA
        self._graph(fn, state).replay()

    def _graph(self, fn: Callable[[Any], None], state: Any) -> Any:  # pragma: no cover - needs CUDA
        """The CUDA graph of ``fn`` over the state's current tensors (captured at the first request)."""
        leaves = state_leaves(state, self.state_names)
        fused = self.compiles(fn)
        key = (fn, fused, tuple(x.data_ptr() for x in leaves))
        graph = self._graphs.get(key)
        if graph is None:
            target = fn
            if fused:  # torch.compile first: fused kernels, fewer launches per replay
                target = self._compiled_fn(fn)
            run = self._in_place(target, state)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            saved = [x.clone() for x in leaves]
            with torch.cuda.stream(stream):
                run()  # warm-up on a side stream, as capture requires
            torch.cuda.current_stream().wait_stream(stream)
            for x, s in zip(leaves, saved):
                x.copy_(s)  # undo the warm-up: the step must run exactly once
            graph = torch.cuda.CUDAGraph()
            self.captures += 1
            with torch.cuda.graph(graph):
                run()
            for x, s in zip(leaves, saved):
                x.copy_(s)  # capture does not execute; restore and replay below
            self._graphs[key] = graph
        return graph


# -- host reads: the syncs a device-resident loop must avoid ------------------------------------------

HOST_READ_NAMES = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__"})


class HostReadCounter(TorchFunctionMode):
    """Counts tensor reads that copy a value to the host (a device-to-host sync on a GPU).

    Counted: ``Tensor.__bool__`` (``if t``, ``bool(t)``, ``while t.any()``), ``item``, ``tolist``,
    ``__int__``, ``__float__`` and ``__index__``. Works on the CPU, so the bound a GPU loop needs is
    tested without one. ``count`` is the total, ``by_name`` the count per method.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: dict[str, int] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READ_NAMES:
            self.count += 1
            self.by_name[name] = self.by_name.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@contextmanager
def count_host_reads() -> Iterator[HostReadCounter]:
    """``with count_host_reads() as reads: ...`` then ``reads.count``: host reads made inside the block."""
    counter = HostReadCounter()
    with counter:
        yield counter


# -- device-resident loops: a flag read at growing intervals ------------------------------------------


class LoopStats:
    """Rounds a loop needed per frame in earlier calls (the first check of the next call is placed there)."""

    def __init__(self, initial: float = 1.0) -> None:
        self.rounds_per_frame = initial

    def estimate(self, frames: int) -> int:
        return max(1, int(self.rounds_per_frame * max(frames, 1) * 1.05) + 1)

    def update(self, rounds: int, frames: int) -> None:
        if frames > 0:
            self.rounds_per_frame = rounds / frames


def run_until_done(
    run: StepRunner,
    body: Callable[[Any], None],
    state: Any,
    done: Callable[[Any], torch.Tensor],
    *,
    first_check: int,
    limit: int,
    on_check: Callable[[int], None] | None = None,
) -> int:
    """Run ``body(state)`` repeatedly until ``done(state)`` (a 0-dim bool tensor that ``body`` keeps
    current) is true; returns the rounds run.

    The flag is read on the host only at check points: after ``first_check`` rounds, then after
    intervals that start at a quarter of it and double, so a call makes O(log) host reads whatever its
    length (none between checks: the rounds are queued on the device, replayed CUDA graphs with
    ``run`` in ``"cuda_graphs"`` mode). ``body`` must leave a finished state unchanged (masked steps),
    so the rounds run past the end are no-ops. ``on_check(rounds)`` runs before each round batch (e.g.
    to grow storage on the host). Raises :class:`RuntimeError` past ``limit`` rounds.

    A compiled ``body`` (``run`` compiles it: "compile" mode, or CUDA graphs inside :func:`compiled_graphs`)
    is checked on the runner's first call: each round also runs eagerly on a copy of the state it started
    from (:func:`_checked_round`), with a host read per round. The first round that differs keeps the eager
    result, warns (:class:`~asrdecode.round_check.CompiledRoundMismatch`) and runs ``body`` uncompiled in
    this runner from then on; a call without a difference marks it verified (later calls run it unchecked).
    """
    checking, key = False, ()
    if run.compiles(body) and body not in run.verified:
        key = run.check_key(body, state)
        verdict = ROUND_CHECKS.get(key)
        if verdict is None:
            checking = True
        else:
            (run.verified if verdict else run.rejected).add(body)
    rounds = 0
    target = max(1, first_check)
    interval = max(1, first_check // 4)
    while True:
        if on_check is not None:
            on_check(target - rounds)
        step = (lambda: _checked_round(run, body, state, key)) if checking else run.bound(body, state)
        with nullcontext() if checking else _strict(done(state).device):
            while rounds < target:
                step()
                rounds += 1
        if bool(done(state)):
            if checking and body not in run.rejected:
                run.verified.add(body)
                ROUND_CHECKS[key] = True
            return rounds
        if rounds >= limit:
            raise RuntimeError(f"device loop did not finish in {limit} rounds")
        target = min(rounds + interval, limit)
        interval *= 2


#: the compiled rounds checked in this process (:func:`run_until_done`), by :meth:`StepRunner.check_key`: True
#: equal to eager, False not (run uncompiled). A loop made anew for each call (a streaming chunk) is checked
#: once, not at every call. (Python constants of a round, e.g. a beam width, are not in the key: two settings
#: over the same shapes share a verdict.)
ROUND_CHECKS: dict[tuple, bool] = {}


def _checked_round(run: StepRunner, body: Callable[[Any], None], state: Any, key: tuple) -> None:
    """One round of ``body`` in ``run``'s compiled form, checked against the eager round on a copy of the
    state it started from; on a difference the state takes the eager result and ``body`` is rejected
    (uncompiled in ``run`` from then on, a :class:`~asrdecode.round_check.CompiledRoundMismatch` warning)."""
    if body in run.rejected:
        run.bound(body, state)()
        return
    twin = state_twin(state, run.state_names)
    run.bound(body, state)()
    body(twin)
    diff = first_difference(state, twin, run.state_names)
    if diff is None:
        return
    run.rejected.add(body)
    ROUND_CHECKS[key] = False
    copy_all(state_leaves(state, run.state_names), state_leaves(twin, run.state_names))
    name = getattr(body, "__qualname__", repr(body))
    warnings.warn(f"the compiled round {name} differs from the eager round ({diff.name}, leaf {diff.leaf}: "
                  f"{diff.count} elements, {diff.detail}); it runs uncompiled from now on", CompiledRoundMismatch,
                  stacklevel=3)


_STRICT = {"on": False}
_COMPILE_IN_GRAPHS = {"on": False}


@contextmanager
def compiled_graphs() -> Iterator[None]:
    """CUDA graphs captured inside this block capture the ``torch.compile``d step (Inductor's fused
    kernels: fewer launches per replay) instead of the eager one; the first capture of each step then
    costs the compilation (seconds). Graphs captured before stay as they were (the key differs)."""
    before = _COMPILE_IN_GRAPHS["on"]
    _COMPILE_IN_GRAPHS["on"] = True
    try:
        yield
    finally:
        _COMPILE_IN_GRAPHS["on"] = before


def mark_lengths_dynamic(*dims: tuple[torch.Tensor | None, int]) -> None:
    """Mark each ``(tensor, dim)`` a length torch.compile keeps symbolic (``maybe_mark_dynamic``; ``None``
    tensors skipped): a compiled step then serves every length bucket instead of compiling for each."""
    import torch._dynamo as dynamo

    for x, dim in dims:
        if x is not None:
            dynamo.maybe_mark_dynamic(x, dim)


def compiles(mode: str) -> bool:
    """Whether a loop run in ``mode`` runs its steps through torch.compile: "compile", or CUDA graphs captured
    inside :func:`compiled_graphs`."""
    return mode == "compile" or (mode == "cuda_graphs" and _COMPILE_IN_GRAPHS["on"])


@contextmanager
def strict_syncs() -> Iterator[None]:
    """Inside this block, the rounds of every :func:`run_until_done` loop on a CUDA device run under
    ``torch.cuda.set_sync_debug_mode("error")``: any host sync inside a loop (not at its check points)
    raises. For tests on a GPU."""
    before = _STRICT["on"]
    _STRICT["on"] = True
    try:
        yield
    finally:
        _STRICT["on"] = before


@contextmanager
def _strict(device: torch.device) -> Iterator[None]:
    if not (_STRICT["on"] and device.type == "cuda"):
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()  # pragma: no cover - needs CUDA
    torch.cuda.set_sync_debug_mode("error")  # pragma: no cover
    try:  # pragma: no cover
        yield
    finally:  # pragma: no cover
        torch.cuda.set_sync_debug_mode(previous)


# -- graphs and static buffers kept between calls -------------------------------------------------------


def bucket(n: int, minimum: int = 16) -> int:
    """Padded size for ``n`` (batch or frames) so that CUDA graphs are shared between calls: the
    smallest value >= ``n`` that is a multiple of a power of two at least an eighth of ``n`` (at most
    ~25 % padding), and at least ``minimum``. E.g. 150 -> 160, 1000 -> 1024, 5 -> 16 (minimum 16)."""
    if n <= minimum:
        return minimum
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step


def parameters_key(model: Any) -> tuple:
    """Addresses, shapes, dtypes and versions of a model's parameters and buffers (an ``nn.Module``): a
    captured graph reads them by address, so a key with them notices replaced tensors; and it may read
    data the model derived from them (e.g. ``LSTMTransducer``'s cached step weights, rebuilt as new
    tensors when a parameter changes in place), so an in-place update is a new key too (an inference
    tensor's: its contents' checksum, :func:`~asrdecode._validation.weights_versions`)."""
    if not isinstance(model, torch.nn.Module):
        return (id(model),)
    tensors = list(model.parameters()) + list(model.buffers())
    return (id(model),) + tuple((t.data_ptr(), tuple(t.shape), t.dtype, v)
                                for t, v in zip(tensors, weights_versions(tensors)))


class LoopCache:
    """Loop states (static buffers) with their :class:`StepRunner` (captured graphs), kept between
    calls by key (least recently used out beyond ``size`` entries)."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            entry = make()
            self._entries[key] = entry
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return entry

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class _EmulatedGraph:
    """What replaying a captured graph does, run eagerly on any device: the step updates the state's
    tensors in place, which must keep their addresses (else a real graph would read stale memory)."""

    def __init__(self, run: Callable[[], None], leaves: Callable[[], list[torch.Tensor]]) -> None:
        self._run = run
        self._leaves = leaves
        self._ptrs = [x.data_ptr() for x in leaves()]

    def replay(self) -> None:
        self._run()
        if [x.data_ptr() for x in self._leaves()] != self._ptrs:
            raise AssertionError("a step moved a state tensor: a captured CUDA graph would read stale memory")


class EmulatedGraphRunner(StepRunner):
    """The CPU twin of ``"cuda_graphs"`` mode, for tests: steps run eagerly through the same in-place
    wrapper a capture uses, "captured" once per (function, tensor addresses) exactly as a real graph is
    (so ``captures`` counts what a GPU would capture), and every replay checks that no state tensor moved.

    With ``pure=True`` a step with a :class:`PureStep` runs as that (uncompiled): what ``compiled_graphs()``
    captures, Inductor aside; each replay also checks that the body left its input tensors as they were.
    Inside :func:`compiled_graphs` the "captured" step is the torch.compile'd one, as on a GPU."""

    def __init__(self, mode: str, state_names: tuple[str, ...], pure: bool = False) -> None:
        super().__init__("eager" if mode == "eager" else "cuda_graphs", state_names)
        self.pure = pure

    def _graph(self, fn: Callable[[Any], None], state: Any) -> Any:
        leaves = state_leaves(state, self.state_names)
        fused = self.compiles(fn)
        key = (fn, fused, tuple(x.data_ptr() for x in leaves))
        graph = self._graphs.get(key)
        if graph is None:
            target = fn
            if fused:
                target = self._compiled_fn(fn)
            elif self.pure and getattr(fn, "pure", None) is not None:
                target = _checked_pure(fn, lambda: state_leaves(state, self.state_names))
            graph = self._graphs[key] = _EmulatedGraph(self._in_place(target, state),
                                                       lambda: state_leaves(state, self.state_names))
            self.captures += 1
        return graph


def _checked_pure(fn: Callable[[Any], None], leaves: Callable[[], list[torch.Tensor]]) -> Callable[[Any], None]:
    """``fn``'s :class:`PureStep` run eagerly, raising if its body changed one of its input tensors or of
    the loop's state tensors ``leaves()``."""
    pure: PureStep = fn.pure  # type: ignore[attr-defined]  # (the caller checked it has one)

    def run(state: Any) -> None:
        inputs = pure.inputs(state)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)] + leaves()
        before = [x.clone() for x in tensors]
        out = pure.body(*inputs)
        for i, (x, b) in enumerate(zip(tensors, before)):
            if not torch.equal(x, b):
                raise AssertionError(f"the pure step {pure.body.__name__} wrote its input or state tensor {i}")
        pure.write(state, out)

    return run


# -- ops that synchronise with the device whatever Python does with their result -------------------------

_SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::unique_dim",
    "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount",
    "aten::equal", "aten::is_nonzero", "aten::histc",
})  # fmt: skip


def _sync_reason(func: Any, args: tuple, kwargs: dict) -> str | None:
    name = func._schema.name
    if name in _SYNC_OPS:
        return name
    if name == "aten::repeat_interleave" and kwargs.get("output_size") is None and len(args) < 3:
        return name + " (no output_size)"
    if name in ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"):
        indices = args[1] if len(args) > 1 else ()
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ()):
            return name + " with a boolean mask"
    return None


class DeviceSyncCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ATen ops that make the host wait for the device (``nonzero``, boolean-mask indexing,
    ``unique``, ``item`` / ``bool`` via ``_local_scalar_dense``, ...): the CPU proxy of
    ``torch.cuda.set_sync_debug_mode("error")``. ``count`` is the total, ``by_op`` the count per op;
    ``ops`` counts every op run (kernel launches, roughly)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.ops = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self.ops += 1
        reason = _sync_reason(func, args, kwargs)
        if reason is not None:
            self.count += 1
            self.by_op[reason] = self.by_op.get(reason, 0) + 1
        return func(*args, **kwargs)


@contextmanager
def count_device_syncs() -> Iterator[DeviceSyncCounter]:
    """``with count_device_syncs() as syncs: ...`` then ``syncs.count`` / ``syncs.by_op`` / ``syncs.ops``."""
    counter = DeviceSyncCounter()
    with counter:
        yield counter
