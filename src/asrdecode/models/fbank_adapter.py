"""sherpa-onnx's NeMo fbank -> an approximation of asrdecode's log-mel: the front-end adapter of ``export-onnx``.

sherpa-onnx computes the features of a NeMo transducer itself (:class:`~asrdecode.models.nemo_onnx.NemoFbankFrontEnd`
reproduces them): kaldi-native-fbank, povey window, pre-emphasis 0.97, no DC removal, 512-point FFT,
80 librosa (Slaney) mel filters over 0-7600 Hz, ``log(max(e, float eps))``, ``snip_edges=False``: frame ``t``
covers samples ``[160 t - 120, 160 t + 280)`` (reflected at the ends), ``T' = (N + 80) // 160`` frames. The
bundled models were trained on :class:`~asrdecode.models.frontend.LogMelFrontEnd`: Hann window, DC removed, no
pre-emphasis, 512-point FFT, 80 HTK mel filters over 20-7600 Hz, ``log(e + 1e-6)``, frame ``t`` covers
``[160 t, 160 t + 400)``, ``T = T' - 2`` frames (``N >= 400``). sherpa-onnx sets these options for every NeMo
model (only ``feat_dim`` and ``normalize_type`` come from the metadata), and its frames sit 120 samples (3/4 of
a hop) before ours, so no metadata and no fixed map of its features gives ours exactly.

:class:`FbankAdapter` approximates our frame ``t`` from sherpa-onnx's frames ``t, t + 1, t + 2`` (centres 120
samples before, 40 and 200 after ours): a linear map (a kernel-3 convolution, started from the least-squares
fit of our log-mel) plus a small residual branch (kernel-3 convolution -> GELU -> 1x1 convolution), both fitted
by ``recipes/fit_fbank_adapter.py`` on synthetic training speech so that the frozen demo encoder's output
matches the one it gives on our log-mel. ``export-onnx`` folds it in front of the encoder; the words it gives
are close to, not the same as, asrdecode's (benchmarks/RESULTS.md, issue 28).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import DecodingInputError, FileFormatError
from .frontend import MEL_DIM

__all__ = ["FbankAdapter", "ADAPTER_CONTEXT", "load_fbank_adapter", "save_fbank_adapter", "ADAPTER_ASSET"]

#: sherpa-onnx frames per adapted frame: ours ``t`` from theirs ``t .. t + 2``; ``T = T' - (ADAPTER_CONTEXT - 1)``
ADAPTER_CONTEXT = 3
ADAPTER_ASSET = Path(__file__).resolve().parent / "assets" / "fbank-adapter.pt"


class FbankAdapter(nn.Module):
    """sherpa-onnx NeMo fbank ``[B, T', 80]`` + lengths ``[B]`` -> approximate log-mel ``[B, T', 80]`` + lengths
    ``T' - 2`` (the last two frames of every row are padding; ``T' >= 1``)."""

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.hidden = int(hidden)
        self.linear = nn.Conv1d(MEL_DIM, MEL_DIM, ADAPTER_CONTEXT)
        self.expand = nn.Conv1d(MEL_DIM, self.hidden, ADAPTER_CONTEXT)
        self.reduce = nn.Conv1d(self.hidden, MEL_DIM, 1)

    def set_linear(self, weight: torch.Tensor) -> None:
        """Start from a least-squares map: ``weight [ADAPTER_CONTEXT * 80 + 1, 80]`` (row ``k * 80 + i``: input bin
        ``i`` of frame ``t + k``; the last row the bias); the residual branch is zeroed."""
        if weight.shape != (ADAPTER_CONTEXT * MEL_DIM + 1, MEL_DIM):
            raise DecodingInputError(f"weight must be [{ADAPTER_CONTEXT * MEL_DIM + 1}, {MEL_DIM}], got {tuple(weight.shape)}")
        with torch.no_grad():
            w = weight[:-1].to(self.linear.weight.dtype).reshape(ADAPTER_CONTEXT, MEL_DIM, MEL_DIM)  # [k, in, out]
            self.linear.weight.copy_(w.permute(2, 1, 0))  # [out, in, k]
            for conv, value in ((self.linear, weight[-1]), (self.reduce, torch.zeros(MEL_DIM))):
                assert conv.bias is not None  # nn.Conv1d's default bias=True
                conv.bias.copy_(value)
            nn.init.zeros_(self.reduce.weight)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[2] != MEL_DIM:
            raise DecodingInputError(f"feats must be [B, T, {MEL_DIM}], got shape {tuple(feats.shape)}")
        x = nn.functional.pad(feats.transpose(1, 2), (0, ADAPTER_CONTEXT - 1))  # [B, 80, T' + 2]
        y = self.linear(x) + self.reduce(nn.functional.gelu(self.expand(x)))  # [B, 80, T']
        return y.transpose(1, 2), (lengths - (ADAPTER_CONTEXT - 1)).clamp(min=0)


def save_fbank_adapter(adapter: FbankAdapter, path: str | Path, fit: dict[str, Any]) -> None:
    """Write ``adapter`` (float16 weights) with ``fit``, a record of how it was fitted."""
    state = {k: v.detach().cpu().half() for k, v in adapter.state_dict().items()}
    torch.save({"kind": "fbank-adapter", "hidden": adapter.hidden, "state_dict": state, "fit": fit}, str(path))


def load_fbank_adapter(path: str | Path = ADAPTER_ASSET) -> FbankAdapter:
    """The adapter saved at ``path`` (default: the bundled one, fitted for the demo encoder), in eval mode.

    Raises:
        FileFormatError: ``path`` is not a saved adapter.
    """
    p = Path(path)
    try:
        ckpt = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, struct.error, ... depending on the damage
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise FileFormatError(p, None, f"not a readable adapter: {first}") from None
    if not isinstance(ckpt, dict) or ckpt.get("kind") != "fbank-adapter":
        raise FileFormatError(p, None, "not an fbank adapter (kind 'fbank-adapter')")
    adapter = FbankAdapter(int(ckpt["hidden"]))
    adapter.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()})
    return adapter.eval()
