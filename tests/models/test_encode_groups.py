"""A batch through an ONNX encoder in groups of similar length (onnx_common.length_groups / encode_in_groups):
each utterance's encoder output equals its own one-utterance encoding; fewer padded frames computed."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.models.onnx_common import PAD_SLACK, PAD_WASTE, encode_in_groups, length_groups  # noqa: E402
from asrdecode.models.onnx_transducer import load_onnx_transducer  # noqa: E402
from asrdecode.transducer import greedy  # noqa: E402
from sherpa_models import build_icefall, build_nemo  # noqa: E402


def test_length_groups_partition_and_padding_bound() -> None:
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.choice([0, 3, rng.randrange(1, 3000)]) for _ in range(rng.randrange(1, 40))]
        groups = length_groups(lengths)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        for k, g in enumerate(groups):
            n = [lengths[i] for i in g]
            assert n == sorted(n, reverse=True)
            if k:  # a later group starts at an utterance of at least PAD_SLACK frames, shorter than the last group's
                assert n[0] >= PAD_SLACK and n[0] <= min(lengths[i] for i in groups[k - 1] if lengths[i] >= PAD_SLACK)
            long = [x for x in n if x >= PAD_SLACK]  # what a group took by the padding rule
            assert n[0] * len(long) - sum(long) <= PAD_WASTE * sum(long) + PAD_SLACK
    assert length_groups([]) == [] and length_groups([5, 0, 7]) == [[2, 0, 1]]
    assert length_groups([2000, 300, 2000, 300]) == [[0, 2], [1, 3]]


def _framewise(calls: list):
    """A padding-free 'encoder': frame t -> 2 * features[t, :3], lengths unchanged; records its input shapes."""
    def run(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(tuple(x.shape))
        return 2 * x[:, :, :3] + 1, n.clone()
    return run


def test_encode_in_groups_equals_one_padded_call() -> None:
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([1000, 210, 990, 0, 240, 5])
    feats = torch.randn(6, 1000, 8, generator=g)
    calls: list = []
    out, n = encode_in_groups(_framewise(calls), feats, lengths)
    assert calls == [(2, 1000, 8), (4, 240, 8)] and out.shape == (6, 1000, 3) and n.tolist() == lengths.tolist()
    full = 2 * feats[:, :, :3] + 1
    for i, k in enumerate(lengths.tolist()):
        assert torch.equal(out[i, :k], full[i, :k])
    assert bool((out[[1, 3, 4, 5], 240:] == 0).all())  # past the second group's longest
    one: list = []
    out1, _ = encode_in_groups(_framewise(one), feats[:1], lengths[:1])  # one group: the call itself
    assert one == [(1, 1000, 8)] and torch.equal(out1, full[:1])
    with pytest.raises(DecodingInputError, match="lengths"):
        encode_in_groups(_framewise([]), feats, lengths[:3])
    with pytest.raises(DecodingInputError, match="lengths"):
        encode_in_groups(_framewise([]), feats, lengths + 1)


@pytest.mark.parametrize("layout", ["icefall", "nemo"])
def test_bundle_batch_equals_each_utterance(tmp_path, layout) -> None:
    d = build_icefall(tmp_path / "m") if layout == "icefall" else build_nemo(tmp_path / "m", normalize_type="NA")
    b = load_onnx_transducer(str(d))
    g = torch.Generator().manual_seed(1)
    waves = [0.1 * torch.randn(n, generator=g) for n in (160_000, 60_000, 158_000, 0, 56_000, 800)]
    feats, flen = b.features(waves)
    assert length_groups(flen.tolist()) == [[0, 2, 1], [4, 5, 3]]
    enc, elen = b.encode_features(feats, flen)
    hyps = greedy(b.model, enc, elen)
    assert int(elen[3]) == 0 and hyps[3].tokens == []  # alone, an empty clip is [1, 1, F]: too short for the conv
    for i, w in enumerate(waves):
        if not w.numel():
            continue
        e1, n1 = b.encode_features(*b.features([w]))
        assert int(n1[0]) == int(elen[i])
        torch.testing.assert_close(enc[i, : int(elen[i])], e1[0, : int(n1[0])], atol=1e-5, rtol=1e-5)
        h = greedy(b.model, e1, n1)[0]
        assert h.tokens == hyps[i].tokens and h.timestamps == hyps[i].timestamps
