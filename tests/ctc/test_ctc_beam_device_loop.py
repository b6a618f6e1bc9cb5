"""The CTC beam search's device loop (ctc/beam_loop.py) on the CPU: the graph path CUDA runs, emulated.

EmulatedGraphRunner replays each round through the same in-place wrapper a CUDA-graph capture uses
and checks that no static buffer moves; results must equal the eager Python frame loop exactly.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.accel import EmulatedGraphRunner, count_device_syncs, count_host_reads
from asrdecode.ctc import beam_loop
from graph_emulation import emulate_graphs
from ctc_device_cases import CASES, assert_same, make_case


@pytest.fixture()
def graphs_on_cpu(monkeypatch):
    """Route the CTC beam search's torch engine to the device loop, emulated graphs, a fresh loop cache."""
    emulate_graphs(monkeypatch, beam_loop)
    yield beam_loop.LOOPS
    beam_loop.LOOPS.clear()


def _eager(lp, lens, blank, kw):
    return ctc.beam_search(lp, lens, blank, engine="torch", **kw)


@pytest.mark.parametrize("name", CASES)
def test_graph_path_equals_eager(tmp_path, name):
    lp, lens, blank, kw = make_case(name, tmp_path, 3, 5, 23)  # B=5 -> 8 rows, T=23 -> 24 frames (padding)
    rows = torch.tensor([4, 0, 1, 2, 3, 1])  # a second batch of 6 rows: the same buckets (also collapsed)
    want, want2 = _eager(lp, lens, blank, kw), _eager(lp[rows], lens[rows], blank, kw)
    with pytest.MonkeyPatch.context() as mp:
        emulate_graphs(mp, beam_loop)
        got = _eager(lp, lens, blank, kw)
        loops = list(beam_loop.LOOPS._entries.values())
        captured = sum(loop.runner.captures for loop in loops)
        got2 = _eager(lp[rows], lens[rows], blank, kw)  # warm: no capture, no new loop
        assert sum(loop.runner.captures for loop in beam_loop.LOOPS._entries.values()) == captured
        assert list(beam_loop.LOOPS._entries.values()) == loops
    assert_same(got, want)
    assert_same(got2, want2)


@pytest.mark.parametrize("name", CASES)
def test_pure_round_equals_eager(tmp_path, name):
    """The round as torch.compile traces it (``_round.pure``: reads its inputs, returns the new state, written
    back eagerly) gives the eager results, and never writes an input (checked every round)."""
    lp, lens, blank, kw = make_case(name, tmp_path, 4, 5, 23)
    want = _eager(lp, lens, blank, kw)
    with pytest.MonkeyPatch.context() as mp:
        emulate_graphs(mp, beam_loop, pure=True)
        got = _eager(lp, lens, blank, kw)
        beam_loop.LOOPS.clear()
    assert_same(got, want)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(0, 19), st.sampled_from(CASES))
def test_graph_path_equals_eager_random(tmp_path_factory, seed, batch, frames, name):
    lp, lens, blank, kw = make_case(name, tmp_path_factory.mktemp("c"), seed, batch, frames)
    want = _eager(lp, lens, blank, kw)
    with pytest.MonkeyPatch.context() as mp:
        emulate_graphs(mp, beam_loop)
        got = _eager(lp, lens, blank, kw)
    assert_same(got, want)


@pytest.mark.parametrize("name", ["plain", "token_lm", "lm_token_beam", "lm_collapse_beta", "word_lm"])
def test_graph_path_equals_eager_on_masked_classes(tmp_path, name):
    """Emissions with classes of probability 0 (-inf) in the device loop, its padding included."""
    from test_ctc_helpers import mask_classes

    lp, lens, blank, kw = make_case(name, tmp_path, 5, 5, 23)
    lp = mask_classes(lp, 5, 0.6)
    want = _eager(lp, lens, blank, kw)
    with pytest.MonkeyPatch.context() as mp:
        emulate_graphs(mp, beam_loop)
        got = _eager(lp, lens, blank, kw)
        beam_loop.LOOPS.clear()
    assert_same(got, want)
    assert all(lp[b, t, k] > -torch.inf for b, nbest in enumerate(got) for h in nbest
               for k, t in zip(h.tokens, h.timestamps))


def test_streaming_on_the_graph_path_equals_whole(tmp_path, graphs_on_cpu):
    lp, lens, blank, kw = make_case("lm_collapse_beta", tmp_path, 7, 3, 30)
    kw = {k: v for k, v in kw.items() if k != "nbest"}
    dec = ctc.CTCBeamDecoder(blank, vocab_size=lp.shape[2], engine="torch", nbest=2, **kw)
    state = dec.init_state(3)
    for lo in (0, 11, 19):
        hi = {0: 11, 11: 19, 19: 30}[lo]
        dec.advance(state, lp[:, lo:hi], (lens - lo).clamp(0, hi - lo))
    streamed = dec.finalize(state)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(beam_loop, "resolve_mode", lambda mode, device: "eager")
        whole = dec.decode(lp, lens)
    assert_same(streamed, whole)


