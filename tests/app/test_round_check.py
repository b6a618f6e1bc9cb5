"""A compiled round is checked against the eager round on its loop's first call (accel.run_until_done,
round_check.py): a faithful compilation is verified once and then runs unchecked; a faulty one is caught in
the round it goes wrong, the call's result is the eager one, a CompiledRoundMismatch warning names the
difference, and the round runs uncompiled from then on. torch.compile is replaced here by a stand-in (the
round itself, or the round plus a nudge of the state) so the checks run in the fast suite; the real
compilations are checked round by round in tests/app/test_compile_exact.py (slow)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import pytest
import torch

from asrdecode import accel, ctc
from asrdecode.round_check import (CHECK_REL, CompiledRoundMismatch, first_difference, mismatch, state_leaves,
                                   state_twin)
from asrdecode.transducer import BeamSearchDecoder, GreedyDecoder
from ctc_device_cases import assert_same, make_case
from transducer_models import random_model


class StandIn:
    """accel's torch.compile replaced: each compiled round runs the round itself, and with ``faulty`` then
    moves the first float state tensor that has finite values (by 0.25, where finite)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, faulty: bool) -> None:
        self.faulty = faulty
        self.rounds = 0  # rounds run in the compiled form
        self.twins = 0  # state copies made for the check
        monkeypatch.setattr(accel, "_compiled_step", self._compile)
        real_twin = accel.state_twin

        def counted_twin(state: Any, names: tuple[str, ...]) -> Any:
            self.twins += 1
            return real_twin(state, names)

        monkeypatch.setattr(accel, "state_twin", counted_twin)
        monkeypatch.setattr(accel, "ROUND_CHECKS", {})

    def _compile(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(state: Any) -> None:
            self.rounds += 1
            fn(state)
            if self.faulty:
                names = _names_of(state)
                leaf = next(x for x in state_leaves(state, names)
                            if x.is_floating_point() and bool(torch.isfinite(x).any()))
                leaf.add_(torch.where(torch.isfinite(leaf), 0.25, 0.0))

        return run


def _names_of(state: Any) -> tuple[str, ...]:
    for attr in ("STATE", "runner"):
        value = getattr(state, attr, None)
        if isinstance(value, tuple):
            return value
        if isinstance(value, accel.StepRunner):
            return value.state_names
    raise AssertionError(f"no state names on {type(state).__name__}")


def _greedy_case() -> tuple[Callable[[str], Any], Callable[[Any, Any], None]]:
    model = random_model(0, 12, 0, [0, 1, 2], blank_bias=1.0).float()
    enc = torch.randn(5, 17, 5, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([17, 9, 0, 12, 3])
    decoders: dict[str, GreedyDecoder] = {}

    def run(mode: str) -> Any:
        dec = decoders.setdefault(mode, GreedyDecoder(model, max_symbols=3, acceleration=mode))
        return dec(enc, lengths)

    def same(got: Any, want: Any) -> None:
        assert [(h.tokens, h.timestamps, h.durations) for h in got] == \
            [(h.tokens, h.timestamps, h.durations) for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-5, abs=1e-5)

    return run, same


def _beam_case() -> tuple[Callable[[str], Any], Callable[[Any, Any], None]]:
    model = random_model(2, 12, 0, None, blank_bias=0.5).float()
    enc = torch.randn(4, 15, 5, generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([15, 11, 6, 0])
    decoders: dict[str, BeamSearchDecoder] = {}

    def run(mode: str) -> Any:
        dec = decoders.setdefault(mode, BeamSearchDecoder(model, beam=3, nbest=2, method="alsd", max_symbols=3,
                                                          acceleration=mode))
        return dec(enc, lengths)

    def same(got: Any, want: Any) -> None:
        for g, w in zip(got, want, strict=True):
            assert [(h.tokens, h.timestamps) for h in g] == [(h.tokens, h.timestamps) for h in w]
            assert [h.score for h in g] == pytest.approx([h.score for h in w], rel=1e-5, abs=1e-5)

    return run, same


def _ctc_case(tmp_path: Any) -> tuple[Callable[[str], Any], Callable[[Any, Any], None]]:
    lp, lens, blank, kw = make_case("token_lm", tmp_path, 4, 6, 21)

    def run(mode: str) -> Any:
        return ctc.beam_search(lp, lens, blank, engine="torch", acceleration=mode, **kw)

    return run, assert_same


CASES = {"greedy": lambda tmp: _greedy_case(), "alsd": lambda tmp: _beam_case(), "ctc_token_lm": _ctc_case}


@pytest.mark.parametrize("name", list(CASES))
def test_faithful_compilation_is_verified_once(monkeypatch, tmp_path, name):
    run, same = CASES[name](tmp_path)
    want = run("eager")
    stand_in = StandIn(monkeypatch, faulty=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledRoundMismatch)
        same(run("compile"), want)
        assert stand_in.twins > 0 and stand_in.rounds == stand_in.twins  # every round checked
        assert list(accel.ROUND_CHECKS.values()) == [True]
        twins, rounds = stand_in.twins, stand_in.rounds
        same(run("compile"), want)  # verified: compiled, unchecked
    assert stand_in.twins == twins and stand_in.rounds > rounds


@pytest.mark.parametrize("name", list(CASES))
def test_faulty_compilation_is_caught_and_the_result_is_eager(monkeypatch, tmp_path, name):
    run, same = CASES[name](tmp_path)
    want = run("eager")
    stand_in = StandIn(monkeypatch, faulty=True)
    with pytest.warns(CompiledRoundMismatch, match="differs from the eager round") as caught:
        same(run("compile"), want)
    assert len(caught) == 1 and stand_in.rounds == 1  # caught in the first round, uncompiled after it
    assert list(accel.ROUND_CHECKS.values()) == [False]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompiledRoundMismatch)
        same(run("compile"), want)  # rejected: eager rounds, no check, no warning
    assert stand_in.rounds == 1


def test_a_verdict_serves_a_new_loop_of_the_same_shapes(monkeypatch, tmp_path):
    """A loop made anew for each call (a streaming chunk; here: the cache emptied) is not checked again."""
    from asrdecode.ctc import beam_loop

    run, same = _ctc_case(tmp_path)
    want = run("eager")
    stand_in = StandIn(monkeypatch, faulty=False)
    same(run("compile"), want)
    twins = stand_in.twins
    assert twins > 0 and beam_loop.LOOPS
    beam_loop.LOOPS.clear()
    same(run("compile"), want)
    assert stand_in.twins == twins


def test_wfst_fixed_loop_compiled_round_is_checked(monkeypatch):
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import WFSTDecoder, fixed
    from test_wfst_fixed import _tlg_case
    from test_wfst_native import _same

    g, lp, lens = _tlg_case(4, 13, 5)
    want = WFSTDecoder(g, engine="torch", loop="fixed", max_active=6)(lp, lens)
    for faulty in (False, True):
        fixed.LOOPS.clear()
        stand_in = StandIn(monkeypatch, faulty=faulty)
        dec = WFSTDecoder(g, engine="torch", loop="fixed", max_active=6, acceleration="compile")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _same(dec(lp, lens), want)
        mismatches = [w for w in caught if issubclass(w.category, CompiledRoundMismatch)]
        assert len(mismatches) == int(faulty) and list(accel.ROUND_CHECKS.values()) == [not faulty]
        assert stand_in.rounds == (1 if faulty else stand_in.twins) and stand_in.twins > 0
    fixed.LOOPS.clear()


def test_mismatch_rules():
    x = torch.tensor([1.0, -math.inf, math.nan, 1000.0, 0.0])
    assert not mismatch(x, x.clone()).any()
    near = torch.tensor([1.0 + 0.5 * CHECK_REL, -math.inf, math.nan, 1000.0 * (1 + 0.5 * CHECK_REL), 0.5 * CHECK_REL])
    assert not mismatch(near, x).any()
    far = torch.tensor([1.0 + 2 * CHECK_REL, math.inf, 0.0, 1000.0 * (1 + 2 * CHECK_REL), 2 * CHECK_REL])
    assert mismatch(far, x).tolist() == [True] * 5
    ints = torch.tensor([1, 2, 3])
    assert mismatch(ints, torch.tensor([1, 2, 4])).tolist() == [False, False, True]


def test_first_difference_names_field_leaf_and_shape():
    class S:
        def __init__(self, a: torch.Tensor, b: list[torch.Tensor]) -> None:
            self.a, self.b = a, b

    s = S(torch.zeros(3), [torch.ones(2), torch.zeros(2, dtype=torch.long)])
    t = state_twin(s, ("a", "b"))
    assert t.a is not s.a and t.b[1] is not s.b[1] and first_difference(s, t, ("a", "b")) is None
    t.b[1][1] = 7
    diff = first_difference(s, t, ("a", "b"))
    assert (diff.name, diff.leaf, diff.count) == ("b", 1, 1) and "got [0] want [7]" in diff.detail
    t.b[1] = torch.zeros(3, dtype=torch.long)
    assert "shape" in first_difference(s, t, ("a", "b")).detail
