"""Driver of the ALSD++ / AES++ beam search steps on the native engine (``transducer_beam.cpp``).

:class:`NativeBeamStep` runs the search bookkeeping of one step of
:class:`asrdecode.transducer.beam.BeamLoop` (``method="alsd"`` / ``"aes"``) in one engine call: the
joint's log-softmax, fusion scores, the top ``beam`` candidates with the carried hypotheses, merging,
the state update, the tree records and the hypotheses the next step expands, all in place on the
loop's ``[B, K]`` state tensors (their memory, no copy). The joint network runs before the call, in
torch, on the frame of every slot (``frame_rows``: the engine says which); the prediction network
runs after it, in torch, on the rows the engine reports as emitting (``emit_rows``).

Fusion models are read as the CTC engine reads them (:func:`asrdecode.native.ctc_beam.describe_fusion`):
NGramLM / BoostingTree automata and WordNGramLM natively, any other model through its ``advance``
rows, computed before each step for every hypothesis.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from ..errors import DecodingInputError
from ..fusion import FusionScorer, check_model_scores
from ._lib import check_status, load
from .abi import TransducerBeamArgs as _Args
from .abi import FusionDesc as _Model
from .ctc_beam import describe_fusion

__all__ = ["EngineStep", "NativeBeamStep", "TreeRecords", "user_model_rows", "check_logits"]


#: tree steps reserved at a time (the engine writes each step's records at the next free one)
_TREE_CHUNK = 64

#: the loop's state tensors the engine reads and writes in place
_STATE = ("score", "time", "symbols", "hash", "nlabels", "last", "lm_states")


#: the dtypes the engine's per-step searches read (their scores and the joint's logits)
SEARCH_DTYPES = (torch.float32, torch.float64)


def _is_double(dtype: torch.dtype) -> int:
    """The engine's ``is_double`` flag for a search of ``dtype``: it reads :data:`SEARCH_DTYPES` only (a float16
    buffer read as float32 gave positive "log-probabilities" of 1e14: the callers pick the tensor engine)."""
    if dtype not in SEARCH_DTYPES:
        raise DecodingInputError(f"the native beam search reads float32 or float64 scores, got {dtype}")
    return int(dtype == torch.float64)


def check_logits(logits: object, dtype: torch.dtype) -> None:
    """The joint's output must be a contiguous 2-D CPU tensor of the search's dtype (the engine checks its
    width and row count against what it reads)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.dtype != dtype \
            or logits.device.type != "cpu" or not logits.is_contiguous():
        got = (f"{logits.dtype} {tuple(logits.shape)} on {logits.device}" if isinstance(logits, torch.Tensor)
               else type(logits).__name__)
        raise DecodingInputError(f"joint output must be a contiguous 2-D {dtype} CPU tensor, got {got}")


def user_model_rows(scorer: FusionScorer, models: Any, rows: list[int], lm_states: torch.Tensor, vocab: int,
                    dtype: torch.dtype) -> list[torch.Tensor]:
    """Hand the engine the ``advance`` rows ``[N, V]`` of every fusion model it does not read natively
    (indices ``rows``), from the hypotheses' states ``lm_states [N, M]``; returns the tensors to keep alive."""
    keep = []
    N = lm_states.shape[0]
    for i in rows:
        sc, nx = scorer.models[i].advance(lm_states[:, i].contiguous())
        check_model_scores(i, scorer.models[i], sc)
        sc = sc.to(dtype).contiguous()
        nx = nx.to(torch.int64).contiguous()
        if sc.shape != (N, vocab) or nx.shape != (N, vocab):
            raise DecodingInputError(f"fusion[{i}].advance returned shapes {tuple(sc.shape)}, {tuple(nx.shape)}; "
                                     f"expected ({N}, {vocab})")
        keep += [sc, nx]
        models[i].rows_scores = sc.data_ptr()
        models[i].rows_next = nx.data_ptr()
    return keep


