"""RNN-T and TDT training losses in pure torch.

Both losses are the negative log-likelihood of the target sequence summed over all alignments
of the (t, u) lattice. One forward (alpha) recursion serves both: a lattice transition either
emits blank (``u`` stays, ``t`` advances by a duration ``d >= 1``) or emits the next label
(``u + 1``, ``t`` advances by ``d >= 0``). RNN-T is the case "blank: d = 1, label: d = 0";
TDT allows every duration of ``durations`` for labels and every non-zero one for blank, each
weighted by the duration log-probability. A path ends with a blank that lands exactly on frame
``T`` after all ``U`` labels (as in NeMo and the TDT paper).

The recursion runs over anti-diagonals ``n = t + u`` of the lattice: all cells of one diagonal
depend only on earlier diagonals, so each step is one vectorised operation over ``[B, T]``, and
``T + U`` steps cover the lattice. Gradients come from autograd through the recursion; only the
``[B, T, U + 1]`` blank / label log-probs (gathered once from the full ``[B, T, U + 1, V]``
log-softmax) enter the loop, so the loop's memory is small.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import DecodingInputError

__all__ = ["rnnt_loss", "tdt_loss", "lattice_log_likelihood"]

_NEG = -1e30  # finite "log 0": keeps logsumexp gradients NaN-free


def _skew(w: torch.Tensor) -> torch.Tensor:
    """``w [B, T, U1]`` -> ``s [B, T + U1, T]`` with ``s[b, n, t] = w[b, t, n - t]`` (``_NEG`` outside)."""
    b, t, u1 = w.shape
    n = t + u1
    tt = torch.arange(t, device=w.device)
    nn_ = torch.arange(n, device=w.device)
    u = nn_.unsqueeze(1) - tt.unsqueeze(0)  # [N, T]
    valid = (u >= 0) & (u < u1)
    idx = u.clamp(0, u1 - 1).t().unsqueeze(0).expand(b, t, n)  # [B, T, N]
    s = w.gather(2, idx).transpose(1, 2)  # [B, N, T]
    return torch.where(valid.unsqueeze(0), s, torch.full_like(s, _NEG))


def _shift(x: torch.Tensor, d: int) -> torch.Tensor:
    """Shift ``x [B, T]`` right by ``d`` along T, filling with ``_NEG``."""
    if d == 0:
        return x
    t = x.shape[1]
    if d >= t:
        return torch.full_like(x, _NEG)
    return torch.cat([torch.full_like(x[:, :d], _NEG), x[:, : t - d]], dim=1)


def lattice_log_likelihood(
    blank: Sequence[tuple[int, torch.Tensor]],
    label: Sequence[tuple[int, torch.Tensor]],
    logit_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
) -> torch.Tensor:
    """Log-likelihood ``[B]`` of the transducer lattice.

    Args:
        blank: ``(d, w)`` pairs: a blank from cell (t, u) moves to (t + d, u) with log-weight
            ``w [B, T, U + 1]`` at (t, u); every ``d >= 1``.
        label: ``(d, w)`` pairs: label ``u + 1`` from (t, u) moves to (t + d, u + 1) with
            log-weight ``w [B, T, U]`` at (t, u); every ``d >= 0``.
        logit_lengths: ``T_b [B]``; target_lengths: ``U_b [B]``.

    Paths start at (0, 0) and end with a blank reaching ``(T_b, U_b)``. Returns ``-inf``-like
    values (about ``-1e30``) for utterances without any complete path.
    """
    w0 = blank[0][1]
    bsz, t, u1 = w0.shape
    if any(d < 1 for d, _ in blank):
        raise DecodingInputError("blank durations must be >= 1 (a blank must advance time)")
    sb = [(d, _skew(w)) for d, w in blank]
    sl = [(d, _skew(torch.nn.functional.pad(w, (0, 1), value=_NEG))) for d, w in label]
    first = torch.full((bsz, t), _NEG, dtype=w0.dtype, device=w0.device)
    first[:, 0] = 0.0
    alphas = [first]
    for n in range(1, t + u1 - 1):
        terms = []
        for d, s in sb:
            if n - d >= 0:
                terms.append(_shift(alphas[n - d] + s[:, n - d], d))
        for d, s in sl:
            if n - d - 1 >= 0:
                terms.append(_shift(alphas[n - d - 1] + s[:, n - d - 1], d))
        alphas.append(torch.logsumexp(torch.stack(terms), dim=0) if terms else torch.full_like(first, _NEG))
    alpha = torch.stack(alphas, dim=1)  # [B, N, T], alpha[b, t + u, t] = alpha(t, u)
    ends = []
    bidx = torch.arange(bsz, device=w0.device)
    for d, w in blank:
        tt = logit_lengths - d
        ok = tt >= 0
        ttc = tt.clamp(min=0)
        val = alpha[bidx, (ttc + target_lengths).clamp(max=alpha.shape[1] - 1), ttc] + w[bidx, ttc, target_lengths]
        ends.append(torch.where(ok, val, torch.full_like(val, _NEG)))
    return torch.logsumexp(torch.stack(ends), dim=0)


def _check(
    logits: torch.Tensor, targets: torch.Tensor, logit_lengths: torch.Tensor, target_lengths: torch.Tensor,
    blank_id: int, n_extra: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 4 or not logits.is_floating_point():
        raise DecodingInputError("logits must be a floating tensor [B, T, U + 1, V(+K)]")
    b, t, u1, v = logits.shape
    if not isinstance(targets, torch.Tensor) or targets.dim() != 2 or targets.shape[0] != b:
        raise DecodingInputError(f"targets must be an integer tensor [B={b}, U]")
    if targets.is_floating_point() or targets.shape[1] != u1 - 1:
        raise DecodingInputError(f"targets must be integer [B, U] with U = logits.shape[2] - 1 = {u1 - 1}")
    nv = v - n_extra
    if not 0 <= blank_id < nv:
        raise DecodingInputError(f"blank_id {blank_id} outside 0..{nv - 1}")
    out = []
    for name, x, hi in (("logit_lengths", logit_lengths, t), ("target_lengths", target_lengths, u1 - 1)):
        x = torch.as_tensor(x, device=logits.device)
        if x.dim() != 1 or x.shape[0] != b or x.is_floating_point():
            raise DecodingInputError(f"{name} must be an integer tensor [B={b}]")
        if b and (int(x.min()) < 0 or int(x.max()) > hi):
            raise DecodingInputError(f"{name} must be in 0..{hi}")
        out.append(x.long())
    if b and int(out[0].min()) < 1:
        raise DecodingInputError("logit_lengths must be >= 1 (a path needs at least one frame)")
    tmask = torch.arange(u1 - 1, device=logits.device).unsqueeze(0) < out[1].unsqueeze(1)
    if bool(((targets < 0) | (targets >= nv) | (targets == blank_id))[tmask].any()):
        raise DecodingInputError(f"targets must be non-blank ids in 0..{nv - 1} (blank_id={blank_id})")
    safe = torch.where(tmask, targets, torch.zeros_like(targets)).long()
    return safe, out[0], out[1]


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are upcast to float32; float32/float64 are kept."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _reduce(nll: torch.Tensor, target_lengths: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return nll
    if reduction == "sum":
        return nll.sum()
    if reduction == "mean":
        return nll.mean()
    if reduction == "mean_per_token":
        return nll.sum() / target_lengths.sum().clamp(min=1)
    raise DecodingInputError(f"reduction must be 'none', 'sum', 'mean' or 'mean_per_token', got {reduction!r}")


def rnnt_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    logit_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank_id: int,
    reduction: str = "mean",
) -> torch.Tensor:
    """RNN-T negative log-likelihood.

    Args:
        logits: joint output ``[B, T, U + 1, V]`` (unnormalised; log-softmax is applied here).
        targets: label ids ``[B, U]`` (padding beyond ``target_lengths`` is ignored).
        logit_lengths: ``[B]`` frames per utterance (>= 1); target_lengths: ``[B]`` labels.
        blank_id: index of blank in ``V``.
        reduction: ``"mean"`` (over utterances), ``"sum"``, ``"none"`` (``[B]``) or
            ``"mean_per_token"`` (sum divided by the total number of labels).
    """
    tg, tl, ul = _check(logits, targets, logit_lengths, target_lengths, blank_id, 0)
    lp = torch.log_softmax(_upcast(logits), dim=-1)
    blank = lp[..., blank_id]
    label = lp[:, :, :-1, :].gather(3, tg[:, None, :, None].expand(-1, lp.shape[1], -1, 1)).squeeze(3)
    nll = -lattice_log_likelihood([(1, blank)], [(0, label)], tl, ul)
    return _reduce(nll, ul, reduction)


def tdt_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    logit_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank_id: int,
    durations: Sequence[int],
    reduction: str = "mean",
    sigma: float = 0.0,
) -> torch.Tensor:
    """TDT (token-and-duration transducer) negative log-likelihood.

    Args:
        logits: joint output ``[B, T, U + 1, V + K]``: the first ``V`` columns are token logits,
            the last ``K = len(durations)`` duration logits; each part is log-softmaxed on its own.
        durations: the duration values (distinct, >= 0, one of them > 0). Labels may take any of
            them; blank only the non-zero ones.
        sigma: logit under-normalisation of the TDT paper (subtracted from token log-probs).
        Other arguments as :func:`rnnt_loss`.
    """
    durs = [int(d) for d in durations]
    if not durs or len(set(durs)) != len(durs) or min(durs) < 0 or max(durs) == 0:
        raise DecodingInputError(f"durations must be distinct ints >= 0 with one > 0, got {list(durations)}")
    k = len(durs)
    tg, tl, ul = _check(logits, targets, logit_lengths, target_lengths, blank_id, k)
    lf = _upcast(logits)
    tok = torch.log_softmax(lf[..., :-k], dim=-1) - sigma
    dur = torch.log_softmax(lf[..., -k:], dim=-1)
    blank = tok[..., blank_id]
    label = tok[:, :, :-1, :].gather(3, tg[:, None, :, None].expand(-1, tok.shape[1], -1, 1)).squeeze(3)
    blank_tr = [(d, blank + dur[..., i]) for i, d in enumerate(durs) if d > 0]
    label_tr = [(d, label + dur[:, :, :-1, i]) for i, d in enumerate(durs)]
    nll = -lattice_log_likelihood(blank_tr, label_tr, tl, ul)
    return _reduce(nll, ul, reduction)
