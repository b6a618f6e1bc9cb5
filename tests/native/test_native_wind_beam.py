"""Native WIND beam search cost as the beam grows (issue 30: the merge of each step compared every pool
entry with every other, O(beam^4) per step: beam 64 took ~60x beam 16's time and beam 257 never returned)."""

from __future__ import annotations

import time

import pytest
import torch

from asrdecode.native import _lib
from asrdecode.transducer.beam import beam_search
from transducer_models import random_model

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable")


def _run(m, enc, lengths, beam: int, engine: str = "native") -> tuple[float, list]:
    t0 = time.perf_counter()
    out = beam_search(m, enc, lengths, beam=beam, method="wind", engine=engine)
    return time.perf_counter() - t0, out


def test_large_beam_grows_near_linearly_and_matches_torch():
    m = random_model(0, 80, 0, None, blank_bias=0.5).float()
    enc = torch.randn(3, 20, 5, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([20, 17, 12])
    _run(m, enc, lengths, 4)  # warm-up (library load, allocations)
    t16, _ = _run(m, enc, lengths, 16)
    t64, out = _run(m, enc, lengths, 64)
    # the old merge: ~60x (0.7 s -> 42 s on this model size); near-linear cost gives ~4-8x
    assert t64 < 25 * max(t16, 0.05), (t16, t64)
    assert t64 < 60.0
    _, want = _run(m, enc, lengths, 64, engine="torch")
    assert [[h.tokens for h in n] for n in out] == [[h.tokens for h in n] for n in want]
