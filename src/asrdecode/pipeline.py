"""Audio to hypotheses for any :class:`~asrdecode.models.ModelBundle`: typed options and one decoder registry.

:class:`DecodeOptions` holds every decoding choice the command line, the server, Ray corpus
decoding and the demo offer (decoder, beam, LM, boosting, graph, ...), checked once where it is
made. :func:`make_pipeline` turns a bundle and options into ``encode(waves)`` and
``decode(output, lengths)``; :data:`DECODERS` says which decoders each model kind has, and
streaming sessions use the same table.

Layers: the decoders (``ctc``, ``transducer``, ``lm``) and ``models`` are below this module;
``streaming``, ``serving``, ``distributed`` and ``cli`` are above it. Nothing here imports them.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, cast

import torch

from .errors import DecodingInputError, FileFormatError
from .results import Hypothesis

__all__ = ["DecodeOptions", "Pipeline", "DECODERS", "METHODS", "make_pipeline", "stream_options", "build_fusion",
           "parse_boost", "best_of"]

#: decoder names per model kind (the bundle's ``kind``)
DECODERS: dict[str, tuple[str, ...]] = {"rnnt": ("greedy", "beam"), "tdt": ("greedy", "beam"),
                                        "ctc": ("greedy", "beam", "wfst")}
#: transducer beam search methods
METHODS = ("alsd", "aes", "wind")

Encode = Callable[[list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
Decode = Callable[[torch.Tensor, torch.Tensor], list[Hypothesis]]
NBest = list[list[Hypothesis]]  # a beam search's n-best lists (final=True: no state returned)


@dataclass(frozen=True)
class DecodeOptions:
    """Every decoding choice of the pipeline (the CLI flag of each field in :attr:`FLAGS`).

    Attributes:
        decoder: ``"greedy"``, ``"beam"`` or ``"wfst"`` (CTC with a TLG graph).
        beam: hypotheses kept (beam search).
        method: transducer beam search: ``"alsd"`` (ALSD++), ``"aes"`` (AES++) or ``"wind"``.
        window: WIND window (transducer greedy, or ``method="wind"``); 1 is off.
        expansion_gamma: WIND beam search's expansion threshold (``method="wind"``), or ``None`` (off).
        lm: a token-level ARPA LM for shallow fusion (beam search), or ``None``.
        lm_weight: its fusion weight.
        beta: bonus per emitted token when fusing.
        boost: ``"PHRASE:WEIGHT"`` items (beam: phrase boosting per token; wfst: word boosts).
        graph: a TLG graph file (``decoder="wfst"``).
        acoustic_scale: acoustic scale of WFST decoding.
        word_lm: a word-level ARPA LM for shallow fusion (:class:`~asrdecode.lm.word.WordNGramLM`), or ``None``.
        word_lm_weight: its fusion weight.
        word_bonus: bonus per word with ``word_lm``.
        wfst_beam: score beam of WFST decoding (natural log).
        max_active: most tokens per utterance after each frame of WFST decoding.
        min_active: WFST decoding keeps at least this many tokens whatever the beam (kaldi's rule; 0: off).
    """

    decoder: str = "greedy"
    beam: int = 8
    method: str = "alsd"
    window: int = 1
    expansion_gamma: Optional[float] = None
    lm: Optional[str] = None
    lm_weight: float = 0.7
    beta: float = 0.0
    boost: tuple[str, ...] = field(default=())
    graph: Optional[str] = None
    acoustic_scale: float = 2.0
    word_lm: Optional[str] = None
    word_lm_weight: float = 0.5
    word_bonus: float = 0.0
    wfst_beam: float = 17.0
    max_active: int = 10000
    min_active: int = 0

    #: field -> the CLI flag that sets it (used in error messages)
    FLAGS = {"decoder": "--decoder", "beam": "--beam", "method": "--method", "window": "--window",
             "expansion_gamma": "--expansion-gamma", "lm": "--lm",
             "lm_weight": "--lm-weight", "beta": "--beta", "boost": "--boost", "graph": "--graph",
             "acoustic_scale": "--acoustic-scale", "word_lm": "--word-lm", "word_lm_weight": "--word-lm-weight",
             "word_bonus": "--word-bonus", "wfst_beam": "--wfst-beam", "max_active": "--max-active",
             "min_active": "--min-active"}
    #: options whose LM / boosting / graph tensors are built on the CPU
    CPU_ONLY = ("lm", "word_lm", "boost", "graph")

    def __post_init__(self) -> None:
        if self.decoder not in ("greedy", "beam", "wfst"):
            raise DecodingInputError(f"decoder must be one of ['greedy', 'beam', 'wfst'], got {self.decoder!r}")
        for name in ("beam", "window", "max_active"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DecodingInputError(f"{self.FLAGS[name]} must be >= 1, got {value!r}")
        if isinstance(self.min_active, bool) or not isinstance(self.min_active, int) or self.min_active < 0:
            raise DecodingInputError(f"--min-active must be an int >= 0, got {self.min_active!r}")
        if self.method not in METHODS:
            raise DecodingInputError(f"--method must be one of {METHODS}, got {self.method!r}")
        for name in ("lm_weight", "beta", "acoustic_scale", "word_lm_weight", "word_bonus", "wfst_beam"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise DecodingInputError(f"{self.FLAGS[name]} must be a finite number, got {value!r}")
        gamma = self.expansion_gamma
        if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float))
                                  or not math.isfinite(gamma) or gamma < 0):
            raise DecodingInputError(f"--expansion-gamma must be a finite number >= 0, got {gamma!r}")
        if not self.wfst_beam > 0:
            raise DecodingInputError(f"wfst_beam must be > 0, got {self.wfst_beam!r}")
        if not self.acoustic_scale > 0:
            raise DecodingInputError(f"--acoustic-scale must be > 0, got {self.acoustic_scale!r}")
        boost = (self.boost,) if isinstance(self.boost, str) else tuple(self.boost or ())
        if not all(isinstance(b, str) for b in boost):
            raise DecodingInputError("boost must be a list of 'PHRASE:WEIGHT' strings")
        object.__setattr__(self, "boost", boost)
        for name in ("lm", "graph", "word_lm"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
            elif value is not None and not isinstance(value, str):
                raise DecodingInputError(f"{self.FLAGS[name]} must be a path, got {type(value).__name__}")

    @classmethod
    def from_mapping(cls, decoder: str = "greedy", options: Optional[Mapping[str, Any]] = None) -> "DecodeOptions":
        """Options from ``{field: value}`` (the CLI's flags as keys); unknown keys and wrong types are errors."""
        opts = dict(options or {})
        for key, value in opts.items():
            if key not in _TYPES:
                raise DecodingInputError(f"decoder_options: unknown key {key!r}; known: {sorted(_TYPES)}")
            if isinstance(value, bool) or not isinstance(value, _TYPES[key]):
                raise DecodingInputError(f"decoder_options[{key!r}] (the CLI's {cls.FLAGS[key]}) must be "
                                         f"{' or '.join(t.__name__ for t in _TYPES[key])}, got {type(value).__name__}")
        return cls(decoder=decoder, **opts)

    @classmethod
    def for_bundle(cls, bundle: Any, **given: Any) -> "DecodeOptions":
        """Options for ``bundle``: the defaults, then the bundle's ``decode_defaults``, then ``given``.

        ``given`` values of ``None`` count as not given (the CLI's unset flags).
        """
        tuned = dict(getattr(bundle, "decode_defaults", None) or {})
        unknown = sorted(set(tuned) - set(_TYPES) - {"decoder"})
        if unknown:
            raise DecodingInputError(f"{getattr(bundle, 'name', 'bundle')}.decode_defaults: unknown option(s) {unknown}")
        merged = {**tuned, **{k: v for k, v in given.items() if v is not None}}
        return cls(**merged)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults (JSON-ready; what a run records)."""
        default = DecodeOptions(decoder=self.decoder)
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if k != "decoder" and v != getattr(default, k)}

    def with_(self, **changes: Any) -> "DecodeOptions":
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)


#: the Python types each option takes in :meth:`DecodeOptions.from_mapping`
_TYPES: dict[str, tuple[type, ...]] = {
    "beam": (int,), "window": (int,), "expansion_gamma": (int, float), "method": (str,), "lm": (str, os.PathLike),
    "lm_weight": (int, float), "beta": (int, float), "boost": (list, tuple), "graph": (str, os.PathLike), "acoustic_scale": (int, float),
    "word_lm": (str, os.PathLike), "word_lm_weight": (int, float), "word_bonus": (int, float),
    "wfst_beam": (int, float), "max_active": (int,), "min_active": (int,)}


class Pipeline(NamedTuple):
    """``encode(waves) -> (output, lengths)`` and ``decode(output, lengths) -> [Hypothesis]`` of one bundle."""

    encode: Encode
    decode: Decode


def parse_boost(spec: str) -> tuple[str, float]:
    """``"phrase:weight"`` -> ``(phrase, weight)``; a spec without ``:weight`` gets weight 1.0."""
    phrase, sep, weight = spec.rpartition(":")
    if not sep:
        phrase, weight = spec, "1.0"
    try:
        w = float(weight)
    except ValueError:
        raise DecodingInputError(f"--boost {spec!r}: the weight after ':' must be a number") from None
    if not math.isfinite(w):
        raise DecodingInputError(f"--boost {spec!r}: the weight must be a finite number")
    if not phrase.strip():
        raise DecodingInputError(f"--boost {spec!r}: empty phrase")
    return phrase.strip(), w


def build_fusion(opts: DecodeOptions, tokenizer: Any, vocab: int, blank: int) -> list:
    """The ``[(FusionModel, weight), ...]`` of ``opts`` (token LM, phrase boosting) for a beam search."""
    _check_fusion_decoder(opts)
    fusion: list = []
    if opts.lm:
        from .lm import NGramLM

        if not Path(opts.lm).is_file():
            raise FileFormatError(opts.lm, None, "no such LM file")
        fusion.append((NGramLM.from_arpa(opts.lm, vocab_size=vocab, blank_id=blank), float(opts.lm_weight)))
    if opts.word_lm:
        from .lm.word import word_lm_fusion

        if tokenizer is None:
            raise DecodingInputError("--word-lm needs a model with a tokenizer")
        fusion.append(word_lm_fusion(opts.word_lm, tokenizer, vocab_size=vocab, blank_id=blank,
                                     weight=opts.word_lm_weight, word_bonus=opts.word_bonus))
    if opts.boost:
        from .lm import BoostingTree

        if tokenizer is None:
            raise DecodingInputError("--boost needs a model with a tokenizer")
        tree = BoostingTree.from_phrases([parse_boost(b) for b in opts.boost], tokenizer, vocab_size=vocab,
                                         blank_id=blank)
        fusion.append((tree, 1.0))
    return fusion


def _check_fusion_decoder(opts: DecodeOptions) -> None:
    if (opts.lm or opts.word_lm or opts.boost) and opts.decoder != "beam":
        raise DecodingInputError("--lm, --word-lm and --boost need --decoder beam")


def best_of(nbest_lists: Sequence[Sequence[Hypothesis]]) -> list[Hypothesis]:
    """The best hypothesis of each utterance from a beam search's n-best lists (an empty list: an empty hypothesis)."""
    return [h[0] if h else Hypothesis([], [], -math.inf) for h in nbest_lists]


def _encoder(bundle: Any) -> Encode:
    @torch.inference_mode()
    def encode(waves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        feats, flen = bundle.features(waves)
        enc, elen = bundle.encode_features(feats, flen)
        if bundle.kind == "ctc":
            return bundle.model.log_probs_from_encoder(enc), elen
        return enc, elen

    return encode


def _ctc_decoder(bundle: Any, opts: DecodeOptions) -> Decode:
    from . import ctc

    tok, blank = bundle.tokenizer, bundle.blank_id
    if opts.decoder == "wfst":
        return _wfst_decoder(bundle, opts)
    if opts.decoder == "greedy":
        return lambda x, n: cast(list[Hypothesis], ctc.greedy(x, n, blank, tok))
    fusion = build_fusion(opts, tok, bundle.model.vocab_size, blank)
    return lambda x, n: best_of(cast(NBest, ctc.beam_search(x, n, blank, beam=opts.beam, fusion=fusion,
                                                            beta=float(opts.beta), tokenizer=tok)))


def _transducer_decoder(bundle: Any, opts: DecodeOptions) -> Decode:
    from . import transducer as tr

    tok, model = bundle.tokenizer, bundle.model
    fusion = build_fusion(opts, tok, model.vocab_size, bundle.blank_id)
    if opts.decoder == "greedy":
        return lambda x, n: cast(list[Hypothesis], tr.greedy(model, x, n, window=opts.window, tokenizer=tok,
                                                             acceleration="eager"))
    kw: dict[str, Any] = {"beam": opts.beam, "tokenizer": tok, "method": opts.method}
    if opts.method == "wind":
        kw.update(window=opts.window, expansion_gamma=opts.expansion_gamma)
    if fusion:
        kw.update(fusion=fusion, beta=float(opts.beta))
    return lambda x, n: best_of(cast(NBest, tr.beam_search(model, x, n, **kw)))


def _wfst_decoder(bundle: Any, opts: DecodeOptions) -> Decode:
    """decode(log_probs, lengths) through a TLG graph (``graph``); ``boost`` takes WORD:WEIGHT."""
    from .ctc.wfst import WFSTDecoder, load_graph

    boosts = dict(parse_boost(b) for b in opts.boost)
    assert opts.graph is not None  # checked by the options
    decoder = WFSTDecoder(load_graph(opts.graph), blank_id=bundle.blank_id, acoustic_scale=float(opts.acoustic_scale),
                          beam=float(opts.wfst_beam), max_active=int(opts.max_active), min_active=int(opts.min_active))

    def decode(x: torch.Tensor, n: torch.Tensor) -> list[Hypothesis]:
        hyps = decoder(x, n, boosts=[boosts] * x.shape[0] if boosts else None)
        for h in hyps:
            h.text = " ".join(w for w, _, _ in h.words or [])
        return hyps

    return decode


def _check_fit(bundle: Any, options: DecodeOptions) -> None:
    """Every check that ``options`` fit ``bundle``, before anything (LM, graph) is built."""
    from .models.bundle import check_bundle

    check_bundle(bundle, getattr(bundle, "name", "model"))
    if not isinstance(options, DecodeOptions):
        raise DecodingInputError(f"options must be DecodeOptions, got {type(options).__name__}")
    if options.decoder == "wfst" and bundle.kind != "ctc":
        raise DecodingInputError(f"--decoder wfst decodes CTC output; {bundle.name} is a {bundle.kind} model "
                                 "(use a CTC model such as demo-ctc)")
    if options.decoder not in DECODERS[bundle.kind]:
        raise DecodingInputError(f"--decoder {options.decoder} does not apply to {bundle.name} (a {bundle.kind} "
                                 f"model): choose one of {DECODERS[bundle.kind]}")
    if bundle.kind == "ctc" and options.window != 1:
        raise DecodingInputError(f"--window applies to transducer decoding, not to the CTC model {bundle.name}")
    if options.expansion_gamma is not None and not (options.decoder == "beam" and options.method == "wind"
                                                    and bundle.kind != "ctc"):
        raise DecodingInputError("--expansion-gamma is an option of --decoder beam --method wind (transducer models)")
    if options.decoder == "wfst":
        if not options.graph:
            raise DecodingInputError("--decoder wfst needs --graph PATH (build one with `asrdecode build-graph`)")
        if not Path(options.graph).is_file():
            raise FileFormatError(options.graph, None, "no such graph file")
        if options.lm or options.word_lm:
            raise DecodingInputError("--lm / --word-lm are for beam search; a WFST graph already holds its word LM")
        return
    if options.lm and not Path(options.lm).is_file():
        raise FileFormatError(options.lm, None, "no such LM file")
    _check_fusion_decoder(options)
    if options.decoder != "beam":
        return
    if bundle.kind == "ctc" and options.method != "alsd":
        raise DecodingInputError(f"--method chooses a transducer beam search; {bundle.name} uses the CTC prefix "
                                 "beam search")
    if bundle.kind != "ctc" and options.window != 1 and options.method != "wind":
        raise DecodingInputError("--window with --decoder beam needs --method wind")


#: the decoder builder of each model kind
_BUILDERS: dict[str, Callable[[Any, DecodeOptions], Decode]] = {
    "ctc": _ctc_decoder, "rnnt": _transducer_decoder, "tdt": _transducer_decoder}


def make_pipeline(bundle: Any, options: DecodeOptions) -> Pipeline:
    """The :class:`Pipeline` of ``bundle`` (a :class:`~asrdecode.models.ModelBundle`) decoded with ``options``.

    Raises:
        DecodingInputError: a decoder or option that does not fit the model (named in the message).
        FileFormatError: a missing or malformed LM / graph file.
    """
    _check_fit(bundle, options)
    return Pipeline(_encoder(bundle), torch.inference_mode()(_BUILDERS[bundle.kind](bundle, options)))


def stream_options(bundle: Any, options: DecodeOptions) -> tuple[dict[str, Any], Optional[dict[str, float]]]:
    """``options`` as :class:`~asrdecode.streaming.StreamDecoder` keyword arguments (decoder, beam,
    fusion models, graph, ...) and the per-stream boosts (WFST words), for the same decoding chunk by chunk.

    Raises what :func:`make_pipeline` raises for options that do not fit the model.
    """
    _check_fit(bundle, options)
    kw: dict[str, Any] = {"decoder": options.decoder}
    boosts: Optional[dict[str, float]] = None
    if options.decoder == "wfst":
        from .ctc.wfst import load_graph

        assert options.graph is not None  # checked by the options
        kw.update(graph=load_graph(options.graph), acoustic_scale=float(options.acoustic_scale),
                  beam=float(options.wfst_beam), max_active=int(options.max_active), min_active=int(options.min_active))
        boosts = dict(parse_boost(b) for b in options.boost) or None
    elif options.decoder == "beam":
        kw.update(beam=options.beam, beta=float(options.beta),
                  fusion=build_fusion(options, bundle.tokenizer, bundle.model.vocab_size, bundle.blank_id))
        if bundle.kind != "ctc":
            kw["method"] = options.method
            if options.method == "wind":
                kw.update(window=options.window, expansion_gamma=options.expansion_gamma)
    elif bundle.kind != "ctc" and options.window != 1:
        kw["window"] = options.window
    return kw, boosts
