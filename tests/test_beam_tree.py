"""BeamTree: restricting to rows and appending later steps keeps backtracking exact."""

import torch
from hypothesis import given, settings, strategies as st

from asrdecode.beam_hyps import BeamTree


def _random_tree(steps: int, batch: int, beam: int, seed: int) -> BeamTree:
    g = torch.Generator().manual_seed(seed)
    tree = BeamTree()
    for s in range(steps):
        tokens = torch.randint(-1, 5, (batch, beam), generator=g)
        parents = torch.randint(0, beam, (batch, beam), generator=g)
        tree.record(tokens, parents, torch.full((batch,), s))
    return tree


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(0, 6), cut=st.integers(0, 6), batch=st.integers(1, 4), beam=st.integers(1, 3),
       seed=st.integers(0, 10_000), data=st.data())
def test_split_rows_then_extend_equals_whole(steps, cut, batch, beam, seed, data):
    cut = min(cut, steps)
    whole = _random_tree(steps, batch, beam, seed)
    rows = torch.tensor(data.draw(st.lists(st.integers(0, batch - 1), min_size=1, max_size=batch)))
    head = BeamTree(whole.tokens[:cut], whole.parents[:cut], whole.data[:cut]).take_rows(rows)
    head.extend(BeamTree(whole.tokens[cut:], whole.parents[cut:], whole.data[cut:]).take_rows(rows))
    assert len(head) == steps
    slots = torch.arange(beam).repeat(len(rows), 1)
    expected = whole.backtrack(torch.arange(beam).repeat(batch, 1))
    assert head.backtrack(slots) == [expected[int(r)] for r in rows]
