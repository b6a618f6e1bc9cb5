"""RNN-T / TDT losses against brute-force enumeration of every alignment on tiny lattices."""

from __future__ import annotations

import math

import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.training import rnnt_loss, tdt_loss


def _brute_rnnt(lp: torch.Tensor, targets: list[int], blank: int) -> torch.Tensor:
    """-log sum over all RNN-T paths; lp [T, U+1, V] log-probs (differentiable)."""
    T, U = lp.shape[0], len(targets)
    paths: list[torch.Tensor] = []

    def walk(t: int, u: int, acc: torch.Tensor) -> None:
        if t == T - 1 and u == U:
            paths.append(acc + lp[t, u, blank])
            return
        if u < U:
            walk(t, u + 1, acc + lp[t, u, targets[u]])
        if t < T - 1:
            walk(t + 1, u, acc + lp[t, u, blank])

    walk(0, 0, lp.new_zeros(()))
    return -torch.logsumexp(torch.stack(paths), 0)


def _brute_tdt(tok: torch.Tensor, dur: torch.Tensor, targets: list[int], blank: int, durs: list[int]) -> torch.Tensor:
    """-log sum over all TDT paths (token, duration) from t=0 ending with a blank landing on T."""
    T, U = tok.shape[0], len(targets)
    paths: list[torch.Tensor] = []

    def walk(t: int, u: int, acc: torch.Tensor) -> None:
        for i, d in enumerate(durs):
            if u < U and t + d < T:
                walk(t + d, u + 1, acc + tok[t, u, targets[u]] + dur[t, u, i])
            if d > 0:
                if t + d == T and u == U:
                    paths.append(acc + tok[t, u, blank] + dur[t, u, i])
                elif t + d < T:
                    walk(t + d, u, acc + tok[t, u, blank] + dur[t, u, i])

    walk(0, 0, tok.new_zeros(()))
    if not paths:
        return tok.new_tensor(math.inf)
    return -torch.logsumexp(torch.stack(paths), 0)


@pytest.mark.parametrize("seed", range(6))
def test_rnnt_matches_brute_force_with_gradients(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    B, T, U, V = 3, 4, 3, 4
    blank = seed % V
    logits = torch.randn(B, T, U + 1, V, generator=g, dtype=torch.float64) * 2
    targets = torch.randint(0, V - 1, (B, U), generator=g)
    targets = targets + (targets >= blank).long()  # never blank
    tl = torch.tensor([T, 2, 3])[:B]
    ul = torch.tensor([U, 1, 0])[:B]
    x = logits.clone().requires_grad_(True)
    ours = rnnt_loss(x, targets, tl, ul, blank, reduction="none")
    ours.sum().backward()
    y = logits.clone().requires_grad_(True)
    lp = torch.log_softmax(y, -1)
    ref = torch.stack([_brute_rnnt(lp[b, : tl[b], : ul[b] + 1], targets[b, : ul[b]].tolist(), blank) for b in range(B)])
    ref.sum().backward()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("durs", [[0, 1, 2], [0, 1, 2, 3, 4], [1, 2], [0, 2, 3], [0, 1]])
@pytest.mark.parametrize("seed", range(3))
def test_tdt_matches_brute_force_with_gradients(durs: list[int], seed: int) -> None:
    g = torch.Generator().manual_seed(100 + seed)
    B, T, U, V = 3, 5, 2, 3
    K = len(durs)
    blank = V - 1
    logits = torch.randn(B, T, U + 1, V + K, generator=g, dtype=torch.float64) * 2
    targets = torch.randint(0, V - 1, (B, U), generator=g)
    tl = torch.tensor([T, 3, 4])
    ul = torch.tensor([U, 1, 0])
    x = logits.clone().requires_grad_(True)
    ours = tdt_loss(x, targets, tl, ul, blank, durs, reduction="none")
    y = logits.clone().requires_grad_(True)
    tok = torch.log_softmax(y[..., :V], -1)
    dur = torch.log_softmax(y[..., V:], -1)
    ref = torch.stack(
        [_brute_tdt(tok[b, : tl[b]], dur[b, : tl[b]], targets[b, : ul[b]].tolist(), blank, durs) for b in range(B)]
    )
    finite = torch.isfinite(ref)
    assert finite.any()
    torch.testing.assert_close(ours[finite], ref[finite])
    assert (ours[~finite] > 1e29).all()  # no path: "infinite" loss
    ours[finite].sum().backward()
    ref[finite].sum().backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_tdt_with_durations_0_1_and_no_duration_logit_mass_is_rnnt_like() -> None:
    """With durations [0, 1] and duration logits forcing label->0, blank->1, TDT equals RNN-T."""
    g = torch.Generator().manual_seed(7)
    B, T, U, V = 2, 4, 2, 5
    tok = torch.randn(B, T, U + 1, V, generator=g, dtype=torch.float64)
    targets = torch.tensor([[1, 2], [3, 0]])
    tl, ul = torch.tensor([4, 3]), torch.tensor([2, 1])
    rnnt = rnnt_loss(tok, targets, tl, ul, blank_id=4, reduction="none")
    # duration log-probs log(1/2) each: every TDT path over durations [0, 1] that is an RNN-T
    # path picks exactly one duration per step -> add (U + T) * log 2
    dur = torch.zeros(B, T, U + 1, 2, dtype=torch.float64)
    tdt = tdt_loss(torch.cat([tok, dur], -1), targets, tl, ul, 4, [0, 1], reduction="none")
    # TDT over [0, 1] also allows labels with d=1 and so has more paths: its likelihood is larger
    # than RNN-T's after the duration penalty
    assert (tdt < rnnt + (tl + ul).double() * math.log(2) + 1e-9).all()


def test_reductions_and_batch_consistency() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 6, 4, 7, generator=g)
    targets = torch.randint(0, 6, (4, 3), generator=g)
    tl, ul = torch.tensor([6, 5, 2, 6]), torch.tensor([3, 2, 1, 0])
    none = rnnt_loss(logits, targets, tl, ul, 6, reduction="none")
    for b in range(4):
        single = rnnt_loss(logits[b : b + 1, : tl[b], : ul[b] + 1], targets[b : b + 1, : ul[b]], tl[b : b + 1], ul[b : b + 1], 6)
        torch.testing.assert_close(none[b], single, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rnnt_loss(logits, targets, tl, ul, 6, reduction="sum"), none.sum())
    torch.testing.assert_close(rnnt_loss(logits, targets, tl, ul, 6), none.mean())
    torch.testing.assert_close(rnnt_loss(logits, targets, tl, ul, 6, reduction="mean_per_token"), none.sum() / 6)


