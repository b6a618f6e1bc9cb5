"""Audio to transcripts in Python, exactly as ``asrdecode transcribe`` makes them.

:func:`transcribe` is one call; a :class:`Recognizer` keeps the model, its decoding graph or LMs and the
pipeline between calls. Both pick the model as the CLI does (none named: :func:`asrdecode.models.default_model`,
phone-ctc), resolve the options as the CLI does (the model's tuned ``decode_defaults`` where the user set
nothing: :func:`asrdecode.registry.resolve_options`), and decode as the CLI does: whole files in batches of
similar lengths, files over ``long_audio_seconds`` in windows cut at pauses
(:func:`asrdecode.long_audio.decode_files`).

Layers: above :mod:`asrdecode.pipeline`, :mod:`asrdecode.long_audio` and :mod:`asrdecode.models`; the CLI and
the server glue the same pieces to their own input and output.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from .audio import SAMPLE_RATE
from .errors import DecodingInputError, check_number
from .long_audio import LONG_AUDIO_SECONDS
from .results import Hypothesis

__all__ = ["Recognizer", "transcribe", "AudioInput"]

#: one input: an audio file's path, or a mono waveform ``[N]`` (a tensor or a NumPy array, at ``sample_rate``)
AudioInput = Union[str, "os.PathLike[str]", torch.Tensor, np.ndarray]


def _is_single(audio: Any) -> bool:
    if isinstance(audio, (str, os.PathLike)):
        return True
    return isinstance(audio, (torch.Tensor, np.ndarray)) and audio.ndim == 1


class Recognizer:
    """A model with its decoding, loaded once; :meth:`transcribe` (or calling it) decodes files or waveforms.

    Args:
        model: a ``--model`` name or path (:func:`asrdecode.models.load_bundle`: ``"phone-ctc"``,
            ``"demo-rnnt"``, a NeMo checkpoint, a model folder, ...), a loaded
            :class:`~asrdecode.models.ModelBundle`, or ``None`` for the CLI's default model.
        long_audio_seconds: a wave longer than this is decoded in windows cut at pauses (``None``: every wave
            whole); the CLI's ``--long-audio-seconds``.
        **options: decoding options by their :class:`~asrdecode.pipeline.DecodeOptions` names, as the CLI's
            flags (``decoder="beam"``, ``beam=8``, ``lm="tokens.arpa"``, ``boost=["edward:3"]``, ``nbest=4``);
            unset ones take the model's tuned defaults.

    Raises:
        DecodingInputError: an unknown model or option, a bad value, an option the decoder does not take.
    """

    def __init__(self, model: Any = None, *, long_audio_seconds: Optional[float] = LONG_AUDIO_SECONDS, **options: Any) -> None:
        from .models import default_model, load_bundle
        from .pipeline import make_pipeline
        from .registry import resolve_options

        if long_audio_seconds is not None:
            check_number("long_audio_seconds", long_audio_seconds, low=0.0, low_open=True)
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        if isinstance(given.get("boost"), str):
            given["boost"] = (given["boost"],)
        if model is None or isinstance(model, (str, os.PathLike)):
            model = load_bundle(os.fspath(model) if model is not None else default_model())
        self.bundle = model
        self.options = resolve_options(model, given)
        self.long_audio_seconds = long_audio_seconds
        self.pipeline = make_pipeline(model, self.options)

    def transcribe(self, audio: Union[AudioInput, Sequence[AudioInput]], *,
                   sample_rate: int = SAMPLE_RATE) -> Union[Hypothesis, list[Hypothesis], list[list[Hypothesis]]]:
        """Decode ``audio``: one input (a path, or a waveform ``[N]``) gives one
        :class:`~asrdecode.results.Hypothesis` (``.text``, ``.tokens``, ``.timestamps`` in frames, ``.words``);
        a list of inputs gives a list. With ``nbest > 1`` each result is that input's n-best list, best first.

        Files are read with :func:`asrdecode.audio.read_audio` (any rate, mixed to mono); waveforms are floats
        at ``sample_rate`` Hz, resampled to 16 kHz. Every input is read and checked before any is decoded.
        """
        from .audio import check_waveform, read_audio, resample
        from .long_audio import decode_files
        from .pipeline import best_of

        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
            raise DecodingInputError(f"sample_rate must be a positive int, got {sample_rate!r}")
        single = _is_single(audio)
        if not single and isinstance(audio, (torch.Tensor, np.ndarray)):
            raise DecodingInputError(f"audio: a waveform must be 1-D [N], got shape {tuple(audio.shape)}; give "
                                     "several waveforms as a list")
        if not single and not isinstance(audio, (list, tuple)):
            raise DecodingInputError(f"audio: expected a path, a 1-D waveform or a list of them, got "
                                     f"{type(audio).__name__}")
        items: list[Any] = [audio] if single else list(audio)  # type: ignore[arg-type]
        waves = []
        for k, a in enumerate(items):
            if isinstance(a, (str, os.PathLike)):
                waves.append(read_audio(os.fspath(a)))
                continue
            if not isinstance(a, (torch.Tensor, np.ndarray)) or a.ndim != 1:
                raise DecodingInputError(f"audio[{k}]: expected a path or a 1-D waveform, got "
                                         f"{type(a).__name__}{tuple(a.shape) if hasattr(a, 'shape') else ''}")
            if not (a.dtype.kind == "f" if isinstance(a, np.ndarray) else a.is_floating_point()):
                raise DecodingInputError(f"audio[{k}]: a waveform holds float samples in [-1, 1], got {a.dtype}")
            if isinstance(a, np.ndarray):  # any strides and byte order
                wave = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
            else:
                wave = a.detach().to("cpu", torch.float32)
            check_waveform(f"audio[{k}]", wave)
            waves.append(resample(wave, sample_rate, SAMPLE_RATE) if sample_rate != SAMPLE_RATE else wave)
        lists = decode_files(self.bundle, self.pipeline, waves, self.options.nbest,
                             long_audio_seconds=self.long_audio_seconds)
        out: list[Any] = lists if self.options.nbest > 1 else best_of(lists)
        return out[0] if single else out

    __call__ = transcribe


def transcribe(audio: Union[AudioInput, Sequence[AudioInput]], model: Any = None, *, sample_rate: int = SAMPLE_RATE,
               long_audio_seconds: Optional[float] = LONG_AUDIO_SECONDS,
               **options: Any) -> Union[Hypothesis, list[Hypothesis], list[list[Hypothesis]]]:
    """``Recognizer(model, long_audio_seconds=..., **options).transcribe(audio, sample_rate=...)``: one call
    that loads the model and decodes ``audio`` as ``asrdecode transcribe`` does. Keep a :class:`Recognizer`
    to decode more than once (the model and its graph load once).

    Example::

        import asrdecode
        print(asrdecode.transcribe("data/real/cards-001.wav").text)          # phone-ctc + its TLG
        hyps = asrdecode.transcribe(["a.wav", "b.wav"], "demo-rnnt", decoder="beam", beam=4)
    """
    return Recognizer(model, long_audio_seconds=long_audio_seconds, **options).transcribe(audio,
                                                                                         sample_rate=sample_rate)
