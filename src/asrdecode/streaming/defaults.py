"""The decoding a bundle gets by default in a stream, resolved as ``transcribe`` resolves it.

:func:`resolve_decoding` resolves the registry options (the bundle's ``decode_defaults`` where they apply:
phone-ctc's cached graph and tuned options), and :func:`bundle_decoding` turns them into a decoder name and
:class:`~asrdecode.streaming.StreamDecoder` keyword arguments (LMs and graph loaded).
:meth:`StreamDecoder.for_bundle <asrdecode.streaming.StreamDecoder.for_bundle>` and the server
(``asrdecode serve``) use them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ..errors import DecodingInputError
from ..pipeline import stream_options
from ..registry import OPTION, decoder_for, resolve_options

__all__ = ["resolve_decoding", "bundle_decoding"]


def resolve_decoding(bundle: Any, decoder: Optional[str], options: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(DecodeOptions, extras)``: the registry options among ``options`` resolved for ``bundle`` exactly as
    ``transcribe`` resolves them (:func:`~asrdecode.registry.resolve_options`: the bundle's
    ``decode_defaults`` where they apply), and the other keys (StreamDecoder's own: ``boost_weight``,
    ``block_frames``, a search keyword the registry does not declare, ...)."""
    extras = dict(options)
    given = {k: extras.pop(k) for k in list(extras) if k in OPTION}
    opts = resolve_options(bundle, {"decoder": decoder, **given})
    if opts.nbest != 1:
        raise DecodingInputError(f"nbest {opts.nbest}: a served stream's result is its best hypothesis (nbest 1; "
                                 "so is a StreamDecoder's)")
    if opts.boost and decoder_for(opts.decoder, getattr(bundle, "kind", None) or "ctc").word_boosts:
        raise DecodingInputError("boost with decoder 'wfst': a stream's word boosts are its own (StreamDecoder.open(id, "
                                 "boosts=...); a served stream's 'boosts' in its start message)")
    return opts, extras


def bundle_decoding(bundle: Any, decoder: Optional[str], options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The decoder (``None``: the bundle's default) and its :class:`~asrdecode.streaming.StreamDecoder`
    keyword arguments: :func:`resolve_decoding`'s options as :func:`~asrdecode.pipeline.stream_options`
    gives them (LMs and graph loaded), then the extra keys (a ``fusion`` list is appended)."""
    opts, extras = resolve_decoding(bundle, decoder, options)
    kw, _ = stream_options(bundle, opts)
    if "fusion" in extras:
        kw["fusion"] = [*kw.get("fusion", ()), *extras.pop("fusion")]
    return kw.pop("decoder"), {**kw, **extras}
