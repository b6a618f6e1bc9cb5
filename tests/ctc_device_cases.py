"""CTC beam search cases shared by the device-loop tests (CPU, graph path emulated) and the CUDA tests."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from asrdecode.lm import NGramLM, WordNGramLM
from asrdecode.lm.boosting import BoostingTree
from test_ctc_helpers import peaky_log_probs, random_lengths, random_token_arpa
from test_lm_word import random_case

CASES = ("plain", "token_lm", "dense_lm", "word_lm", "boosting", "collapse", "lm_token_beam", "lm_collapse_beta")


def make_case(name: str, tmp: Path, seed: int, batch: int, frames: int,
              device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, int, dict]:
    """``(log_probs [B, T, V], lengths [B], blank, beam_search keyword arguments)`` of case ``name``, the
    fusion models on ``device`` (the emissions stay on the CPU: callers move them)."""
    vocab, blank = 12, seed % 12
    kw: dict = {"beam": 8, "nbest": 3}
    if name == "word_lm":
        pieces, blank, _, text = random_case(seed, "delimiter", order=2)
        vocab = len(pieces)
        path = tmp / f"w{seed}.arpa"
        path.write_text(text)
        kw["fusion"] = [(WordNGramLM.from_arpa(path, pieces, blank_id=blank).to(device), 0.8)]
    elif name in ("token_lm", "dense_lm", "lm_token_beam", "lm_collapse_beta"):
        path = tmp / f"t{seed}.arpa"
        path.write_text(random_token_arpa(seed, vocab, blank, order=3))
        lm = NGramLM.from_arpa(path, vocab_size=vocab, blank_id=blank)
        if name == "dense_lm":  # every state a dense row: the LM step without a back-off chain
            lm = lm.with_dense_rows()
        kw["fusion"] = [(lm.to(device), 0.6)]
    elif name == "boosting":
        rng = random.Random(seed)
        phrases = [[rng.choice([v for v in range(vocab) if v != blank]) for _ in range(rng.randint(1, 3))]
                   for _ in range(3)]
        kw["fusion"] = [(BoostingTree.from_token_sequences(phrases, vocab_size=vocab, blank_id=blank,
                                                           weight=1.5).to(device), 1.0)]
    if name == "collapse":
        kw["blank_collapse"] = 0.9
    if name == "lm_token_beam":
        kw["token_beam"] = 4
    if name == "lm_collapse_beta":
        kw.update(blank_collapse="weak", beta=0.7)
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=4.0).float()
    lens = random_lengths(seed, batch, frames)
    return lp, lens, blank, kw


def assert_same(got: list, want: list, rel: float = 1e-4) -> None:
    """Tokens and timestamps equal, scores within ``rel`` (relative, at least absolute 1e-4)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert [h.tokens for h in g] == [h.tokens for h in w]
        assert [h.timestamps for h in g] == [h.timestamps for h in w]
        for a, b in zip(g, w):
            assert abs(a.score - b.score) <= rel * max(1.0, abs(b.score)) or a.score == b.score