@pytest.mark.parametrize("name", CASES)
def test_host_reads_per_call_are_a_small_constant(tmp_path, graphs_on_cpu, name):
    """Validation, collapse, the loop and the n-best extraction: at most 8 host reads at B=8, T=150,
    the same count at T=40, and no syncing op beyond them."""
    counts = []
    for frames in (150, 40):
        lp, lens, blank, kw = make_case(name, tmp_path, 11, 8, frames)
        lens[0] = frames
        ctc.beam_search(lp, lens, blank, engine="torch", **kw)  # capture (emulated) outside the count
        with count_host_reads() as reads, count_device_syncs() as syncs:
            ctc.beam_search(lp, lens, blank, engine="torch", **kw)
        assert reads.count <= 8, reads.by_name
        counts.append((reads.count, syncs.count))
        # syncs: the host reads plus the validation's masked reductions (fixed per call)
        assert syncs.count <= 8, syncs.by_op
    assert counts[0] == counts[1]


class _CountingRunner(EmulatedGraphRunner):
    """The emulated graph runner, counting the ATen ops (kernel launches, roughly) of every replayed round."""

    ops = 0
    rounds = 0

    def _graph(self, fn, state):
        graph = super()._graph(fn, state)

        class Counted:
            def replay(self_inner) -> None:
                with count_device_syncs() as syncs:
                    graph.replay()
                _CountingRunner.ops += syncs.ops
                _CountingRunner.rounds += 1

        return Counted()


#: ops per frame of the static (graph) round as measured (B=8, beam 8, V=12; "plain" searches the whole
#: vocabulary here, V - 1 < 2 * beam; the bundled token 4-gram at B=128, beam 16, V=257 gives the same
#: count as "lm_collapse_beta"; each fused automaton's step sets its blank's score: one fill): the bounds are
#: these plus ~10 %, so a change that adds kernels shows here
OPS_PER_FRAME = {"plain": 63, "token_lm": 88, "dense_lm": 77, "lm_collapse_beta": 91, "boosting": 77, "lm_token_beam": 101}


@pytest.mark.parametrize("name", sorted(OPS_PER_FRAME))
def test_ops_per_frame_of_the_static_round(tmp_path, monkeypatch, name):
    """The captured frame's op count (ATen ops: each a kernel launch on a GPU, views included) is bounded."""
    emulate_graphs(monkeypatch, beam_loop)
    monkeypatch.setattr(beam_loop, "StepRunner", _CountingRunner)
    lp, lens, blank, kw = make_case(name, tmp_path, 2, 8, 40)
    _CountingRunner.ops = _CountingRunner.rounds = 0
    ctc.beam_search(lp, lens, blank, engine="torch", **kw)
    per_frame = _CountingRunner.ops / (_CountingRunner.rounds * beam_loop.UNROLL)
    assert _CountingRunner.rounds > 0
    assert per_frame <= OPS_PER_FRAME[name] * 1.1, per_frame
    beam_loop.LOOPS.clear()


def test_acceleration_setting_is_checked_against_the_device(tmp_path):
    """``acceleration``: None / "auto" / "eager" give the default search on the CPU; CUDA graphs need CUDA
    tensors, an unknown mode is named, and the native engine runs eagerly only."""
    from asrdecode.errors import DecodingInputError

    lp, lens, blank, kw = make_case("token_lm", tmp_path, 6, 3, 11)
    want = ctc.beam_search(lp, lens, blank, **kw)
    for acc in ("auto", "eager"):
        assert_same(ctc.beam_search(lp, lens, blank, acceleration=acc, **kw), want)
    with pytest.raises(DecodingInputError, match="CUDA"):
        ctc.beam_search(lp, lens, blank, acceleration="cuda_graphs", **kw)
    with pytest.raises(DecodingInputError, match="acceleration mode must be one of"):
        ctc.beam_search(lp, lens, blank, acceleration="fast", **kw)
    with pytest.raises(DecodingInputError, match="eager execution"):
        ctc.beam_search(lp, lens, blank, acceleration="compile", engine="native", **kw)


@pytest.mark.parametrize("seed", range(4))
def test_dense_lm_engines_agree(tmp_path, seed):
    """A token LM whose every state has a dense row (``NGramLM.with_dense_rows``): the tensor engine's graph
    path and the native engine read the same rows, the same hypotheses."""
    lp, lens, blank, kw = make_case("dense_lm", tmp_path, seed, 6, 25)
    assert kw["fusion"][0][0].automaton.max_chain == 0
    want = ctc.beam_search(lp, lens, blank, engine="native", **kw)
    with pytest.MonkeyPatch.context() as mp:
        emulate_graphs(mp, beam_loop)
        got = _eager(lp, lens, blank, kw)
        beam_loop.LOOPS.clear()
    assert_same(got, want)


def test_a_cached_loop_reports_a_user_fusion_models_nan(graphs_on_cpu):
    """A warm call replays rounds captured with the first call's scorer: the watch read after the call is that
    scorer's, so a user model's NaN on the second call is still a FusionScoreError."""
    from asrdecode.fusion import FusionScoreError
    from test_ctc_helpers import TableBigram, peaky_log_probs

    lp = peaky_log_probs(4, 3, 20, 6, 0, peak=4.0, dtype=torch.float32)
    model = TableBigram(6, 0, seed=5)
    kw = dict(beam=4, fusion=[(model, 0.5)])
    good = _eager(lp, None, 0, kw)
    captured = len(beam_loop.LOOPS._entries)
    model.scores[:, 1:] = float("nan")  # in place: the same tensors, the cached loop is reused
    with pytest.raises(FusionScoreError, match=r"fusion\[0\] \(TableBigram\)"):
        _eager(lp, None, 0, kw)
    assert len(beam_loop.LOOPS._entries) == captured
    model.scores[:, 1:] = TableBigram(6, 0, seed=5).scores[:, 1:]
    assert_same(_eager(lp, None, 0, kw), good)
