"""The bundled demo models: ``demo-ctc``, ``demo-rnnt`` and ``demo-tdt``.

They share one encoder (:class:`~asrdecode.models.frontend.MelEncoder`: 80 log-mel bins every
10 ms, three stride-2 convolutions to 80 ms frames, a BiLSTM) and one sentencepiece BPE tokenizer
(256 pieces, blank id 256). The recipes in ``recipes/`` rebuild them; the weights ship as fp16
under ``models/assets/``. ``encoder.pt`` names the front end its encoder was trained on
(``"logmel"``; ``"hama"`` for encoders over hama's phone posteriors, the design of session 1).

Shapes: ``B`` batch, ``N`` audio samples (16 kHz), ``T`` encoder frames (80 ms), ``D`` encoder
width, ``V`` vocabulary size with blank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..audio import check_waveform
from ..errors import DecodingInputError, FileFormatError
from ..tokenizers import SentencePieceTokenizer
from ..transducer.model import LSTMTransducer
from .frontend import HamaFrontEnd, LogMelFrontEnd, MelEncoder, PhoneEncoder, pad_features

__all__ = ["DemoModel", "DemoCTCHead", "DemoNet", "load", "available", "build_model", "save_checkpoint",
           "load_encoder_state", "read_encoder", "ASSETS"]

ASSETS = Path(__file__).resolve().parent / "assets"
_NAMES = {"demo-ctc": "ctc", "demo-rnnt": "rnnt", "demo-tdt": "tdt"}
FRAME_SECONDS = 0.08
#: token-LM weight and per-token bonus per model, tuned on dev by recipes/tune_lm.py (the values of
#: TUNED in recipes/evaluate_models.py); the pipeline's defaults for these models (``decode_defaults``)
LM_TUNED = {"demo-ctc": (0.7, 2.0), "demo-rnnt": (0.5, 1.0), "demo-tdt": (0.3, 1.0)}
#: demo-ctc's WFST acoustic scale over a TLG of the bundled word 3-gram (benchmarks/RESULTS.md, WER synth50 /
#: real10: 0.461 / 0.728 at 2.0, 0.429 / 0.794 at 1.5); it was the CLI's default for every model before the
#: library's neutral 1.0 became the one default
WFST_ACOUSTIC_SCALE = {"demo-ctc": 2.0}
FRONTENDS = ("logmel", "hama")
PRED_DIM = 256
JOINT_DIM = 256


class DemoNet(nn.Module):
    """Encoder plus either a CTC head (``kind="ctc"``) or an LSTM transducer (``"rnnt"``/``"tdt"``)."""

    def __init__(self, kind: str, vocab_size: int, blank_id: int, durations: Sequence[int] | None = None,
                 frontend: str = "logmel") -> None:
        super().__init__()
        if kind not in ("ctc", "rnnt", "tdt"):
            raise DecodingInputError(f"kind must be 'ctc', 'rnnt' or 'tdt', got {kind!r}")
        if frontend not in FRONTENDS:
            raise DecodingInputError(f"frontend must be one of {sorted(FRONTENDS)}, got {frontend!r}")
        self.kind = kind
        self.frontend = frontend
        self.blank_id = int(blank_id)
        self.vocab_size = int(vocab_size)
        self.encoder = MelEncoder() if frontend == "logmel" else PhoneEncoder()
        if kind == "ctc":
            self.ctc_head = nn.Linear(self.encoder.out_dim, vocab_size)
        else:
            self.transducer = LSTMTransducer(
                vocab_size, self.encoder.out_dim, PRED_DIM, JOINT_DIM, blank_id,
                durations=durations if kind == "tdt" else None,
            )


def build_model(kind: str, vocab_size: int, blank_id: int, durations: Sequence[int] | None = None,
                frontend: str = "logmel") -> DemoNet:
    """A freshly initialised :class:`DemoNet` (used by ``recipes/train.py``)."""
    return DemoNet(kind, vocab_size, blank_id, durations, frontend)


def save_checkpoint(model: DemoNet, kind: str, path: str | Path, vocab_size: int, blank_id: int,
                    durations: Sequence[int] | None) -> None:
    """Write the head of ``model`` (everything but the shared encoder) as fp16 to ``path``.

    For ``kind="ctc"`` the encoder is written too, to ``encoder.pt`` next to ``path`` (with the
    name of its front end): the RNN-T and TDT models are trained on top of this frozen encoder, so
    all three share its weights.
    """
    path = Path(path)
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()
             if not k.startswith("encoder.")}
    torch.save({"kind": kind, "vocab_size": vocab_size, "blank_id": blank_id,
                "durations": None if durations is None else list(durations), "state_dict": state}, str(path))
    if kind == "ctc":
        enc = {k: v.half() if v.is_floating_point() else v for k, v in model.encoder.state_dict().items()}
        torch.save({"kind": "encoder", "frontend": model.frontend, "state_dict": enc}, str(path.parent / "encoder.pt"))


def _load_checkpoint(path: str | Path) -> object:
    """``torch.load`` with ``weights_only=True`` (tensors and plain containers only, never code),
    explicitly: torch < 2.6, which pyproject allows, defaults to full unpickling."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, ... depending on the damage
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise FileFormatError(path, None, f"not a weights-only torch checkpoint: {first}") from None


