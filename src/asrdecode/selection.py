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

    Cost: float32 on an accelerator, or a small float32 tensor on the CPU: one int64 top-k over packed
    (score, index) keys and a few element-wise kernels (:func:`_packed_topk`). Otherwise: ``torch.topk``
    plus one comparison and one more top-k over ``x`` (the lowest indices equal to the k-th value), and two
    sorts of the ``k`` results (equal values by ascending index).
    """
    if dim != -1 and dim != x.dim() - 1:
        val, idx = ordered_topk(x.movedim(dim, -1), k)
        return val.movedim(-1, dim), idx.movedim(-1, dim)
    n = x.shape[-1]
    if x.dtype == torch.float32 and n < 1 << 31 and (x.device.type != "cpu" or x.numel() <= PACKED_CPU_MAX):
        return _packed_topk(x, k)  # fewer kernels (a GPU's cost); on the CPU the int64 element-wise work of a
        # large tensor costs more than the second top-k
    val, idx = x.topk(k, dim=-1)  # values non-increasing; the indices of equal values in any order
    kth = val[..., -1:]
    # the k-th value's ties: keep the lowest indices (n marks "no such entry"); a float32 key where exact
    # (n <= 2**24: the faster top-k), else int64
    if n <= 1 << 24:
        ties = torch.where(x == kth, _arange(n, x.device, torch.float32), float(n)).topk(k, dim=-1, largest=False)
        ties_idx = ties.values.long()
    else:
        ties_idx = torch.where(x == kth, _arange(n, x.device, torch.long), n).topk(k, dim=-1, largest=False).values
    above = (val > kth).sum(dim=-1, keepdim=True)  # entries strictly better than the k-th value: kept
    j = _arange(k, x.device, torch.long)
    fill = ties_idx.gather(-1, (j - above).clamp(min=0))
    idx = torch.where((j < above) | (fill >= n), idx, fill)
    # equal values by ascending index: the indices sorted, then stably by value (the values, non-increasing
    # already, keep their places; with NaN scores every index stays valid and the caller's check names it)
    by_idx, perm = idx.sort(dim=-1)
    _, by_val = val.gather(-1, perm).sort(dim=-1, descending=True, stable=True)
    return val, by_idx.gather(-1, by_val)


#: most elements of a float32 CPU tensor that :func:`ordered_topk` selects from with packed keys (its cost
#: grows with the tensor: above this the two top-k of the general path are faster)
PACKED_CPU_MAX = 1 << 16
_ARANGES: dict[tuple[int, torch.device, torch.dtype, bool], torch.Tensor] = {}


def _arange(n: int, device: torch.device, dtype: torch.dtype, reverse: bool = False) -> torch.Tensor:
    """``0..n-1`` (``reverse``: ``n-1..0``) on ``device``, made once (a constant: no kernel per call). Under
    torch.compile made in the graph (Inductor fuses it into its users): a cache filled while tracing would
    fail the trace's guard on the next call and compile the step again."""
    if torch.compiler.is_compiling():
        return torch.arange(n - 1, -1, -1, device=device, dtype=dtype) if reverse else torch.arange(n, device=device,
                                                                                                    dtype=dtype)
    key = (n, device, dtype, reverse)
    t = _ARANGES.get(key)
    if t is None:
        if len(_ARANGES) > 256:
            _ARANGES.clear()
        t = _ARANGES[key] = (torch.arange(n - 1, -1, -1, device=device, dtype=dtype) if reverse
                             else torch.arange(n, device=device, dtype=dtype))
    return t


def _packed_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ordered_topk` of float32 ``x [..., n]`` as one int64 top-k: the score's bits made
    order-preserving as a signed int (``-0.0`` counted as ``+0.0``: they compare equal) in the high 32
    bits, ``n - 1 - index`` in the low 32 (so among equal scores the lower index is larger)."""
    n = x.shape[-1]
    bits = (x + 0.0).view(torch.int32).long()  # x + 0.0: -0.0 -> +0.0
    key = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats: larger magnitude -> smaller key
    # key * 2**32 + (n - 1 - index): the key's bits above the index's (one kernel; exact in int64)
    top = torch.add(_arange(n, x.device, torch.long, reverse=True), key, alpha=1 << 32).topk(k, dim=-1).values
    idx = (n - 1) - (top & 0xFFFFFFFF)
    return x.gather(-1, idx), idx
