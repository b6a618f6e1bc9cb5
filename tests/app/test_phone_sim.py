"""recipes/phone_sim.py: the front-end simulator's alignment, statistics and sampling."""

import sys
from pathlib import Path

import torch
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))
from phone_sim import BLANK, DIM, WB, PhoneSimulator, _runs, align, estimate, reference_phones  # noqa: E402


def _levenshtein(a, b):
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=8), st.lists(st.integers(0, 4), max_size=8))
def test_alignment_is_a_minimum_edit_alignment(ref, hyp):
    pairs = align(ref, hyp)
    assert [r for r, _ in pairs if r is not None] == ref
    assert [h for _, h in pairs if h is not None] == hyp
    assert sum(r != h for r, h in pairs) == _levenshtein(ref, hyp)


def _utterance(phones, gen):
    """Log-probs [T, DIM] whose argmax path spells ``phones`` with blanks between."""
    path = [BLANK, BLANK]
    for p in phones:
        path += [p, BLANK]
    lp = torch.full((len(path), DIM), -12.0) + 0.1 * torch.rand(len(path), DIM, generator=gen)
    lp[torch.arange(len(path)), torch.tensor(path)] = -0.01
    return lp.half()


def test_estimate_and_sample_on_error_free_utterances():
    lex = {"ab": [3, 4], "ba": [4, 3], "aa": [3, 3]}
    gen = torch.Generator().manual_seed(0)
    texts = ["ab ba", "aa ab", "ba"] * 5
    feats = [_utterance(reference_phones(t, lex), gen) for t in texts]
    stats = estimate(feats, texts, lex)
    assert stats["utterances"] == len(texts)
    assert float(stats["del"].sum()) == 0 and float(stats["ins"].sum()) == 0
    assert float(stats["sub"][3, 3]) > 0 and float(stats["sub"][3, 4]) == 0
    sim = PhoneSimulator(stats, error_scale=0.0, seed=1)
    ref = reference_phones("aa ab ba", lex)
    f = sim.sample(ref)
    assert f.shape[1] == DIM and f.dtype == torch.float16
    hyp = [t for t, _ in _runs(f.float().argmax(-1).tolist()) if t != BLANK]
    assert hyp == ref  # no errors at scale 0; repeated phones stay separated by a blank
    assert reference_phones("ab zz", lex) is None
    assert WB in ref
