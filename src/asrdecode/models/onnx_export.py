"""Export a bundled transducer (``demo-rnnt``, ``demo-tdt``) to ONNX files sherpa-onnx loads.

``layout="nemo"`` (the default; what sherpa-onnx reads for LSTM prediction networks, the layout of
:mod:`asrdecode.models.nemo_onnx`): ``encoder.onnx`` (``audio_signal [N, 80, T]`` + ``length`` ->
``[N, C, T']``), ``decoder.onnx`` (``targets`` / ``target_length`` / two LSTM states -> ``[N, H, 1]``,
length, states), ``joiner.onnx`` (both projections + the joint) and ``tokens.txt`` (``<blk>`` last)
with NeMo's metadata (``vocab_size`` without the blank, ``pred_rnn_layers``, ``pred_hidden``,
``subsampling_factor``, ``normalize_type`` empty: the encoder normalises itself; ``url`` naming
``tdt`` for TDT) plus ``frontend=logmel``. sherpa-onnx computes its own NeMo fbank from the audio, which
no metadata turns into the log-mel the models were trained on (:mod:`asrdecode.models.fbank_adapter`), so
by default (``adapter=True``) ``encoder.onnx`` starts with the fitted :class:`~.fbank_adapter.FbankAdapter`:
``audio_signal`` is sherpa-onnx's fbank, mapped to (an approximation of) our log-mel, the tensors
``logmel`` / ``logmel_length``, which feed the encoder; metadata ``logmel_input=logmel,logmel_length``
names them, and asrdecode feeds its own log-mel there (exact: the bundled model's words), while
sherpa-onnx's words are close, not equal (benchmarks/RESULTS.md, issue 28). ``adapter=False``: the
encoder alone, ``audio_signal`` = our log-mel (sherpa-onnx's words then differ much more).

``layout="stateful"``: asrdecode's earlier layout (``x`` / ``x_lens``, ``y`` + ``h`` / ``c``, projected
outputs), which only asrdecode reads. Uses torch's TorchScript-based ONNX exporter (``dynamo=False``)
and the ``onnx`` package for metadata.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from ..errors import DecodingInputError
from ..transducer.model import LSTMTransducer
from .onnx_transducer import LAYOUT

__all__ = ["export_onnx", "OPSET", "LAYOUTS"]

OPSET = 17
#: what ``export_onnx`` can write: NeMo's layout (sherpa-onnx loads it) and asrdecode's own
LAYOUTS = ("nemo", "stateful")


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


class _NemoEncoder(nn.Module):
    """``audio_signal [N, F, T]`` + ``length [N]`` -> encoder output ``[N, C, T']`` + lengths (NeMo's ``[N, C, T]``)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, n = self.encoder(audio_signal.transpose(1, 2), length)
        return y.transpose(1, 2), n


class _NemoAdapter(nn.Module):
    """sherpa-onnx's fbank ``audio_signal [N, 80, T']`` + ``length [N]`` -> approximate log-mel ``[N, 80, T']``
    (valid: the first ``length - 2``) + those lengths. :class:`_NemoEncoder`'s twin under another attribute
    name: the two graphs are merged into one encoder.onnx, so their initializers must not share names."""

    def __init__(self, adapter: nn.Module) -> None:
        super().__init__()
        self.adapter = adapter

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, n = self.adapter(audio_signal.transpose(1, 2), length)
        return y.transpose(1, 2), n


class _NemoDecoder(nn.Module):
    """``targets [N, 1]`` int32 + ``target_length [N]`` + LSTM states ``[L, N, H]`` -> ``[N, H, 1]``, length, states."""

    def __init__(self, t: LSTMTransducer) -> None:
        super().__init__()
        self.t = t

    def forward(self, targets: torch.Tensor, target_length: torch.Tensor, h: torch.Tensor,
                c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h2, c2) = self.t.lstm(self.t.embedding(targets.long()), (h, c))
        return out.transpose(1, 2), target_length, h2, c2


