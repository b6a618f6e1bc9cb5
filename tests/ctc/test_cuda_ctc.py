"""CTC beam search (device loop, CUDA graphs) and WFST decoding on CUDA: identical to the CPU's results.

Run by the lead on a GPU (skipped without one). The CTC cases are those of the CPU device-loop tests;
every CUDA decode runs under strict_syncs() (a host sync inside a loop's rounds raises), a warm call on
the same buckets captures no graph.
"""

from __future__ import annotations

import pytest
import torch

from asrdecode import ctc
from asrdecode.accel import strict_syncs
from asrdecode.ctc import beam_loop
from ctc_device_cases import CASES, assert_same, make_case

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("name", CASES)
def test_ctc_beam_on_cuda_equals_cpu(tmp_path, name):
    lp, lens, blank, kw = make_case(name, tmp_path, 9, 5, 37, device="cpu")
    want = ctc.beam_search(lp, lens, blank, engine="torch", **kw)
    _, _, _, kw_dev = make_case(name, tmp_path, 9, 5, 37, device="cuda")
    rows = torch.tensor([4, 0, 1, 2, 3, 1])  # same buckets as the first batch (B 6 -> 8, T -> 40)
    with strict_syncs():
        got = ctc.beam_search(lp.cuda(), lens.cuda(), blank, engine="torch", **kw_dev)
        captures = sum(loop.runner.captures for loop in beam_loop.LOOPS._entries.values())
        got2 = ctc.beam_search(lp[rows].cuda(), lens[rows].cuda(), blank, engine="torch", **kw_dev)
        assert sum(loop.runner.captures for loop in beam_loop.LOOPS._entries.values()) == captures
    assert_same(got, want)
    assert_same(got2, ctc.beam_search(lp[rows], lens[rows], blank, engine="torch", **kw))


def test_wfst_on_cuda_equals_cpu():
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import WFSTDecoder, build_tlg
    from test_ctc_wfst import BLANK, LEXICON, V, _lm

    g = build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK)
    lp = torch.log_softmax(2 * torch.randn(4, 40, V, generator=torch.Generator().manual_seed(3)), -1)
    lens = torch.tensor([40, 23, 0, 31])
    want = WFSTDecoder(g, engine="torch", max_active=4)(lp, lens, nbest=2)
    dec = WFSTDecoder(g, engine="torch", max_active=4)
    got = dec(lp.cuda(), lens.cuda(), nbest=2)
    assert dec.graph.device.type == "cuda"  # moved once, kept by the decoder
    assert [[h.words for h in n] for n in got] == [[h.words for h in n] for n in want]
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
    for n, m in zip(got, want):
        assert [h.score for h in n] == pytest.approx([h.score for h in m], rel=1e-4)


def test_wfst_fixed_loop_on_cuda_equals_cpu():
    """The 1-best device loop (CUDA graphs): equal to the CPU's, no sync inside the rounds, a warm call on the
    same buckets (B 6 -> 8, T 37 -> 48) captures nothing."""
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import WFSTDecoder, build_tlg, fixed
    from test_ctc_wfst import BLANK, LEXICON, V, _lm

    g = build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK)
    gen = torch.Generator().manual_seed(4)
    lp = torch.log_softmax(2 * torch.randn(6, 37, V, generator=gen), -1)
    lens = torch.tensor([37, 23, 0, 31, 5, 37])
    rows = torch.tensor([5, 0, 1, 2, 3, 3])
    boosts = [{"ab": 1.0}, None, None, {"b": -0.5}, None, None]
    for kw in ({"beam": 12.0, "max_active": 4, "acoustic_scale": 2.0}, {"min_active": 2, "beam": 3.0},
               {"beam": 12.0, "max_active": 4, "acoustic_scale": 2.0, "dense_min_degree": 1}):  # pre-pruned
        cpu = WFSTDecoder(g, engine="torch", **kw)
        want, want2 = cpu(lp, lens, boosts=boosts), cpu(lp[rows], lens[rows])
        dec = WFSTDecoder(g, engine="torch", **kw)
        with strict_syncs():
            got = dec(lp.cuda(), lens.cuda(), boosts=boosts)
            dec(lp[rows].cuda(), lens[rows].cuda())
            captures = sum(loop.runner.captures for loop in fixed.LOOPS._entries.values())
            got2 = dec(lp[rows].cuda(), lens[rows].cuda())
            assert sum(loop.runner.captures for loop in fixed.LOOPS._entries.values()) == captures
        for a, b in ((got, want), (got2, want2)):
            assert [h.words for h in a] == [h.words for h in b]
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.timestamps for h in a] == [h.timestamps for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-4)