class TreeRecords:
    """Where the engine writes each step's tree records ``(token, parent, data) [B, S]``: room reserved in a
    preallocated :class:`~asrdecode.beam_hyps.BeamTree` ``_TREE_CHUNK`` steps at a time, or (a list tree
    carried from a tensor-engine chunk) fresh tensors appended to it."""

    def __init__(self, tree: Any, batch: int, slots: int) -> None:
        self.tree, self.B, self.S = tree, batch, slots
        self._room = 0
        self._ptrs: tuple[int, int, int] = (0, 0, 0)
        self._out: torch.Tensor | None = None

    def next_step(self) -> tuple[int, int, int]:
        """The addresses of the next step's records."""
        self._out = None
        if self._room == 0:
            ptrs = self.tree.open_steps_native(_TREE_CHUNK, self.B, self.S)
            if ptrs is None:
                self._out = torch.empty((3, self.B, self.S), dtype=torch.long)
                return tuple(self._out[i].data_ptr() for i in range(3))  # type: ignore[return-value]
            self._room, self._ptrs = _TREE_CHUNK, ptrs
        return self._ptrs

    def written(self) -> None:
        """Count the step the engine wrote."""
        if self._out is not None:
            self.tree.record(self._out[0], self._out[1], self._out[2])
            return
        self.tree.close_steps(1)
        self._room -= 1
        step = self.B * self.S * 8
        self._ptrs = tuple(p + step for p in self._ptrs)  # type: ignore[assignment]


class EngineStep:
    """What the native steps of a ``BeamLoop`` (ALSD++ / AES++: :class:`NativeBeamStep`; WIND:
    :class:`~.transducer_wind.NativeWindStep`) share: the loop's state made contiguous, its per-utterance
    arrays ``[B]``, the outputs ``[B*slots]`` (``parent_flat``, ``emitted``, ``labels``, ``emit_rows``), the
    fusion descriptors, the tree records, and the call of one step (:meth:`call_step`)."""

    def __init__(self, loop: Any, scorer: FusionScorer, slots: int) -> None:
        self.lib = load()
        B = loop.B
        N = B * slots
        for name in _STATE:
            t = getattr(loop, name)
            if not t.is_contiguous():
                setattr(loop, name, t.contiguous())
        self.loop, self.scorer = loop, scorer
        self.lengths = loop.lengths.reshape(B).contiguous()
        self.offset = loop.offset.reshape(B).contiguous()
        self.final = loop.final.reshape(B).contiguous()
        self.parent_flat = torch.zeros(N, dtype=torch.long)
        self.emitted = torch.zeros(N, dtype=torch.bool)
        self.labels = torch.full((N,), loop.blank, dtype=torch.long)
        self.emit_rows = torch.zeros(N, dtype=torch.long)
        self.counts = (ctypes.c_int64 * 2)()
        fusion = scorer.fusion
        self.models = (_Model * max(len(fusion), 1))()
        self.row_models = [i for i, (m, w) in enumerate(fusion) if not describe_fusion(self.models[i], m, w)]
        self.err = ctypes.create_string_buffer(512)
        self.keep: list[torch.Tensor] = []  # the user models' score rows the engine reads this step
        self.records = TreeRecords(loop.tree, B, slots)
        self.num_emitted = 0
        self.num_active = 0
        self.args: Any = None

    def call_step(self, entry: Any, logits: torch.Tensor, what: str) -> None:
        """One step of the engine's ``entry`` from the joint's ``logits [rows, cols]`` (the loop's dtype,
        contiguous); its error as the named error (``what``: the search's name)."""
        lp, a = self.loop, self.args
        check_logits(logits, lp.dtype)
        a.logits = logits.data_ptr()
        a.logit_rows, a.logit_cols = logits.shape
        self.keep = user_model_rows(self.scorer, self.models, self.row_models, lp.lm_states, lp.V, lp.dtype)
        a.tok_out, a.par_out, a.dat_out = self.records.next_step()
        rc = entry(ctypes.byref(a), self.err, len(self.err))
        if rc != 0:
            message = self.err.value.decode(errors="replace")
            check_status(rc, what, message)
            raise DecodingInputError(f"{what}: {message}")
        self.records.written()
        self.num_active, self.num_emitted = self.counts[0], self.counts[1]