class _NemoJoiner(nn.Module):
    """``encoder_outputs [N, C, 1]`` + ``decoder_outputs [N, H, 1]`` -> logits ``[N, 1, 1, V (+K)]``."""

    def __init__(self, t: LSTMTransducer) -> None:
        super().__init__()
        self.t = t

    def forward(self, encoder_outputs: torch.Tensor, decoder_outputs: torch.Tensor) -> torch.Tensor:
        f = self.t.enc_proj(encoder_outputs.transpose(1, 2)).unsqueeze(2)
        g = self.t.dec_proj(decoder_outputs.transpose(1, 2)).unsqueeze(1)
        return self.t.joint(f, g)


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


def export_onnx(bundle: Any, out_dir: str | Path, layout: str = "nemo", adapter: bool = True) -> list[Path]:
    """Write ``bundle`` (a bundled demo transducer: log-mel encoder, :class:`LSTMTransducer`) to
    ``out_dir`` in ``layout`` (see the module docstring); returns the files written. ``adapter``
    (``layout="nemo"`` only): put the sherpa-onnx front-end adapter in front of the encoder.

    Raises:
        DecodingInputError: ``bundle`` is not a log-mel demo transducer, ``layout`` is unknown, or one of
            the files to write is a symbolic link (never written through).
    """
    if layout not in LAYOUTS:
        raise DecodingInputError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    t = getattr(bundle, "model", None)
    if getattr(bundle, "kind", None) not in ("rnnt", "tdt") or not isinstance(t, LSTMTransducer) \
            or getattr(bundle, "frontend", None) != "logmel" or not isinstance(getattr(bundle, "encoder", None), nn.Module):
        raise DecodingInputError(f"export-onnx exports the bundled transducers (demo-rnnt, demo-tdt: log-mel encoder + "
                                 f"LSTM prediction network), got {getattr(bundle, 'name', type(bundle).__name__)!r}")
    try:
        import onnx  # noqa: F401
    except ImportError:
        from .onnx_transducer import OnnxMissingError

        raise OnnxMissingError("export-onnx needs `pip install -e '.[onnx]'` in the asrdecode checkout (onnx, onnxruntime)") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = [out / f for f in LAYOUT]
    _refuse_links(final)
    # every file is written in a fresh private folder (mkdtemp: mode 0700, a new name) and moved into
    # place by os.replace, which replaces a link planted meanwhile instead of writing through it
    stage = Path(tempfile.mkdtemp(prefix=".export-onnx-", dir=out))
    try:
        files = [stage / f for f in LAYOUT]
        _export_layout(bundle, t, files, layout, adapter)
        _refuse_links(final)
        for staged, target in zip(files, final):
            os.replace(staged, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return final


def _refuse_links(paths: list[Path]) -> None:
    """Raise :class:`~asrdecode.errors.DecodingInputError` when one of ``paths`` is a symbolic link."""
    for path in paths:
        if path.is_symlink():
            raise DecodingInputError(f"{path} is a symbolic link; export-onnx does not write through links "
                                     f"(remove it or choose another folder)")


def _export_layout(bundle: Any, t: LSTMTransducer, files: list[Path], layout: str, adapter: bool) -> None:
    """Write ``layout``'s four files (:data:`LAYOUT` order) of ``bundle`` to ``files``."""
    enc, t = bundle.encoder.eval().cpu(), t.eval().cpu()
    if layout == "nemo":
        _export_nemo(bundle, enc, t, files, adapter)
        return
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


def _export_nemo_encoder(enc: nn.Module, feature_dim: int, path: Path, adapter: bool) -> dict[str, str]:
    """``encoder.onnx`` (with the front-end adapter in front when ``adapter``); returns the metadata it adds."""
    import onnx

    axes = {"N": {0: "N", 2: "T"}, "L": {0: "N"}}
    sample = (torch.randn(2, feature_dim, 64), torch.tensor([64, 40]))
    if not adapter:
        _export(_NemoEncoder(enc), sample, path, ["audio_signal", "length"], ["outputs", "encoded_lengths"],
                {"audio_signal": axes["N"], "length": axes["L"], "outputs": {0: "N", 2: "T_out"},
                 "encoded_lengths": axes["L"]})
        return {}
    from .fbank_adapter import load_fbank_adapter

    front, core = path.with_suffix(".adapter.tmp"), path.with_suffix(".core.tmp")
    try:
        _export(_NemoAdapter(load_fbank_adapter()), sample, front, ["audio_signal", "length"],
                ["logmel", "logmel_length"], {"audio_signal": axes["N"], "length": axes["L"], "logmel": axes["N"],
                                              "logmel_length": axes["L"]})
        _export(_NemoEncoder(enc), sample, core, ["logmel", "logmel_length"], ["outputs", "encoded_lengths"],
                {"logmel": axes["N"], "logmel_length": axes["L"], "outputs": {0: "N", 2: "T_out"},
                 "encoded_lengths": axes["L"]})
        merged = onnx.compose.merge_models(onnx.load(str(front)), onnx.load(str(core)),
                                           io_map=[("logmel", "logmel"), ("logmel_length", "logmel_length")])
        onnx.save(merged, str(path))
    finally:
        front.unlink(missing_ok=True)
        core.unlink(missing_ok=True)
    return {"logmel_input": "logmel,logmel_length",
            "frontend_adapter": "fbank-adapter: sherpa-onnx NeMo fbank -> approximate asrdecode log-mel"}


def _export_nemo(bundle: Any, enc: nn.Module, t: LSTMTransducer, files: list[Path], adapter: bool) -> list[Path]:
    """The NeMo layout (sherpa-onnx's ``nemo_transducer``); the blank must be the last id."""
    blank, v = int(t.blank_id), int(t.vocab_size)
    if blank != v - 1:
        raise DecodingInputError(f"the NeMo layout needs the blank last (id {v - 1}), the model's is {blank}")
    if t.durations is not None and list(t.durations) != list(range(len(t.durations))):
        raise DecodingInputError(f"sherpa-onnx reads TDT durations as 0..K-1, the model's are {t.durations}")
    f = bundle.feature_dim
    tap = _export_nemo_encoder(enc, f, files[0], adapter)
    h, c = t.initial_state(2)
    _export(_NemoDecoder(t), (torch.tensor([[1], [blank]], dtype=torch.int32), torch.ones(2, dtype=torch.int32), h, c),
            files[1], ["targets", "target_length", "states.1", "onnx::Slice_3"],
            ["outputs", "prednet_lengths", "states", "next_c"],
            {"targets": {0: "N"}, "target_length": {0: "N"}, "states.1": {1: "N"}, "onnx::Slice_3": {1: "N"},
             "outputs": {0: "N"}, "prednet_lengths": {0: "N"}, "states": {1: "N"}, "next_c": {1: "N"}})
    d_enc = t.enc_proj.in_features
    _export(_NemoJoiner(t), (torch.randn(3, d_enc, 1), torch.randn(3, t.pred_dim, 1)), files[2],
            ["encoder_outputs", "decoder_outputs"], ["outputs"],
            {"encoder_outputs": {0: "N"}, "decoder_outputs": {0: "N"}, "outputs": {0: "N"}})
    name = str(getattr(bundle, "name", ""))
    _add_metadata(files[0], {
        "model_type": "EncDecRNNTBPEModel", "version": "1", "model_author": "asrdecode",
        "url": f"asrdecode/{name}" + ("-tdt" if t.durations and "tdt" not in name else ""),
        "comment": "exported by asrdecode export-onnx", "vocab_size": str(v - 1),
        "subsampling_factor": str(bundle.feature_frames_per_frame), "normalize_type": "",
        "pred_rnn_layers": str(t.pred_layers), "pred_hidden": str(t.pred_dim), "feat_dim": str(f),
        "frontend": "logmel", **tap,
        "frame_shift_ms": str(round(bundle.frame_seconds * 1000 / bundle.feature_frames_per_frame, 6)),
    })
    tok = bundle.tokenizer
    # specials the tokenizer renders as "" (<unk>) keep a name: sherpa-onnx's tokens.txt has one per id
    lines = [f"{'<blk>' if i == blank else tok.id_to_piece(i) or ('<unk>' if i == 0 else f'<special{i}>')} {i}"
             for i in range(v)]
    files[3].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files
