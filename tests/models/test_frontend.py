"""The demo models' front ends: log-mel features and the convolutional BiLSTM encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asrdecode.errors import DecodingInputError
from asrdecode.models.frontend import MEL_DIM, LogMelFrontEnd, MelEncoder, _mel_filterbank


def _tone(freq: float, seconds: float = 0.5, amp: float = 0.3) -> torch.Tensor:
    t = torch.arange(int(16000 * seconds), dtype=torch.float64) / 16000
    return (amp * torch.sin(2 * math.pi * freq * t)).float()


@pytest.mark.parametrize("n", [0, 399, 400, 401, 559, 560, 16000, 16123])
def test_frame_count(n: int) -> None:
    feats = LogMelFrontEnd().log_mel(torch.zeros(n) + 0.01)
    assert feats.shape == (0 if n < 400 else 1 + (n - 400) // 160, MEL_DIM)


def test_filterbank_shape_and_peaks() -> None:
    fb = _mel_filterbank(512, MEL_DIM, 16000)
    assert fb.shape == (257, MEL_DIM)
    assert bool((fb >= 0).all())
    assert bool((fb.max(0).values > 0.25).all())  # no empty filter (the lowest are narrower than an FFT bin)
    centres = fb.argmax(0)
    assert bool((centres[1:] >= centres[:-1]).all())  # increasing centre frequencies


@pytest.mark.parametrize("freq", [250.0, 1000.0, 3000.0, 6000.0])
def test_tone_lands_in_its_mel_band(freq: float) -> None:
    feats = LogMelFrontEnd().log_mel(_tone(freq))
    band = int(feats.mean(0).argmax())
    fb = _mel_filterbank(512, MEL_DIM, 16000)
    bin_ = round(freq / (16000 / 512))
    # the loudest band is one whose filter covers the tone's FFT bin (or a neighbour of it)
    covering = set(torch.nonzero(fb[bin_] > 0).flatten().tolist())
    assert band in covering or band - 1 in covering or band + 1 in covering


def test_gain_invariance_after_normalisation() -> None:
    g = torch.Generator().manual_seed(0)
    x = 0.05 * torch.randn(16000, generator=g)
    fe = LogMelFrontEnd()
    a, b = fe.log_mel(x), fe.log_mel(4.0 * x)
    torch.testing.assert_close(b - a, torch.full_like(a, math.log(16.0)), atol=1e-2, rtol=0)  # 1e-6 floor
    n = torch.tensor([a.shape[0]])
    torch.testing.assert_close(MelEncoder.normalise(a[None], n), MelEncoder.normalise(b[None], n), atol=1e-2, rtol=0)


def test_normalise_ignores_padding() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 30, MEL_DIM, generator=g)
    n = torch.tensor([30, 17])
    y = MelEncoder.normalise(x, n)
    assert bool((y[1, 17:] == 0).all())
    torch.testing.assert_close(y[1, :17], MelEncoder.normalise(x[1:, :17], n[1:])[0])
    torch.testing.assert_close(y[0].mean(0), torch.zeros(MEL_DIM), atol=1e-5, rtol=0)
    torch.testing.assert_close(y[0].std(0, unbiased=False), torch.ones(MEL_DIM), atol=1e-3, rtol=0)


@pytest.mark.parametrize("t", [1, 7, 8, 9, 64, 101])
def test_encoder_lengths(t: int) -> None:
    assert int(MelEncoder.out_lengths(torch.tensor([t]))[0]) == math.ceil(t / 8)


def test_encoder_batched_equals_single() -> None:
    torch.manual_seed(0)
    enc = MelEncoder().eval()
    lens = torch.tensor([83, 40, 9])
    x = torch.randn(3, 83, MEL_DIM)
    with torch.no_grad():
        y, n = enc(x, lens)
        assert n.tolist() == [11, 5, 2] and y.shape == (3, 11, enc.out_dim)
        for i in range(3):
            yi, ni = enc(x[i : i + 1, : lens[i]], lens[i : i + 1])
            torch.testing.assert_close(yi[0, : ni[0]], y[i, : n[i]], atol=1e-5, rtol=1e-5)


def test_bad_inputs() -> None:
    fe = LogMelFrontEnd()
    with pytest.raises(DecodingInputError, match="1-D"):
        fe.log_mel(torch.zeros(2, 400))
    with pytest.raises(DecodingInputError, match="1-D"):
        fe.log_mel([0.0] * 400)  # type: ignore[arg-type]
    with pytest.raises(DecodingInputError, match="feats"):
        MelEncoder()(torch.zeros(1, 10, 40), torch.tensor([10]))


def test_demo_model_front_ends() -> None:
    """A demo bundle computes the features its encoder was trained on: log-mel or hama phones."""
    from torch import nn

    from asrdecode.models.demo import ASSETS, DemoModel
    from asrdecode.models.frontend import PhoneEncoder
    from asrdecode.tokenizers import SentencePieceTokenizer

    tok = SentencePieceTokenizer(ASSETS / "tokenizer.model")
    audio = [0.1 * torch.randn(16000), 0.1 * torch.randn(8000)]
    mel = DemoModel("x", "ctc", nn.Identity(), tok, MelEncoder().eval(), frontend="logmel")
    x, n = mel.features(audio)
    assert x.shape == (2, 98, MEL_DIM) and n.tolist() == [98, 48]
    assert mel.feature_frames_per_frame == 8
    enc, el = mel.encode_features(x, n)
    assert el.tolist() == [13, 6] and enc.shape[:2] == (2, 13)
    with pytest.raises(DecodingInputError, match="feats"):
        mel.encode_features(torch.zeros(1, 8, 191), torch.tensor([8]))
    pytest.importorskip("hama")
    phones = DemoModel("x", "ctc", nn.Identity(), tok, PhoneEncoder().eval(), frontend="hama")
    x, n = phones.features(audio)
    assert x.shape[2] == 191 and phones.feature_frames_per_frame == 4
    assert abs(int(n[0]) - 50) <= 1  # 20 ms frames
    enc, el = phones.encode_features(x, n)
    assert el.tolist() == [math.ceil(int(v) / 4) for v in n]


def test_read_encoder(tmp_path) -> None:
    """encoder.pt names its front end; older files (no name) are hama encoders; bad files are refused."""
    from asrdecode.errors import FileFormatError
    from asrdecode.models.demo import ASSETS, read_encoder

    frontend, state = read_encoder(ASSETS / "encoder.pt")
    assert frontend == "logmel" and all(v.dtype != torch.float16 for v in state.values())
    torch.save({"kind": "encoder", "state_dict": {"w": torch.zeros(2, dtype=torch.float16)}}, tmp_path / "old.pt")
    frontend, state = read_encoder(tmp_path / "old.pt")
    assert frontend == "hama" and state["w"].dtype == torch.float32
    torch.save({"kind": "encoder", "frontend": "mfcc", "state_dict": {}}, tmp_path / "odd.pt")
    with pytest.raises(FileFormatError, match="front end"):
        read_encoder(tmp_path / "odd.pt")
    torch.save({"kind": "ctc", "state_dict": {}}, tmp_path / "head.pt")
    with pytest.raises(FileFormatError, match="encoder checkpoint"):
        read_encoder(tmp_path / "head.pt")


def test_bundle_features_validate_a_list_of_waveforms() -> None:
    """A list of waveforms is checked one by one (each 1-D float), nothing padded to check it."""
    from asrdecode.models.demo import as_wave_list

    waves = as_wave_list([torch.zeros(400), np.zeros(10, dtype=np.float64)], None)
    assert [w.shape for w in waves] == [(400,), (10,)] and all(w.dtype == torch.float32 for w in waves)
    for bad, match in (([], "empty"), ([torch.zeros(3), torch.zeros(2, 3)], r"audio\[1\]"),
                       ([torch.zeros(3, dtype=torch.int16)], r"audio\[0\]")):
        with pytest.raises(DecodingInputError, match=match):
            as_wave_list(bad, None)
    ramp = np.arange(10, dtype=np.float32) / 10  # negative strides (a reversed view): torch.from_numpy refused them
    assert torch.equal(as_wave_list(ramp[::-1], None)[0], torch.from_numpy(ramp[::-1].copy()))
    assert torch.equal(as_wave_list([ramp[::-2]], None)[0], torch.from_numpy(ramp[::-2].copy()))


@pytest.mark.parametrize("audio, match", [
    (torch.tensor([0.0, float("nan")]), r"^audio contains NaN or inf"),
    (np.array([0.0, np.inf], np.float32), r"^audio contains NaN or inf"),
    ([torch.zeros(3), torch.tensor([0.0, -float("inf")])], r"^audio\[1\] contains NaN or inf"),
    (torch.tensor([[0.0, 0.0], [0.0, 2000.0]]), r"^audio\[1\] has samples of magnitude 2e\+03"),
    (torch.zeros(5, dtype=torch.int16), "must be floating point"),
])
def test_bundle_waveforms_must_be_finite_and_in_range(audio, match) -> None:
    """Every model's waveform funnel (as_wave_list) applies audio.check_waveform, the streams' rule: NaN
    audio gave phone-ctc an empty transcript, not an error."""
    from asrdecode.models.demo import as_wave_list

    with pytest.raises(DecodingInputError, match=match):
        as_wave_list(audio, None)
    # padding past a row's length is not audio: only the valid samples are checked
    padded = torch.tensor([[0.1, 0.2, float("nan")], [0.3, 0.0, 0.0]])
    waves = as_wave_list(padded, torch.tensor([2, 1]))
    assert torch.equal(waves[0], padded[0, :2]) and torch.equal(waves[1], padded[1, :1])
