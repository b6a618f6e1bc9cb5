"""Helpers shared by the CTC tests (no tests here): random emissions and a table-based fusion model."""

from __future__ import annotations

from typing import Optional

import torch


def random_log_probs(seed: int, batch: int, frames: int, vocab: int, *, scale: float = 3.0,
                     dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``[B, T, V]`` log-softmax of Gaussian logits (continuous values: no exact ties)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, frames, vocab, generator=g, dtype=torch.float64) * scale
    return torch.log_softmax(logits, dim=-1).to(dtype)


def peaky_log_probs(seed: int, batch: int, frames: int, vocab: int, blank: int, *, peak: float = 12.0,
                    blank_rate: float = 0.6, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """CTC-like emissions: each frame has one dominant class (blank with probability ``blank_rate``)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, frames, vocab, generator=g, dtype=torch.float64)
    cls = torch.randint(0, vocab, (batch, frames), generator=g)
    is_blank = torch.rand(batch, frames, generator=g) < blank_rate
    cls = torch.where(is_blank, torch.full_like(cls, blank), cls)
    logits.scatter_add_(2, cls[:, :, None], torch.full((batch, frames, 1), peak, dtype=torch.float64))
    return torch.log_softmax(logits, dim=-1).to(dtype)


def mask_classes(log_probs: torch.Tensor, seed: int, rate: float) -> torch.Tensor:
    """``log_probs [B, T, V]`` with about ``rate`` of its entries set to ``-inf`` (classes of probability 0:
    a masked vocabulary) and each frame renormalised; every frame keeps at least one class."""
    g = torch.Generator().manual_seed(seed + 11)
    masked = torch.rand(log_probs.shape, generator=g) < rate
    keep = torch.randint(0, log_probs.shape[-1], log_probs.shape[:-1], generator=g)
    masked.scatter_(-1, keep[..., None], False)
    return torch.log_softmax(log_probs.double().masked_fill(masked, float("-inf")), dim=-1).to(log_probs.dtype)


def random_lengths(seed: int, batch: int, frames: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 7)
    lens = torch.randint(0, frames + 1, (batch,), generator=g)
    lens[0] = frames
    return lens


class TableBigram:
    """A bigram fusion model over model token ids: state = previous token (``vocab_size`` = sentence start).

    Scores are random normalised log-probs over the non-blank tokens; the blank column is 0 with
    the state unchanged, as the FusionModel protocol requires.
    """

    def __init__(self, vocab_size: int, blank_id: int, seed: int = 0, sharpness: float = 1.0) -> None:
        self.vocab_size = vocab_size
        self.blank_id = blank_id
        g = torch.Generator().manual_seed(seed)
        n_states = vocab_size + 1
        logits = torch.randn(n_states, vocab_size + 1, generator=g, dtype=torch.float64) * sharpness
        logits[:, blank_id] = -float("inf")
        lp = torch.log_softmax(logits, dim=-1)  # last column: end of sentence
        self.scores = lp[:, :vocab_size].clone()
        self.scores[:, blank_id] = 0.0
        self.eos = lp[:, vocab_size].clone()
        nxt = torch.arange(vocab_size)[None, :].repeat(n_states, 1)
        nxt[:, blank_id] = torch.arange(n_states)
        self.next = nxt
        self.start = vocab_size

    def initial_states(self, n: int, device: torch.device | None = None) -> torch.Tensor:
        return torch.full((n,), self.start, dtype=torch.long, device=device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.scores[states], self.next[states]

    def final(self, states: torch.Tensor) -> torch.Tensor:
        return self.eos[states]


def random_token_arpa(seed: int, vocab_size: int, blank_id: int, order: int = 3, per_order: int = 30) -> str:
    """ARPA text of a random back-off LM over the non-blank token ids, spelled ``chr(100 + id)``.

    Prefix-closed and suffix-closed (every n-gram's context and suffix are n-grams too), as lmplz writes.
    """
    import random

    rng = random.Random(seed)
    words = [chr(100 + i) for i in range(vocab_size) if i != blank_id]
    grams: list[dict[tuple[str, ...], tuple[float, Optional[float]]]] = [dict() for _ in range(order)]
    for w in ["<s>", "</s>", "<unk>", *words]:
        lp = -99.0 if w == "<s>" else round(rng.uniform(-2.5, -0.1), 4)
        grams[0][(w,)] = (lp, None if w == "</s>" or order == 1 else round(rng.uniform(-1.0, 0.0), 4))
    for k in range(2, order + 1):
        contexts = [g for g in grams[k - 2] if g[-1] != "</s>"]
        for _ in range(per_order):
            g = rng.choice(contexts) + (rng.choice(words + ["</s>"]),)
            if g in grams[k - 1] or g[1:] not in grams[k - 2] or "<s>" in g[1:]:
                continue
            bo = None if (k == order or g[-1] == "</s>") else round(rng.uniform(-1.0, 0.0), 4)
            grams[k - 1][g] = (round(rng.uniform(-2.0, -0.01), 4), bo)
            if bo is not None:
                contexts.append(g)
    lines = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, start=1)]
    for k, g in enumerate(grams, start=1):
        lines += ["", f"\\{k}-grams:"]
        for key, (lp, bo) in g.items():
            lines.append(f"{lp}\t{' '.join(key)}" + ("" if bo is None else f"\t{bo}"))
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)
