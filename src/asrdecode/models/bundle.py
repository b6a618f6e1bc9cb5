"""What an acoustic model must give the pipeline: the ``ModelBundle`` and ``CTCModel`` protocols.

Everything above the decoders (the CLI, :mod:`asrdecode.pipeline`, streaming sessions, the
server, Ray corpus decoding) sees a model only through :class:`ModelBundle`. A bundle turns
audio into features, features into encoder output, and hands the decoders either a
:class:`CTCModel` head (``kind == "ctc"``) or a :class:`~asrdecode.transducer.TransducerModel`
(``"rnnt"`` / ``"tdt"``). The bundled demo models, NeMo models and any user object with these
attributes are bundles; :func:`load_bundle` turns a ``--model`` argument into one.

Shapes: ``B`` batch, ``Tf`` feature frames, ``F`` feature width, ``T`` encoder frames, ``D``
encoder width, ``V`` vocabulary size (blank included).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, runtime_checkable

import torch

from ..configs import KINDS
from ..errors import DecodingInputError

__all__ = ["CTCModel", "ModelBundle", "KINDS", "check_bundle", "load_bundle", "register_loader"]



@runtime_checkable
class CTCModel(Protocol):
    """A CTC head over encoder output: ``log_probs_from_encoder(enc [B, T, D]) -> [B, T, V]`` log-probs."""

    blank_id: int
    vocab_size: int

    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        ...


@runtime_checkable
class ModelBundle(Protocol):
    """An acoustic model as the pipeline sees it.

    Attributes:
        name: what it is called in outputs and errors (``"demo-rnnt"``, a path, ...).
        kind: ``"ctc"``, ``"rnnt"`` or ``"tdt"``.
        model: a :class:`CTCModel` (``kind == "ctc"``) or a ``TransducerModel``.
        tokenizer: ids -> text (``decode``, ``vocab_size``; ``id_to_piece`` for word times), or ``None``.
        blank_id: the blank class of ``model``.
        frame_seconds: seconds per encoder frame.
        feature_dim: ``F``, the width of :meth:`features`.
        feature_frames_per_frame: feature frames per encoder frame (the encoder's subsampling).
        encoder_dim: ``D``, the width of :meth:`encode_features`.

    Optional: ``decode_defaults``, a mapping of :class:`~asrdecode.pipeline.DecodeOptions` fields
    tuned for the model (LM weight, bonus, a default decoder and graph, ...); the CLI, the server
    and :meth:`DecodeOptions.for_bundle` start from them.
    """

    name: str
    kind: str
    model: Any
    tokenizer: Any
    blank_id: int
    frame_seconds: float
    feature_dim: int
    feature_frames_per_frame: int
    encoder_dim: int

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio (a list of 16 kHz waveforms ``[N]``) -> features ``[B, Tf, F]`` and lengths ``[B]``."""
        ...

    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[B, Tf, F]`` + lengths -> encoder output ``[B, T, D]`` + lengths ``[B]``."""
        ...


def check_bundle(bundle: Any, source: str = "bundle") -> Any:
    """Return ``bundle`` if it implements :class:`ModelBundle` consistently, else raise naming what is missing."""
    missing = [name for name in ("name", "kind", "model", "tokenizer", "blank_id", "frame_seconds", "feature_dim",
                                 "feature_frames_per_frame", "encoder_dim", "features", "encode_features")
               if not hasattr(bundle, name)]
    if missing:
        raise DecodingInputError(f"{source}: a {type(bundle).__name__} is not a ModelBundle (missing {missing})")
    if bundle.kind not in KINDS:
        raise DecodingInputError(f"{source}: kind must be one of {KINDS}, got {bundle.kind!r}")
    if bundle.kind == "ctc":
        if not isinstance(bundle.model, CTCModel):
            raise DecodingInputError(f"{source}: a 'ctc' bundle's model needs log_probs_from_encoder, "
                                     "blank_id and vocab_size (the CTCModel protocol)")
    else:
        from ..transducer.model import TransducerModel

        if not isinstance(bundle.model, TransducerModel):
            raise DecodingInputError(f"{source}: a {bundle.kind!r} bundle's model must implement TransducerModel")
    if not float(bundle.frame_seconds) > 0:
        raise DecodingInputError(f"{source}: frame_seconds must be > 0, got {bundle.frame_seconds!r}")
    tok = bundle.tokenizer
    vocab = int(bundle.model.vocab_size)
    if tok is not None and int(getattr(tok, "vocab_size", vocab)) != vocab:
        raise DecodingInputError(f"{source}: the tokenizer has {tok.vocab_size} ids but the model has {vocab}")
    return bundle


#: extra loaders: (accepts(spec) -> bool, load(spec, device) -> bundle), tried in order
_LOADERS: list[tuple[Callable[[str], bool], Callable[[str, torch.device], Any]]] = []
#: model names the registered loaders accept (listed in :func:`load_bundle`'s error message)
_LOADER_NAMES: list[str] = []


def register_loader(accepts: Callable[[str], bool], load: Callable[[str, torch.device], Any],
                    names: tuple[str, ...] = ()) -> None:
    """Teach :func:`load_bundle` a new kind of ``--model`` argument (e.g. a model directory format);
    ``names``: model names it accepts, to list in error messages."""
    _LOADERS.append((accepts, load))
    _LOADER_NAMES.extend(n for n in names if n not in _LOADER_NAMES)


def load_bundle(spec: str, device: str | torch.device = "cpu") -> Any:
    """A :class:`ModelBundle` from a ``--model`` argument.

    ``spec`` is one of:

    * a bundled model name (:func:`asrdecode.models.available`);
    * a NeMo checkpoint ``PATH.nemo`` (needs ``nemo_toolkit``; a Transducer model);
    * a directory: a Hugging Face ``save_pretrained`` CTC model (``config.json``; needs the ``hf``
      extra, :mod:`~asrdecode.models.hf_ctc`) or an ONNX transducer in sherpa-onnx's layout
      (``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx``, ``tokens.txt``; needs the ``onnx``
      extra, :mod:`~asrdecode.models.onnx_transducer`);
    * ``package.module:attribute``: an importable bundle, or a callable returning one (called with
      no arguments), for models the library has no loader for;
    * anything a loader added with :func:`register_loader` accepts.

    Raises:
        DecodingInputError: ``spec`` is none of these, or what it names is not a valid bundle.
    """
    from .demo import available, load

    dev = torch.device(device)
    if not isinstance(spec, str) or not spec:
        raise DecodingInputError(f"model must be a non-empty string, got {spec!r}")
    if spec in available():
        return load(spec, device=dev)
    for accepts, loader in _LOADERS:
        if accepts(spec):
            return check_bundle(loader(spec, dev), spec)
    if spec.endswith(".nemo"):
        from .nemo import NeMoBundle

        if not Path(spec).is_file():
            raise DecodingInputError(f"model {spec!r}: no such NeMo checkpoint")
        return check_bundle(NeMoBundle.from_checkpoint(spec, device=dev), spec)
    if Path(spec).is_dir():
        return check_bundle(_load_directory(spec, dev), spec)
    module, sep, attr = spec.partition(":")
    if sep and module and attr and not Path(spec).exists():
        return check_bundle(_import_bundle(module, attr, spec), spec)
    raise DecodingInputError(
        f"model {spec!r}: expected a bundled model name ({', '.join([*available(), *_LOADER_NAMES])}), a NeMo checkpoint PATH.nemo, "
        f"{_DIRECTORIES}, or package.module:attribute naming a ModelBundle (or a function returning one)")


#: the model directories load_bundle reads (named in its error messages)
_DIRECTORIES = ("a model directory (Hugging Face CTC: config.json + weights + vocab.json; ONNX transducer: "
                "encoder.onnx, decoder.onnx, joiner.onnx, tokens.txt; NeMo CTC ONNX: model.onnx, tokens.txt)")


def _load_directory(spec: str, device: torch.device) -> Any:
    from .hf_ctc import is_hf_ctc_dir, load_hf_ctc
    from .onnx_transducer import is_onnx_transducer_dir, load_onnx_transducer

    if is_onnx_transducer_dir(spec):
        return load_onnx_transducer(spec, device)
    from .nemo_ctc_onnx import is_nemo_ctc_dir, load_nemo_ctc

    if is_nemo_ctc_dir(spec):  # model.onnx + tokens.txt: a NeMo CTC export (sherpa-onnx's from_nemo_ctc)
        return load_nemo_ctc(spec, device)
    if is_hf_ctc_dir(spec):
        return load_hf_ctc(spec, device)
    raise DecodingInputError(f"model {spec!r}: a directory, but not {_DIRECTORIES}")


def _import_bundle(module: str, attr: str, spec: str) -> Any:
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as err:
        raise DecodingInputError(f"model {spec!r}: cannot import {module!r} ({err})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DecodingInputError(f"model {spec!r}: {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not hasattr(obj, "kind") and callable(obj):
        obj = obj()
    return obj
