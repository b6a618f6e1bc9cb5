"""CTC greedy decoding and blank collapse against direct per-utterance definitions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.ctc.collapse import CollapseState, stream_collapse
from asrdecode.errors import DecodingInputError
from test_ctc_helpers import peaky_log_probs, random_lengths, random_log_probs

SETTINGS = settings(max_examples=60, deadline=None)


def greedy_definition(lp: torch.Tensor, n: int, blank: int) -> tuple[list[int], list[int], float]:
    """B(argmax path): tokens, the first frame of each token's run, and the path score."""
    path = [int(lp[t].argmax()) for t in range(n)]
    tokens, frames = [], []
    for t, k in enumerate(path):
        if k != blank and (t == 0 or path[t - 1] != k):
            tokens.append(k)
            frames.append(t)
    return tokens, frames, float(sum(float(lp[t].max()) for t in range(n)))


def definition3_kept(lp: torch.Tensor, n: int, blank: int, threshold: float | None) -> list[int]:
    """Indices I = complement of phi(E) (Definitions 2 and 3 of the paper), 0-based."""
    if threshold is None:
        E = {t for t in range(n) if int(lp[t].argmax()) == blank}
    else:
        E = {t for t in range(n) if math.exp(float(lp[t, blank])) > threshold}
    phi = {t for t in E if (t - 1 in E) or t == 0 or all(s in E for s in range(t, n))}
    return [t for t in range(n) if t not in phi]


dims = st.tuples(st.integers(0, 10_000), st.integers(1, 4), st.integers(0, 25), st.integers(2, 7))


@SETTINGS
@given(dims, st.booleans())
def test_greedy_equals_argmax_collapse_definition(d, peaky):
    seed, batch, frames, vocab = d
    blank = seed % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank) if peaky
          else random_log_probs(seed, batch, frames, vocab))
    lens = random_lengths(seed, batch, frames)
    hyps = ctc.greedy(lp, lens, blank)
    assert len(hyps) == batch
    for b in range(batch):
        tokens, frames_, score = greedy_definition(lp[b], int(lens[b]), blank)
        assert hyps[b].tokens == tokens
        assert hyps[b].timestamps == frames_
        assert hyps[b].score == pytest.approx(score, abs=1e-9)


@SETTINGS
@given(dims, st.booleans(), st.integers(1, 5), st.integers(0, 10_000))
def test_streaming_greedy_equals_whole(d, peaky, n_chunks, cut_seed):
    """Chunk by chunk with a carried state (per-utterance chunk lengths, empty chunks too), the
    hypotheses equal one whole-utterance call; a label run across a chunk boundary is emitted once."""
    seed, batch, frames, vocab = d
    blank = seed % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank) if peaky
          else random_log_probs(seed, batch, frames, vocab))
    lens = random_lengths(seed, batch, frames)
    g = torch.Generator().manual_seed(cut_seed)
    cuts = sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist())
    bounds = [0, *cuts, frames]
    state = ctc.CTCGreedyState.initial(batch)
    for a, z in zip(bounds[:-1], bounds[1:]):
        chunk_lens = (lens - a).clamp(min=0, max=z - a)
        hyps, state = ctc.greedy(lp[:, a:z], chunk_lens, blank, state=state)
    whole = ctc.greedy(lp, lens, blank)
    assert [(h.tokens, h.timestamps) for h in hyps] == [(h.tokens, h.timestamps) for h in whole]
    assert [h.score for h in hyps] == pytest.approx([h.score for h in whole], abs=1e-6)
    assert state.offset.tolist() == lens.tolist()
    parts = ctc.CTCGreedyState.join(state.split([1] * batch))
    assert torch.equal(parts.prev, state.prev) and parts.hyps == state.hyps


