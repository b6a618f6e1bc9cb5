"""Front end and encoder of the bundled demo models.

The front end is a real acoustic model trained on real speech: the phoneme CTC model shipped in
the PyPI package ``hama`` (Apache-2.0). It maps 16 kHz audio to phone log-probs ``[T20, 191]``
at 20 ms frames. :class:`PhoneEncoder` stacks 4 of those frames (80 ms, like 8x-subsampled
production encoders) and runs a small BiLSTM over them; the CTC, RNN-T and TDT demo models all
share this encoder design.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import DecodingInputError
from .spectral import FrameMap, MelProduct

__all__ = ["HamaFrontEnd", "PhoneEncoder", "PHONE_DIM", "STACK", "LogMelFrontEnd", "MelEncoder", "MEL_DIM",
           "pad_features"]

PHONE_DIM = 191
STACK = 4


class HamaFrontEnd:
    """hama's phone recogniser as a feature extractor: audio ``[N]`` (16 kHz) -> log-probs ``[T20, 191]``."""

    def __init__(self) -> None:
        try:
            from hama import _engine
            from hama.asr import _read_asr_hama_bytes
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("the demo models' front end needs `pip install hama`") from err
        self._session = _engine.AsrSession(_read_asr_hama_bytes(None))

    def phone_log_probs(self, audio: torch.Tensor) -> torch.Tensor:
        """``audio [N]`` float in [-1, 1] at 16 kHz -> phone log-probs ``[T20, 191]`` float32."""
        if not isinstance(audio, torch.Tensor) or audio.dim() != 1:
            raise DecodingInputError("audio must be a 1-D float tensor [N] sampled at 16 kHz")
        if audio.numel() < 400:
            # shorter than one analysis window: no frames
            return torch.zeros(0, PHONE_DIM)
        wav = audio.detach().to(torch.float32).clamp(-1, 1).cpu().numpy().reshape(1, -1)
        lp, n = self._session.run(["log_probs", "out_lengths"], {"waveform": wav, "waveform_lengths": None})
        return torch.from_numpy(lp[0, : int(n[0])].copy())


