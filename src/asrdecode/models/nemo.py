"""Adapter from NeMo RNN-T / TDT models to the :class:`~asrdecode.transducer.TransducerModel` protocol.

NeMo is optional: importing this module needs only torch; NeMo is imported when an adapter is
built from NeMo objects (and a missing NeMo raises an :class:`ImportError` that says how to get it).

NeMo's conventions and how the adapter maps them:

* vocabulary: NeMo's ``num_classes`` excludes blank; blank is the *last* token index
  (``num_classes``), so ``vocab_size = num_classes + 1`` and ``blank_id = vocab_size - 1``.
* start of sequence: NeMo's ``RNNTDecoder`` with ``blank_as_pad=True`` maps blank to a zero
  embedding, which is exactly our "blank as ``predict`` input means start-of-sequence".
* state: the LSTM decoder's state is ``(h, c)``, each ``[L, B, H]`` (batch on dim 1); the
  stateless decoder's is ``[context [B, C-1]]`` (batch on dim 0).
* TDT: the joint's ``num_extra_outputs`` duration logits follow the ``V`` token logits.
* log-softmax: NeMo's joint applies ``log_softmax`` over the whole output on CPU. The adapter
  returns the raw logits of the joint network (divided by the joint's temperature); a
  log-softmax only shifts each row by a constant, so both give the same argmax, and our
  decoders' own ``log_softmax`` of these logits equals NeMo's RNN-T scores.

Shapes: ``B`` batch, ``T`` frames, ``D`` encoder width, ``P`` prediction width, ``H`` joint width,
``V`` vocabulary including blank, ``K`` number of TDT durations.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ..errors import DecodingInputError, FileFormatError, RemoteCodeError, check_emissions, check_metadata_number

__all__ = ["NeMoBundle", "NeMoTransducer", "encoder_output", "require_nemo"]

_INSTALL_HINT = (
    "asrdecode.models.nemo needs NVIDIA NeMo (`pip install \"nemo_toolkit[asr]\" torch==2.13.0`, "
    "preferably in its own virtual environment); asrdecode itself does not depend on it"
)


def require_nemo() -> Any:
    """Import and return ``nemo.collections.asr.modules``; raise a clear ImportError when NeMo is missing."""
    try:
        from nemo.collections.asr import modules  # noqa: PLC0415 (optional dependency)
    except ImportError as err:  # pragma: no cover - exercised only without NeMo
        raise ImportError(f"{_INSTALL_HINT} (import failed: {err})") from err
    return modules


def _tdt_durations_of(asr_model: Any) -> list[int] | None:
    """The TDT durations of a NeMo ASR model, or ``None`` when its joint has no duration outputs (RNN-T).

    Looked up in the live decoding object, then the config's ``decoding.durations``, then
    ``model_defaults.tdt_durations``.
    """
    if not int(getattr(asr_model.joint, "num_extra_outputs", 0)):
        return None
    candidates = [getattr(getattr(asr_model, "decoding", None), "durations", None)]
    cfg = getattr(asr_model, "cfg", None)
    if cfg is not None:
        for section, key in (("decoding", "durations"), ("model_defaults", "tdt_durations")):
            sub = cfg.get(section, None)
            candidates.append(sub.get(key, None) if sub is not None else None)
    for durations in candidates:
        if durations:
            return [int(d) for d in durations]
    return None


class NeMoTransducer(nn.Module):
    """A NeMo prediction network + joint network seen as a :class:`TransducerModel`.

    Args:
        decoder: a NeMo ``RNNTDecoder`` (LSTM, ``blank_as_pad=True``) or ``StatelessTransducerDecoder``.
        joint: a NeMo ``RNNTJoint`` (or subclass) built for the same vocabulary.
        durations: TDT duration values (NeMo's ``model_defaults.tdt_durations``); ``None`` for RNN-T.
            Their number must equal the joint's ``num_extra_outputs``.

    The wrapped modules are put in eval mode (dropout off), as NeMo's own decoding does.
    Use :meth:`from_model` for a whole ``EncDecRNNTModel`` / ``EncDecRNNTBPEModel``.
    """

    def __init__(self, decoder: nn.Module, joint: nn.Module, durations: Sequence[int] | None = None) -> None:
        super().__init__()
        modules = require_nemo()
        if not isinstance(decoder, (modules.RNNTDecoder, modules.StatelessTransducerDecoder)):
            raise DecodingInputError(
                f"decoder must be a NeMo RNNTDecoder or StatelessTransducerDecoder, got {type(decoder).__name__}"
            )
        if not isinstance(joint, modules.RNNTJoint):
            raise DecodingInputError(f"joint must be a NeMo RNNTJoint, got {type(joint).__name__}")
        if not getattr(decoder, "blank_as_pad", True):
            raise DecodingInputError(
                "NeMo decoders built with blank_as_pad=False are not supported: their embedding has no "
                "row for blank, so blank cannot be fed as the start-of-sequence input"
            )
        n_tokens = int(joint.num_classes_with_blank) - int(joint.num_extra_outputs)
        if int(decoder.blank_idx) != n_tokens - 1:
            raise DecodingInputError(
                f"decoder blank index {decoder.blank_idx} does not match the joint's vocabulary "
                f"({n_tokens - 1} labels + blank)"
            )
        n_extra = int(joint.num_extra_outputs)
        if durations is None:
            if n_extra:
                raise DecodingInputError(
                    f"joint has {n_extra} extra outputs but no TDT durations were given "
                    "(multi-blank models are not supported)"
                )
            self.durations: list[int] | None = None
        else:
            d = [int(x) for x in durations]
            if len(d) != n_extra:
                raise DecodingInputError(
                    f"durations has {len(d)} values but the joint has {n_extra} duration outputs"
                )
            self.durations = d
        self.decoder = decoder
        self.nemo_joint = joint
        self.vocab_size = n_tokens
        self.blank_id = n_tokens - 1
        self._stateless = isinstance(decoder, modules.StatelessTransducerDecoder)
        self._state_dim = 0 if self._stateless else 1
        # The plain RNNTJoint's joint_after_projection is add -> adapters -> joint_net (-> log_softmax);
        # subclasses (e.g. HAT) change it, so they go through joint_after_projection itself.
        self._plain_joint = type(joint).joint_after_projection is modules.RNNTJoint.joint_after_projection
        self.eval()

    @classmethod
    def from_model(cls, asr_model: nn.Module) -> "NeMoTransducer":
        """Wrap a NeMo ASR model (``EncDecRNNTModel``, ``EncDecRNNTBPEModel``, TDT or hybrid)."""
        decoder = getattr(asr_model, "decoder", None)
        joint = getattr(asr_model, "joint", None)
        if decoder is None or joint is None:
            raise DecodingInputError(
                f"{type(asr_model).__name__} has no `decoder` and `joint`: not a NeMo transducer model"
            )
        return cls(decoder, joint, durations=_tdt_durations_of(asr_model))

    # -- protocol -------------------------------------------------------------------------------

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder output ``[..., D]`` -> joint space ``[..., H]``."""
        return self.nemo_joint.project_encoder(enc)

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        """Prediction-network output ``[..., P]`` -> joint space ``[..., H]``."""
        return self.nemo_joint.project_prednet(dec)

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> Any:
        """NeMo's own initial state for ``batch`` hypotheses: ``(h, c)`` each ``[L, B, P]``, or ``[[B, C-1]]``."""
        p = next(self.decoder.parameters())
        like = torch.empty(batch, 1, device=device or p.device, dtype=dtype or p.dtype)
        state = self.decoder.initialize_state(like)
        return list(state) if self._stateless else tuple(state)

    def predict(self, labels: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One step: labels ``[B]`` (blank = start of sequence) -> (output ``[B, P]``, new state)."""
        out = self.decoder.predict(labels.unsqueeze(1), state, add_sos=False, batch_size=labels.shape[0])
        g, new = out[0], out[1]
        return g.squeeze(1), (list(new) if self._stateless else tuple(new))

    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        """Joint after projection: ``[..., H]`` + ``[..., H]`` -> logits ``[..., V (+K)]``."""
        j = self.nemo_joint
        if self._plain_joint:
            x = enc_proj + dec_proj
            if j.is_adapter_available():
                x = j.forward_enabled_adapters(x)
            out = j.joint_net(x)
            temperature = float(getattr(j, "temperature", 1.0))
            return out / temperature if temperature != 1.0 else out
        # Generic path: NeMo's joint_after_projection takes f [N, T, H], g [N, U, H] -> [N, T, U, V].
        f, g = torch.broadcast_tensors(enc_proj, dec_proj)
        lead = f.shape[:-1]
        res = j.joint_after_projection(f.reshape(-1, 1, f.shape[-1]), g.reshape(-1, 1, g.shape[-1]))
        return res.reshape(*lead, res.shape[-1])

    def select_state(self, state: Any, index: torch.Tensor) -> Any:
        """Gather the states of hypotheses ``index [N]`` -> a state of batch ``N``."""
        picked = [s.index_select(self._state_dim, index) for s in state]
        return picked if self._stateless else tuple(picked)

    def replace_state(self, state: Any, new: Any, mask: torch.Tensor) -> Any:
        """Per hypothesis, ``new`` where ``mask [B]`` is true, else ``state``."""
        merged = []
        for old, nw in zip(state, new):
            shape = [1] * old.dim()
            shape[self._state_dim] = -1
            merged.append(torch.where(mask.view(shape), nw, old))
        return merged if self._stateless else tuple(merged)


def encoder_output(
    nemo_model: nn.Module, audio: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a NeMo ASR model's preprocessor and encoder on waveforms.

    Args:
        nemo_model: a NeMo ``EncDecRNNTModel`` / ``EncDecRNNTBPEModel`` (anything whose ``forward``
            takes ``input_signal``, ``input_signal_length`` and returns ``(encoded [B, D, T], lengths)``).
        audio: waveforms ``[B, S]`` at the model's sample rate.
        lengths: samples per waveform ``[B]``.

    Returns:
        ``(enc [B, T, D], enc_lengths [B])``, the layout our decoders take (NeMo's is ``[B, D, T]``).
    """
    require_nemo()
    check_emissions("audio", audio, ndim=2)
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.shape[0] != audio.shape[0]:
        raise DecodingInputError(f"lengths must be a 1-D tensor with {audio.shape[0]} entries (one per waveform)")
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise DecodingInputError(f"lengths must have an integer dtype, got {lengths.dtype}")
    if audio.shape[0] and (int(lengths.min()) < 0 or int(lengths.max()) > audio.shape[1]):
        raise DecodingInputError(f"lengths must lie in 0..{audio.shape[1]} (the padded waveform length)")
    was_training = nemo_model.training
    nemo_model.eval()
    try:
        with torch.inference_mode():
            enc, enc_len = nemo_model(input_signal=audio, input_signal_length=lengths)[:2]
    finally:
        nemo_model.train(was_training)
    return enc.transpose(1, 2).contiguous(), enc_len


class _NeMoTokenizer:
    """A NeMo tokenizer as ours: ``vocab_size`` with the blank (last id), ``decode``, ``id_to_piece``."""

    def __init__(self, nemo_tokenizer: Any, vocab_size: int) -> None:
        self._tok = nemo_tokenizer
        self.vocab_size = int(vocab_size)
        self.blank_id = self.vocab_size - 1

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.ids_to_text([int(i) for i in ids if int(i) != self.blank_id])

    def id_to_piece(self, i: int) -> str:
        return "<blk>" if int(i) == self.blank_id else self._tok.ids_to_tokens([int(i)])[0]


class _NeMoCTCHead(nn.Module):
    """A NeMo CTC decoder (``ConvASRDecoder``) as a :class:`~asrdecode.models.bundle.CTCModel`."""

    def __init__(self, decoder: nn.Module, vocab_size: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.vocab_size = int(vocab_size)
        self.blank_id = self.vocab_size - 1

    @torch.no_grad()
    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder output ``[B, T, D]`` -> log-probs ``[B, T, V]``."""
        return torch.log_softmax(self.decoder(encoder_output=enc.transpose(1, 2)).float(), dim=-1)


class NeMoBundle:
    """A NeMo ASR model (RNN-T, TDT or CTC) as a :class:`~asrdecode.models.bundle.ModelBundle`.

    Features are NeMo's preprocessor output (``[B, Tf, F]``, our layout), the encoder is NeMo's,
    and the decoders see :class:`NeMoTransducer` or a CTC head. ``asrdecode transcribe --model
    PATH.nemo`` loads one through :meth:`from_checkpoint`.
    """

    def __init__(self, asr_model: Any, name: str = "nemo") -> None:  # a NeMo ASRModel (duck-typed)
        self.asr_model = asr_model.eval()
        self.name = name
        cfg = asr_model.cfg
        if hasattr(asr_model, "joint"):
            self.model: Any = NeMoTransducer.from_model(asr_model).eval()
            self.kind = "rnnt" if self.model.durations is None else "tdt"
        else:
            self.model = _NeMoCTCHead(asr_model.decoder, int(asr_model.decoder.num_classes_with_blank))
            self.kind = "ctc"
        tok = getattr(asr_model, "tokenizer", None)
        self.tokenizer = None if tok is None else _NeMoTokenizer(tok, self.model.vocab_size)
        stride = float(cfg.preprocessor.get("window_stride", 0.01))
        sub = int(getattr(asr_model.encoder, "subsampling_factor", cfg.encoder.get("subsampling_factor", 1)))
        self.feature_dim = int(cfg.preprocessor.get("features", cfg.preprocessor.get("nfilt", 80)))
        self.feature_frames_per_frame = sub
        self.frame_seconds = stride * sub
        self.encoder_dim = int(cfg.encoder.get("d_model", getattr(asr_model.encoder, "_feat_out", 0)))
        self.sample_rate = int(cfg.get("sample_rate", 16000))
        _check_metadata(name, stride, sub, self.feature_dim, self.sample_rate, self.model.vocab_size)

    @property
    def blank_id(self) -> int:
        return int(self.model.blank_id)

    @classmethod
    def from_checkpoint(cls, path: str, device: torch.device | str = "cpu") -> "NeMoBundle":
        """Restore a ``.nemo`` file (needs NeMo). Its config is read first: a class to build outside
        ``nemo.`` (``_target_``) raises :class:`~asrdecode.errors.RemoteCodeError`, nothing imported."""
        check_nemo_targets(path)
        require_nemo()
        from nemo.collections.asr.models import ASRModel  # noqa: PLC0415 (optional dependency)

        return cls(ASRModel.restore_from(str(path), map_location=torch.device(device)), name=str(path))

    @torch.no_grad()
    def features(self, audio: Any, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Waveforms (list of ``[N]``, or ``[B, N]`` with ``lengths``; 16 kHz) -> NeMo preprocessor features
        ``[B, Tf, F]`` and lengths ``[B]``."""
        from ..audio import pad_batch
        from .demo import as_wave_list

        waves = as_wave_list(audio, lengths)
        x, n = pad_batch(waves)
        self.asr_model.preprocessor.eval()
        feats, flen = self.asr_model.preprocessor(input_signal=x, length=n)
        return feats.transpose(1, 2).contiguous(), flen

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` + lengths -> encoder output ``[B, T, D]`` + lengths ``[B]``."""
        enc, elen = self.asr_model.encoder(audio_signal=feats.transpose(1, 2), length=lengths)
        return enc.transpose(1, 2).contiguous(), elen


#: a model config value or size outside these ranges is refused (a header's 1e12 becomes no allocation)
_LIMITS = {"window_stride": (1e-4, 1.0), "subsampling_factor": (1, 64), "features": (1, 4096),
           "sample_rate": (8000, 384_000), "vocab_size": (2, 1_000_000)}
_CONFIG_MEMBER_BYTES = 4 << 20


def _check_metadata(name: str, stride: float, sub: int, features: int, rate: int, vocab: int) -> None:
    for key, value, integer in (("window_stride", stride, False), ("subsampling_factor", sub, True),
                                ("features", features, True), ("sample_rate", rate, True), ("vocab_size", vocab, True)):
        lo, hi = _LIMITS[key]
        check_metadata_number(name, key, value, lo, hi, integer=integer)


def check_nemo_targets(path: str) -> None:
    """Read a ``.nemo`` archive's ``model_config.yaml`` (safely: no code, bounded size) and refuse it
    with :class:`~asrdecode.errors.RemoteCodeError` when a ``_target_`` names a class outside
    ``nemo.`` (NeMo would import and build it: any module, any callable). Without PyYAML the check is
    left to NeMo's own loader (NeMo depends on PyYAML, so that happens only when NeMo is missing too)."""
    import tarfile

    try:
        import yaml
    except ImportError:
        return
    try:
        with tarfile.open(path, "r:*") as tar:
            member = next((m for m in tar if m.isfile() and m.name.rsplit("/", 1)[-1] == "model_config.yaml"), None)
            if member is None:
                raise FileFormatError(path, None, "not a NeMo archive: no model_config.yaml")
            if member.size > _CONFIG_MEMBER_BYTES:
                raise FileFormatError(path, None, f"model_config.yaml is {member.size} bytes (at most {_CONFIG_MEMBER_BYTES})")
            f = tar.extractfile(member)
            config = yaml.safe_load(f.read() if f is not None else b"")
    except (OSError, tarfile.TarError, EOFError) as err:
        raise FileFormatError(path, None, f"not a readable NeMo archive ({err})") from None
    except yaml.YAMLError as err:
        raise FileFormatError(path, None, f"model_config.yaml is not valid YAML ({str(err).splitlines()[0]})") from None
    for where, target in _targets(config, "model_config"):
        if not isinstance(target, str) or not target.startswith("nemo."):
            raise RemoteCodeError(path, None, f"{where}._target_ is {target!r}: only NeMo's own classes "
                                              "(nemo.*) are built; the archive asks to run other code")


def _targets(node: object, where: str, depth: int = 0):
    """``(path, value)`` of every ``_target_`` key in a parsed YAML tree."""
    if depth > 64:
        raise FileFormatError(where, None, "model_config.yaml nests deeper than 64 levels")
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "_target_":
                yield where, v
            else:
                yield from _targets(v, f"{where}.{k}", depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{where}[{i}]", depth + 1)
