"""NeMo CTC models exported to ONNX as sherpa-onnx reads them (``from_nemo_ctc``), as a ``ModelBundle``.

A directory with ``model.onnx`` and ``tokens.txt``: ``audio_signal [N, F, T]`` float32 + ``length [N]``
int64 -> log-probs ``[N, T', V]`` (the graph's first output); ``<blk>`` is the last token. Metadata:
``vocab_size`` (without the blank), ``subsampling_factor`` (output lengths are ``length //
subsampling_factor``, sherpa-onnx's rule), ``normalize_type``, ``feat_dim`` (default 80). Features:
sherpa-onnx's NeMo CTC fbank (kaldi-native-fbank: librosa mel 0 Hz to Nyquist, Hann window,
pre-emphasis 0.97, no DC removal) + ``normalize_type`` per utterance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from .nemo_onnx import NORMALIZE_TYPES, NemoFbankFrontEnd
from .onnx_common import check_dim, meta_float, meta_int, nemo_encoder_inputs, ort_session
from .frontend import pad_features
from .vocabulary import PieceTokenizer, read_tokens_txt

__all__ = ["NemoCtcOnnxBundle", "is_nemo_ctc_dir", "load_nemo_ctc"]


class _LogProbs:
    """The CTC head: the graph already returns log-probs; ``log_softmax`` keeps them normalised."""

    def __init__(self, vocab_size: int, blank_id: int) -> None:
        self.vocab_size, self.blank_id = vocab_size, blank_id

    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return enc.float().log_softmax(-1)


def is_nemo_ctc_dir(spec: str) -> bool:
    """A directory with ``model.onnx`` and ``tokens.txt`` (sherpa-onnx's NeMo CTC layout)."""
    p = Path(spec)
    return p.is_dir() and (p / "model.onnx").is_file() and (p / "tokens.txt").is_file()


class NemoCtcOnnxBundle:
    """A NeMo CTC ONNX directory as a ``ModelBundle`` (``kind == "ctc"``, CPU)."""

    kind = "ctc"

    def __init__(self, name: str, session: Any, tokenizer: PieceTokenizer, vocab: int, feature_dim: int,
                 subsampling: int, normalize_type: str, frame_shift_ms: float) -> None:
        self.name, self.session, self.tokenizer = name, session, tokenizer
        self.blank_id = vocab - 1
        self.model = _LogProbs(vocab, self.blank_id)
        self.feature_dim, self.feature_frames_per_frame = int(feature_dim), int(subsampling)
        self.frame_seconds = subsampling * frame_shift_ms / 1000.0
        self.encoder_dim = vocab
        self._front = NemoFbankFrontEnd(feature_dim, normalize_type, window="hann", high_freq=0.0)
        self._in = [i.name for i in session.get_inputs()]

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """16 kHz waveforms -> normalised features ``[B, Tf, F]`` (padded with 0) + lengths ``[B]``."""
        from .demo import as_wave_list

        feats = [self._front.fbank(w) for w in as_wave_list(audio, lengths)]
        return pad_features(feats, self.feature_dim)

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` + lengths -> log-probs ``[B, T, V]`` + ``lengths // subsampling_factor``."""
        x, n_np = nemo_encoder_inputs(feats, lengths, self.feature_dim)
        n = torch.from_numpy(n_np)
        out = self.session.run(None, {self._in[0]: x, self._in[1]: n_np})[0]
        lp = torch.from_numpy(np.ascontiguousarray(out))
        if lp.dim() != 3 or lp.shape[2] != self.model.vocab_size:
            raise FileFormatError(self.name, None, f"model.onnx returned shape {tuple(lp.shape)}, expected "
                                                   f"[N, T, {self.model.vocab_size}]")
        return lp, torch.clamp(torch.div(n, self.feature_frames_per_frame, rounding_mode="floor"), max=lp.shape[1])


def load_nemo_ctc(spec: str, device: torch.device | str = "cpu") -> NemoCtcOnnxBundle:
    """A NeMo CTC ONNX directory -> :class:`NemoCtcOnnxBundle`.

    Raises:
        OnnxMissingError: onnxruntime / kaldi-native-fbank missing.
        FileFormatError: inputs, metadata or ``tokens.txt`` do not fit the layout.
        DecodingInputError: ``device`` is not the CPU.
    """
    if torch.device(device).type != "cpu":
        raise DecodingInputError(f"ONNX models run on the CPU (onnxruntime), got device {str(device)!r}")
    root = Path(spec)
    path = root / "model.onnx"
    sess = ort_session(path)
    ins = [i.name for i in sess.get_inputs()]
    if ins[:2] != ["audio_signal", "length"]:
        raise FileFormatError(path, None, f"a NeMo CTC model has inputs ['audio_signal', 'length'], got {ins}")
    meta = dict(sess.get_modelmeta().custom_metadata_map)
    vocab = meta_int(path, meta, "vocab_size") + 1
    subsampling = meta_int(path, meta, "subsampling_factor")
    feat_dim = meta_int(path, meta, "feat_dim", 80)
    check_dim(path, sess.get_inputs()[0], 1, feat_dim, "metadata 'feat_dim'")  # audio_signal [N, F, T]
    norm = meta.get("normalize_type", "")
    norm = "" if norm == "NA" else norm
    if norm not in NORMALIZE_TYPES:
        raise FileFormatError(path, None, f"metadata 'normalize_type' must be one of ['per_feature', '', 'NA'], got {norm!r}")
    shift = meta_float(path, meta, "frame_shift_ms", 10.0)
    pieces = read_tokens_txt(root / "tokens.txt")
    if len(pieces) != vocab:
        raise FileFormatError(root / "tokens.txt", None, f"{len(pieces)} tokens but metadata vocab_size + 1 is {vocab}")
    if pieces[-1] != "<blk>":
        raise FileFormatError(root / "tokens.txt", None, f"a NeMo model's last token must be <blk>, got {pieces[-1]!r}")
    specials = [p for p in pieces if p.startswith("<") and p.endswith(">") and len(p) > 2]
    tok = PieceTokenizer(pieces, vocab - 1, specials=specials)
    return NemoCtcOnnxBundle(str(spec), sess, tok, vocab, feat_dim, subsampling, norm, shift)
