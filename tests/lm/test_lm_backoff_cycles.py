"""Backoff-chain depths and cycle detection of BackoffAutomaton (n-gram LMs, boosting trees, the word
LM's automata): exact depths against a one-step-per-round walk on small random automata, and a cycle in
a 100k-state automaton refused in well under a second (the old walk took one O(S) round per state)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.lm._automaton import BackoffAutomaton


def _automaton(backoff: np.ndarray, terminal: np.ndarray, vocab: int = 4) -> BackoffAutomaton:
    """An automaton with the given backoff links and terminals and no arcs."""
    S = len(backoff)
    none_i, none_f = torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.float32)
    return BackoffAutomaton(vocab_size=vocab, blank_id=None, arc_offsets=torch.zeros(S + 1, dtype=torch.int64),
                            arc_label=none_i, arc_weight=none_f, arc_dest=none_i,
                            backoff_state=torch.from_numpy(backoff), backoff_weight=torch.full((S,), -0.5),
                            final_weight=torch.zeros(S), terminal=torch.from_numpy(terminal), root_fill=-10.0)


def _walk_depth(backoff: np.ndarray, terminal: np.ndarray) -> list[int]:
    out = []
    for s in range(len(backoff)):
        n = 0
        while not terminal[s]:
            s, n = int(backoff[s]), n + 1
        out.append(n)
    return out


def test_depths_equal_a_plain_walk() -> None:
    rng = np.random.default_rng(0)
    for _ in range(100):
        S = int(rng.integers(1, 40))
        terminal = np.zeros(S, dtype=bool)
        terminal[rng.choice(S, min(S, int(rng.integers(1, 4))), replace=False)] = True
        order = rng.permutation(S)  # a random forest: each state backs off to one earlier in `order`
        backoff = np.arange(S)
        for i, s in enumerate(order):
            if not terminal[s]:
                backoff[s] = order[int(rng.integers(0, i))] if i else s
        if not terminal[order[0]]:
            terminal[order[0]] = True
        a = _automaton(backoff, terminal)
        assert a.depth.tolist() == _walk_depth(backoff, terminal)
        assert a.max_depth == max(_walk_depth(backoff, terminal))


def test_a_cycle_in_a_large_automaton_is_refused_fast() -> None:
    S = 100_000
    backoff = (np.arange(S) - 1) // 2  # a binary tree of depth ~17 under the terminal 0
    backoff[0] = 0
    terminal = np.zeros(S, dtype=bool)
    terminal[0] = True
    backoff[S - 2], backoff[S - 1] = S - 1, S - 2  # one 2-state cycle
    t0 = time.perf_counter()
    with pytest.raises(DecodingInputError, match="backoff links form a cycle"):
        _automaton(backoff, terminal)
    assert time.perf_counter() - t0 < 2.0
    backoff[S - 2] = backoff[S - 1] = 0  # the same automaton without the cycle: exact depths
    a = _automaton(backoff, terminal)
    assert a.depth.tolist() == _walk_depth(backoff, terminal) and a.max_depth == 16
