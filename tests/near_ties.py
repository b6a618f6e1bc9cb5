"""How close the exact (torch) NeMo and modified beam searches come to a tie at their cuts: a search whose float32
scores move by a rounding (the C++ networks' arithmetic, another kernel level) may keep another hypothesis
there, so two engines' results may differ only where this margin is a few ulps."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import asrdecode.models.sherpa_nemo_search as nemo_search
import asrdecode.models.sherpa_search as modified_search

#: a cut this close (float32 ulps of the kept score) is a near-tie
TIE_ULPS = 2


def nemo_search_margin_ulps(model: Any, enc: torch.Tensor, lens: Any, **kw: Any) -> tuple[list, float]:
    """The torch engine's n-best lists of ``nemo_beam_search(model, enc, lens, engine="torch", **kw)`` and the
    smallest margin (in float32 ulps) between a kept and a dropped score at any of its cuts (the beam's best
    candidates, a row's top-k tokens); ``inf`` when no cut dropped anything."""
    margins: list[float] = []
    sort, topk, better = nemo_search.partial_sort, nemo_search.top_k, nemo_search._better

    def cut(kept: float, dropped: float) -> None:
        margins.append((kept - dropped) / float(np.spacing(np.float32(abs(kept)))))

    def sort_and_record(items: list, k: int, by):
        if by is better and len(items) > k:
            scores = sorted((float(c[0].logp) for c in items), reverse=True)
            cut(scores[k - 1], scores[k])
        return sort(items, k, by)

    def topk_and_record(row: torch.Tensor, k: int) -> list[int]:
        if row.numel() > k:
            vals = torch.sort(row, descending=True).values
            cut(float(vals[k - 1]), float(vals[k]))
        return topk(row, k)

    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nemo_search, "partial_sort", sort_and_record)
        mp.setattr(nemo_search, "top_k", topk_and_record)
        out = nemo_search.nemo_beam_search(model, enc, lens, engine="torch", **kw)
    return out, min(margins, default=math.inf)


def modified_search_margin_ulps(model: Any, enc: torch.Tensor, lens: Any, **kw: Any) -> tuple[list, float]:
    """The torch engine's n-best lists of ``modified_beam_search(model, enc, lens, engine="torch", **kw)`` and the
    smallest margin (in float32 ulps) between the kept and the best dropped score of any frame's cut (its top
    ``beam`` of the hypotheses' extensions); ``inf`` when no cut dropped anything."""
    margins: list[float] = []
    topk = modified_search.ordered_topk

    def topk_and_record(x: torch.Tensor, k: int) -> Any:
        if x.numel() > k:
            vals = torch.sort(x.reshape(-1), descending=True).values
            kept, dropped = float(vals[k - 1]), float(vals[k])
            margins.append((kept - dropped) / float(np.spacing(np.float32(abs(kept)))))
        return topk(x, k)

    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(modified_search, "ordered_topk", topk_and_record)
        out = modified_search.modified_beam_search(model, enc, lens, engine="torch", **kw)
    return out, min(margins, default=math.inf)
