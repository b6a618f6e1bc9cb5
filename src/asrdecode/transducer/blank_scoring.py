"""``log(1 - p[blank])`` of Eq. 3 (LM-weighted blank scoring), computed so it stays finite.

Eq. 3 of the ALSD++ paper adds ``lam * log(1 - p[blank])`` to every label. ``log1p(-exp(lp[blank]))``
is ``-inf`` once ``p[blank]`` rounds to 1 (a confident frame of a sharp model: ``lp[blank]`` is the
difference of two logits-sized numbers, so it rounds to 0 long before the labels' mass vanishes), and with
a negative weight (an internal-LM subtraction) that ``-inf`` becomes ``+inf`` and then NaN. Here the same
quantity is the log-sum-exp of the labels' log-probabilities, ``log sum_{k != blank} p[k]``: finite
whenever a label's probability is. Every engine computes it this way (the native one in
``transducer_common.h``'s ``log_nonblank_mass``).
"""

from __future__ import annotations

import torch


def log_nonblank(lp: torch.Tensor, blank: int) -> torch.Tensor:
    """``log(1 - p[blank])`` of log-probabilities ``lp [..., V]`` as ``logsumexp`` over the other
    columns: ``[..., 1]`` (``-inf`` when ``V == 1``)."""
    V = lp.shape[-1]
    if blank == V - 1:
        rest = lp[..., :blank]
    elif blank == 0:
        rest = lp[..., 1:]
    else:
        rest = torch.cat((lp[..., :blank], lp[..., blank + 1 :]), dim=-1)
    return torch.logsumexp(rest, dim=-1, keepdim=True)
