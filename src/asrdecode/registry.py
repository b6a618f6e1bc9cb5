"""The one registry of decoders and decoding options; every entry point derives from it.

:data:`OPTIONS` declares each decoding option once (type, default, bounds, help, CLI flag, the
options it needs); :data:`DECODERS` declares each decoder once (name, model kinds, the options it
takes, its search keyword arguments, offline builder and streaming family). From them come
:class:`DecodeOptions` (its fields, checks and docstring), the CLI's decoding flags and
``--decoder`` choices, the server's and Ray's options, and :func:`resolve_options`: the one
function that applies a model bundle's ``decode_defaults``.

Resolution rules (:func:`resolve_options`): the user's values, then the bundle's
``decode_defaults``, then the defaults below. A value the user gave that the decoder does not take,
or whose requirement is missing (``--beta`` without an LM), is an error naming both; a tuned value
of the bundle that does not apply (demo-ctc's LM-tuned ``beta`` when no LM is given, phone-ctc's
graph when another decoder is chosen) is dropped.

Adding an option: one :class:`Option` in :data:`OPTIONS`, its name in the ``options`` of the
decoders that take it, and its use in their ``search_kwargs`` (``decoders.py``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from . import decoders as impl
from .errors import DecodingInputError, check_int, check_number

__all__ = ["Option", "Decoder", "OPTIONS", "DECODERS", "KINDS", "METHODS", "ENGINES", "COMPATS", "DecodeOptions",
           "decoder_names", "decoder_for", "options_for", "resolve_options", "check_options", "check_types"]

KINDS = ("ctc", "rnnt", "tdt")
TRANSDUCERS = ("rnnt", "tdt")
#: transducer beam search methods
METHODS = ("alsd", "aes", "wind")
#: the search engines (``native/choice.py``)
ENGINES = ("auto", "native", "torch")
#: ``compat`` presets: our own decoding, or sherpa-onnx's (``models/sherpa_compat.py``)
COMPATS = ("none", "sherpa")
#: each preset's defaults where they differ from ours (a given option still wins): sherpa-onnx's beam
#: searches keep 4 paths by default (its ``max_active_paths``), ours 8
COMPAT_DEFAULTS: dict[str, dict[str, Any]] = {"none": {}, "sherpa": {"beam": 4}}

#: value kinds of an option: their Python types as :meth:`DecodeOptions.from_mapping` accepts them
_PY_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,),
                                          "path": (str, os.PathLike), "phrases": (list, tuple)}


def _needs_lm(o: Any) -> Optional[str]:
    return None if (o.lm or o.word_lm) else "--lm or --word-lm"


def _needs_token_lm(o: Any) -> Optional[str]:
    return None if o.lm else "--lm"


def _needs_word_lm(o: Any) -> Optional[str]:
    return None if o.word_lm else "--word-lm"


def _needs_wind(o: Any) -> Optional[str]:
    return None if o.method == "wind" else "--method wind"


def _needs_wind_with_beam(o: Any) -> Optional[str]:
    return None if o.decoder != "beam" or o.method == "wind" else "--method wind"


@dataclass(frozen=True)
class Option:
    """One decoding option.

    Attributes:
        name: the :class:`DecodeOptions` field (the CLI flag is ``--name-with-dashes``).
        kind: ``"int"``, ``"float"``, ``"str"``, ``"path"`` or ``"phrases"`` (repeatable strings).
        default: the value when neither the user nor the model sets it (``None``: off / the decoder's own).
        help: one line for ``--help`` and the docs.
        low, low_open: the bound ``value >= low`` (``> low`` with ``low_open``).
        choices: the accepted strings.
        optional: ``None`` is a valid value.
        requires: ``requires(options) -> None`` when the option may be set, else what it needs
            (e.g. ``"--lm"``).
        cpu_only: its tensors (LM, graph, boosting tree) are built on the CPU.
        metavar: the CLI's metavar.
        tuned: bundles tune it (``decode_defaults``); ``--help`` says so.
    """

    name: str
    kind: str
    default: Any
    help: str
    low: Optional[float] = None
    low_open: bool = False
    choices: Optional[tuple[str, ...]] = None
    optional: bool = False
    requires: Optional[Callable[[Any], Optional[str]]] = None
    cpu_only: bool = False
    metavar: Optional[str] = None
    tuned: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """``value`` checked (and normalised: paths to ``str``, phrases to a tuple); a named error if bad."""
        if value is None and self.optional:
            return None
        if self.kind == "phrases":
            items = (value,) if isinstance(value, str) else tuple(value or ())
            if not all(isinstance(b, str) for b in items):
                raise DecodingInputError(f"{self.name} must be a list of 'PHRASE:WEIGHT' strings, got {value!r}")
            return items
        if self.kind == "path":
            if isinstance(value, (str, os.PathLike)):
                return os.fspath(value)
            raise DecodingInputError(f"{self.flag} must be a path, got {type(value).__name__}")
        if self.kind == "str":
            if value not in (self.choices or ()):
                raise DecodingInputError(f"{self.flag} must be one of {self.choices}, got {value!r}")
            return value
        return self._number(value)

    def _number(self, value: Any) -> Any:
        if self.kind == "int":  # an int is > low exactly when it is >= floor(low) + 1
            low = None if self.low is None else math.floor(self.low) + 1 if self.low_open else math.ceil(self.low)
            return check_int(self.flag, value, low=low)
        return check_number(self.flag, value, low=self.low, low_open=self.low_open)


#: every decoding option, in ``--help`` order
OPTIONS: tuple[Option, ...] = (
    Option("beam", "int", 8, "hypotheses kept by the beam search (with --compat sherpa: 4, sherpa-onnx's)", low=1),
    Option("method", "str", "alsd", "transducer beam search: ALSD++, AES++ or WIND beam search", choices=METHODS),
    Option("window", "int", None, "WIND window: transducer greedy (default 1: off) or --method wind (default 8)",
           low=1, optional=True, requires=_needs_wind_with_beam),
    Option("expansion_gamma", "float", None, "--method wind: keep a hypothesis's expansions within GAMMA "
           "(log-score) of its best one (mAES's threshold: faster; default: off)", low=0, optional=True,
           requires=_needs_wind, metavar="GAMMA"),
    Option("max_symbols", "int", 10, "transducers: at most this many labels per frame, then time advances",
           low=1),
    Option("lm", "path", None, "token-level ARPA LM for shallow fusion (.arpa or .arpa.gz, e.g. from build-lm "
           "--tokens)", optional=True, cpu_only=True, metavar="PATH"),
    Option("lm_weight", "float", 0.7, "token LM weight", requires=_needs_token_lm, tuned=True),
    Option("beta", "float", 0.0, "per-token bonus with an LM", requires=_needs_lm, tuned=True),
    Option("word_lm", "path", None, "word-level ARPA LM for shallow fusion (.arpa or .arpa.gz; KenLM binaries "
           "are not read)", optional=True, cpu_only=True, metavar="PATH"),
    Option("word_lm_weight", "float", 0.5, "word LM weight", requires=_needs_word_lm),
    Option("word_bonus", "float", 0.0, "per-word bonus with --word-lm", requires=_needs_word_lm),
    Option("boost", "phrases", (), "boost a phrase by WEIGHT per token (repeatable); with --decoder wfst, a word "
           "by WEIGHT", cpu_only=True, metavar='"PHRASE:WEIGHT"'),
    Option("graph", "path", None, "TLG graph for --decoder wfst (from `asrdecode build-graph`)", optional=True,
           cpu_only=True, metavar="PATH"),
    Option("acoustic_scale", "float", 2.0, "acoustic scale of WFST decoding", low=0, low_open=True),
    Option("wfst_beam", "float", 17.0, "score beam of WFST decoding (natural log)", low=0, low_open=True),
    Option("max_active", "int", 10000, "most tokens per utterance and frame of WFST decoding", low=1),
    Option("min_active", "int", 0, "WFST decoding keeps at least this many tokens whatever the beam "
           "(kaldi's rule; 0: off)", low=0),
    Option("engine", "str", "auto", "search engine: native (C++, CPU), torch (tensors), auto (native on CPU "
           "when built)", choices=ENGINES),
    Option("compat", "str", "none", "transducers: sherpa = decode as sherpa-onnx does on its ONNX layouts (start "
           "context, symbols per frame, <unk> as blank; beam: its modified beam search, icefall or NeMo)",
           choices=COMPATS),
    Option("nbest", "int", 1, "hypotheses per utterance in the output (transcribe --format json, eval -o)",
           low=1),
)
OPTION = {o.name: o for o in OPTIONS}

_FUSION = ("lm", "lm_weight", "beta", "word_lm", "word_lm_weight", "word_bonus", "boost")


@dataclass(frozen=True)
class Decoder:
    """One decoder for some model kinds.

    Attributes:
        name: the ``--decoder`` name.
        kinds: the model kinds it decodes.
        options: the :data:`OPTIONS` it takes.
        search_kwargs: ``(bundle, options) -> {keyword: value}`` of its search (LMs, graph loaded);
            the offline builder and the streaming family both call the search with them.
        build: ``(bundle, options) -> decode_nbest(x, lengths) -> [[Hypothesis]]`` (offline).
        family: the :mod:`asrdecode.streaming.families` class that streams it.
        help: one line.
    """

    name: str
    kinds: tuple[str, ...]
    options: tuple[str, ...]
    search_kwargs: Callable[[Any, Any], dict[str, Any]]
    build: Callable[[Any, Any], Callable]
    family: str
    help: str


#: every decoder; a (name, kind) pair is declared once
DECODERS: tuple[Decoder, ...] = (
    Decoder("greedy", ("ctc",), (), impl.no_kwargs, impl.ctc_greedy, "CTCGreedy", "argmax + collapse"),
    Decoder("greedy", TRANSDUCERS, ("window", "max_symbols", "engine", "compat"), impl.transducer_greedy_kwargs,
            impl.transducer_greedy, "TransducerGreedy", "label-looping greedy (WIND with --window)"),
    Decoder("beam", ("ctc",), ("beam", *_FUSION, "engine", "nbest"), impl.ctc_beam_kwargs, impl.ctc_beam,
            "CTCBeam", "batched prefix beam search, LM fusion and boosting"),
    Decoder("beam", TRANSDUCERS, ("beam", "method", "window", "expansion_gamma", "max_symbols", *_FUSION, "engine",
                                  "compat", "nbest"),
            impl.transducer_beam_kwargs, impl.transducer_beam, "TransducerBeam", "ALSD++ / AES++ / WIND beam search"),
    Decoder("wfst", ("ctc",), ("graph", "acoustic_scale", "wfst_beam", "max_active", "min_active", "boost", "engine",
                               "nbest"),
            impl.wfst_kwargs, impl.wfst, "WFST", "token passing over a TLG graph"),
)


def decoder_names(kinds: Iterable[str] = KINDS) -> tuple[str, ...]:
    """The decoder names for any of ``kinds``, in declaration order."""
    kinds = tuple(kinds)
    return tuple(dict.fromkeys(d.name for d in DECODERS if set(d.kinds) & set(kinds)))


def decoder_for(name: str, kind: str) -> Decoder:
    """The :class:`Decoder` ``name`` of a ``kind`` model; a named error if it does not apply."""
    for d in DECODERS:
        if d.name == name and kind in d.kinds:
            return d
    if name not in decoder_names():
        raise DecodingInputError(f"decoder must be one of {list(decoder_names())}, got {name!r}")
    hint = " (use a CTC model such as demo-ctc)" if name == "wfst" else ""
    raise DecodingInputError(f"--decoder {name} does not apply to a {kind} model: choose one of "
                             f"{list(decoder_names([kind]))}{hint}")


def options_for(kinds: Iterable[str] = KINDS) -> tuple[Option, ...]:
    """The options some decoder of ``kinds`` takes, in :data:`OPTIONS` order (the CLI's flags)."""
    kinds = tuple(kinds)
    used = {n for d in DECODERS if set(d.kinds) & set(kinds) for n in d.options}
    return tuple(o for o in OPTIONS if o.name in used)


# ----------------------------------------------------------------------------------- DecodeOptions
class _OptionsBase:
    """Methods of :class:`DecodeOptions` (whose fields come from :data:`OPTIONS`)."""

    decoder: str  # the first field of every DecodeOptions

    #: field -> the CLI flag that sets it (used in error messages)
    FLAGS: dict[str, str] = {"decoder": "--decoder", **{o.name: o.flag for o in OPTIONS}}
    #: options whose LM / boosting / graph tensors are built on the CPU
    CPU_ONLY: tuple[str, ...] = tuple(o.name for o in OPTIONS if o.cpu_only)

    def __post_init__(self) -> None:
        if self.decoder not in decoder_names():
            raise DecodingInputError(f"decoder must be one of {list(decoder_names())}, got {self.decoder!r}")
        for o in OPTIONS:
            object.__setattr__(self, o.name, o.check(getattr(self, o.name)))

    @classmethod
    def from_mapping(cls, decoder: str = "greedy", options: Optional[Mapping[str, Any]] = None) -> Any:
        """Options from ``{field: value}`` (the CLI's flags as keys); unknown keys and wrong types are errors."""
        opts = dict(options or {})
        check_types(opts)
        return cls(decoder=decoder, **opts)  # type: ignore[call-arg]  # fields made from OPTIONS

    @classmethod
    def for_bundle(cls, bundle: Any, **given: Any) -> Any:
        """:func:`resolve_options` of ``bundle`` with ``given`` (``None`` values count as not given)."""
        return resolve_options(bundle, given)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults (JSON-ready; what a run records)."""
        return {o.name: (list(v) if isinstance(v, tuple) else v) for o in OPTIONS
                if (v := getattr(self, o.name)) != o.default}

    def with_(self, **changes: Any) -> Any:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def _docstring() -> str:
    lines = ["Every decoding choice of the pipeline, one field per :data:`~asrdecode.registry.OPTIONS` entry.",
             "", "Attributes:", "    decoder: " + ", ".join(decoder_names()) + "."]
    lines += [f"    {o.name}: {o.help} (default {o.default!r})." for o in OPTIONS]
    return "\n".join(lines)


if TYPE_CHECKING:
    # its fields are made from OPTIONS at import time, which a static checker cannot follow
    DecodeOptions = Any
else:
    DecodeOptions = dataclasses.make_dataclass(
        "DecodeOptions", [("decoder", str, dataclasses.field(default="greedy"))]
        + [(o.name, Any, dataclasses.field(default=o.default)) for o in OPTIONS],
        bases=(_OptionsBase,), frozen=True)
    DecodeOptions.__module__ = __name__
    DecodeOptions.__doc__ = _docstring()


def check_types(options: Mapping[str, Any]) -> None:
    """Named errors for unknown keys and ill-typed values of ``{option: value}`` (Python callers)."""
    for key, value in options.items():
        if key not in OPTION:
            raise DecodingInputError(f"decoder_options: unknown key {key!r}; known: {sorted(OPTION)}")
        o = OPTION[key]
        if value is None and o.optional:
            continue
        types = _PY_TYPES[o.kind]
        if isinstance(value, bool) or not isinstance(value, types):
            raise DecodingInputError(f"decoder_options[{key!r}] (the CLI's {o.flag}) must be "
                                     f"{' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")


# -------------------------------------------------------------------------------------- resolution
def check_options(kind: str, options: Any) -> Decoder:
    """Check that every option set in ``options`` (differing from its default) applies to its decoder
    for a ``kind`` model and has what it requires; returns the decoder."""
    if not isinstance(options, _OptionsBase):  # DecodeOptions is its only subclass
        raise DecodingInputError(f"options must be DecodeOptions, got {type(options).__name__}")
    dec = decoder_for(options.decoder, kind)
    for o in OPTIONS:
        if getattr(options, o.name) != o.default:
            _check_applies(o, dec, kind, options)
    return dec


def _check_applies(o: Option, dec: Decoder, kind: str, options: Any) -> None:
    if o.name not in dec.options:
        takers = [d.name for d in DECODERS if o.name in d.options and kind in d.kinds]
        where = (f"it is an option of --decoder {' / '.join(dict.fromkeys(takers))}" if takers
                 else f"no decoder of a {kind} model takes it")
        takes = ", ".join(OPTION[n].flag for n in dec.options) or "no options"
        raise DecodingInputError(f"{o.flag} does not apply to --decoder {dec.name} of a {kind} model ({where}; "
                                 f"--decoder {dec.name} takes {takes})")
    need = o.requires(options) if o.requires is not None else None
    if need is not None:
        raise DecodingInputError(f"{o.flag} needs {need} (it is not applied without it)")


def bundle_defaults(bundle: Any) -> dict[str, Any]:
    """``bundle``'s ``decode_defaults`` (``{}`` for none), unknown keys a named error."""
    tuned = dict(getattr(bundle, "decode_defaults", None) or {})
    unknown = sorted(set(tuned) - set(OPTION) - {"decoder"})
    if unknown:
        raise DecodingInputError(f"{getattr(bundle, 'name', 'bundle')}.decode_defaults: unknown option(s) {unknown}")
    return tuned


def resolve_options(bundle: Any, given: Optional[Mapping[str, Any]] = None, *, kind: Optional[str] = None) -> Any:
    """The :class:`DecodeOptions` every entry point decodes ``bundle`` with.

    Args:
        bundle: a :class:`~asrdecode.models.ModelBundle` (its ``kind`` and ``decode_defaults``), or
            ``None`` (no tuned defaults; ``kind`` then says the model kind, default ``"ctc"``).
        given: the user's ``{option: value}`` (``"decoder"`` included); ``None`` values are not given.

    Returns the user's values, then the bundle's tuned ``decode_defaults`` where they apply to the
    chosen decoder and have what they need, then the registry's defaults.

    Raises:
        DecodingInputError: an unknown option, a bad value, a decoder that does not fit the model, or
            a given option that the decoder does not take or that lacks its requirement.
    """
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(OPTION) - {"decoder"})
    if unknown:
        raise DecodingInputError(f"unknown option {unknown[0]!r}; the options are {sorted(OPTION)}")
    if "boost" in given and not given["boost"]:
        del given["boost"]
    decoder = given.pop("decoder", None)
    tuned = bundle_defaults(bundle)
    kind = kind or (getattr(bundle, "kind", None) if bundle is not None else None) or "ctc"
    name = decoder or tuned.pop("decoder", None) or "greedy"
    tuned.pop("decoder", None)
    dec = decoder_for(name, kind)
    for key in given:  # a given option the decoder does not take, then the given values
        if key not in dec.options:
            _check_applies(OPTION[key], dec, kind, None)
    DecodeOptions(decoder=name, **given)
    keep = {k: v for k, v in tuned.items() if k in dec.options and k not in given}
    compat = given.get("compat", keep.get("compat", OPTION["compat"].default))
    keep.update({k: v for k, v in COMPAT_DEFAULTS.get(compat, {}).items() if k in dec.options and k not in given})
    while True:  # drop the tuned values whose requirement is missing (until none is)
        opts = DecodeOptions(decoder=name, **given, **keep)
        unmet = [k for k in keep if (req := OPTION[k].requires) is not None and req(opts) is not None]
        if not unmet:
            break
        keep = {k: v for k, v in keep.items() if k not in unmet}
    for key in given:
        _check_applies(OPTION[key], dec, kind, opts)
    check_options(kind, opts)
    return opts
