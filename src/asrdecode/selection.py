"""Top-k selection with a fixed tie rule, shared by the tensor beam searches and matching the native engine.

``torch.topk`` leaves the order of equal values open (and which of several equal values at the k-th place
it keeps). The native engine's selections (``asrd::TopK``) take the higher value first and, among equal
values, the lower index. :func:`ordered_topk` gives the same answer in tensor operations: no host
synchronisation and static shapes, so it runs eagerly, under ``torch.compile`` and in CUDA graphs.
Exact ties are frequent in float32 searches: scores in the thousands have an ulp of ~1e-4, so candidates
whose increments differ by less round to the same sum.
"""

from __future__ import annotations

import torch

__all__ = ["ordered_topk"]


def ordered_topk(x: torch.Tensor, k: int, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of ``x`` along ``dim`` and their indices, best first; equal values are
    ordered, and kept at the k-th place, by ascending index.

    Args:
        x: ``[..., n, ...]`` real tensor without NaN; ``1 <= k <= n``.
    Returns:
        (values, indices), each ``[..., k, ...]``.

    Cost: float32 on an accelerator: one int64 top-k over packed (score, index) keys and a few
    element-wise kernels (:func:`_packed_topk`). Otherwise: ``torch.topk`` plus one comparison and one
    more top-k over ``x`` (the lowest indices equal to the k-th value), and ``k * k`` comparisons.
    """
    if dim != -1 and dim != x.dim() - 1:
        val, idx = ordered_topk(x.movedim(dim, -1), k)
        return val.movedim(-1, dim), idx.movedim(-1, dim)
    n = x.shape[-1]
    if x.dtype == torch.float32 and x.device.type != "cpu" and n < 1 << 31:
        return _packed_topk(x, k)  # fewer kernels (a GPU's cost); on the CPU the int64 element-wise work costs more
    val, idx = x.topk(k, dim=-1)  # values non-increasing; the indices of equal values in any order
    kth = val[..., -1:]
    # the k-th value's ties: keep the lowest indices (n marks "no such entry"); a float32 key where exact
    # (n <= 2**24: the faster top-k), else int64
    if n <= 1 << 24:
        pos = torch.arange(n, device=x.device, dtype=torch.float32)
        ties = -torch.where(x == kth, -pos, -float(n)).topk(k, dim=-1).values
        ties = ties.long()
    else:
        ties = torch.where(x == kth, torch.arange(n, device=x.device), n).topk(k, dim=-1, largest=False).values
    above = (val > kth).sum(dim=-1, keepdim=True)  # entries strictly better than the k-th value: kept
    j = torch.arange(k, device=x.device)
    fill = ties.gather(-1, (j - above).clamp(min=0))
    idx = torch.where((j < above) | (fill >= n), idx, fill)
    # equal values by ascending index: each entry's place = the entries that go before it ([..., k, k]);
    # the values, non-increasing already, keep theirs
    v_i, v_j = val[..., :, None], val[..., None, :]
    before = (v_j > v_i) | ((v_j == v_i) & (idx[..., None, :] < idx[..., :, None]))
    # (idx.clone(): with NaN scores, which compare unequal, the places may collide; every index stays valid
    # and the caller's non-finite check names the problem)
    return val, idx.clone().scatter_(-1, before.sum(dim=-1), idx)


def _packed_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ordered_topk` of float32 ``x [..., n]`` as one int64 top-k: the score's bits made
    order-preserving as a signed int (``-0.0`` counted as ``+0.0``: they compare equal) in the high 32
    bits, ``n - 1 - index`` in the low 32 (so among equal scores the lower index is larger)."""
    n = x.shape[-1]
    bits = (x + 0.0).view(torch.int32).long()  # x + 0.0: -0.0 -> +0.0
    key = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats: larger magnitude -> smaller key
    rev = torch.arange(n - 1, -1, -1, device=x.device)
    top = ((key << 32) | rev).topk(k, dim=-1).values
    idx = (n - 1) - (top & 0xFFFFFFFF)
    return x.gather(-1, idx), idx
