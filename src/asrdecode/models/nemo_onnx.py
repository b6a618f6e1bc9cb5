"""NeMo transducers exported to ONNX in the layout sherpa-onnx reads (parakeet RNN-T / TDT).

A directory with ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt`` whose encoder's
first input is ``audio_signal`` (``N`` batch, ``F`` features, ``C`` encoder width, ``H`` prediction
width, ``L`` LSTM layers):

- ``encoder.onnx``: ``audio_signal [N, F, T]`` float32 + ``length [N]`` int64 ->
  ``[N, C, T']`` (NOT projected: NeMo's joiner holds both projections) + lengths ``[N]``;
- ``decoder.onnx``: ``targets [N, 1]`` int32 + ``target_length [N]`` int32 + ``states.1 [L, N, H]`` +
  ``onnx::Slice_3 [L, N, H]`` (names vary; order counts) -> ``[N, H, 1]`` + lengths + the two new states;
- ``joiner.onnx``: ``encoder_outputs [N, C, 1]`` + ``decoder_outputs [N, H, 1]`` -> ``[N, 1, 1, V (+K)]``;
- ``tokens.txt``: ``<blk>`` is the last id.

``encoder.onnx``'s metadata: ``vocab_size`` (NeMo's: without the blank), ``subsampling_factor``,
``normalize_type`` (``per_feature`` or empty / ``NA``), ``pred_rnn_layers``, ``pred_hidden``,
``feat_dim`` (default 80), ``frontend`` (asrdecode's: ``logmel`` = our own features), ``logmel_input``
(asrdecode's: the two tensors inside ``encoder.onnx`` where our log-mel and its lengths enter, after
``export-onnx``'s front-end adapter; asrdecode runs the graph from there) and ``url`` (TDT when it contains
``tdt``: sherpa-onnx's rule; the durations are then ``0..K-1``, K the joiner's extra outputs). Features:
:class:`NemoFbankFrontEnd`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from .frontend import pad_features
from .onnx_common import (OnnxMissingError, check_dim, encode_in_groups, fold_unk, meta_float, meta_int,
                          nemo_encoder_inputs, ort_session)
from .spectral import kaldi_fbank_engine
from .vocabulary import PieceTokenizer, read_tokens_txt

__all__ = ["NemoFbankFrontEnd", "NemoOnnxTransducer", "NemoOnnxBundle", "load_nemo_transducer",
           "NORMALIZE_TYPES", "per_feature_normalise"]

#: ``normalize_type`` values sherpa-onnx implements ("" = none)
NORMALIZE_TYPES = ("", "per_feature")
#: NeMo's per-feature normalisation adds this to the standard deviation
NEMO_STD_EPS = 1e-5


def per_feature_normalise(x: torch.Tensor) -> torch.Tensor:
    """``[T, F]`` -> each feature column with mean 0 and std ~1 over the T frames (population
    variance, ``1 / (std + 1e-5)``: NeMo's ``per_feature`` as sherpa-onnx computes it)."""
    if x.shape[0] == 0:
        return x
    x64 = x.double()
    mean = x64.mean(0, keepdim=True)
    var = ((x64 * x64).mean(0, keepdim=True) - mean * mean).clamp(min=0)
    return ((x64 - mean) / (var.sqrt() + NEMO_STD_EPS)).float()


class NemoFbankFrontEnd:
    """Audio ``[N]`` (16 kHz, [-1, 1]) -> log-mel ``[T, F]`` as sherpa-onnx computes it for NeMo
    transducers: kaldi-native-fbank with librosa's mel filters (``is_librosa``), 0 Hz to Nyquist
    minus 400 Hz, povey window, pre-emphasis 0.97, no DC removal, no dither, ``snip_edges=False``
    (``T = (N + 80) // 160``), then ``normalize_type`` per utterance. NeMo CTC models: ``window="hann"``,
    ``high_freq=0`` (Nyquist), as sherpa-onnx sets them for ``from_nemo_ctc``. ``fbank``: who computes the
    fbank (:data:`~asrdecode.models.spectral.FBANK_ENGINES`)."""

    def __init__(self, num_bins: int, normalize_type: str = "per_feature", window: str = "povey",
                 high_freq: float = -400.0, fbank: str = "fast") -> None:
        try:
            import kaldi_native_fbank as knf
        except ImportError:
            raise OnnxMissingError("NeMo ONNX models need `pip install -e '.[onnx]'` in the asrdecode checkout (kaldi-native-fbank)") from None
        if normalize_type not in NORMALIZE_TYPES:
            raise DecodingInputError(f"normalize_type must be one of {list(NORMALIZE_TYPES)}, got {normalize_type!r}")
        self._knf = knf
        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.frame_opts.snip_edges = False
        opts.frame_opts.samp_freq = 16000
        opts.frame_opts.remove_dc_offset = False
        opts.mel_opts.num_bins = int(num_bins)
        opts.mel_opts.low_freq = 0
        opts.mel_opts.high_freq = float(high_freq)
        opts.mel_opts.is_librosa = True
        opts.frame_opts.window_type = window
        self.opts, self.num_bins, self.normalize_type = opts, int(num_bins), normalize_type
        self._fbank = kaldi_fbank_engine(knf, opts, fbank)

    def fbank(self, audio: torch.Tensor) -> torch.Tensor:
        """``audio [N]`` (16 kHz) -> ``[T, num_bins]`` features, normalised per ``normalize_type``."""
        x = self._fbank(audio)
        if not x.shape[0]:
            return x
        return per_feature_normalise(x) if self.normalize_type == "per_feature" else x


class NemoOnnxTransducer:
    """NeMo's ``decoder.onnx`` + ``joiner.onnx`` as a :class:`~asrdecode.transducer.TransducerModel`.

    State: ``(h [L, B, H], c [L, B, H])``. ``predict`` runs the LSTM on every label it is given
    (the blank included: the start step, as NeMo and sherpa-onnx do). ``project_*`` are the identity
    (the joiner projects); ``joint`` broadcasts the leading axes of ``[..., C]`` and ``[..., H]``.
    """

    def __init__(self, decoder: Any, joiner: Any, vocab_size: int, layers: int, hidden: int, enc_dim: int,
                 durations: Optional[list[int]] = None, unk_id: Optional[int] = None,
                 unk_as_blank: Optional[str] = None) -> None:
        self.decoder, self.joiner = decoder, joiner
        self.vocab_size, self.blank_id = int(vocab_size), int(vocab_size) - 1
        self.durations = durations
        self.layers, self.hidden, self.enc_dim = int(layers), int(hidden), int(enc_dim)
        self.unk_id, self.unk_as_blank = unk_id, unk_as_blank
        #: (decoder.onnx, joiner.onnx) when loaded from files: the native greedy reads their weights
        self.onnx_files: Optional[tuple[Path, Path]] = None
        self._in = [i.name for i in decoder.get_inputs()]
        self._jin = [i.name for i in joiner.get_inputs()]
        self._out_width = self.vocab_size + (len(durations) if durations else 0)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return enc

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return dec

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> Any:
        z = torch.zeros(self.layers, batch, self.hidden, dtype=dtype or torch.float32, device=device)
        return (z, z.clone())

    @torch.no_grad()
    def predict(self, labels: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """Labels ``[B]`` -> (``[B, H]``, new state)."""
        h, c = state
        if labels.numel() == 0:
            return torch.zeros(0, self.hidden, dtype=h.dtype, device=labels.device), state
        n = labels.numel()
        feeds = {self._in[0]: labels.view(-1, 1).cpu().numpy().astype(np.int32),
                 self._in[1]: np.ones(n, dtype=np.int32),
                 self._in[2]: h.detach().cpu().float().numpy(), self._in[3]: c.detach().cpu().float().numpy()}
        out = self.decoder.run(None, feeds)
        dev = labels.device
        dec = torch.from_numpy(out[0][:, :, 0].copy()).to(device=dev, dtype=h.dtype)
        return dec, (torch.from_numpy(out[2]).to(dev, h.dtype), torch.from_numpy(out[3]).to(dev, h.dtype))

    @torch.no_grad()
    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        """``[..., C]`` + ``[..., H]`` (leading axes broadcast) -> logits ``[..., V (+K)]``."""
        lead = torch.broadcast_shapes(enc_proj.shape[:-1], dec_proj.shape[:-1])
        a = enc_proj.expand(*lead, enc_proj.shape[-1])
        b = dec_proj.expand(*lead, dec_proj.shape[-1])
        rows = int(np.prod(lead)) if lead else 1
        if rows == 0:
            return torch.zeros(*lead, self._out_width, dtype=a.dtype, device=a.device)
        a2 = a.reshape(rows, a.shape[-1], 1).detach().cpu().float().numpy()
        b2 = b.reshape(rows, b.shape[-1], 1).detach().cpu().float().numpy()
        (logit,) = self.joiner.run(None, {self._jin[0]: a2, self._jin[1]: b2})[:1]
        out = torch.from_numpy(logit.reshape(rows, -1)).to(device=a.device, dtype=a.dtype).reshape(*lead, -1)
        return fold_unk(out, self.blank_id, self.unk_id, self.unk_as_blank, self.vocab_size)

    def select_state(self, state: Any, index: torch.Tensor) -> Any:
        return (state[0].index_select(1, index), state[1].index_select(1, index))

    def replace_state(self, state: Any, new: Any, mask: torch.Tensor) -> Any:
        m = mask.view(1, -1, 1)
        return (torch.where(m, new[0], state[0]), torch.where(m, new[1], state[1]))


class NemoOnnxBundle:
    """A NeMo-layout ONNX transducer directory as a ``ModelBundle`` (see the module docstring).

    ``frontend``: ``"nemo-fbank"`` (:class:`NemoFbankFrontEnd`, what sherpa-onnx computes) or
    ``"logmel"`` (asrdecode's :class:`~asrdecode.models.frontend.LogMelFrontEnd`: metadata
    ``frontend=logmel``, written by ``export-onnx`` for the bundled models)."""

    def __init__(self, name: str, encoder: Any, model: NemoOnnxTransducer, tokenizer: PieceTokenizer,
                 feature_dim: int, subsampling: int, normalize_type: str, frame_shift_ms: float = 10.0,
                 frontend: str = "nemo-fbank", fbank: str = "fast") -> None:
        self.name, self.encoder, self.model, self.tokenizer = name, encoder, model, tokenizer
        self.kind = "tdt" if model.durations else "rnnt"
        self.blank_id = model.blank_id
        self.feature_dim = int(feature_dim)
        self.feature_frames_per_frame = int(subsampling)
        self.frame_seconds = subsampling * frame_shift_ms / 1000.0
        self.encoder_dim = model.enc_dim
        self.normalize_type, self.frontend = normalize_type, frontend
        if frontend == "logmel":
            from .frontend import LogMelFrontEnd

            if self.feature_dim != 80:
                raise DecodingInputError(f"the logmel front end has 80 bins, the encoder wants {self.feature_dim}")
            self._fbank: Callable[[torch.Tensor], torch.Tensor] = LogMelFrontEnd().log_mel
        else:
            self._front = NemoFbankFrontEnd(feature_dim, normalize_type, fbank=fbank)
            self._fbank = self._front.fbank
        self._enc_in = [i.name for i in encoder.get_inputs()]

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """16 kHz waveforms -> normalised features ``[B, Tf, F]`` (padded with 0, as sherpa-onnx) + lengths ``[B]``."""
        from .demo import as_wave_list

        feats = [self._fbank(w) for w in as_wave_list(audio, lengths)]
        return pad_features(feats, self.feature_dim)

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` + lengths -> encoder output ``[B, T, C]`` + lengths ``[B]`` (CPU, float32)."""
        return encode_in_groups(self._encode, feats, lengths, self.feature_dim)

    def _encode(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One onnxruntime call: ``feats [B, Tf, F]`` + lengths -> encoder output ``[B, T, C]`` + lengths ``[B]``."""
        x, n = nemo_encoder_inputs(feats, lengths, self.feature_dim)
        out, out_len = self.encoder.run(None, {self._enc_in[0]: x, self._enc_in[1]: n})[:2]
        enc = torch.from_numpy(np.ascontiguousarray(out.transpose(0, 2, 1)))
        return enc, torch.from_numpy(np.asarray(out_len)).long()


def _check_decoder_shapes(path: Path, decoder: Any, layers: int, hidden: int) -> None:
    """The decoder's LSTM states in and out (``[pred_rnn_layers, N, pred_hidden]``) and its output
    (``[N, pred_hidden, U]``) against the metadata, where the graph fixes those sizes."""
    for item in (*decoder.get_inputs()[2:4], *decoder.get_outputs()[2:4]):
        check_dim(path, item, 0, layers, "metadata 'pred_rnn_layers'")
        check_dim(path, item, 2, hidden, "metadata 'pred_hidden'")
    check_dim(path, decoder.get_outputs()[0], 1, hidden, "metadata 'pred_hidden'")


def _shape_dim(path: Path, item: Any, axis: int, what: str) -> int:
    shape = item.shape
    d = shape[axis] if len(shape) > abs(axis) - (axis < 0) else None
    if not isinstance(d, int) or d <= 0:
        raise FileFormatError(path, None, f"{what} ({item.name!r}) needs a fixed size on axis {axis}, got shape {shape}")
    return d


def _encoder_from(path: Path, inputs: list[str], outputs: list[str]) -> Any:
    """A session of the part of ``path``'s graph from the tensors ``inputs`` (features ``[N, F, T]``, lengths
    ``[N]``) to ``outputs``: the encoder without ``export-onnx``'s front-end adapter."""
    import onnx
    from onnx.utils import Extractor


    if len(inputs) != 2:
        raise FileFormatError(path, None, f"metadata 'logmel_input' must name two tensors, got {inputs}")
    try:
        core = Extractor(onnx.load(str(path))).extract_model(inputs, outputs)
    except Exception as err:  # onnx raises KeyError / ValueError / its own checker errors for unknown tensors
        raise FileFormatError(path, None, f"metadata 'logmel_input' {inputs}: no such sub-graph ({err})") from None
    return ort_session(path, core.SerializeToString())


def load_nemo_transducer(root: Path, encoder: Any, decoder: Any, joiner: Any,
                         unk_as_blank: Optional[str] = None, fbank: str = "fast") -> NemoOnnxBundle:
    """Sessions of a NeMo-layout directory -> :class:`NemoOnnxBundle` (metadata checked as sherpa-onnx does).

    Raises:
        FileFormatError: inputs / outputs, metadata or ``tokens.txt`` do not fit the layout.
    """
    enc_path = root / "encoder.onnx"
    ins = [i.name for i in encoder.get_inputs()]
    if ins[:2] != ["audio_signal", "length"] or len(encoder.get_outputs()) < 2:
        raise FileFormatError(enc_path, None, f"a NeMo encoder has inputs ['audio_signal', 'length'] and two outputs, "
                                              f"got inputs {ins}")
    if len(decoder.get_inputs()) != 4 or len(decoder.get_outputs()) != 4:
        raise FileFormatError(root / "decoder.onnx", None, "a NeMo decoder has inputs (targets, target_length, "
                              "state0, state1) and outputs (out, length, state0, state1)")
    if len(joiner.get_inputs()) != 2:
        raise FileFormatError(root / "joiner.onnx", None, "a NeMo joiner has inputs (encoder_outputs, decoder_outputs)")
    meta = dict(encoder.get_modelmeta().custom_metadata_map)
    vocab = meta_int(enc_path, meta, "vocab_size") + 1  # NeMo's vocab_size leaves out the blank
    subsampling = meta_int(enc_path, meta, "subsampling_factor")
    layers = meta_int(enc_path, meta, "pred_rnn_layers")
    hidden = meta_int(enc_path, meta, "pred_hidden")
    feat_dim = meta_int(enc_path, meta, "feat_dim", 80)
    norm = meta.get("normalize_type", "")
    norm = "" if norm == "NA" else norm
    if norm not in NORMALIZE_TYPES:
        raise FileFormatError(enc_path, None, f"metadata 'normalize_type' must be one of ['per_feature', '', 'NA'], "
                                              f"got {norm!r}")
    shift = meta_float(enc_path, meta, "frame_shift_ms", 10.0)
    frontend = meta.get("frontend", "nemo-fbank")
    if frontend not in ("nemo-fbank", "logmel"):
        raise FileFormatError(enc_path, None, f"metadata 'frontend' must be 'nemo-fbank' or 'logmel', got {frontend!r}")
    if frontend == "logmel" and feat_dim != 80:
        raise FileFormatError(enc_path, None, f"the logmel front end has 80 bins but feat_dim is {feat_dim}")
    check_dim(enc_path, encoder.get_inputs()[0], 1, feat_dim, "metadata 'feat_dim'")  # audio_signal [N, F, T]
    _check_decoder_shapes(root / "decoder.onnx", decoder, layers, hidden)
    if "logmel_input" in meta:
        if frontend != "logmel":
            raise FileFormatError(enc_path, None, "metadata 'logmel_input' needs frontend=logmel")
        encoder = _encoder_from(enc_path, meta["logmel_input"].split(","), [o.name for o in encoder.get_outputs()[:2]])
    pieces = read_tokens_txt(root / "tokens.txt")
    if len(pieces) != vocab:
        raise FileFormatError(root / "tokens.txt", None, f"{len(pieces)} tokens but metadata vocab_size + 1 is {vocab}")
    if pieces[-1] != "<blk>":
        raise FileFormatError(root / "tokens.txt", None, f"a NeMo model's last token must be <blk>, got {pieces[-1]!r}")
    width = _shape_dim(root / "joiner.onnx", joiner.get_outputs()[0], -1, "the joiner's output")
    enc_dim = _shape_dim(root / "joiner.onnx", joiner.get_inputs()[0], 1, "the joiner's encoder input")
    dec_dim = _shape_dim(root / "joiner.onnx", joiner.get_inputs()[1], 1, "the joiner's decoder input")
    if dec_dim != hidden:
        raise FileFormatError(root / "joiner.onnx", None, f"decoder input width {dec_dim} != pred_hidden {hidden}")
    check_dim(enc_path, encoder.get_outputs()[0], 1, enc_dim, "the joiner's encoder input width")  # [N, D, T']
    durations = None
    if "tdt" in meta.get("url", ""):
        if width <= vocab:
            raise FileFormatError(root / "joiner.onnx", None, f"a TDT model ('tdt' in metadata 'url') needs more than "
                                                              f"vocab_size + 1 = {vocab} outputs, got {width}")
        durations = list(range(width - vocab))
    elif width != vocab:
        raise FileFormatError(root / "joiner.onnx", None, f"{width} outputs but vocab_size + 1 is {vocab} (a TDT model "
                                                          f"names 'tdt' in metadata 'url')")
    unk = pieces.index("<unk>") if "<unk>" in pieces else None
    model = NemoOnnxTransducer(decoder, joiner, vocab, layers, hidden, enc_dim, durations, unk, unk_as_blank)
    model.onnx_files = (root / "decoder.onnx", root / "joiner.onnx")
    specials = [p for p in pieces if p.startswith("<") and p.endswith(">") and len(p) > 2]
    tokenizer = PieceTokenizer(pieces, model.blank_id, specials=specials)
    return NemoOnnxBundle(str(root), encoder, model, tokenizer, feat_dim, subsampling, norm, shift, frontend, fbank)
