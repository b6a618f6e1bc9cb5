"""Export a bundled transducer (``demo-rnnt``, ``demo-tdt``) to sherpa-onnx's layout.

Writes ``encoder.onnx`` (log-mel encoder + the joint's encoder projection), ``decoder.onnx``
(embedding + LSTM + decoder projection, ``h`` / ``c`` states), ``joiner.onnx`` and ``tokens.txt``
with the metadata :mod:`asrdecode.models.onnx_transducer` reads. Uses torch's TorchScript-based
ONNX exporter (``dynamo=False``: no onnxscript needed) and the ``onnx`` package for metadata.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from ..errors import DecodingInputError
from ..transducer.model import LSTMTransducer
from .onnx_transducer import LAYOUT

__all__ = ["export_onnx", "OPSET"]

OPSET = 17


class _Encoder(nn.Module):
    def __init__(self, encoder: nn.Module, proj: nn.Module) -> None:
        super().__init__()
        self.encoder, self.proj = encoder, proj

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, n = self.encoder(x, x_lens)
        return self.proj(y), n


class _Decoder(nn.Module):
    def __init__(self, t: LSTMTransducer) -> None:
        super().__init__()
        self.t = t

    def forward(self, y: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h2, c2) = self.t.lstm(self.t.embedding(y[:, -1:]), (h, c))
        return self.t.dec_proj(out[:, -1]), h2, c2


class _Joiner(nn.Module):
    def __init__(self, t: LSTMTransducer) -> None:
        super().__init__()
        self.t = t

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        return self.t.joint(encoder_out, decoder_out)


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Silence what the exporter's C++ side prints to file descriptor 2 (shape-inference notes on
    packed LSTMs); Python exceptions are unaffected."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stderr without a descriptor
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _export(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
            axes: dict[str, dict[int, str]]) -> None:
    with warnings.catch_warnings(), torch.no_grad(), _quiet_native_stderr():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=OPSET)


def _add_metadata(path: Path, meta: dict[str, str]) -> None:
    import onnx

    m = onnx.load(str(path))
    for k, v in meta.items():
        entry = m.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(m, str(path))


def export_onnx(bundle: Any, out_dir: str | Path) -> list[Path]:
    """Write ``bundle`` (a bundled demo transducer: log-mel encoder, :class:`LSTMTransducer`) to
    ``out_dir`` in the sherpa-onnx layout; returns the files written.

    Raises:
        DecodingInputError: ``bundle`` is not a log-mel demo transducer.
    """
    t = getattr(bundle, "model", None)
    if getattr(bundle, "kind", None) not in ("rnnt", "tdt") or not isinstance(t, LSTMTransducer) \
            or getattr(bundle, "frontend", None) != "logmel" or not isinstance(getattr(bundle, "encoder", None), nn.Module):
        raise DecodingInputError(f"export-onnx exports the bundled transducers (demo-rnnt, demo-tdt: log-mel encoder + "
                                 f"LSTM prediction network), got {getattr(bundle, 'name', type(bundle).__name__)!r}")
    try:
        import onnx  # noqa: F401
    except ImportError:
        from .onnx_transducer import OnnxMissingError

        raise OnnxMissingError("export-onnx needs `pip install 'asrdecode[onnx]'` (onnx, onnxruntime)") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    enc, t = bundle.encoder.eval().cpu(), t.eval().cpu()
    files = [out / f for f in LAYOUT]
    feats = torch.randn(2, 64, bundle.feature_dim)
    _export(_Encoder(enc, t.enc_proj), (feats, torch.tensor([64, 40])), files[0], ["x", "x_lens"],
            ["encoder_out", "encoder_out_lens"],
            {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, "encoder_out": {0: "N", 1: "T_out"}, "encoder_out_lens": {0: "N"}})
    h, c = t.initial_state(2)
    _export(_Decoder(t), (torch.tensor([[1], [2]]), h, c), files[1], ["y", "h", "c"], ["decoder_out", "next_h", "next_c"],
            {"y": {0: "N"}, "h": {1: "N"}, "c": {1: "N"}, "decoder_out": {0: "N"}, "next_h": {1: "N"}, "next_c": {1: "N"}})
    width = t.enc_proj.out_features
    _export(_Joiner(t), (torch.randn(3, width), torch.randn(3, width)), files[2], ["encoder_out", "decoder_out"],
            ["logit"], {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}})
    tok, blank = bundle.tokenizer, int(t.blank_id)
    _add_metadata(files[0], {
        "model_type": "asrdecode-transducer", "source": str(getattr(bundle, "name", "")),
        "vocab_size": str(t.vocab_size), "blank_id": str(blank), "context_size": "1",
        "durations": ",".join(str(d) for d in t.durations) if t.durations else "",
        "frontend": "logmel", "feature_dim": str(bundle.feature_dim),
        "subsampling_factor": str(bundle.feature_frames_per_frame),
        "frame_shift_ms": str(round(bundle.frame_seconds * 1000 / bundle.feature_frames_per_frame, 6)),
    })
    lines = [f"{'<blk>' if i == blank else tok.id_to_piece(i)} {i}" for i in range(t.vocab_size)]
    files[3].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files
