"""Every numeric option is checked where it enters: NaN / inf / out-of-range values get a named error.

Before these checks an LM weight of NaN gave empty CTC hypotheses or an IndexError in the
transducer beam search, ``--acoustic-scale nan`` and a boost ``word:nan`` an empty transcript
with exit status 0, and ``--beam 100000`` ran for seconds into an allocator error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asrdecode import ctc
from asrdecode.ctc._checks import MAX_BEAM
from asrdecode.errors import DecodingInputError
from asrdecode.fusion import FusionScorer, check_fusion
from asrdecode.transducer import beam_search, reference_beam_search
from test_ctc_helpers import TableBigram, random_log_probs
from transducer_models import FUSION_BLANK, FUSION_V, random_encoder, random_model, tiny_boosting_tree

NON_FINITE = [float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("weight", NON_FINITE + ["0.5", None, True, torch.tensor([1.0, 2.0])])
def test_fusion_weight_must_be_finite(weight):
    lm = TableBigram(FUSION_V, FUSION_BLANK)
    with pytest.raises(DecodingInputError, match=r"fusion\[0\] weight must be a finite number"):
        check_fusion([(lm, weight)], FUSION_V)
    with pytest.raises(DecodingInputError, match=r"fusion\[0\] weight"):
        FusionScorer([(lm, weight)], FUSION_V, FUSION_BLANK)


def test_fusion_weight_accepts_numpy_and_tensor_scalars():
    lm = TableBigram(FUSION_V, FUSION_BLANK)
    assert [w for _, w in check_fusion([(lm, np.float32(0.5)), (lm, torch.tensor(2.0)), (lm, 1)], FUSION_V)] == \
        [0.5, 2.0, 1.0]


@pytest.mark.parametrize("weight", NON_FINITE)
def test_ctc_beam_with_non_finite_lm_weight(weight):
    x = random_log_probs(0, 2, 6, FUSION_V)
    with pytest.raises(DecodingInputError, match="weight must be a finite number"):
        ctc.beam_search(x, None, FUSION_BLANK, beam=4, fusion=[(TableBigram(FUSION_V, FUSION_BLANK), weight)])


@pytest.mark.parametrize("weight", NON_FINITE)
@pytest.mark.parametrize("method", ["alsd", "aes", "wind"])
def test_transducer_beam_with_non_finite_fusion_weight(weight, method):
    model = random_model(0, FUSION_V, FUSION_BLANK, None)
    enc = random_encoder(1, 2, 5)
    fusion = [(tiny_boosting_tree(), weight)]
    with pytest.raises(DecodingInputError, match="weight must be a finite number"):
        beam_search(model, enc, beam=3, method=method, fusion=fusion)
    if method != "wind":
        with pytest.raises(DecodingInputError, match="weight must be a finite number"):
            reference_beam_search(model, enc[0], beam=3, method=method, fusion=fusion)


@pytest.mark.parametrize("kw, match", [
    ({"beta": float("nan")}, "beta must be a finite number"),
    ({"beta": float("inf")}, "beta must be a finite number"),
    ({"beam_threshold": float("nan")}, "beam_threshold must be finite"),
    ({"beam_threshold": 0.0}, "beam_threshold must be > 0"),
    ({"beam": 0}, "beam must be >= 1"),
    ({"beam": 2.0}, "beam must be an int"),
    ({"beam": MAX_BEAM + 1}, f"beam must be <= {MAX_BEAM}"),
    ({"beam": 100_000}, f"beam must be <= {MAX_BEAM}"),
    ({"beam": 4, "token_beam": 0}, "token_beam must be >= 1"),
])
def test_ctc_beam_numeric_options(kw, match):
    x = random_log_probs(0, 1, 4, FUSION_V)
    with pytest.raises(DecodingInputError, match=match):
        ctc.beam_search(x, None, FUSION_BLANK, **kw)


def test_ctc_beam_at_the_cap_runs():
    x = random_log_probs(0, 1, 3, FUSION_V)
    assert ctc.beam_search(x, None, FUSION_BLANK, beam=MAX_BEAM, beam_threshold=5.0)[0][0].tokens is not None
    assert ctc.beam_search(x, None, FUSION_BLANK, beam=np.int64(4))[0][0].tokens is not None  # numpy ints are ints


# ------------------------------------------------------------------------------------------------- WFST
kaldifst = pytest.importorskip("kaldifst")


@pytest.fixture(scope="module")
def graph():
    from asrdecode.ctc.wfst import build_tlg
    from test_ctc_wfst import BLANK, LEXICON, V, _lm

    return build_tlg(V, LEXICON, _lm(), topology="normal", blank_id=BLANK)


@pytest.mark.parametrize("kw, match", [
    ({"acoustic_scale": float("nan")}, "acoustic_scale must be finite"),
    ({"acoustic_scale": float("inf")}, "acoustic_scale must be finite"),
    ({"acoustic_scale": 0.0}, "acoustic_scale must be > 0"),
    ({"acoustic_scale": -1.0}, "acoustic_scale must be > 0"),
    ({"acoustic_scale": "2"}, None),  # a numeric string is a number (float("2")); accepted
    ({"beam": float("nan")}, "beam must be finite"),
    ({"beam": 0.0}, "beam must be > 0"),
    ({"lattice_beam": float("nan")}, "lattice_beam must be finite"),
    ({"max_active": 0}, "max_active must be >= 1"),
    ({"max_active": 2.5}, "max_active must be an int"),
    ({"dense_min_degree": 0}, "dense_min_degree must be >= 1"),
    ({"dense_memory_mb": float("nan")}, "dense_memory_mb must be finite"),
    ({"dense_memory_mb": -1.0}, "dense_memory_mb must be >= 0"),
])
def test_wfst_settings(graph, kw, match):
    from asrdecode.ctc.wfst import WFSTDecoder

    if match is None:
        WFSTDecoder(graph, **kw)
        return
    with pytest.raises(DecodingInputError, match=match):
        WFSTDecoder(graph, **kw)


@pytest.mark.parametrize("value", NON_FINITE + ["x"])
def test_wfst_word_boost_must_be_finite(graph, value):
    from asrdecode.ctc.wfst import WFSTDecoder

    dec = WFSTDecoder(graph)
    with pytest.raises(DecodingInputError, match=r"boosts\[0\]\['ab'\] must be"):
        dec(torch.zeros(1, 3, 3), boosts=[{"ab": value}])
    assert dec(torch.zeros(1, 3, 3).log_softmax(-1), boosts=[{"ab": 1.0}])[0].score is not None


# -------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("spec", ["word:nan", "word:inf", "word:-inf", "two words:NaN"])
def test_cli_boost_weight_must_be_finite(spec):
    from asrdecode.pipeline import parse_boost

    with pytest.raises(DecodingInputError, match="must be a finite number"):
        parse_boost(spec)
    assert parse_boost("word:2.5") == ("word", 2.5)


def test_cli_decode_with_nan_lm_weight_exits_2(tmp_path, capsys):
    from asrdecode import cli
    from asrdecode.models.demo import ASSETS

    lm = ASSETS / "token-4gram.arpa.gz"
    if not lm.is_file():
        pytest.skip("token LM not bundled")
    em = tmp_path / "x.npy"
    np.save(em, random_log_probs(0, 1, 5, 257, dtype=torch.float32)[0].numpy())
    code = cli.main(["decode", str(em), "--decoder", "beam", "--blank-id", "256", "--lm", str(lm),
                     "--lm-weight", "nan"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "weight must be a finite number" in err
