"""Small random transducers written in the two ONNX layouts sherpa-onnx reads (built in the test, no
downloads): icefall's stateless transducer (zipformer / conformer exports) and NeMo's RNN-T / TDT
(parakeet exports). The encoders are one strided convolution (so padding never leaks into valid
frames); decoders and joiners have the shapes of the real ones."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from asrdecode.models.onnx_export import _add_metadata, _export

SUBSAMPLING = 4


def _pieces(vocab: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for i in range(vocab):
        a, b = divmod(i, len(letters))
        out.append(("▁" if i % 3 == 0 else "") + letters[b] + (letters[a % 26] if a else ""))
    return out


def _write_tokens(path: Path, pieces: list[str]) -> None:
    path.write_text("".join(f"{p} {i}\n" for i, p in enumerate(pieces)), encoding="utf-8")


# ------------------------------------------------------------------------------------------------ icefall
class _IcefallEncoder(nn.Module):
    def __init__(self, feat: int, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(feat, 64, SUBSAMPLING, stride=SUBSAMPLING)
        self.proj = nn.Linear(64, dim)

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.tanh(self.conv(x.transpose(1, 2) / 4)).transpose(1, 2)
        return self.proj(y), torch.div(x_lens, SUBSAMPLING, rounding_mode="floor")


class _IcefallDecoder(nn.Module):
    """icefall's stateless decoder: embedding (``-1`` -> zeros), grouped conv over the context, relu, projection."""

    def __init__(self, vocab: int, emb: int, context: int, dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.conv = nn.Conv1d(emb, emb, context, groups=emb // 4, bias=False)
        self.proj = nn.Linear(emb, dim)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        e = self.embedding(y.clamp(min=0)) * (y >= 0).unsqueeze(-1).to(torch.float32)
        out = torch.relu(self.conv(e.transpose(1, 2))).squeeze(2)
        return self.proj(out)


class _IcefallJoiner(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.out = nn.Linear(dim, vocab)

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(encoder_out + decoder_out))


def build_icefall(out: Path, seed: int = 0, vocab: int = 500, context: int = 2, feat: int = 80, dim: int = 64,
                  emb: int = 32, blank_bias: float = 2.5) -> Path:
    """An icefall-style stateless transducer: ``encoder.onnx`` (x, x_lens), ``decoder.onnx`` (y), ``joiner.onnx``,
    ``tokens.txt`` (``<blk>`` 0, ``<sos/eos>`` 1, ``<unk>`` 2) with icefall's metadata."""
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    enc, dec, joi = _IcefallEncoder(feat, dim), _IcefallDecoder(vocab, emb, context, dim), _IcefallJoiner(dim, vocab)
    with torch.no_grad():
        joi.out.weight.mul_(4.0)
        joi.out.bias[0] += blank_bias  # 2.5: blank wins about half the frames
    _export(enc, (torch.randn(2, 40, feat), torch.tensor([40, 33])), out / "encoder.onnx", ["x", "x_lens"],
            ["encoder_out", "encoder_out_lens"],
            {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, "encoder_out": {0: "N", 1: "T_out"}, "encoder_out_lens": {0: "N"}})
    _export(dec, (torch.tensor([[-1, 0], [4, 5]])[:, -context:] if context <= 2 else torch.zeros(2, context, dtype=torch.long),),
            out / "decoder.onnx", ["y"], ["decoder_out"], {"y": {0: "N"}, "decoder_out": {0: "N"}})
    _export(joi, (torch.randn(3, dim), torch.randn(3, dim)), out / "joiner.onnx", ["encoder_out", "decoder_out"],
            ["logit"], {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}})
    _add_metadata(out / "encoder.onnx", {"model_type": "zipformer2", "version": "1", "model_author": "asrdecode tests"})
    _add_metadata(out / "decoder.onnx", {"vocab_size": str(vocab), "context_size": str(context)})
    _add_metadata(out / "joiner.onnx", {"joiner_dim": str(dim)})
    _write_tokens(out / "tokens.txt", ["<blk>", "<sos/eos>", "<unk>", *_pieces(vocab - 3)])
    return out


# ---------------------------------------------------------------------------------------------------- NeMo
class _NemoEncoder(nn.Module):
    def __init__(self, feat: int, dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.conv = nn.Conv1d(feat, dim, SUBSAMPLING, stride=SUBSAMPLING)
        self.scale = scale

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.conv(audio_signal) * self.scale), torch.div(length, SUBSAMPLING, rounding_mode="floor")


class _NemoDecoder(nn.Module):
    """NeMo's RNNTDecoder as exported: embedding (blank = padding row) + LSTM, ``[N, H, 1]`` output."""

    def __init__(self, vocab: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden, padding_idx=vocab - 1)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers)

    def forward(self, targets: torch.Tensor, target_length: torch.Tensor, s0: torch.Tensor,
                s1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.embedding(targets.long()).transpose(0, 1)  # [U, N, H]
        y, (h, c) = self.lstm(x, (s0, s1))
        return y.permute(1, 2, 0), target_length, h, c


class _NemoJoiner(nn.Module):
    def __init__(self, enc_dim: int, hidden: int, joint: int, outputs: int) -> None:
        super().__init__()
        self.enc, self.pred, self.out = nn.Linear(enc_dim, joint), nn.Linear(hidden, joint), nn.Linear(joint, outputs)

    def forward(self, encoder_outputs: torch.Tensor, decoder_outputs: torch.Tensor) -> torch.Tensor:
        f = self.enc(encoder_outputs.transpose(1, 2)).unsqueeze(2)  # [N, T, 1, J]
        g = self.pred(decoder_outputs.transpose(1, 2)).unsqueeze(1)  # [N, 1, U, J]
        return self.out(torch.relu(f + g))


def build_nemo(out: Path, seed: int = 0, vocab: int = 128, tdt: bool = False, feat: int = 80, enc_dim: int = 48,
               hidden: int = 32, layers: int = 1, normalize_type: str = "per_feature", scale: float = 1.0,
               blank_bias: float = 7.0, enc_gain: float = 4.0, joint: int = 64) -> Path:
    """A NeMo-layout RNN-T (or TDT with durations 0..4): ``vocab`` tokens without the blank, ``<blk>`` last."""
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    v = vocab + 1
    enc, dec = _NemoEncoder(feat, enc_dim, scale), _NemoDecoder(v, hidden, layers)
    joi = _NemoJoiner(enc_dim, hidden, joint, v + (5 if tdt else 0))
    with torch.no_grad():
        joi.out.weight.mul_(3.0)
        joi.enc.weight.mul_(enc_gain)
        joi.pred.weight.mul_(enc_gain)
        joi.out.bias[vocab] += blank_bias
    _export(enc, (torch.randn(2, feat, 40), torch.tensor([40, 33])), out / "encoder.onnx", ["audio_signal", "length"],
            ["outputs", "encoded_lengths"],
            {"audio_signal": {0: "N", 2: "T"}, "length": {0: "N"}, "outputs": {0: "N", 2: "T_out"},
             "encoded_lengths": {0: "N"}})
    z = torch.zeros(layers, 2, hidden)
    _export(dec, (torch.tensor([[3], [v - 1]], dtype=torch.int32), torch.tensor([1, 1], dtype=torch.int32), z, z),
            out / "decoder.onnx", ["targets", "target_length", "states.1", "onnx::Slice_3"],
            ["outputs", "prednet_lengths", "states", "next_c"],
            {"targets": {0: "N"}, "target_length": {0: "N"}, "states.1": {1: "N"}, "onnx::Slice_3": {1: "N"},
             "outputs": {0: "N"}, "prednet_lengths": {0: "N"}, "states": {1: "N"}, "next_c": {1: "N"}})
    _export(joi, (torch.randn(3, enc_dim, 1), torch.randn(3, hidden, 1)), out / "joiner.onnx",
            ["encoder_outputs", "decoder_outputs"], ["outputs"],
            {"encoder_outputs": {0: "N"}, "decoder_outputs": {0: "N"}, "outputs": {0: "N"}})
    _add_metadata(out / "encoder.onnx", {
        "vocab_size": str(vocab), "normalize_type": normalize_type, "subsampling_factor": str(SUBSAMPLING),
        "model_type": "EncDecRNNTBPEModel", "version": "2", "model_author": "asrdecode tests",
        "url": "tests/parakeet-tdt-random" if tdt else "tests/parakeet-rnnt-random",
        "comment": "random weights", "pred_rnn_layers": str(layers), "pred_hidden": str(hidden), "feat_dim": str(feat)})
    _write_tokens(out / "tokens.txt", ["<unk>", *_pieces(vocab - 1), "<blk>"])
    return out


# ------------------------------------------------------------------------------------------------ NeMo CTC
class _NemoCtc(nn.Module):
    def __init__(self, feat: int, dim: int, vocab: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(feat, dim, SUBSAMPLING, stride=SUBSAMPLING)
        self.out = nn.Linear(dim, vocab)

    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.conv(audio_signal)).transpose(1, 2)
        keep = (length.view(-1, 1, 1) >= 0).to(y.dtype)  # uses length (the exporter drops unused inputs)
        return (self.out(y * keep) * 3.0).log_softmax(-1)


def build_nemo_ctc(out: Path, seed: int = 0, vocab: int = 64, feat: int = 80, normalize_type: str = "per_feature",
                   blank_bias: float = 0.0) -> Path:
    """A NeMo-layout CTC model (``model.onnx`` -> log-probs ``[N, T', V]``; ``<blk>`` last)."""
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    m = _NemoCtc(feat, 48, vocab + 1)
    with torch.no_grad():
        m.out.bias[vocab] += blank_bias
    _export(m, (torch.randn(2, feat, 40), torch.tensor([40, 33])), out / "model.onnx", ["audio_signal", "length"],
            ["logprobs"], {"audio_signal": {0: "N", 2: "T"}, "length": {0: "N"}, "logprobs": {0: "N", 1: "T_out"}})
    _add_metadata(out / "model.onnx", {"vocab_size": str(vocab), "normalize_type": normalize_type,
                                       "subsampling_factor": str(SUBSAMPLING), "model_type": "EncDecCTCModelBPE",
                                       "version": "1", "model_author": "asrdecode tests", "feat_dim": str(feat)})
    _write_tokens(out / "tokens.txt", ["<unk>", *_pieces(vocab - 1), "<blk>"])
    return out


def build_small_layouts(root: Path) -> dict[str, Path]:
    """Small icefall (stateless, context 2), NeMo RNN-T and NeMo TDT models under ``root``: the layouts the
    native transducer search reads, for its engine-agreement tests."""
    return {"icefall": build_icefall(root / "icefall", seed=2, vocab=40, context=2, dim=16, emb=8),
            "nemo": build_nemo(root / "nemo", seed=3, vocab=30, hidden=16, enc_dim=12, joint=16, blank_bias=2.0),
            "nemo-tdt": build_nemo(root / "nemo-tdt", seed=4, vocab=30, tdt=True, hidden=16, enc_dim=12, joint=16,
                                   blank_bias=2.0)}
