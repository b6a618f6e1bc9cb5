"""models/spectral.py: the few-pass log-mel core against its definitions.

KaldiFbank's oracle is kaldi-native-fbank itself (``OnlineFbank`` fed the whole utterance, frame by frame:
what sherpa-onnx computes); LogMelFrontEnd's is its plain formula (DC removed, Hann window, ``|rfft|^2``,
dense mel product, ``log(e + 1e-6)``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.models.frontend import MEL_DIM, LogMelFrontEnd, _mel_filterbank
from asrdecode.models.spectral import FrameMap, KaldiFbank, MelProduct, kaldi_fbank_engine, knf_fbank

knf = pytest.importorskip("kaldi_native_fbank")

ROOT = Path(__file__).resolve().parents[2]
CLIPS = sorted(ROOT.glob("data/real/*.wav"))[:3] + sorted(ROOT.glob("data/synth_test/*.wav"))[:3]
# log energies of float32 spectra: kaldi-native-fbank's FFT is double, ours float32 (measured max 1.1e-3
# on the 60 clips, in bins near -15)
ATOL = 5e-3


def _knf_fbank(opts, audio: torch.Tensor) -> torch.Tensor:
    f = knf.OnlineFbank(opts)
    if audio.numel():
        f.accept_waveform(16000, audio.numpy())
    f.input_finished()
    rows = [np.asarray(f.get_frame(i), dtype=np.float32) for i in range(f.num_frames_ready)]
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, opts.mel_opts.num_bins)


def _opts(snip_edges: bool = False, window: str = "povey", dc: bool = True, librosa: bool = False,
          preemph: float = 0.97, bins: int = 80, high: float = -400.0, round_pow2: bool = True):
    o = knf.FbankOptions()
    o.frame_opts.dither = 0.0
    o.frame_opts.snip_edges = snip_edges
    o.frame_opts.window_type = window
    o.frame_opts.remove_dc_offset = dc
    o.frame_opts.preemph_coeff = preemph
    o.frame_opts.round_to_power_of_two = round_pow2
    o.mel_opts.num_bins = bins
    o.mel_opts.high_freq = high
    if librosa:
        o.mel_opts.is_librosa = True
        o.mel_opts.low_freq = 0.0
    return o


@pytest.fixture(scope="module")
def waves() -> list[torch.Tensor]:
    from asrdecode.audio import read_audio

    return [read_audio(c) for c in CLIPS]


OPTIONS = [dict(), dict(snip_edges=True), dict(window="hann", dc=False, librosa=True),
           dict(window="hamming", preemph=0.0, bins=64, high=0.0), dict(round_pow2=False, bins=23)]


@pytest.mark.parametrize("kw", OPTIONS, ids=[str(sorted(k.items())) for k in OPTIONS])
def test_kaldi_fbank_equals_kaldi_native_fbank(waves, kw) -> None:
    opts = _opts(**kw)
    ours = KaldiFbank(knf, opts)
    for w in waves:
        want = _knf_fbank(opts, w)
        got = ours(w)
        assert got.shape == want.shape and got.dtype == torch.float32
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("snip_edges", [False, True])
def test_kaldi_frames_at_every_short_length(snip_edges) -> None:
    """Frame counts and the reflected edges (shorter than half a frame: reflected more than once)."""
    opts = _opts(snip_edges=snip_edges)
    ours = KaldiFbank(knf, opts)
    g = torch.Generator().manual_seed(0)
    for n in [0, 1, 2, 7, 79, 80, 81, 119, 120, 121, 159, 160, 239, 240, 399, 400, 401, 561, 1777]:
        x = 0.1 * torch.randn(n, generator=g)
        want = _knf_fbank(opts, x)
        got = ours(x)
        assert got.shape == want.shape, n
        assert ours.num_frames(n) == want.shape[0]
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_kaldi_fbank_refuses_what_it_does_not_compute() -> None:
    for change in (lambda o: setattr(o.frame_opts, "dither", 1.0), lambda o: setattr(o, "use_energy", True),
                   lambda o: setattr(o, "use_power", False), lambda o: setattr(o, "use_log_fbank", False)):
        o = _opts()
        change(o)
        with pytest.raises(DecodingInputError, match="opts"):
            KaldiFbank(knf, o)
    with pytest.raises(DecodingInputError, match="1-D"):
        KaldiFbank(knf, _opts())(torch.zeros(2, 400))


def _log_mel_formula(audio: torch.Tensor) -> torch.Tensor:
    frames = audio.unfold(0, 400, 160)
    frames = frames - frames.mean(dim=1, keepdim=True)
    spec = torch.fft.rfft(frames * torch.hann_window(400, periodic=True), n=512).abs().pow(2)
    return torch.log(spec @ _mel_filterbank(512, MEL_DIM, 16000) + 1e-6)


def test_log_mel_equals_its_formula(waves) -> None:
    fe = LogMelFrontEnd()
    for w in waves:
        torch.testing.assert_close(fe.log_mel(w), _log_mel_formula(w), atol=ATOL, rtol=0)


def test_mel_product_equals_the_dense_product() -> None:
    g = torch.Generator().manual_seed(2)
    mel = _mel_filterbank(512, MEL_DIM, 16000)
    spec = torch.complex(torch.randn(37, 257, generator=g), torch.randn(37, 257, generator=g))
    want = (spec.abs() ** 2) @ mel
    torch.testing.assert_close(MelProduct(mel)(spec.clone()), want, rtol=1e-5, atol=1e-5)
    # an empty filter stays zero; a bank that is not a matrix of non-negative weights is refused
    mel0 = mel.clone()
    mel0[:, 5] = 0
    assert bool((MelProduct(mel0)(spec.clone())[:, 5] == 0).all())
    with pytest.raises(DecodingInputError, match="mel"):
        MelProduct(-mel)
    with pytest.raises(DecodingInputError, match="spec"):
        MelProduct(mel)(spec[:, :100])


def test_frame_map_is_dc_preemphasis_window() -> None:
    g = torch.Generator().manual_seed(3)
    frames = torch.randn(9, 50, generator=g) + 3.0
    w = torch.rand(50, generator=g)
    x = frames - frames.mean(1, keepdim=True)
    pre = torch.cat([x[:, :1] * (1 - 0.97), x[:, 1:] - 0.97 * x[:, :-1]], 1)
    got = FrameMap(w, 0.97, True)(frames, 64)
    assert got.shape == (9, 64) and bool((got[:, 50:] == 0).all())
    torch.testing.assert_close(got[:, :50], pre * w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(FrameMap(w, 0.0, False)(frames), frames * w)
    assert math.isclose(float(FrameMap(w, 0.5, True)(torch.ones(1, 50)).abs().max()), 0.0, abs_tol=1e-6)
    with pytest.raises(DecodingInputError, match="window"):
        FrameMap(torch.ones(1))


def test_knf_engine_is_kaldi_native_fbank_itself(waves) -> None:
    """``fbank="knf"``: kaldi-native-fbank's own features, bit for bit (sherpa-onnx's); "fast" within ATOL."""
    opts = _opts()
    for w in waves[:2] + [torch.zeros(0), 0.1 * torch.randn(90)]:
        want = _knf_fbank(opts, w)
        assert torch.equal(knf_fbank(knf, opts, w), want) and torch.equal(kaldi_fbank_engine(knf, opts, "knf")(w), want)
        torch.testing.assert_close(kaldi_fbank_engine(knf, opts, "fast")(w), want, atol=ATOL, rtol=0)
    with pytest.raises(DecodingInputError, match="fbank must be one of"):
        kaldi_fbank_engine(knf, opts, "kaldi")
    with pytest.raises(DecodingInputError, match="1-D"):
        knf_fbank(knf, opts, torch.zeros(2, 400))


def test_onnx_loaders_take_the_fbank_engine(tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from asrdecode.models.onnx_transducer import load_onnx_transducer
    from sherpa_models import build_icefall, build_nemo

    g = torch.Generator().manual_seed(5)
    w = [0.1 * torch.randn(16000, generator=g)]
    for d in (build_icefall(tmp_path / "icefall"), build_nemo(tmp_path / "nemo", normalize_type="NA")):
        fast, exact = load_onnx_transducer(str(d)).features(w)[0], load_onnx_transducer(str(d), fbank="knf").features(w)[0]
        assert not torch.equal(fast, exact)  # float32 rounding apart ...
        torch.testing.assert_close(fast, exact, atol=ATOL, rtol=0)  # ... and no more
        with pytest.raises(DecodingInputError, match="fbank must be one of"):
            load_onnx_transducer(str(d), fbank="exact")
