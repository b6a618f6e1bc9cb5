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


def test_masked_classes_on_cuda_equal_cpu(tmp_path):
    """Emissions with classes of probability 0 (-inf) in the CTC device loop and both WFST loops on CUDA."""
    pytest.importorskip("kaldifst")
    from asrdecode.ctc.wfst import WFSTDecoder, build_tlg
    from test_ctc_helpers import mask_classes
    from test_ctc_wfst import BLANK, LEXICON, V, _lm

    lp, lens, blank, kw = make_case("token_lm", tmp_path, 9, 5, 37, device="cpu")
    lp = mask_classes(lp, 9, 0.5)
    _, _, _, kw_dev = make_case("token_lm", tmp_path, 9, 5, 37, device="cuda")
    with strict_syncs():
        got = ctc.beam_search(lp.cuda(), lens.cuda(), blank, engine="torch", **kw_dev)
    assert_same(got, ctc.beam_search(lp, lens, blank, engine="torch", **kw))
    g = build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK)
    em = mask_classes(torch.log_softmax(2 * torch.randn(4, 30, V, generator=torch.Generator().manual_seed(5)), -1),
                      5, 0.5)
    lengths = torch.tensor([30, 11, 0, 25])
    for loop in ("fixed", "dynamic"):
        want = WFSTDecoder(g, engine="torch", loop=loop, max_active=4)(em, lengths)
        got = WFSTDecoder(g, engine="torch", loop=loop, max_active=4)(em.cuda(), lengths.cuda())
        assert [(h.words, h.tokens) for h in got] == [(h.words, h.tokens) for h in want], loop


def test_a_user_fusion_models_nan_is_caught_in_captured_graphs():
    """The watch's flag is updated in place inside the captured rounds and read once after the call."""
    from asrdecode.fusion import FusionScoreError
    from test_ctc_helpers import TableBigram, peaky_log_probs

    class OnDevice(TableBigram):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.scores, self.eos, self.next = self.scores.cuda(), self.eos.cuda(), self.next.cuda()

    lp = peaky_log_probs(3, 4, 30, 6, 0, peak=4.0, dtype=torch.float32).cuda()
    model = OnDevice(6, 0, seed=2)
    good = ctc.beam_search(lp, None, 0, beam=4, fusion=[(model, 0.5)], engine="torch")
    model.scores[:, 3] = float("nan")
    with pytest.raises(FusionScoreError):
        ctc.beam_search(lp, None, 0, beam=4, fusion=[(model, 0.5)], engine="torch")
    model.scores[:, 3] = OnDevice(6, 0, seed=2).scores[:, 3]
    assert_same(ctc.beam_search(lp, None, 0, beam=4, fusion=[(model, 0.5)], engine="torch"), good)