def read_encoder(path: str | Path) -> tuple[str, dict[str, torch.Tensor]]:
    """``encoder.pt`` read once: the front end its encoder was trained on (``"logmel"`` /
    ``"hama"``) and the encoder's weights (float32)."""
    ckpt = _load_checkpoint(path)
    if not isinstance(ckpt, dict) or ckpt.get("kind") != "encoder":
        raise FileFormatError(path, None, "not an asrdecode demo encoder checkpoint")
    frontend = ckpt.get("frontend", "hama")  # encoders saved before the log-mel front end: hama
    if frontend not in FRONTENDS:
        raise FileFormatError(path, None, f"unknown front end {frontend!r}")
    return frontend, {k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}


def load_encoder_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The shared encoder's weights (float32) from ``encoder.pt``."""
    return read_encoder(path)[1]


class DemoCTCHead(nn.Module):
    """The demo CTC model: audio -> frame log-probs ``[B, T, V]`` (blank id ``blank_id``)."""

    def __init__(self, net: DemoNet, front: "DemoModel") -> None:
        super().__init__()
        self.encoder = net.encoder
        self.head = net.ctc_head
        self.blank_id = net.blank_id
        self.vocab_size = net.vocab_size
        self._front = front

    @torch.no_grad()
    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder output ``[B, T, D]`` -> log-probs ``[B, T, V]``."""
        return torch.log_softmax(self.head(enc).float(), dim=-1)

    @torch.no_grad()
    def log_probs(self, audio, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio (list of ``[N]`` tensors, or padded ``[B, N]`` + ``lengths``) -> (``[B, T, V]``, ``[B]``)."""
        enc, out_len = self._front.encode(audio, lengths)
        return self.log_probs_from_encoder(enc), out_len


