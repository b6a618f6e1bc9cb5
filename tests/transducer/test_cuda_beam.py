"""Transducer beam search on a CUDA device (ALSD++, AES++, WIND beam; n-gram LM + boosting): the same n-best
lists as the CPU's, eager and with CUDA graphs, every device loop under ``strict_syncs()`` (a host sync
inside a loop raises), and a warm call of a seen bucket captures no graph. Skipped without a device."""

from __future__ import annotations

import pytest
import torch

from asrdecode.accel import strict_syncs
from asrdecode.transducer import BeamSearchDecoder

from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model, tiny_boosting_tree, tiny_lm

pytestmark = pytest.mark.cuda

V, BLANK = FUSION_V, FUSION_BLANK
CUDA = "cuda"
CASES = [("alsd", None, {}), ("aes", None, {"pruning": "early"}), ("alsd", [0, 1, 2], {}),
         ("wind", None, {"window": 3})]


@pytest.fixture(scope="module")
def fusion_models(tmp_path_factory):
    return tiny_lm(tmp_path_factory.mktemp("cuda_beam_lm")), tiny_boosting_tree()


def _fusion(models, device):
    lm, tree = models
    return [(lm.to(device), 0.4), (tree.to(device), 0.3)]


def _same(got, want):
    """Tokens, timestamps and durations exactly; scores within 1e-6 relative (float64 models)."""
    for rg, rw in zip(got, want, strict=True):
        assert [(h.tokens, h.timestamps, h.durations) for h in rg] == [(h.tokens, h.timestamps, h.durations)
                                                                        for h in rw]
        for hg, hw in zip(rg, rw):
            assert abs(hg.score - hw.score) <= 1e-6 * max(1.0, abs(hw.score))


def _captures(dec):
    return sum(run.captures for _, run in dec._loops._entries.values())


@pytest.mark.parametrize("method,durations,extra", CASES)
def test_cuda_equals_cpu_and_warm_calls_capture_nothing(fusion_models, method, durations, extra):
    m = random_model(11, V, BLANK, durations, blank_bias=1.0)
    kw = dict(beam=4, nbest=3, method=method, max_symbols=3, engine="torch", **extra)
    cpu = BeamSearchDecoder(m, fusion=_fusion(fusion_models, "cpu"), **kw)
    m_cuda = random_model(11, V, BLANK, durations, blank_bias=1.0).to(CUDA)
    fusion = _fusion(fusion_models, CUDA)
    eager = BeamSearchDecoder(m_cuda, fusion=fusion, acceleration="eager", **kw)
    graphs = BeamSearchDecoder(m_cuda, fusion=fusion, acceleration="cuda_graphs", **kw)
    # B 9 and 10 share the bucket 10 (padded rows of length 0), T 21..23 the bucket 24; the first call is
    # the longest (its tree room serves the later ones)
    shapes = [(10, 23, [23, 23, 1, 9, 16, 12, 23, 0, 20, 5]), (9, 21, [21, 0, 13, 21, 7, 2, 19, 21, 11]),
              (10, 22, [2, 22, 18, 22, 5, 22, 1, 14, 9, 22])]
    captured = []
    for i, (B, T, lens) in enumerate(shapes):
        enc = random_encoder(100 + i, B, T)
        lengths = torch.tensor(lens)
        want = cpu.decode(enc, lengths)
        with strict_syncs():
            _same(eager.decode(enc.to(CUDA), lengths.to(CUDA)), want)
            _same(graphs.decode(enc.to(CUDA), lengths.to(CUDA)), want)
        captured.append(_captures(graphs))
    assert captured[0] > 0
    assert captured[1] == captured[0] and captured[2] == captured[0]  # warm: the same bucket, no capture


@pytest.mark.parametrize("method", ["alsd", "wind"])
def test_cuda_streaming_equals_cpu(fusion_models, method):
    """Chunks on the device (the plain static loop: the state is carried) equal the CPU's one-shot search."""
    m = random_model(12, V, BLANK, None, blank_bias=1.0)
    kw = dict(beam=3, nbest=3, method=method, window=2, max_symbols=3, engine="torch")
    enc = random_encoder(7, 3, 16)
    lengths = torch.tensor([16, 9, 12])
    want = BeamSearchDecoder(m, fusion=_fusion(fusion_models, "cpu"), **kw).decode(enc, lengths)
    dec = BeamSearchDecoder(m.to(CUDA), fusion=_fusion(fusion_models, CUDA), acceleration="cuda_graphs", **kw)
    with strict_syncs():
        state = dec.init_state(3, enc.shape[-1], dtype=enc.dtype)
        for a, b in ((0, 6), (6, 16)):
            clen = (lengths - a).clamp(min=0, max=b - a)
            state = dec.advance(state, enc[:, a:b].to(CUDA), clen.to(CUDA), final=(lengths <= b).to(CUDA))
        _same(dec.finalize(state), want)


@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_masked_classes_and_broken_scores_on_cuda(fusion_models, method):
    """A masked label and blank (-inf joint bias) decode as on the CPU, with CUDA graphs; a NaN joint logit
    is NonFiniteJointError, and a user fusion model's NaN FusionScoreError, read after the captured rounds."""
    import math

    from asrdecode.errors import NonFiniteJointError
    from asrdecode.fusion import FusionScoreError
    from test_ctc_helpers import TableBigram

    m = random_model(12, V, BLANK, None, blank_bias=1.0)
    with torch.no_grad():
        m.joint_out.bias[[1, BLANK]] = -math.inf
    enc = random_encoder(12, 3, 9)
    lengths = torch.tensor([9, 4, 7])
    kw = dict(beam=3, nbest=3, method=method, max_symbols=2, engine="torch")
    want = BeamSearchDecoder(m, fusion=_fusion(fusion_models, "cpu"), **kw)(enc, lengths)
    with strict_syncs():
        got = BeamSearchDecoder(m.to(CUDA), fusion=_fusion(fusion_models, CUDA), **kw)(enc.to(CUDA), lengths.to(CUDA))
    _same(got, want)
    with torch.no_grad():
        m.joint_out.bias[2] = math.nan
    with pytest.raises(NonFiniteJointError):
        BeamSearchDecoder(m, **kw)(enc.to(CUDA), lengths.to(CUDA))

    class OnDevice(TableBigram):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.scores, self.eos, self.next = self.scores.to(CUDA), self.eos.to(CUDA), self.next.to(CUDA)

    table = OnDevice(V, BLANK, seed=4)
    table.scores[:, [v for v in range(V) if v != BLANK]] = math.nan
    ok = random_model(13, V, BLANK, None, blank_bias=1.0).to(CUDA)
    dec = BeamSearchDecoder(ok, fusion=[(table, 0.5)], **kw)
    for _ in range(2):  # a cold call (capture) and a warm one (replay)
        with pytest.raises(FusionScoreError):
            dec(enc.to(CUDA), lengths.to(CUDA))
