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

__all__ = ["HamaFrontEnd", "PhoneEncoder", "PHONE_DIM", "STACK"]

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


class PhoneEncoder(nn.Module):
    """Phone log-probs ``[B, T20, 191]`` -> encoder output ``[B, ceil(T20 / 4), D]`` (80 ms frames).

    Posteriors (``exp``) -> stack 4 frames -> linear -> ReLU -> ``layers``-layer BiLSTM of ``hidden`` units per direction;
    ``D = 2 * hidden``.
    """

    def __init__(self, hidden: int = 192, proj: int = 256, layers: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.inp = nn.Linear(PHONE_DIM * STACK, proj)
        self.lstm = nn.LSTM(proj, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
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
        packed = nn.utils.rnn.pack_padded_sequence(x, out_len.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.lstm(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return self.drop(y), out_len