def test_single_frame_no_labels_is_blank_logprob() -> None:
    logits = torch.randn(1, 1, 1, 3)
    loss = rnnt_loss(logits, torch.zeros(1, 0, dtype=torch.long), torch.tensor([1]), torch.tensor([0]), 2)
    torch.testing.assert_close(loss, -torch.log_softmax(logits, -1)[0, 0, 0, 2])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"logits": torch.zeros(2, 3, 4)}, "logits"),
        ({"targets": torch.zeros(2, 3)}, "targets"),
        ({"targets": torch.zeros(2, 2, dtype=torch.long)}, "targets"),
        ({"logit_lengths": torch.tensor([3, 4])}, "logit_lengths"),
        ({"logit_lengths": torch.tensor([0, 3])}, "logit_lengths"),
        ({"target_lengths": torch.tensor([4, 1])}, "target_lengths"),
        ({"target_lengths": torch.tensor([1.0, 1.0])}, "target_lengths"),
        ({"blank_id": 9}, "blank_id"),
        ({"targets": torch.tensor([[4, 1, 1], [1, 1, 1]])}, "targets"),
        ({"reduction": "avg"}, "reduction"),
    ],
)
def test_bad_inputs_raise(kwargs: dict, match: str) -> None:
    args = {
        "logits": torch.zeros(2, 3, 4, 5),
        "targets": torch.ones(2, 3, dtype=torch.long),
        "logit_lengths": torch.tensor([3, 2]),
        "target_lengths": torch.tensor([3, 1]),
        "blank_id": 4,
    }
    args.update(kwargs)
    with pytest.raises(DecodingInputError, match=match):
        rnnt_loss(**args)


def test_tdt_bad_durations() -> None:
    logits = torch.zeros(1, 2, 2, 5)
    t = torch.ones(1, 1, dtype=torch.long)
    for durs in ([], [0], [1, 1], [-1, 1]):
        with pytest.raises(DecodingInputError, match="durations"):
            tdt_loss(logits, t, torch.tensor([2]), torch.tensor([1]), 0, durs)
