"""Driver of the WIND beam search steps on the native engine (``transducer_wind.cpp``).

:class:`NativeWindStep` runs one step of :class:`asrdecode.transducer.beam.BeamLoop` with
``method="wind"`` in two engine calls around the joint network: :meth:`pop` picks each stepping
utterance's earliest frame list and lists the (hypothesis, window frame) rows the joint must score;
:meth:`run` takes those logits and does the rest of the step in place on the loop's ``[B, S]`` state
tensors (``S = (window + 1) * beam``). The prediction network then runs, in torch, on the emitting
rows. Fusion models as in :mod:`asrdecode.native.transducer_beam`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from ..fusion import FusionScorer
from ._lib import check_status
from .abi import WindArgs as _Args
from .transducer_beam import EngineStep, _is_double

__all__ = ["NativeWindStep"]


class NativeWindStep(EngineStep):
    """The native steps of one WIND search (``loop``: a ``BeamLoop`` with ``method="wind"``, CPU, eager).

    :meth:`pop` returns the number ``m`` of joint rows: encoder rows ``enc_rows[:m]`` (``b * T + frame``)
    and hypothesis rows ``dec_rows[:m]``. After :meth:`run`: the loop's state holds the new hypotheses,
    ``parent_flat [B*S]`` their parents' rows, ``emitted`` / ``labels`` what the prediction network
    takes, ``emit_rows[:num_emitted]`` the emitting rows, ``num_active`` the utterances stepping next.
    """

    def __init__(self, loop: Any, scorer: FusionScorer) -> None:
        super().__init__(loop, scorer, loop.S)
        B, K, W = loop.B, loop.K, loop.window
        self.active = torch.zeros(B, dtype=torch.bool)
        self.tmin = torch.zeros(B, dtype=torch.long)
        self.row_of = torch.zeros(B * K * W, dtype=torch.long)
        self.enc_rows = torch.zeros(B * K * W, dtype=torch.long)
        self.dec_rows = torch.zeros(B * K * W, dtype=torch.long)
        fusion = scorer.fusion
        self.args = _Args(
            batch=B, beam=K, vocab=loop.V, window=W, frames=loop.T, blank=loop.blank, early=int(loop.early),
            lm_weighted=int(loop.lm_weighted), max_symbols=-1 if loop.max_symbols is None else loop.max_symbols,
            num_models=len(fusion), is_double=_is_double(loop.dtype), lam=loop.lam, beta=loop.beta,
            lengths=self.lengths.data_ptr(), offset=self.offset.data_ptr(), final_chunk=self.final.data_ptr(),
            score=loop.score.data_ptr(), time=loop.time.data_ptr(), symbols=loop.symbols.data_ptr(),
            hash=loop.hash.data_ptr(), nlabels=loop.nlabels.data_ptr(), last=loop.last.data_ptr(),
            lm_states=loop.lm_states.data_ptr(), active=self.active.data_ptr(), tmin=self.tmin.data_ptr(),
            row_of=self.row_of.data_ptr(), enc_rows=self.enc_rows.data_ptr(), dec_rows=self.dec_rows.data_ptr(),
            parent_flat=self.parent_flat.data_ptr(), emitted=self.emitted.data_ptr(), labels=self.labels.data_ptr(),
            emit_rows=self.emit_rows.data_ptr(), counts=ctypes.addressof(self.counts),
            models=self.models, has_gamma=int(loop.gamma is not None),
            gamma=0.0 if loop.gamma is None else loop.gamma)
        self.num_active = self.lib.asrd_wind_active(ctypes.byref(self.args))

    def pop(self) -> int:
        """Pick the popped lists; returns the number of joint rows (``enc_rows`` / ``dec_rows``)."""
        m = int(self.lib.asrd_wind_pop(ctypes.byref(self.args)))
        check_status(m, "native WIND beam search")
        return m

    def run(self, logits: torch.Tensor) -> None:
        """The rest of the step from the joint's ``logits [m, V]`` (the loop's dtype, contiguous)."""
        self.call_step(self.lib.asrd_wind_step, logits, "native WIND beam search")
