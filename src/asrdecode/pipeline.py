"""Audio to hypotheses for any :class:`~asrdecode.models.ModelBundle`: options in, ``encode`` / ``decode`` out.

:class:`DecodeOptions` (every decoding choice, derived from :mod:`asrdecode.registry`, re-exported
here) is resolved for a bundle by :func:`~asrdecode.registry.resolve_options` (the user's values,
then the bundle's ``decode_defaults``, then the registry's defaults). :func:`make_pipeline` turns a
bundle and options into ``encode(waves)`` and ``decode(output, lengths)`` through the registry
decoder's builder; :func:`stream_options` gives the same search's
:class:`~asrdecode.streaming.StreamDecoder` keyword arguments.

Layers: the decoders (``ctc``, ``transducer``, ``lm``) and ``models`` are below this module;
``streaming``, ``serving``, ``distributed`` and ``cli`` are above it. Nothing here imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from .decoders import DecodeNBest, NBest, best_of, build_fusion, check_sherpa_streams, parse_boost, word_boosts
from .configs import FusionConfig, GraphConfig
from .errors import DecodingInputError, FileFormatError
from .registry import KINDS, DecodeOptions, Search, check_options, decoder_names, resolve_options
from .results import Hypothesis

__all__ = ["DecodeOptions", "Pipeline", "DECODER_NAMES", "NBest", "make_pipeline", "stream_options", "build_fusion",
           "parse_boost", "best_of", "resolve_options"]

#: decoder names per model kind (the bundle's ``kind``), from the registry
DECODER_NAMES: dict[str, tuple[str, ...]] = {kind: decoder_names([kind]) for kind in KINDS}

Encode = Callable[[list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
Decode = Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]


@dataclass(frozen=True)
class Pipeline:
    """``encode(waves) -> (output, lengths)`` and ``decode(output, lengths) -> [Hypothesis]`` of one bundle;
    ``decode_nbest`` gives each utterance's n-best list (``options.nbest`` long at most, best first).
    Unpacks as ``encode, decode = pipeline``."""

    encode: Encode
    decode: Decode
    decode_nbest: DecodeNBest

    def __iter__(self) -> Iterator[Callable]:
        return iter((self.encode, self.decode))


def _encoder(bundle: Any) -> Encode:
    @torch.inference_mode()
    def encode(waves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        feats, flen = bundle.features(waves)
        enc, elen = bundle.encode_features(feats, flen)
        if bundle.kind == "ctc":
            return bundle.model.log_probs_from_encoder(enc), elen
        return enc, elen

    return encode


def check_fit(bundle: Any, options: DecodeOptions) -> Search:
    """Every check that ``options`` fit ``bundle`` (the registry's rules, files exist) before anything
    (LM, graph) is built; returns the registry's :class:`~asrdecode.registry.Decoder`."""
    from .models.bundle import check_bundle

    check_bundle(bundle, getattr(bundle, "name", "model"))
    dec = check_options(bundle.kind, options)
    words = getattr(bundle, "word_decoders", None)  # a model whose tokens are not spelled words (phones)
    if words is not None and options.decoder not in words:
        raise DecodingInputError(f"--decoder {options.decoder} gives {getattr(bundle, 'name', 'the model')}'s phones, "
                                 f"not words; the decoders that give words: {', '.join(words)}")
    own = [flag for flag, given in (("--lm", options.lm), ("--word-lm", options.word_lm)) if given]
    if words is not None and dec.takes(FusionConfig) and own:
        # the beam search gives words through the bundle's own lexicon word LM, which a user's LM replaces
        raise DecodingInputError(
            f"--decoder beam {' '.join(own)} gives {getattr(bundle, 'name', 'the model')}'s phones, not words: its "
            f"beam search spells words with its own word LM only (drop {' and '.join(own)}); for your LM's words "
            f"build a graph (`asrdecode build-graph`) and use --decoder wfst --graph PATH")
    for name, what in (("lm", "LM"), ("word_lm", "word LM"), ("graph", "graph")):
        path = getattr(options, name)
        if path and not Path(path).is_file():
            raise FileFormatError(path, None, f"no such {what} file")
    if dec.takes(GraphConfig) and not options.graph:
        raise DecodingInputError("--decoder wfst needs --graph PATH (build one with `asrdecode build-graph`)")
    return dec


def make_pipeline(bundle: Any, options: DecodeOptions) -> Pipeline:
    """The :class:`Pipeline` of ``bundle`` (a :class:`~asrdecode.models.ModelBundle`) decoded with ``options``.

    Raises:
        DecodingInputError: a decoder or option that does not fit the model (named in the message).
        FileFormatError: a missing or malformed LM / graph file.
    """
    dec = check_fit(bundle, options)
    nbest = torch.inference_mode()(dec.build(bundle, options))
    return Pipeline(_encoder(bundle), lambda x, n: best_of(nbest(x, n)), nbest)


def stream_options(bundle: Any, options: DecodeOptions) -> tuple[dict[str, Any], Optional[dict[str, float]]]:
    """``options`` as :class:`~asrdecode.streaming.StreamDecoder` keyword arguments (decoder and the
    registry decoder's search keyword arguments: beam, fusion models, graph, ...) and the per-stream
    boosts (WFST words), for the same decoding chunk by chunk.

    Raises what :func:`make_pipeline` raises for options that do not fit the model.
    """
    dec = check_fit(bundle, options)
    kw = {"decoder": options.decoder, **dec.search_kwargs(bundle, options)}
    if kw.get("compat") == "sherpa":
        check_sherpa_streams(bundle.model, options.decoder)
    return kw, word_boosts(options) if dec.word_boosts else None
