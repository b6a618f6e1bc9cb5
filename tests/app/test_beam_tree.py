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


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(0, 9), cut=st.integers(0, 9), batch=st.integers(1, 4), beam=st.integers(1, 3),
       capacity=st.integers(1, 4), seed=st.integers(0, 10_000), data=st.data())
def test_preallocated_equals_list_tree(steps, cut, batch, beam, capacity, seed, data):
    """The preallocated storage (written in place at a device step counter, doubled on the host) holds
    the same tree as the list form: len, backtrack, take_rows, extend in both directions."""
    cut = min(cut, steps)
    whole = _random_tree(steps, batch, beam, seed)
    pre = BeamTree.preallocated(batch, beam, capacity=capacity)
    for s in range(steps):  # the static path: reserve on the host, write in place, count on the host
        pre.reserve(1)
        pre.write(whole.tokens[s], whole.parents[s], whole.data[s])
        pre.advance(1)
    assert len(pre) == steps and int(pre.tensors()[-1]) == steps and pre.capacity >= steps
    slots = torch.tensor(data.draw(st.lists(st.integers(-1, beam - 1), min_size=batch * 2, max_size=batch * 2)))
    slots = slots.view(batch, 2)
    assert pre.backtrack(slots) == whole.backtrack(slots)
    rows = torch.tensor(data.draw(st.lists(st.integers(0, batch - 1), min_size=1, max_size=batch)))
    assert pre.take_rows(rows).backtrack(slots[rows]) == whole.take_rows(rows).backtrack(slots[rows])
    assert pre.materialize().backtrack(slots) == whole.backtrack(slots)
    # a list tree extended by a preallocated one, and a preallocated one (record()) extended by a list tree
    head = BeamTree(whole.tokens[:cut], whole.parents[:cut], whole.data[:cut])
    tail = BeamTree.preallocated(batch, beam, capacity=capacity)
    for s in range(cut, steps):
        tail.record(whole.tokens[s], whole.parents[s], whole.data[s])
    head.extend(tail)
    assert len(head) == steps and head.backtrack(slots) == whole.backtrack(slots)
    grown = BeamTree.preallocated(batch, beam, capacity=capacity)
    grown.extend(BeamTree(whole.tokens[:cut], whole.parents[:cut], whole.data[:cut]))
    grown.extend(BeamTree(whole.tokens[cut:], whole.parents[cut:], whole.data[cut:]))
    assert len(grown) == steps and grown.backtrack(slots) == whole.backtrack(slots)


def test_preallocated_doubles_on_the_host():
    tree = BeamTree.preallocated(2, 3, capacity=2)
    ptrs = {tree.tensors()[0].data_ptr()}
    for s in range(5):
        tree.reserve(1)
        ptrs.add(tree.tensors()[0].data_ptr())
        tree.write(torch.full((2, 3), s), torch.zeros(2, 3, dtype=torch.long), torch.full((2,), s))
        tree.advance(1)
    assert tree.capacity == 8 and len(tree) == 5 and len(ptrs) == 3  # 2 -> 4 -> 8: new storage twice
    assert tree.backtrack(torch.tensor([[0], [2]])) == [[([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])]] * 2
