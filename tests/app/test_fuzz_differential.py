"""The differential fuzzer's harness (benchmarks/fuzz_differential.py): cases pass on today's engines, and a
wrong or failing engine is reported, not passed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fuzz_differential as fd  # noqa: E402

from asrdecode import ctc  # noqa: E402
from asrdecode.native import _lib  # noqa: E402

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable (no C++ compiler)")


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    return fd.Resources(tmp_path_factory.mktemp("fuzz_diff"))


@pytest.mark.parametrize("entry,case", [("ctc-beam", 109), ("transducer-beam", 0), ("transducer-greedy", 7),
                                        ("ctc-word-lm", 10776), ("ctc-word-lm", 10782), ("streaming", 0),
                                        ("streaming", 1), ("streaming", 2), ("wfst", 0), ("tlg", 0), ("tlg", 1),
                                        ("modified-beam", 0), ("nemo-beam", 0), ("masked", 6),
                                        ("masked", 9190), ("masked", 10500), ("masked", 843324), ("masked", 0),
                                        ("broken", 0), ("broken", 1), ("broken", 2), ("broken", 3)])
def test_cases_found_by_the_fuzzer_pass(res, entry, case):
    """ctc-beam:109 (an n-gram LM at a negative weight), the inference-mode models of every transducer case,
    ctc-word-lm:10776 (a lexicon word LM at a negative weight: +inf scores), 10782 (the oracle kept an
    n-best entry scored -inf), masked:6 (the native WFST engine kept a path of probability 0 alive), 9190
    (the ALSD++ oracle's masked blank at a negative LM weight: -inf + inf) and 10500 (the tensor engine's
    masked blank at weight 0: 0 * -inf) and 843324 (the WIND oracle kept a masked label's -inf hypothesis)
    failed before their fixes; one case of each other entry point."""
    assert fd.run_case(entry, case, res) == ("pass", "")


def test_a_wrong_engine_is_a_disagreement(res, monkeypatch):
    real = ctc.beam_search

    def drop_last_token(lp, lens, blank, engine="auto", **kw):
        out = real(lp, lens, blank, engine=engine, **kw)
        if engine == "torch":
            for row in out:
                for h in row:
                    h.tokens = h.tokens[:-1]
        return out

    monkeypatch.setattr(fd.ctc, "beam_search", drop_last_token)
    outcomes = [fd.run_case("ctc-beam", n, res)[0] for n in range(20)]
    assert "disagree" in outcomes and "error" not in outcomes


def test_a_failing_engine_is_an_error(res, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("engine failure")

    monkeypatch.setattr(fd, "greedy", fail)
    outcome, detail = fd.run_case("transducer-greedy", 3, res)
    assert outcome == "error" and "engine failure" in detail


def test_a_search_that_swallows_a_broken_joint_is_reported(res, monkeypatch):
    """The ``broken`` entry point: a greedy search that returns its last good hypotheses instead of raising
    on a NaN / +inf joint is a disagreement (neither the named error nor the masked model's result)."""
    from asrdecode.errors import NonFiniteJointError
    from asrdecode.results import Hypothesis

    real = fd.greedy

    def swallow(model, enc, lengths, **kw):
        try:
            return real(model, enc, lengths, **kw)
        except NonFiniteJointError:
            return [Hypothesis([], [], 0.0) for _ in range(enc.shape[0])]

    monkeypatch.setattr(fd, "greedy", swallow)
    outcomes = [fd.run_case("broken", n, res)[0] for n in range(40)]
    assert "disagree" in outcomes and "error" not in outcomes
