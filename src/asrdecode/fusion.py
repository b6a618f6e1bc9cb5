"""The FusionModel protocol: what every beam search asks of an n-gram LM or a boosting tree.

A fusion model is a finite-state scorer over the *model's* token ids. Its states are int64
ids. ``advance`` scores every token for a batch of states at once, so a beam search can fuse
the whole vocabulary into its candidate scores in one tensor operation ("late pruning"), or
only the top acoustic candidates ("early pruning").

Convention for the blank: columns are indexed by model token id, ``vocab_size`` equals the
model's vocabulary size (blank included). The blank column (``blank_id``) always has score 0
and next state equal to the current state, so decoders never remap ids.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import torch

__all__ = ["FusionModel"]


@runtime_checkable
class FusionModel(Protocol):
    """A scorer with integer states over the model's vocabulary (natural-log scores)."""

    vocab_size: int
    blank_id: int | None

    def initial_states(self, n: int, device: torch.device | None = None) -> torch.Tensor:
        """States ``[n]`` (int64) for ``n`` fresh hypotheses."""
        ...

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (float) and next states ``[N, V]`` (int64) of every token from ``states [N]``."""
        ...

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """End-of-sentence scores ``[N]`` for ``states [N]``."""
        ...


def check_fusion(fusion: Sequence[tuple[FusionModel, float]] | None, vocab_size: int) -> list[tuple[FusionModel, float]]:
    """Validate ``[(model, weight), ...]`` against the decoder's vocabulary size; return it as a list."""
    from .errors import DecodingInputError

    out: list[tuple[FusionModel, float]] = []
    for i, item in enumerate(fusion or ()):
        try:
            model, weight = item
        except (TypeError, ValueError):
            raise DecodingInputError(f"fusion[{i}] must be a (FusionModel, weight) pair") from None
        if not isinstance(model, FusionModel):
            raise DecodingInputError(f"fusion[{i}] model does not implement FusionModel")
        if int(model.vocab_size) != int(vocab_size):
            raise DecodingInputError(
                f"fusion[{i}] has vocab_size {model.vocab_size} but the acoustic model has {vocab_size}"
            )
        out.append((model, float(weight)))
    return out