@dataclass
class DemoModel:
    """A loaded demo model.

    Attributes:
        name: ``"demo-ctc"``, ``"demo-rnnt"`` or ``"demo-tdt"``.
        kind: ``"ctc"``, ``"rnnt"`` or ``"tdt"``.
        model: a :class:`DemoCTCHead` (``log_probs(audio)``, a :class:`~asrdecode.models.bundle.CTCModel`) or an
            :class:`~asrdecode.transducer.LSTMTransducer` (the TransducerModel protocol).
        tokenizer: the :class:`~asrdecode.tokenizers.SentencePieceTokenizer` (blank id = ``blank_id``).
        encoder: the trained encoder (:class:`MelEncoder`, or :class:`PhoneEncoder` for a
            ``"hama"`` model), used by :meth:`encode`.
        frame_seconds: duration of one encoder frame (0.08 s).
        frontend: ``"logmel"`` (80 log-mel energies every 10 ms) or ``"hama"`` (hama's 191 phone
            log-probs every 20 ms): what :meth:`features` computes.
    """

    name: str
    kind: str
    model: Any  # a DemoCTCHead or an LSTMTransducer (nn.Identity while load() builds the head)
    tokenizer: SentencePieceTokenizer
    encoder: MelEncoder | PhoneEncoder
    frame_seconds: float = FRAME_SECONDS
    frontend: str = "logmel"
    _front: LogMelFrontEnd | HamaFrontEnd | None = field(default=None, repr=False)

    @property
    def feature_dim(self) -> int:
        """Width ``F`` of :meth:`features` (80 log-mel bins or 191 phone log-probs)."""
        return int(self.encoder.feature_dim)

    @property
    def feature_frames_per_frame(self) -> int:
        """Feature frames per 80 ms encoder frame (8 log-mel frames of 10 ms, 4 hama frames of 20 ms)."""
        return int(self.encoder.feature_frames_per_frame)

    @property
    def blank_id(self) -> int:
        return int(self.model.blank_id)

    @property
    def decode_defaults(self) -> dict[str, float]:
        """The decoding options tuned for this model (see :class:`~asrdecode.pipeline.DecodeOptions`)."""
        if self.name not in LM_TUNED:
            return {}
        weight, beta = LM_TUNED[self.name]
        scale = {"acoustic_scale": WFST_ACOUSTIC_SCALE[self.name]} if self.name in WFST_ACOUSTIC_SCALE else {}
        return {"lm_weight": weight, "beta": beta, **scale}

    @property
    def encoder_dim(self) -> int:
        """Width ``D`` of :meth:`encode_features`."""
        return int(self.encoder.out_dim)

    def features(self, audio, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio -> padded features ``[B, Tf, F]`` and their lengths ``[B]``.

        ``F``/frame: 80 log-mel energies every 10 ms (``frontend="logmel"``) or 191 hama phone
        log-probs every 20 ms (``"hama"``). ``audio`` is a list of 1-D waveforms (tensors or numpy
        arrays, 16 kHz, float in [-1, 1]), a single 1-D waveform, or a padded ``[B, N]`` tensor with
        ``lengths [B]`` in samples.
        """
        waves = as_wave_list(audio, lengths)
        if self._front is None:
            self._front = LogMelFrontEnd() if self.frontend == "logmel" else HamaFrontEnd()
        if isinstance(self._front, LogMelFrontEnd):
            feats = [self._front.log_mel(w) for w in waves]
        else:
            feats = [self._front.phone_log_probs(w) for w in waves]
        return pad_features(feats, self.feature_dim)

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` (see :meth:`features`) + lengths -> encoder output ``[B, T, D]`` + lengths ``[B]``."""
        if not isinstance(feats, torch.Tensor) or feats.dim() != 3 or feats.shape[2] != self.feature_dim:
            raise DecodingInputError(f"feats must be a float tensor [B, Tf, {self.feature_dim}]")
        self.encoder.eval()
        enc, out_len = self.encoder(feats.float(), lengths.long())
        return enc, out_len

    @torch.no_grad()
    def encode(self, audio, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio -> encoder output ``[B, T, D]`` (float32, 80 ms frames) and lengths ``[B]`` (int64).

        Accepts what :meth:`features` accepts. Batched: one encoder call for the whole batch.
        """
        feats, flen = self.features(audio, lengths)
        return self.encode_features(feats, flen)


def as_wave_list(audio, lengths) -> list[torch.Tensor]:
    """The waveforms a model's ``transcribe`` / ``encode`` is given (a tensor ``[N]`` or ``[B, N]`` with
    ``lengths [B]``, a numpy array, or a list of ``[N]``) as float32 tensors ``[N_i]``; each must pass
    :func:`~asrdecode.audio.check_waveform` (finite, at most ``MAX_ABS_SAMPLE`` in magnitude)."""
    waves = _wave_list(audio, lengths)
    for i, w in enumerate(waves):
        check_waveform("audio" if len(waves) == 1 and not isinstance(audio, (list, tuple)) else f"audio[{i}]", w)
    return waves


def _wave_list(audio, lengths) -> list[torch.Tensor]:
    if isinstance(audio, np.ndarray):
        audio = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))
    if isinstance(audio, torch.Tensor):
        if audio.dim() not in (1, 2):
            raise DecodingInputError(f"audio must be [N] or [B, N], got shape {tuple(audio.shape)}")
        if not audio.is_floating_point():
            raise DecodingInputError(f"audio must be floating point in [-1, 1], got dtype {audio.dtype}")
        if audio.dim() == 1:
            if lengths is not None:
                raise DecodingInputError("lengths must be None for a single 1-D waveform")
            return [audio.float()]
        if lengths is None:
            return [a.float() for a in audio]
        from ..errors import check_lengths

        ln = check_lengths(lengths, audio.shape[0], audio.shape[1], device=torch.device("cpu"))
        return [audio[i, : int(ln[i])].float() for i in range(audio.shape[0])]
    if isinstance(audio, (list, tuple)):
        if lengths is not None:
            raise DecodingInputError("lengths must be None when audio is a list of waveforms")
        out = []
        for i, a in enumerate(audio):
            if isinstance(a, np.ndarray):
                a = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
            if not isinstance(a, torch.Tensor) or a.dim() != 1 or not a.is_floating_point():
                raise DecodingInputError(f"audio[{i}] must be a 1-D float waveform [N]")
            out.append(a.float())
        if not out:
            raise DecodingInputError("audio must not be an empty list")
        return out
    raise DecodingInputError(f"audio must be a tensor, numpy array or list of waveforms, got {type(audio).__name__}")


def available() -> list[str]:
    """Names accepted by :func:`load`."""
    return sorted(_NAMES)


def load(name: str, device: str | torch.device = "cpu") -> DemoModel:
    """Load a bundled demo model: ``"demo-ctc"``, ``"demo-rnnt"`` or ``"demo-tdt"``.

    Weights are stored as fp16 and loaded as float32. Needs the ``sentencepiece`` package (and
    ``hama`` for a model whose encoder was trained on hama's phone posteriors).
    """
    if name not in _NAMES:
        raise DecodingInputError(f"name must be one of {available()}, got {name!r}")
    path = ASSETS / f"{name}.pt"
    if not path.is_file():
        raise FileFormatError(path, None, "bundled model weights are missing (rerun the recipes, see recipes/README.md)")
    ckpt = _load_checkpoint(path)
    if not isinstance(ckpt, dict) or ckpt.get("kind") != _NAMES[name]:
        raise FileFormatError(path, None, f"checkpoint kind {ckpt.get('kind') if isinstance(ckpt, dict) else None!r} "
                                          f"does not match {name!r}")
    tok = SentencePieceTokenizer(ASSETS / "tokenizer.model")
    if tok.vocab_size != ckpt["vocab_size"] or tok.blank_id != ckpt["blank_id"]:
        raise FileFormatError(path, None, "tokenizer and model vocabularies differ")
    frontend, encoder_state = read_encoder(ASSETS / "encoder.pt")
    net = DemoNet(ckpt["kind"], ckpt["vocab_size"], ckpt["blank_id"], ckpt["durations"], frontend)
    head = {k: v.float() if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}
    net.encoder.load_state_dict(encoder_state)
    missing, unexpected = net.load_state_dict(head, strict=False)
    if unexpected or any(not k.startswith("encoder.") for k in missing):
        raise FileFormatError(path, None, f"weights do not fit the model (missing {missing}, unexpected {unexpected})")
    net.eval().to(device)
    demo = DemoModel(name=name, kind=ckpt["kind"], model=nn.Identity(), tokenizer=tok, encoder=net.encoder,
                     frontend=frontend)
    demo.model = DemoCTCHead(net, demo).eval() if ckpt["kind"] == "ctc" else net.transducer.eval()
    return demo
