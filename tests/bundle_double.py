"""Test doubles implementing :class:`asrdecode.models.ModelBundle` without any bundled model code.

``--model bundle_double:ctc_bundle`` (or ``:rnnt_bundle``) loads them through
:func:`asrdecode.models.load_bundle` (the tests put this folder on ``sys.path`` / ``PYTHONPATH``).
Features: mean absolute amplitude and zero-crossing rate of 20 ms frames (``F = 2``); the encoder
stacks 4 of them to 80 ms (``D = 8``) and applies a fixed random projection; the heads are seeded
random networks over a character vocabulary. The transcripts mean nothing; they are deterministic.
"""

from __future__ import annotations

import torch

from asrdecode.tokenizers import CharTokenizer
from asrdecode.transducer import LSTMTransducer

SYMBOLS = ["_"] + list("abcdefgh ")  # blank first: its id is 0, unlike the bundled models
FRAME = 320  # samples per feature frame (20 ms)
STACK = 4


class _Head(torch.nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(dim, vocab)
        self.blank_id, self.vocab_size = 0, vocab

    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lin(enc), dim=-1)


class DoubleBundle:
    """A tiny ModelBundle (see the module docstring); ``kind`` is ``"ctc"`` or ``"rnnt"``."""

    feature_dim = 2
    feature_frames_per_frame = STACK
    encoder_dim = 8
    frame_seconds = FRAME * STACK / 16000

    def __init__(self, kind: str) -> None:
        g = torch.Generator().manual_seed(7)
        self.name, self.kind = f"double-{kind}", kind
        self.proj = torch.randn(self.feature_dim * STACK, self.encoder_dim, generator=g)
        self.tokenizer = CharTokenizer(SYMBOLS, blank_id=0)
        torch.manual_seed(11)
        if kind == "ctc":
            self.model = _Head(self.encoder_dim, len(SYMBOLS)).eval()
        else:
            self.model = LSTMTransducer(len(SYMBOLS), self.encoder_dim, 16, 16, blank_id=0).eval()
            with torch.no_grad():
                self.model.joint_out.bias[0] += 2.0  # a label on some frames, blank on most
        self.blank_id = 0

    def features(self, audio, lengths=None) -> tuple[torch.Tensor, torch.Tensor]:
        feats = []
        for w in audio:
            w = torch.as_tensor(w, dtype=torch.float32)
            frames = w[: w.numel() // FRAME * FRAME].reshape(-1, FRAME)
            zcr = (frames[:, 1:].sign() != frames[:, :-1].sign()).float().mean(dim=1)
            feats.append(torch.stack([10 * frames.abs().mean(dim=1), zcr], dim=1))
        flen = torch.tensor([f.shape[0] for f in feats])
        x = torch.zeros(len(feats), max(1, int(flen.max())), self.feature_dim)
        for i, f in enumerate(feats):
            x[i, : f.shape[0]] = f
        return x, flen

    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T = feats.shape[1] // STACK
        stacked = feats[:, : T * STACK].reshape(feats.shape[0], T, STACK * self.feature_dim)
        return torch.tanh(stacked @ self.proj), lengths // STACK


def ctc_bundle() -> DoubleBundle:
    return DoubleBundle("ctc")


def rnnt_bundle() -> DoubleBundle:
    return DoubleBundle("rnnt")