@SETTINGS
@given(dims, st.booleans())
def test_weak_collapse_keeps_greedy_output(d, peaky):
    """Equation 1: greedy decoding of the weakly collapsed emission is unchanged (timestamps too)."""
    seed, batch, frames, vocab = d
    blank = (seed // 3) % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank) if peaky
          else random_log_probs(seed, batch, frames, vocab))
    lens = random_lengths(seed, batch, frames)
    collapsed, new_lens, index = ctc.blank_collapse(lp, lens, blank, threshold=None)
    before = ctc.greedy(lp, lens, blank)
    after = ctc.greedy(collapsed, new_lens, blank)
    for b in range(batch):
        assert after[b].tokens == before[b].tokens
        assert [int(index[b, t]) for t in after[b].timestamps] == before[b].timestamps


@SETTINGS
@given(dims, st.sampled_from([None, 0.5, 0.9, 0.99, 0.999]), st.booleans())
def test_collapse_matches_definition3(d, threshold, peaky):
    seed, batch, frames, vocab = d
    blank = (seed // 5) % vocab
    lp = (peaky_log_probs(seed, batch, frames, vocab, blank, peak=10.0, blank_rate=0.7) if peaky
          else random_log_probs(seed, batch, frames, vocab))
    lens = random_lengths(seed, batch, frames)
    collapsed, new_lens, index = ctc.blank_collapse(lp, lens, blank, threshold=threshold)
    assert collapsed.shape[0] == batch and index.shape == collapsed.shape[:2]
    assert collapsed.shape[1] == (int(new_lens.max()) if batch else 0)
    for b in range(batch):
        kept = definition3_kept(lp[b], int(lens[b]), blank, threshold)
        n = int(new_lens[b])
        assert n == len(kept)
        assert index[b, :n].tolist() == kept
        assert bool((index[b, n:] == -1).all())
        assert torch.equal(collapsed[b, :n], lp[b, kept])


@SETTINGS
@given(dims, st.sampled_from([None, 0.9, 0.999]), st.integers(1, 6), st.integers(0, 10_000))
def test_streaming_collapse_equals_whole(d, threshold, n_chunks, cut_seed):
    """Chunk by chunk with a carried state, the kept frames are those of Definition 3 on the whole."""
    seed, batch, frames, vocab = d
    blank = seed % vocab
    lp = peaky_log_probs(seed, batch, frames, vocab, blank, peak=10.0, blank_rate=0.7)
    g = torch.Generator().manual_seed(cut_seed)
    cuts = sorted(torch.randint(0, frames + 1, (n_chunks - 1,), generator=g).tolist())
    bounds = [0, *cuts, frames]
    state = CollapseState.initial(batch, vocab, lp.dtype, lp.device)
    offsets = torch.zeros(batch, dtype=torch.long)
    got = [[] for _ in range(batch)]
    for a, z in zip(bounds[:-1], bounds[1:]):
        lens = torch.full((batch,), z - a)
        out, new_lens, idx, state = stream_collapse(lp[:, a:z], lens, offsets, blank, threshold, state)
        offsets = offsets + lens
        for b in range(batch):
            n = int(new_lens[b])
            got[b].extend(idx[b, :n].tolist())
            assert torch.equal(out[b, :n], lp[b, idx[b, :n]])
    for b in range(batch):
        assert got[b] == definition3_kept(lp[b], frames, blank, threshold)


def test_collapse_removes_runs_on_peaky_emissions():
    lp = peaky_log_probs(1, 2, 200, 10, 0, peak=14.0, blank_rate=0.8)
    _, new_lens, _ = ctc.blank_collapse(lp, None, 0, 0.99)
    assert int(new_lens.max()) < 200 * 0.6


def test_greedy_text_and_zero_length():
    from asrdecode import CharTokenizer

    tok = CharTokenizer(["_", "a", "b", " "], blank_id=0)
    lp = torch.log_softmax(torch.tensor([[[0.0, 5, 0, 0], [0, 5, 0, 0], [5, 0, 0, 0], [0, 5, 0, 0], [0, 0, 5, 0]]]), -1)
    lp = torch.cat([lp, lp])
    hyps = ctc.greedy(lp, torch.tensor([5, 0]), 0, tokenizer=tok)
    assert hyps[0].tokens == [1, 1, 2] and hyps[0].timestamps == [0, 3, 4] and hyps[0].text == "aab"
    assert hyps[1].tokens == [] and hyps[1].score == 0.0 and hyps[1].text == ""
    assert ctc.greedy(lp.log_softmax(-1) * 0 + lp, None, 0)[1].tokens == [1, 1, 2]
    empty = torch.zeros(2, 0, 4)
    assert [h.tokens for h in ctc.greedy(empty, None, 0)] == [[], []]
    c, n, i = ctc.blank_collapse(empty, None, 0)
    assert c.shape == (2, 0, 4) and n.tolist() == [0, 0]


def test_logits_only_with_explicit_flag():
    logits = torch.randn(2, 6, 5)
    with pytest.raises(DecodingInputError, match="log_softmax=True"):
        ctc.greedy(logits * 3 + 1, None, 0)
    a = ctc.greedy(logits, None, 0, log_softmax=True)
    b = ctc.greedy(torch.log_softmax(logits, -1), None, 0)
    assert [h.tokens for h in a] == [h.tokens for h in b]


@pytest.mark.parametrize("fn", [lambda *a, **k: ctc.greedy(*a, **k), lambda *a, **k: ctc.blank_collapse(*a, **k)])
def test_bad_inputs(fn):
    lp = random_log_probs(0, 2, 5, 4, dtype=torch.float32)
    with pytest.raises(DecodingInputError, match="blank_id"):
        fn(lp, None, 4)
    with pytest.raises(DecodingInputError, match="blank_id"):
        fn(lp, None, -1)
    with pytest.raises(DecodingInputError, match="blank_id"):
        fn(lp, None, 1.0)
    bad = lp.clone()
    bad[1, 2, 3] = float("nan")
    with pytest.raises(DecodingInputError, match="NaN"):
        fn(bad, None, 0)
    bad = lp.clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(DecodingInputError, match=r"NaN or \+inf"):
        fn(bad, None, 0)
    with pytest.raises(DecodingInputError, match=r"NaN or \+inf"):
        fn(bad, None, 0, log_softmax=True)
    dead = lp.clone()
    dead[1, 3] = -float("inf")  # a frame where no class is possible
    for log_softmax in (False, True):
        with pytest.raises(DecodingInputError, match="all -inf"):
            fn(dead, None, 0, log_softmax=log_softmax)
    fn(dead, torch.tensor([5, 3]), 0)  # ... in padding: not inspected
    # Padding frames are not inspected.
    bad = lp.clone()
    bad[1, 4] = float("nan")
    fn(bad, torch.tensor([5, 4]), 0)
    with pytest.raises(DecodingInputError, match="normalised"):
        fn(lp + 0.1, None, 0)
    with pytest.raises(DecodingInputError, match="dimensions"):
        fn(lp[0], None, 0)
    with pytest.raises(DecodingInputError, match="floating"):
        fn(lp.long(), None, 0)
    with pytest.raises(DecodingInputError, match="lengths"):
        fn(lp, torch.tensor([6, 1]), 0)
    with pytest.raises(DecodingInputError, match="lengths"):
        fn(lp, torch.tensor([-1, 1]), 0)
    with pytest.raises(DecodingInputError, match="lengths"):
        fn(lp, torch.tensor([1, 1, 1]), 0)
    with pytest.raises(DecodingInputError, match="log_probs"):
        fn(lp.tolist(), None, 0)


def test_bad_threshold_and_tokenizer():
    from asrdecode import CharTokenizer

    lp = random_log_probs(0, 1, 5, 4)
    for th in (0.0, 1.0, 1.5, -0.1, "x"):
        with pytest.raises(DecodingInputError, match="threshold"):
            ctc.blank_collapse(lp, None, 0, th)
    with pytest.raises(DecodingInputError, match="vocab_size"):
        ctc.greedy(lp, None, 0, tokenizer=CharTokenizer(["_", "a", "b"], blank_id=0))
