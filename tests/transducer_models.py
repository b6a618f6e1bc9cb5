"""Random Transducer models for property tests (float64, so batched and reference agree exactly)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import torch

from asrdecode.lm import BoostingTree, NGramLM
from asrdecode.transducer import LSTMTransducer, StatelessTransducer

#: Vocabulary of the tiny fusion models below (tokens 0..4, blank 5), shared by the beam tests.
FUSION_V, FUSION_BLANK = 6, 5
TINY_ARPA = "\n".join([
    "\\data\\", "ngram 1=7", "ngram 2=3", "", "\\1-grams:", "-1.0\t<unk>", "-99\t<s>\t-0.5", "-0.7\t</s>",
    "-0.6\td\t-0.3", "-0.8\te\t-0.2", "-0.9\tf", "-1.1\tg", "", "\\2-grams:", "-0.3\t<s> d", "-0.4\td e",
    "-0.2\te </s>", "", "\\end\\", "",
])


def tiny_lm(directory: Path) -> NGramLM:
    """A token bigram LM over ``FUSION_V`` tokens (written to ``directory`` as ARPA and read back)."""
    p = Path(directory) / "lm.arpa"
    p.write_text(TINY_ARPA)
    return NGramLM.from_arpa(p, vocab_size=FUSION_V, blank_id=FUSION_BLANK)


def tiny_boosting_tree() -> BoostingTree:
    """Boosts the token sequences [0, 1, 2] and [3]."""
    return BoostingTree.from_token_sequences([[0, 1, 2], [3]], vocab_size=FUSION_V, blank_id=FUSION_BLANK)


def random_model(
    seed: int,
    vocab: int,
    blank: int,
    durations: list[int] | None,
    kind: str = "lstm",
    pred_layers: int = 1,
    blank_bias: float = 2.0,
    enc_dim: int = 5,
) -> torch.nn.Module:
    """A small random model in float64; ``blank_bias`` raises the blank logit so decoding ends."""
    torch.manual_seed(seed)
    if kind == "lstm":
        m = LSTMTransducer(vocab, enc_dim, 6, 8, blank_id=blank, durations=durations, pred_layers=pred_layers)
    else:
        m = StatelessTransducer(vocab, enc_dim, 6, 8, blank_id=blank, durations=durations, context=pred_layers)
    m = m.double().eval()
    with torch.no_grad():
        m.joint_out.weight.mul_(2.0)
        m.joint_out.bias[blank] += blank_bias
    return m


def random_encoder(seed: int, B: int, T: int, D: int = 5) -> torch.Tensor:
    """Encoder output ``[B, T, D]`` in float64 (``D`` = ``random_model``'s default ``enc_dim``)."""
    return torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


class ApproxScore(float):
    """A score that equals another within ``10**-digits`` (relative to ``max(1, |score|)``).

    Rounding both sides (``round(x, 8)``) is not a tolerance: two values 1e-15 apart can round
    differently; this compares the difference instead, so keys built from it are robust to the
    last-bit differences of another CPU or thread count. Ordering is a float's.
    """

    digits: int = 8

    def __new__(cls, value: float, digits: int = 8) -> "ApproxScore":
        obj = super().__new__(cls, value)
        obj.digits = digits
        return obj

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return abs(float(self) - float(other)) <= 10.0 ** -self.digits * max(1.0, abs(float(other)))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = float.__hash__


def hyp_key(hyps, digits: int = 8) -> list:
    """What must agree between two decoders: tokens, timestamps, durations, score (within ``10**-digits``)."""
    return [(h.tokens, h.timestamps, h.durations, ApproxScore(h.score, digits)) for h in hyps]


def assert_same_hypothesis(got, want, rel: float = 1e-9) -> None:
    """Same tokens, timestamps, durations and text; scores within ``rel`` (relative, at least absolute)."""
    assert (got.tokens, got.timestamps, got.durations, got.text) == (want.tokens, want.timestamps, want.durations,
                                                                     want.text)
    assert abs(got.score - want.score) <= rel * max(1.0, abs(want.score)), (got.score, want.score)


@contextmanager
def engine_calls(module: Any, name: str) -> Iterator[dict[str, int]]:
    """Count the calls of ``module.name`` (a native one-call path that returns ``None`` where it does not
    apply) that ran (``calls``) and that declined (``declined``)."""
    seen = {"calls": 0, "declined": 0}
    real = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        seen["calls" if out is not None else "declined"] += 1
        return out

    with mock.patch.object(module, name, spy):
        yield seen