def pad_features(feats: list[torch.Tensor], feature_dim: int, value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-utterance features ``[Tf_i, F]`` -> one batch ``[B, max(1, max Tf_i), F]`` padded with ``value``
    and the lengths ``[B]`` (every bundle's ``features``)."""
    flen = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    x = torch.full((len(feats), max(1, int(flen.max()) if len(feats) else 1), feature_dim), float(value))
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = f
    return x, flen


def _bilstm(inp: int, hidden: int, layers: int, dropout: float) -> nn.LSTM:
    """The encoders' batch-first bidirectional LSTM (dropout between layers)."""
    return nn.LSTM(inp, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                   dropout=dropout if layers > 1 else 0.0)


def _run_packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``lstm`` over ``x [B, T, F]`` with ``lengths [B]`` valid frames; padding stays out of the state."""
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    y, _ = lstm(packed)
    return nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])[0]


class PhoneEncoder(nn.Module):
    """Phone log-probs ``[B, T20, 191]`` -> encoder output ``[B, ceil(T20 / 4), D]`` (80 ms frames).

    Posteriors (``exp``) -> stack 4 frames -> linear -> ReLU -> ``layers``-layer BiLSTM of ``hidden`` units per direction;
    ``D = 2 * hidden``.
    """

    feature_dim = PHONE_DIM
    feature_frames_per_frame = STACK

    def __init__(self, hidden: int = 192, proj: int = 256, layers: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.inp = nn.Linear(PHONE_DIM * STACK, proj)
        self.lstm = _bilstm(proj, hidden, layers, dropout)
        self.drop = nn.Dropout(dropout)
        self.out_dim = 2 * hidden

    @staticmethod
    def out_lengths(lengths: torch.Tensor) -> torch.Tensor:
        """Frame counts after stacking: ``ceil(lengths / 4)``."""
        return torch.div(lengths + STACK - 1, STACK, rounding_mode="floor")

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, f = feats.shape
        if f != PHONE_DIM:
            raise DecodingInputError(f"feats must be [B, T, {PHONE_DIM}], got shape {tuple(feats.shape)}")
        pad = (-t) % STACK
        # padded frames: a confident blank (id 190), so a partial last group looks like silence
        mask = torch.arange(t + pad, device=feats.device).unsqueeze(0) >= lengths.unsqueeze(1)
        x = torch.nn.functional.pad(feats, (0, 0, 0, pad))
        silence = torch.full((PHONE_DIM,), -30.0, dtype=x.dtype, device=x.device)
        silence[PHONE_DIM - 1] = 0.0
        x = torch.where(mask.unsqueeze(2), silence, x)
        x = x.reshape(b, (t + pad) // STACK, STACK * PHONE_DIM)
        # phone posteriors (probabilities) learn much faster than raw log-probs (which span [-50, 0])
        x = x.exp()
        out_len = self.out_lengths(lengths)
        x = self.drop(torch.relu(self.inp(x)))
        y = _run_packed(self.lstm, x, out_len)
        return self.drop(y), out_len


# -- log-mel front end + convolutional BiLSTM encoder --------------------------------------------

MEL_DIM = 80
MEL_HOP = 160  # 10 ms at 16 kHz
MEL_WINDOW = 400  # 25 ms
MEL_STACK = 8  # 10 ms feature frames per 80 ms encoder frame


def _mel_filterbank(n_fft: int, n_mels: int, sample_rate: int, f_min: float = 20.0, f_max: float = 7600.0) -> torch.Tensor:
    """Triangular filters on the HTK mel scale: ``[n_fft // 2 + 1, n_mels]``."""
    def mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def hz(m: torch.Tensor) -> torch.Tensor:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    freqs = torch.linspace(0.0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    edges = hz(torch.linspace(float(mel(torch.tensor(f_min))), float(mel(torch.tensor(f_max))), n_mels + 2,
                              dtype=torch.float64))
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    f = freqs.unsqueeze(1)
    up = (f - lo) / (mid - lo)
    down = (hi - f) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0).to(torch.float32)


class LogMelFrontEnd:
    """Audio ``[N]`` (16 kHz) -> log-mel energies ``[T10, 80]`` (25 ms Hann window, 10 ms hop).

    ``T10 = 1 + (N - 400) // 160`` frames (0 when ``N < 400``); frame ``t`` covers samples
    ``[160 t, 160 t + 400)``, so encoder frame ``j`` (80 ms) starts at sample ``1280 j``. Pure
    torch (no torchaudio). Not normalised: :class:`MelEncoder` normalises per utterance.
    """

    def __init__(self) -> None:
        self._frame_map = FrameMap(torch.hann_window(MEL_WINDOW, periodic=True), preemph=0.0, remove_dc=True)
        self._mel = MelProduct(_mel_filterbank(512, MEL_DIM, 16000))

    def log_mel(self, audio: torch.Tensor) -> torch.Tensor:
        """``audio [N]`` float in [-1, 1] at 16 kHz -> ``[T10, 80]`` float32."""
        if not isinstance(audio, torch.Tensor) or audio.dim() != 1:
            raise DecodingInputError("audio must be a 1-D float tensor [N] sampled at 16 kHz")
        if audio.numel() < MEL_WINDOW:
            return torch.zeros(0, MEL_DIM)
        x = audio.detach().to(torch.float32).cpu()
        frames = x.unfold(0, MEL_WINDOW, MEL_HOP)  # [T10, 400], a view
        spec = torch.fft.rfft(self._frame_map(frames, 512))  # DC removed, windowed, zero-padded: [T10, 257]
        return self._mel(spec).add_(1e-6).log_()  # power spectrum x mel filters


class MelEncoder(nn.Module):
    """Log-mel ``[B, T10, 80]`` -> encoder output ``[B, ceil(T10 / 8), D]`` (80 ms frames).

    Per-utterance mean / variance normalisation over the valid frames, three stride-2 1-D
    convolutions (kernel 5, ``conv`` channels, GELU; padded frames are zeroed after each, so the
    output does not depend on the batch's padding), layer norm, then a ``layers``-layer BiLSTM of ``hidden``
    units per direction; ``D = 2 * hidden``.
    """

    feature_dim = MEL_DIM
    feature_frames_per_frame = MEL_STACK

    def __init__(self, hidden: int = 192, conv: int = 256, layers: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(MEL_DIM if i == 0 else conv, conv, 5, stride=2, padding=2)
                                    for i in range(3)])
        self.norm = nn.LayerNorm(conv)
        self.lstm = _bilstm(conv, hidden, layers, dropout)
        self.drop = nn.Dropout(dropout)
        self.out_dim = 2 * hidden

    @staticmethod
    def out_lengths(lengths: torch.Tensor) -> torch.Tensor:
        """Frame counts after the three stride-2 convolutions: ``ceil(lengths / 8)``."""
        for _ in range(3):
            lengths = torch.div(lengths + 1, 2, rounding_mode="floor")
        return lengths

    @staticmethod
    def normalise(feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Per-utterance, per-bin mean / variance normalisation over the valid frames; padding -> 0."""
        valid = (torch.arange(feats.shape[1], device=feats.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(2)
        n = lengths.clamp(min=1).to(feats.dtype).view(-1, 1, 1)
        x = torch.where(valid, feats, torch.zeros((), dtype=feats.dtype, device=feats.device))
        mean = x.sum(1, keepdim=True) / n
        var = (torch.where(valid, x - mean, torch.zeros((), dtype=feats.dtype, device=feats.device)) ** 2).sum(1, keepdim=True) / n
        return torch.where(valid, (x - mean) / torch.sqrt(var + 1e-5), torch.zeros((), dtype=feats.dtype, device=feats.device))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[2] != MEL_DIM:
            raise DecodingInputError(f"feats must be [B, T, {MEL_DIM}], got shape {tuple(feats.shape)}")
        x = self.normalise(feats, lengths).transpose(1, 2)  # [B, 80, T10]
        n = lengths
        for conv in self.convs:
            x = nn.functional.gelu(conv(x))
            n = torch.div(n + 1, 2, rounding_mode="floor")
            keep = torch.arange(x.shape[2], device=x.device).unsqueeze(0) < n.unsqueeze(1)
            x = x * keep.unsqueeze(1).to(x.dtype)
        x = self.drop(self.norm(x.transpose(1, 2)))
        y = _run_packed(self.lstm, x, n)
        return self.drop(y), n
