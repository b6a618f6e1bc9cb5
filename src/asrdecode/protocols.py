"""The streaming convention every decoder follows, as Protocols that mypy checks.

:class:`StreamingDecoder`: ``init_state(batch)`` -> a state of ``batch`` fresh streams;
``advance(state, chunk [B, T, ...], lengths [B])`` -> the state after the chunk; ``partial(state)`` ->
the results so far (the state unchanged); ``finalize(state)`` -> the results at the end of the streams;
``decode(x [B, T, ...], lengths [B])`` -> the results of whole utterances (= one chunk, then finalize).

:class:`StreamState`: what many streams' states do to share one batched call: ``join(states, **parts)``
-> one batch state of the per-stream states (``parts``: what the batch needs that the streams do not hold:
CTC beam's ``template=``, a fresh batch state of the decoder; the transducer searches' ``pred_state=``,
the batch's prediction-network state) and ``batch.split_into(states)``, which gives each stream its rows back
(returning what the streams do not hold: the transducer searches' prediction-network state, else None).

The decoders and states conform by their signatures (no base class); the checks at the bottom make mypy
verify each of them, and ``tests/app/test_configs.py`` checks them at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence, TypeVar

import torch

__all__ = ["StreamingDecoder", "StreamState"]

S = TypeVar("S")
R = TypeVar("R", covariant=True)
T = TypeVar("T", bound="StreamState")


class StreamingDecoder(Protocol[S, R]):
    """A decoder of chunks: state type ``S``, results type ``R`` (one per utterance, or n-best lists)."""

    def init_state(self, batch: int, /) -> S:
        """A state of ``batch`` fresh streams."""
        ...

    def advance(self, state: S, chunk: torch.Tensor, lengths: Optional[torch.Tensor] = None, /) -> S:
        """The state after ``chunk [B, T, ...]`` (``lengths [B]`` valid frames, default all)."""
        ...

    def partial(self, state: S, /) -> R:
        """The results so far; ``state`` unchanged."""
        ...

    def finalize(self, state: S, /) -> R:
        """The results at the end of the streams."""
        ...

    def decode(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None, /) -> R:
        """Whole utterances ``x [B, T, ...]`` (``lengths [B]``)."""
        ...


class StreamState(Protocol):
    """A streaming state that batches: join many into one, split the batch back into them."""

    @classmethod
    def join(cls: type[T], states: Sequence[T], /) -> T:
        """One batch state of ``states`` (their rows in order); a state that needs more of the caller takes
        it as keywords (``template=``, ``pred_state=``)."""
        ...

    def split_into(self, states: Sequence[Any], /) -> Any:
        """Give each of ``states`` (those :meth:`join` joined) its rows of this batch state."""
        ...


if TYPE_CHECKING:  # mypy verifies that every decoder and state follows the convention
    from .ctc.beam import CTCBeamDecoder, CTCBeamState
    from .ctc.greedy import CTCGreedyDecoder, CTCGreedyState
    from .ctc.wfst.decoder import WFSTDecoder
    from .ctc.wfst.stream_state import WFSTStreamState
    from .results import Hypothesis
    from .transducer.beam import BeamSearchDecoder
    from .transducer.beam_state import BeamState
    from .transducer.greedy import GreedyDecoder, GreedyState

    def _decoders(a: CTCGreedyDecoder, b: CTCBeamDecoder, c: WFSTDecoder, d: GreedyDecoder,
                  e: BeamSearchDecoder) -> None:
        _a: StreamingDecoder[CTCGreedyState, list[Hypothesis]] = a
        _b: StreamingDecoder[CTCBeamState, list[list[Hypothesis]]] = b
        _c: StreamingDecoder[WFSTStreamState, list[Hypothesis]] = c
        _d: StreamingDecoder[GreedyState, list[Hypothesis]] = d
        _e: StreamingDecoder[BeamState, list[list[Hypothesis]]] = e

    def _states(a: CTCGreedyState, b: CTCBeamState, c: WFSTStreamState, d: BeamState, e: GreedyState) -> None:
        _a: StreamState = a
        _b: StreamState = b
        _c: StreamState = c
        _d: StreamState = d
        _e: StreamState = e