class NativeBeamStep(EngineStep):
    """The native step of one ALSD++ / AES++ search (``loop``: a ``BeamLoop``, CPU, eager).

    Before :meth:`run`: ``joint_rows[:num_active]`` are the slots the step expands and
    ``frame_rows[:num_active]`` their encoder rows (``b * T + frame``); the joint runs on those rows only.

    After :meth:`run`: ``loop.score`` ... ``loop.lm_states`` and ``loop.active`` hold the new state,
    ``parent_flat [B*K]`` each new hypothesis's parent row, ``emitted`` / ``labels [B*K]`` what the
    prediction network must take, ``emit_rows[:num_emitted]`` the emitting rows, and ``joint_rows`` /
    ``frame_rows`` / ``num_active`` are those of the next step.
    """

    def __init__(self, loop: Any, scorer: FusionScorer) -> None:
        super().__init__(loop, scorer, loop.K)
        B, K, T = loop.B, loop.K, loop.T
        N = B * K
        loop.active = loop.active.contiguous()
        self.durations = loop.dvals.contiguous()
        self.frame_rows = torch.zeros(N, dtype=torch.long)
        self.joint_rows = torch.zeros(N, dtype=torch.long)
        self.logit_pos = torch.zeros(N, dtype=torch.long)
        self.selected_ok = torch.zeros((B, K), dtype=torch.bool)
        fusion = scorer.fusion
        self.num_active = self.lib.asrd_transducer_joint_rows(
            B, K, T, loop.time.data_ptr(), loop.active.data_ptr(), self.frame_rows.data_ptr(),
            self.joint_rows.data_ptr(), self.logit_pos.data_ptr())
        self.args = _Args(
            batch=B, beam=K, vocab=loop.V, num_durations=loop.D, logit_stride=loop.V + (loop.D if loop.tdt else 0),
            frames=T, blank=loop.blank, tdt=int(loop.tdt), aes=int(loop.aes), early=int(loop.early),
            lm_weighted=int(loop.lm_weighted), max_symbols=-1 if loop.max_symbols is None else loop.max_symbols,
            num_models=len(fusion), is_double=_is_double(loop.dtype), pack=loop.rule.pack,
            lam=loop.lam, beta=loop.beta, durations=self.durations.data_ptr(), lengths=self.lengths.data_ptr(),
            offset=self.offset.data_ptr(), final_chunk=self.final.data_ptr(),
            parent_flat=self.parent_flat.data_ptr(), emitted=self.emitted.data_ptr(), labels=self.labels.data_ptr(),
            emit_rows=self.emit_rows.data_ptr(), frame_rows=self.frame_rows.data_ptr(),
            joint_rows=self.joint_rows.data_ptr(), logit_pos=self.logit_pos.data_ptr(),
            selected_ok=self.selected_ok.data_ptr(), counts=ctypes.addressof(self.counts),
            models=self.models)
        self._bind_state()

    def _bind_state(self) -> None:
        """Point the engine at the loop's current state tensors (they are updated in place)."""
        lp, a = self.loop, self.args
        a.score, a.time, a.symbols, a.hash = (lp.score.data_ptr(), lp.time.data_ptr(), lp.symbols.data_ptr(),
                                              lp.hash.data_ptr())
        a.nlabels, a.last, a.lm_states, a.active = (lp.nlabels.data_ptr(), lp.last.data_ptr(),
                                                    lp.lm_states.data_ptr(), lp.active.data_ptr())

    def run(self, logits: torch.Tensor) -> None:
        """One step from the joint's ``logits [num_active, V (+ D)]`` (the loop's dtype, contiguous) of the
        expanding slots ``joint_rows[:num_active]``."""
        self.call_step(self.lib.asrd_transducer_beam_step, logits, "native transducer beam search")

