"""The native and tensor engines agree where scores tie exactly (issue 35: "engines disagree").

Exact ties are common in float32 searches (scores in the thousands have an ulp of ~1e-4) and under an LM's
back-off; the native engine keeps equal candidates in candidate-index order, and the tensor engine's
:func:`~asrdecode.selection.ordered_topk` does the same. Here the ties are made on purpose: a joint whose
logits are rounded to multiples of 1/2, so equal logits give bit-equal log-probabilities.
"""

from __future__ import annotations

import random

import pytest
import torch

from asrdecode.lm import NGramLM
from asrdecode.native import _lib
from asrdecode.selection import ordered_topk
from asrdecode.transducer import LSTMTransducer, StatelessTransducer
from asrdecode.transducer.beam import beam_search
from test_lm_ngram import random_arpa
from transducer_models import FUSION_BLANK, FUSION_V, hyp_key, random_encoder, tiny_lm

native = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_ordered_topk_is_a_stable_descending_sort(dtype, k):
    """Against a stable descending sort: many equal values, ``-inf`` among them, several rows and dims."""
    gen = torch.Generator().manual_seed(k)
    for trial in range(20):
        x = torch.randint(-3, 3, (2, 7, 7 + trial), generator=gen).to(dtype)
        if dtype.is_floating_point:
            x = torch.where(x == -3, float("-inf"), x / 3)
        for dim in (-1, 1):
            got_v, got_i = ordered_topk(x, k, dim=dim)
            want_v, want_i = x.sort(dim=dim, descending=True, stable=True)
            assert torch.equal(got_v, want_v.narrow(dim, 0, k))
            assert torch.equal(got_i, want_i.narrow(dim, 0, k))


class RoundedJoint(LSTMTransducer):
    """A random LSTM transducer whose joint's logits are rounded to multiples of 1/2: equal log-probs."""

    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        return torch.round(super().joint(enc_proj, dec_proj) * 2) / 2


def rounded_model(seed: int, durations: list[int] | None, dtype: torch.dtype) -> RoundedJoint:
    torch.manual_seed(seed)
    m = RoundedJoint(FUSION_V, 5, 6, 8, blank_id=FUSION_BLANK, durations=durations).to(dtype).eval()
    with torch.no_grad():
        m.joint_out.weight.mul_(0.5)  # logits within a few units: many equal after rounding
        m.joint_out.bias[FUSION_BLANK] += 0.5
    return m


@native
@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
@pytest.mark.parametrize("pruning", ["late", "early"])
def test_engines_agree_on_exact_ties(tmp_path, durations, method, pruning):
    if method == "wind" and durations is not None:
        pytest.skip("WIND is RNN-T only")
    lm = tiny_lm(tmp_path)
    for seed in range(6):
        dtype = (torch.float32, torch.float64)[seed % 2]
        m = rounded_model(seed, durations, dtype)
        enc = random_encoder(seed, 3, 12).to(dtype)
        kw = dict(beam=4, nbest=4, method=method, pruning=pruning, max_symbols=3,
                  fusion=[(lm, 0.5)] if seed % 3 else [])
        if method == "wind":
            kw["window"] = 2
        got = beam_search(m, enc, engine="native", **kw)
        want = beam_search(m, enc, engine="torch", **kw)
        assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want], (seed, dtype)


