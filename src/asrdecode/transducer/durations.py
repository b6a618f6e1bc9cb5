"""How time advances after a Transducer decision: the one difference between RNN-T and TDT.

RNN-T: a blank moves to the next frame, a label stays on its frame. TDT: both move by the
predicted duration value, a blank by at least one frame. The symbol cap (``max_symbols``) forces
one frame after that many labels on a frame; it is applied by the searches, not here.

Beam searches keep each label's frame and duration in one integer of the hypothesis tree:
``frame * pack + duration`` (``pack = max(durations) + 1``; 1 for RNN-T).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union, overload

import torch

__all__ = ["DurationRule"]

Frames = Union[int, torch.Tensor]


class DurationRule:
    """The advance rule and the tree-data packing of one model (``durations`` values, or ``None``: RNN-T)."""

    def __init__(self, durations: Optional[Sequence[int]]) -> None:
        self.tdt = durations is not None
        #: the duration values a joint's duration outputs stand for (RNN-T: one value, 0)
        self.values: list[int] = [int(d) for d in durations] if durations is not None else [0]
        #: ``frame * pack + duration`` is a label's tree data
        self.pack = max(self.values) + 1

    @classmethod
    def of(cls, model: object) -> "DurationRule":
        """The rule of a :class:`~asrdecode.transducer.TransducerModel` (its ``durations``)."""
        return cls(getattr(model, "durations", None))

    @overload
    def blank_advance(self, dur: int) -> int: ...
    @overload
    def blank_advance(self, dur: torch.Tensor) -> torch.Tensor: ...

    def blank_advance(self, dur: Frames) -> Frames:
        """Frames a blank decision advances: 1 for RNN-T, the duration value (at least 1) for TDT."""
        if isinstance(dur, torch.Tensor):
            return dur.clamp(min=1) if self.tdt else torch.ones_like(dur)
        return max(int(dur), 1) if self.tdt else 1

    @overload
    def label_advance(self, dur: int) -> int: ...
    @overload
    def label_advance(self, dur: torch.Tensor) -> torch.Tensor: ...

    def label_advance(self, dur: Frames) -> Frames:
        """Frames a label decision advances: 0 for RNN-T, the duration value for TDT."""
        if isinstance(dur, torch.Tensor):
            return dur if self.tdt else torch.zeros_like(dur)
        return int(dur) if self.tdt else 0

    def pack_data(self, frame: torch.Tensor, dur: torch.Tensor | int) -> torch.Tensor:
        """Tree data ``frame * pack + duration`` of labels (``dur`` 0 for RNN-T)."""
        return frame * self.pack + dur

    def unpack_data(self, data: Sequence[int]) -> tuple[list[int], Optional[list[int]]]:
        """A hypothesis's frames and (TDT) durations from its tree data."""
        return [x // self.pack for x in data], ([x % self.pack for x in data] if self.tdt else None)
