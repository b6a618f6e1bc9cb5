"""ONNX transducers in sherpa-onnx's file layout, run with onnxruntime, as a ``ModelBundle``.

A directory holding ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt`` loads
with ``load_bundle(PATH)`` / ``--model PATH``. The graphs (``N`` batch, ``C`` joint width):

- ``encoder.onnx``: ``x [N, T, F]`` float32 features + ``x_lens [N]`` int64 ->
  ``encoder_out [N, T', C]`` (already projected into joint space) + ``encoder_out_lens [N]``;
- ``decoder.onnx``: ``y [N, context_size]`` int64 (the last labels, blank = none yet) and zero or
  more state inputs (an LSTM's ``h``, ``c``: any shape with one symbolic batch axis) ->
  ``decoder_out [N, C]`` (projected) followed by the new states in input order. Stateless
  (icefall) decoders have no state inputs;
- ``joiner.onnx``: ``encoder_out [N, C]`` + ``decoder_out [N, C]`` -> ``logit [N, V (+K)]``;
- ``tokens.txt``: ``<piece> <id>`` per line.

``encoder.onnx``'s metadata (``decoder.onnx``'s for keys the encoder lacks) says how to use them:
``vocab_size``, ``context_size``, ``blank_id`` (default: the id of ``<blk>`` / ``<blank>`` in
tokens.txt), ``durations`` (TDT: ``"0,1,2,3,4"``), ``frontend``, ``feature_dim`` (default: the
width of ``x``), ``subsampling_factor`` (feature frames per encoder frame; default: measured once
at load, 2000 frames through the encoder) and ``frame_shift_ms`` (default 10). Front ends:

- ``"kaldi-fbank"`` (the default: what sherpa-onnx computes for icefall models): Kaldi log-mel
  filterbank as ``kaldi-native-fbank`` computes it (:class:`~asrdecode.models.spectral.KaldiFbank`) with sherpa-onnx's options (samples in [-1, 1], no dither,
  ``snip_edges=False``, ``high_freq=-400``, 25 / 10 ms frames, povey window);
- ``"logmel"``: asrdecode's own :class:`~asrdecode.models.frontend.LogMelFrontEnd` (what
  ``asrdecode export-onnx`` writes for the bundled transducers).

onnxruntime and kaldi-native-fbank are the optional ``onnx`` extra; the bundle runs on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from .frontend import pad_features
from .onnx_common import META_RANGES, OnnxMissingError, fold_unk, meta_float, meta_int  # noqa: F401 (re-exported)
from .onnx_common import check_range, check_dim, encode_in_groups, ort_session
from .spectral import FBANK_ENGINES, kaldi_fbank_engine
from .vocabulary import BLANK_PIECES, PieceTokenizer, read_tokens_txt

__all__ = ["OnnxTransducer", "OnnxTransducerBundle", "is_onnx_transducer_dir", "load_onnx_transducer",
           "OnnxMissingError", "LAYOUT", "FRONTENDS", "START_CONTEXTS", "UNK_MODES", "fold_unk", "meta_int",
           "meta_float"]

#: the files of a sherpa-onnx transducer directory
LAYOUT = ("encoder.onnx", "decoder.onnx", "joiner.onnx", "tokens.txt")
#: front ends (``frontend`` metadata) this loader computes features for; the first is the default
FRONTENDS = ("kaldi-fbank", "logmel")
#: the value sherpa-onnx pads a batch of Kaldi fbank features with (log 1e-10)
KALDI_PAD = -23.025850929940457
#: feature frames run through the encoder to measure its subsampling when the metadata lacks it
PROBE_FRAMES = 2000
BATCH_AXIS = "N"
#: ``start_context`` values: ours (``[blank] * context``) and sherpa-onnx's (``[-1, ..., -1, blank]``)
START_CONTEXTS = ("blank", "sherpa")
#: ``unk_as_blank`` values (see :func:`fold_unk`)
UNK_MODES = (None, "max", "sum")


def is_onnx_transducer_dir(spec: str) -> bool:
    """Whether ``spec`` is a directory with an ``encoder.onnx`` (the sherpa-onnx transducer layout)."""
    p = Path(spec)
    return p.is_dir() and (p / "encoder.onnx").is_file()


def _names(items: Any) -> list[str]:
    return [i.name for i in items]


def _expect_io(path: Path, session: Any, inputs: list[str], outputs: list[str]) -> None:
    ins, outs = _names(session.get_inputs()), _names(session.get_outputs())
    if ins[: len(inputs)] != inputs or outs[: len(outputs)] != outputs:
        raise FileFormatError(path, None, f"expected inputs {inputs} and outputs {outputs} first, got inputs {ins} "
                                          f"and outputs {outs}")


class OnnxTransducer:
    """``decoder.onnx`` + ``joiner.onnx`` as a :class:`~asrdecode.transducer.TransducerModel`.

    The state is a tuple ``(context [B, context_size] int64, *decoder states)``; a blank label
    leaves the context as it is (start of sequence), any other label shifts it in. The encoder
    and decoder graphs already project into joint space, so ``project_encoder`` /
    ``project_decoder`` are the identity.

    ``start_context``: the context of an empty hypothesis. ``"blank"`` (ours): ``[blank] * context``;
    ``"sherpa"`` (sherpa-onnx / icefall): ``[-1] * (context - 1) + [blank]`` (icefall decoders embed
    ``-1`` as a zero vector). ``unk_as_blank``: ``None`` (ours: ``<unk>`` is a label like any other),
    ``"max"`` (sherpa-onnx's greedy: an ``<unk>`` argmax counts as blank) or ``"sum"`` (sherpa-onnx's
    modified beam search: an ``<unk>`` expansion merges with the blank one) -- see :func:`fold_unk`.
    """

    def __init__(self, decoder: Any, joiner: Any, blank_id: int, vocab_size: int, context_size: int,
                 durations: Optional[list[int]] = None, path: str = "decoder.onnx", *,
                 start_context: str = "blank", unk_id: Optional[int] = None,
                 unk_as_blank: Optional[str] = None) -> None:
        self.decoder, self.joiner = decoder, joiner
        self.blank_id, self.vocab_size, self.context_size = int(blank_id), int(vocab_size), int(context_size)
        self.durations = durations
        if start_context not in START_CONTEXTS:
            raise DecodingInputError(f"start_context must be one of {list(START_CONTEXTS)}, got {start_context!r}")
        if unk_as_blank not in UNK_MODES:
            raise DecodingInputError(f"unk_as_blank must be one of {list(UNK_MODES)}, got {unk_as_blank!r}")
        self.start_context, self.unk_id, self.unk_as_blank = start_context, unk_id, unk_as_blank
        #: (decoder.onnx, joiner.onnx) when loaded from files: the native greedy reads their weights
        self.onnx_files: Optional[tuple[Path, Path]] = None
        states = decoder.get_inputs()[1:]
        self._state_names = [s.name for s in states]
        self._state_shapes, self._state_axes = [], []
        for s in states:
            axes = [k for k, d in enumerate(s.shape) if not isinstance(d, int)]
            if len(axes) != 1 or any(not isinstance(d, int) for k, d in enumerate(s.shape) if k != axes[0]):
                raise FileFormatError(path, None, f"decoder state {s.name!r} must have one symbolic (batch) axis "
                                                  f"and fixed other sizes, got shape {s.shape}")
            self._state_shapes.append(list(s.shape))
            self._state_axes.append(axes[0])
        self._out_width = self.vocab_size + (len(durations) if durations else 0)
        self._dec_width = int(joiner.get_inputs()[1].shape[-1])

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return enc

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return dec

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> Any:
        ctx = torch.full((batch, self.context_size), self.blank_id, dtype=torch.long, device=device)
        if self.start_context == "sherpa":
            ctx[:, :-1] = -1
        states = []
        for shape, axis in zip(self._state_shapes, self._state_axes):
            shape = list(shape)
            shape[axis] = batch
            states.append(torch.zeros(shape, dtype=dtype or torch.float32, device=device))
        return (ctx, *states)

    @torch.no_grad()
    def predict(self, labels: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """Labels ``[B]`` -> (``decoder_out [B, C]``, new state)."""
        ctx, states = state[0], state[1:]
        shifted = torch.cat([ctx[:, 1:], labels.view(-1, 1).to(ctx.dtype)], dim=1)
        ctx = torch.where((labels == self.blank_id).view(-1, 1), ctx, shifted)
        dtype = states[0].dtype if states else torch.float32
        if labels.numel() == 0:
            return torch.zeros(0, self._dec_width, dtype=dtype, device=labels.device), (ctx, *states)
        feeds = {"y": ctx.cpu().numpy()}
        feeds.update({n: s.detach().cpu().float().numpy() for n, s in zip(self._state_names, states)})
        outs = self.decoder.run(None, feeds)
        dev = labels.device
        new = [torch.from_numpy(o).to(device=dev, dtype=s.dtype) for o, s in zip(outs[1:], states)]
        return torch.from_numpy(outs[0]).to(device=dev, dtype=dtype), (ctx, *new)

    @torch.no_grad()
    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        """``[..., C]`` + ``[..., C]`` (broadcast) -> logits ``[..., V (+K)]``."""
        a, b = torch.broadcast_tensors(enc_proj, dec_proj)
        lead = a.shape[:-1]
        rows = int(np.prod(lead)) if lead else 1
        if rows == 0:
            return torch.zeros(*lead, self._out_width, dtype=a.dtype, device=a.device)
        a2 = a.reshape(rows, a.shape[-1]).detach().cpu().float().numpy()
        b2 = b.reshape(rows, b.shape[-1]).detach().cpu().float().numpy()
        (logit,) = self.joiner.run(None, {"encoder_out": a2, "decoder_out": b2})[:1]
        out = torch.from_numpy(logit).to(device=a.device, dtype=a.dtype).reshape(*lead, logit.shape[-1])
        return fold_unk(out, self.blank_id, self.unk_id, self.unk_as_blank, self.vocab_size)

    def select_state(self, state: Any, index: torch.Tensor) -> Any:
        return (state[0][index], *(s.index_select(ax, index) for s, ax in zip(state[1:], self._state_axes)))

    def replace_state(self, state: Any, new: Any, mask: torch.Tensor) -> Any:
        out = [torch.where(mask.view(-1, 1), new[0], state[0])]
        for s, n, ax in zip(state[1:], new[1:], self._state_axes):
            shape = [1] * s.dim()
            shape[ax] = -1
            out.append(torch.where(mask.view(shape), n, s))
        return tuple(out)


class KaldiFbankFrontEnd:
    """Audio ``[N]`` (16 kHz, [-1, 1]) -> Kaldi log-mel filterbank ``[T, F]`` as sherpa-onnx computes it
    (``T = (N + 80) // 160``: frames centred every 10 ms, ``snip_edges=False``); ``fbank``: who computes
    it (:data:`~asrdecode.models.spectral.FBANK_ENGINES`: ``"fast"``, or ``"knf"`` for sherpa-onnx's bits)."""

    def __init__(self, num_bins: int, fbank: str = "fast") -> None:
        try:
            import kaldi_native_fbank as knf
        except ImportError:
            raise OnnxMissingError("the kaldi-fbank front end needs `pip install -e '.[onnx]'` in the asrdecode checkout "
                                   "(kaldi-native-fbank)") from None
        self._knf = knf
        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.frame_opts.snip_edges = False
        opts.frame_opts.samp_freq = 16000
        opts.mel_opts.num_bins = int(num_bins)
        opts.mel_opts.high_freq = -400
        self.opts = opts
        self.num_bins = int(num_bins)
        self._fbank = kaldi_fbank_engine(knf, opts, fbank)

    def fbank(self, audio: torch.Tensor) -> torch.Tensor:
        """Kaldi fbank features ``[T, num_bins]`` of 16 kHz ``audio [N]``, as sherpa-onnx computes them."""
        return self._fbank(audio)


class OnnxTransducerBundle:
    """A sherpa-onnx-layout transducer directory as a ``ModelBundle`` (see the module docstring)."""

    def __init__(self, name: str, encoder: Any, model: OnnxTransducer, tokenizer: PieceTokenizer,
                 feature_dim: int, subsampling: int, frame_shift_ms: float, frontend: str = "logmel",
                 fbank: str = "fast") -> None:
        from .frontend import LogMelFrontEnd

        self.name, self.encoder, self.model, self.tokenizer = name, encoder, model, tokenizer
        self.frontend = frontend
        self.kind = "tdt" if model.durations else "rnnt"
        self.blank_id = model.blank_id
        self.feature_dim = int(feature_dim)
        self.feature_frames_per_frame = int(subsampling)
        self.frame_seconds = subsampling * frame_shift_ms / 1000.0
        self.encoder_dim = int(model.joiner.get_inputs()[0].shape[-1])
        if frontend == "logmel":
            if self.feature_dim != 80:
                raise DecodingInputError(f"the logmel front end has 80 bins, the encoder wants {self.feature_dim}")
            self._features, self._pad = LogMelFrontEnd().log_mel, 0.0
        else:  # padded with log(1e-10), as sherpa-onnx pads a batch
            self._features, self._pad = KaldiFbankFrontEnd(self.feature_dim, fbank).fbank, KALDI_PAD

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """16 kHz waveforms -> features ``[B, Tf, F]`` (the ``frontend``'s) + lengths ``[B]``."""
        from .demo import as_wave_list

        feats = [self._features(w) for w in as_wave_list(audio, lengths)]
        return pad_features(feats, self.feature_dim, self._pad)

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` + lengths -> ``encoder_out [B, T, C]`` + lengths ``[B]`` (CPU, float32)."""
        return encode_in_groups(self._encode, feats, lengths, self.feature_dim)

    def _encode(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One onnxruntime call: ``feats [B, Tf, F]`` + lengths -> ``encoder_out [B, T, C]`` + lengths ``[B]``."""
        x = feats.detach().cpu().float().contiguous().numpy()
        n = lengths.detach().cpu().long().numpy()
        out, out_len = self.encoder.run(None, {"x": x, "x_lens": n})[:2]
        return torch.from_numpy(out), torch.from_numpy(np.asarray(out_len)).long()


def load_onnx_transducer(spec: str, device: torch.device | str = "cpu", *, start_context: str = "blank",
                         unk_as_blank: Optional[str] = None, fbank: str = "fast") -> Any:
    """A sherpa-onnx-layout directory -> :class:`OnnxTransducerBundle` (icefall layout) or a
    :class:`~.nemo_onnx.NemoOnnxBundle` (NeMo layout).

    Reads icefall's layout (``x`` / ``x_lens``, stateless or stateful decoder, this module's
    docstring) and NeMo's (``audio_signal`` / ``length``: :mod:`asrdecode.models.nemo_onnx`).
    ``start_context`` / ``unk_as_blank``: see :class:`OnnxTransducer` (sherpa-onnx compatibility).
    ``fbank``: who computes the Kaldi fbank front end (:data:`~asrdecode.models.spectral.FBANK_ENGINES`):
    ``"fast"`` (asrdecode's, within 1.1e-3 of sherpa-onnx's) or ``"knf"`` (kaldi-native-fbank's own
    ``OnlineFbank``: sherpa-onnx's features to the last bit, ~10x slower).

    Raises:
        OnnxMissingError: ``onnxruntime`` is not installed.
        FileFormatError: a file of :data:`LAYOUT` is missing or malformed, metadata is missing or
            disagrees with the graphs or ``tokens.txt``.
        DecodingInputError: ``device`` is not the CPU, ``fbank`` not one of ``FBANK_ENGINES``.
    """
    if torch.device(device).type != "cpu":
        raise DecodingInputError(f"ONNX models run on the CPU (onnxruntime), got device {str(device)!r}")
    if fbank not in FBANK_ENGINES:
        raise DecodingInputError(f"fbank must be one of {list(FBANK_ENGINES)}, got {fbank!r}")
    root = Path(spec)
    missing = [f for f in LAYOUT if not (root / f).is_file()]
    if missing:
        raise FileFormatError(root, None, f"an ONNX transducer directory needs {list(LAYOUT)}; missing {missing}")
    enc_path = root / "encoder.onnx"
    encoder, decoder, joiner = (ort_session(root / f) for f in LAYOUT[:3])
    if _names(encoder.get_inputs())[:1] == ["audio_signal"]:
        from .nemo_onnx import load_nemo_transducer

        return load_nemo_transducer(root, encoder, decoder, joiner, unk_as_blank=unk_as_blank, fbank=fbank)
    _expect_io(enc_path, encoder, ["x", "x_lens"], ["encoder_out", "encoder_out_lens"])
    _expect_io(root / "decoder.onnx", decoder, ["y"], ["decoder_out"])
    _expect_io(root / "joiner.onnx", joiner, ["encoder_out", "decoder_out"], ["logit"])
    if len(decoder.get_outputs()) != len(decoder.get_inputs()):
        raise FileFormatError(root / "decoder.onnx", None, "expected one new state output per state input")
    # icefall's exports keep vocab_size / context_size in decoder.onnx's metadata: the encoder's wins
    meta = {**dict(decoder.get_modelmeta().custom_metadata_map), **dict(encoder.get_modelmeta().custom_metadata_map)}
    frontend = meta.get("frontend", FRONTENDS[0])
    if frontend not in FRONTENDS:
        raise FileFormatError(enc_path, None, f"metadata 'frontend' must be one of {list(FRONTENDS)} (the features the "
                              f"encoder was trained on), got {frontend!r}")
    pieces = read_tokens_txt(root / "tokens.txt")
    vocab = meta_int(enc_path, meta, "vocab_size", len(pieces))
    if vocab != len(pieces):
        raise FileFormatError(root / "tokens.txt", None, f"{len(pieces)} tokens but metadata vocab_size is {vocab}")
    # icefall: blank is 0 (sherpa-onnx hard-codes it) unless tokens.txt names it elsewhere
    blank_default = next((pieces.index(b) for b in BLANK_PIECES if b in pieces), 0)
    blank = meta_int(enc_path, meta, "blank_id", blank_default)
    if not 0 <= blank < vocab:
        raise FileFormatError(enc_path, None, f"blank_id {blank} outside 0..{vocab - 1}")
    raw_d = meta.get("durations", "").strip()
    try:
        durations = [int(d) for d in raw_d.split(",")] if raw_d else None
    except ValueError:
        raise FileFormatError(enc_path, None, f"metadata 'durations' must be comma-separated ints, got {raw_d!r}") from None
    if durations is not None:
        for d in durations:
            check_range(enc_path, "durations", d)
        if len(set(durations)) != len(durations) or max(durations) == 0:
            raise FileFormatError(enc_path, None, f"metadata 'durations' must be distinct with one > 0, got {raw_d!r}")
    widths = [i.shape[-1] if i.shape else None for i in joiner.get_inputs()[:2]]
    if not all(isinstance(w, int) and w > 0 for w in widths):
        raise FileFormatError(root / "joiner.onnx", None, f"encoder_out and decoder_out need a fixed width, got {widths}")
    context = meta_int(enc_path, meta, "context_size", 1)
    _check_icefall_shapes(root, encoder, decoder, joiner, context, widths)
    unk = pieces.index("<unk>") if "<unk>" in pieces else None
    model = OnnxTransducer(decoder, joiner, blank, vocab, context, durations, str(root / "decoder.onnx"),
                           start_context=start_context, unk_id=unk, unk_as_blank=unk_as_blank)
    model.onnx_files = (root / "decoder.onnx", root / "joiner.onnx")
    width = joiner.get_outputs()[0].shape[-1]
    if isinstance(width, int) and width != model._out_width:
        raise FileFormatError(root / "joiner.onnx", None, f"logit has {width} outputs but vocab_size + len(durations) "
                                                          f"is {model._out_width}")
    specials = [p for p in pieces if p.startswith("<") and p.endswith(">") and len(p) > 2]
    tokenizer = PieceTokenizer(pieces, blank, specials=specials)
    shift = meta_float(enc_path, meta, "frame_shift_ms", 10.0)
    width = encoder.get_inputs()[0].shape[-1]
    feature_dim = meta_int(enc_path, meta, "feature_dim", width if isinstance(width, int) else 80)
    if frontend == "logmel" and feature_dim != 80:
        raise FileFormatError(enc_path, None, f"the logmel front end has 80 bins but feature_dim is {feature_dim}")
    check_dim(enc_path, encoder.get_inputs()[0], -1, feature_dim, "metadata 'feature_dim'")
    if "subsampling_factor" in meta:
        subsampling = meta_int(enc_path, meta, "subsampling_factor")
    else:
        subsampling = _measure_subsampling(enc_path, encoder, feature_dim)
    return OnnxTransducerBundle(str(spec), encoder, model, tokenizer, feature_dim, subsampling, shift, frontend,
                                fbank)


def _check_icefall_shapes(root: Path, encoder: Any, decoder: Any, joiner: Any, context: int, widths: list) -> None:
    """The graphs' fixed sizes against each other and the metadata: the decoder reads ``context`` labels
    (``y [N, context_size]``), its output and the encoder's are as wide as the joiner's inputs."""
    check_dim(root / "decoder.onnx", decoder.get_inputs()[0], 1, context, "metadata 'context_size'")
    check_dim(root / "decoder.onnx", decoder.get_outputs()[0], -1, widths[1],
              "the width of joiner.onnx's decoder_out input")
    check_dim(root / "encoder.onnx", encoder.get_outputs()[0], -1, widths[0],
              "the width of joiner.onnx's encoder_out input")


def _measure_subsampling(path: Path, encoder: Any, feature_dim: int) -> int:
    """Feature frames per encoder frame, from one run of the encoder over :data:`PROBE_FRAMES` frames."""
    x = np.zeros((1, PROBE_FRAMES, feature_dim), dtype=np.float32)
    try:
        out_len = int(np.asarray(encoder.run(None, {"x": x, "x_lens": np.array([PROBE_FRAMES], dtype=np.int64)})[1])[0])
    except Exception as err:  # onnxruntime's own exception types
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise FileFormatError(path, None, f"metadata 'subsampling_factor' is missing and the encoder does not run on "
                                          f"[1, {PROBE_FRAMES}, {feature_dim}] features to measure it: {first}") from None
    if out_len < 1:
        raise FileFormatError(path, None, "metadata 'subsampling_factor' is missing and the encoder returned no frames")
    return max(1, round(PROBE_FRAMES / out_len))