def joint_in_float64(m: torch.nn.Module) -> torch.nn.Module:
    """Let ``m``'s float32 joint compute in float64 and round to float32: its logits for a row then do not
    depend on which other rows share the matrix product (BLAS blocking does otherwise by an ulp; the
    native engine runs the joint on the expanding rows, the tensor engine on all ``B * beam``), so the
    engines see the same logits and only their tie rules can make them differ."""
    out = m.joint_out

    def joint(enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(enc_proj.double() + dec_proj.double())
        return torch.nn.functional.linear(x, out.weight.double(), out.bias.double()).float()

    m.joint = joint
    return m


def _agree(m, enc, **kw) -> list:
    got = beam_search(m, enc, engine="native", **kw)
    want = beam_search(m, enc, engine="torch", **kw)
    assert [hyp_key(r, 5) for r in got] == [hyp_key(r, 5) for r in want]
    return got


@native
@pytest.mark.parametrize("method", ["alsd", "aes"])
@pytest.mark.parametrize("seed,pruning", [(0, "late"), (1, "early")])
def test_engines_agree_when_the_symbol_cap_ends_every_frame(seed, pruning, method):
    """Issue 35, case 3: a float32 model whose blank is so unlikely that ``max_symbols`` ends every frame.
    The scores reach the thousands after a few frames (ulp ~1e-4), so candidates tie exactly; before the
    tie rule was shared these seeds gave different n-best lists."""
    torch.manual_seed(seed)
    m = LSTMTransducer(64, 16, 16, 16, blank_id=63).eval()
    with torch.no_grad():
        m.joint_out.bias[63] -= 40.0
    joint_in_float64(m)
    enc = torch.randn(4, 40, 16, generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        got = _agree(m, enc, beam=4, nbest=4, method=method, pruning=pruning, max_symbols=10)
    assert all(len(h.tokens) == 400 for r in got for h in r)  # the cap on every frame


@native
def test_engines_agree_with_a_200k_vocabulary():
    """Issue 35, case 2: a random icefall-style stateless transducer with 200000 tokens (flat, float32),
    long enough that the scores reach ~2000: exact ties among the 800k candidates per step. Indices and
    hashes are int64 on both engines (4 * 200001 candidates per utterance, no overflow)."""
    torch.manual_seed(1)
    m = joint_in_float64(StatelessTransducer(200_000, 16, 16, 16, blank_id=0, context=2).eval())
    enc = torch.randn(2, 60, 16, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        got = _agree(m, enc, beam=4, nbest=4, method="alsd", max_symbols=3)
    assert min(h.score for r in got for h in r) < -1500


@native
def test_engines_agree_with_a_token_lm_in_the_cap_regime(tmp_path):
    """Issue 35, case 1 (the paper RNN-T with its token 4-gram, weight 0.3, beta 0), small: a flat float32
    model over 1024 labels + blank whose LM outweighs the acoustics, so every frame ends at the cap and the
    scores reach ~-2700 (ulp 2.4e-4): exact ties between candidates of different hypotheses. (Early pruning
    on the same input differs by an ulp already at step 0: the engines' float32 log-softmax sums round
    differently, see docs/architecture.md; that near-tie is not a tie-rule matter.)"""
    V = 1025
    path = tmp_path / "lm.arpa"
    path.write_text(random_arpa(random.Random(3), V - 1, 4, max_per_order=300, suffix_closed=True))
    lm = NGramLM.from_arpa(path, vocab_size=V, blank_id=V - 1)
    torch.manual_seed(0)
    m = joint_in_float64(LSTMTransducer(V, 16, 16, 16, blank_id=V - 1).eval())
    enc = torch.randn(4, 40, 16, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        got = _agree(m, enc, beam=4, nbest=4, method="alsd", pruning="late", max_symbols=10, fusion=[(lm, 0.3)],
                     beta=0.0)
    assert min(h.score for r in got for h in r) < -2000


@pytest.mark.parametrize("seed", range(4))
def test_packed_topk_equals_a_stable_sort_on_ties_zeros_and_infinities(seed):
    """The accelerators' float32 selection (packed int64 keys) orders like a stable descending sort:
    equal values by ascending index, -0.0 equal to +0.0, -inf last; the other path agrees."""
    from asrdecode.selection import _packed_topk, ordered_topk

    g = torch.Generator().manual_seed(seed)
    for _ in range(60):
        n = int(torch.randint(1, 70, (1,), generator=g))
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        x = torch.randint(-4, 4, (3, n), generator=g).float() * 0.5
        x[x == 1.5] = float("-inf")
        x[x == -0.5] = -0.0
        want = torch.sort(-(x + 0.0).double(), dim=-1, stable=True).indices[..., :k]
        for val, idx in (_packed_topk(x, k), ordered_topk(x, k), ordered_topk(x.double(), k)):
            assert torch.equal(idx, want)
            assert torch.equal(val.float(), x.gather(-1, want))
