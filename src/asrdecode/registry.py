"""The one registry of decoders: a list of searches, each (name, model kinds, config, decoder class).

:data:`DECODERS` lists each search once: its ``--decoder`` name, the model kinds it decodes, its
config (:mod:`asrdecode.configs`: every setting's default, help, bounds, flag and check), its decoder
class, the pipeline options around it (fusion, graph file, ``compat``, ``nbest``), its offline builder
and its search keyword arguments (:mod:`asrdecode.decoders`). From them come :data:`OPTIONS` (the
configs' ``cli`` fields: the CLI's decoding flags, the server's and Ray's keys), the ``--decoder``
choices, the checks of :class:`DecodeOptions` and :func:`resolve_options`: the one function that
applies a model bundle's ``decode_defaults``.

Resolution rules (:func:`resolve_options`): the user's values, then the bundle's
``decode_defaults``, then the defaults of the configs. A value the user gave that the decoder does not
take, or whose requirement is missing (``--beta`` without an LM), is an error naming both; a tuned
value of the bundle that does not apply (demo-ctc's LM-tuned ``beta`` when no LM is given, phone-ctc's
graph when another decoder is chosen) is dropped.

Adding an option to a search: one :func:`~asrdecode.configs.setting` field in its config (``cli=True``
for a decoding flag) and its use in the search; a decoding flag is also one typed
:class:`DecodeOptions` field (its default read from the config; ``tests/app/test_configs.py`` checks the two
agree). :mod:`asrdecode.decoders` passes the config's fields to the search by name.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping, Optional

from . import decoders as impl
from .configs import (COMPATS, ENGINES, KINDS, METHODS, TRANSDUCERS, BeamSetting, BetaSetting, BoostSetting,
                      CompatConfig, CTCBeamConfig, CTCGreedyConfig, EngineSetting, FusionConfig, GraphConfig,
                      MaxSymbolsSetting, NBestSetting, SearchConfig, Setting, SherpaBeamSetting, TransducerBeamConfig,
                      TransducerGreedyConfig, WFSTConfig, default_of)
from .ctc import CTCBeamDecoder, CTCGreedyDecoder
from .ctc.wfst import WFSTDecoder
from .errors import DecodingInputError, check_int, check_number
from .transducer import BeamSearchDecoder, GreedyDecoder

__all__ = ["Option", "Search", "OPTIONS", "OPTION", "DECODERS", "KINDS", "TRANSDUCERS", "METHODS", "ENGINES",
           "COMPATS", "COMPAT_DEFAULTS", "DecodeOptions", "decoder_names", "decoder_for", "options_for",
           "resolve_options", "check_options", "check_types"]

#: each ``compat`` preset's defaults where they differ from ours (a given option still wins): sherpa-onnx's
#: beam searches keep 4 paths by default (its ``max_active_paths``), ours 8
COMPAT_DEFAULTS: dict[str, dict[str, Any]] = {"none": {}, "sherpa": {"beam": default_of(SherpaBeamSetting, "beam")}}

#: value kinds of an option: their Python types as :meth:`DecodeOptions.from_mapping` accepts them
_PY_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,),
                                          "path": (str, os.PathLike), "phrases": (list, tuple)}


def option_name(name: str, s: Setting) -> str:
    """The registry name of config field ``name`` (its flag without ``--``, dashes as underscores)."""
    return s.flag[2:].replace("-", "_") if s.flag else name


@dataclass(frozen=True)
class Search:
    """One search for some model kinds.

    Attributes:
        name: the ``--decoder`` name.
        kinds: the model kinds it decodes.
        config: its :class:`~asrdecode.configs.SearchConfig` class (the search's settings).
        decoder: its decoder class (made with ``config=``; streams through ``init_state`` / ``advance``).
        extras: the pipeline's option configs it takes too (fusion models, graph file, compat preset, nbest).
        search_kwargs: ``(bundle, options) -> {keyword: value}`` of its search (LMs, graph loaded);
            the offline builder and the streaming family both call the search with them.
        build: ``(bundle, options) -> decode_nbest(x, lengths) -> [[Hypothesis]]`` (offline).
        help: one line.
    """

    name: str
    kinds: tuple[str, ...]
    config: type[SearchConfig]
    decoder: type
    extras: tuple[type[SearchConfig], ...]
    search_kwargs: Callable[[Any, Any], dict[str, Any]]
    build: Callable[[Any, Any], Callable]
    help: str
    #: option name -> (config field name, its Setting), for the configs' ``cli`` fields
    settings: dict[str, tuple[str, Setting]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        found: dict[str, tuple[str, Setting]] = {}
        for cfg in (self.config, *self.extras):
            for n, s, _ in cfg.settings():
                if s.cli:
                    found.setdefault(option_name(n, s), (n, s))
        object.__setattr__(self, "settings", found)

    @property
    def options(self) -> tuple[str, ...]:
        """The registry options it takes, in :data:`OPTIONS` order."""
        return tuple(o.name for o in OPTIONS if o.name in self.settings)

    def setting(self, option: str) -> Setting:
        """The :class:`~asrdecode.configs.Setting` of ``option`` in this search."""
        return self.settings[option][1]

    def takes(self, config: type[SearchConfig]) -> bool:
        """Whether the search takes ``config``'s options (its own config, or one of its extras)."""
        return config is self.config or config in self.extras

    @property
    def word_boosts(self) -> bool:
        """``--boost`` boosts words of the search's output (WFST: boosting without fusion), not token phrases."""
        return BoostSetting in self.extras


#: every search; a (name, kind) pair is declared once
DECODERS: tuple[Search, ...] = (
    Search("greedy", ("ctc",), CTCGreedyConfig, CTCGreedyDecoder, (), impl.no_kwargs, impl.ctc_greedy,
           "argmax + collapse"),
    Search("greedy", TRANSDUCERS, TransducerGreedyConfig, GreedyDecoder, (CompatConfig,),
           impl.transducer_greedy_kwargs, impl.transducer_greedy, "label-looping greedy (WIND with --window)"),
    Search("beam", ("ctc",), CTCBeamConfig, CTCBeamDecoder, (FusionConfig,), impl.ctc_beam_kwargs, impl.ctc_beam,
           "batched prefix beam search, LM fusion and boosting"),
    Search("beam", TRANSDUCERS, TransducerBeamConfig, BeamSearchDecoder, (FusionConfig, CompatConfig),
           impl.transducer_beam_kwargs, impl.transducer_beam, "ALSD++ / AES++ / WIND beam search"),
    Search("wfst", ("ctc",), WFSTConfig, WFSTDecoder, (GraphConfig, BoostSetting, NBestSetting), impl.wfst_kwargs,
           impl.wfst, "token passing over a TLG graph"),
)


def search_for(decoder_cls: type) -> tuple[Search, ...]:
    """The searches whose decoder class is ``decoder_cls``."""
    return tuple(d for d in DECODERS if d.decoder is decoder_cls)


def decoder_names(kinds: Iterable[str] = KINDS) -> tuple[str, ...]:
    """The decoder names for any of ``kinds``, in declaration order."""
    kinds = tuple(kinds)
    return tuple(dict.fromkeys(d.name for d in DECODERS if set(d.kinds) & set(kinds)))


def decoder_for(name: str, kind: str) -> Search:
    """The :class:`Search` ``name`` of a ``kind`` model; a named error if it does not apply."""
    for d in DECODERS:
        if d.name == name and kind in d.kinds:
            return d
    if name not in decoder_names():
        raise DecodingInputError(f"decoder must be one of {list(decoder_names())}, got {name!r}")
    hint = " (use a CTC model such as demo-ctc)" if name == "wfst" else ""
    raise DecodingInputError(f"--decoder {name} does not apply to a {kind} model: choose one of "
                             f"{list(decoder_names([kind]))}{hint}")


# ------------------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class Option:
    """One decoding option: the registry's view of the config fields that it names (one, or several with
    the same flag, e.g. ``--window`` of transducer greedy and of the WIND beam search).

    Attributes:
        name: the :class:`DecodeOptions` field.
        flag: the CLI flag.
        default: the :class:`DecodeOptions` default: the configs' default, or ``None`` ("the search's own")
            when the configs that take it differ.
        setting: the :class:`~asrdecode.configs.Setting` (help, kind, bounds, check, ...) of the first config
            that declares it.
        help: one line for ``--help`` (the searches' own defaults named where they differ).
    """

    name: str
    flag: str
    default: Any
    setting: Setting
    help: str

    kind = property(lambda self: self.setting.kind)
    choices = property(lambda self: self.setting.choices)
    metavar = property(lambda self: self.setting.metavar)
    tuned = property(lambda self: self.setting.tuned)
    cpu_only = property(lambda self: self.setting.cpu_only)
    requires = property(lambda self: self.setting.requires)
    optional = property(lambda self: self.setting.optional or self.default is None)

    def check(self, value: Any) -> Any:
        """``value`` checked against the field's kind and bounds (an error naming the flag), then by the
        config field's own check (an error naming the option, as the search would); normalised (paths to
        ``str``, phrases to a tuple)."""
        if value is None and self.optional:
            return None
        s = self.setting
        if s.kind == "int":  # an int is > low exactly when it is >= floor(low) + 1
            low = None if s.low is None else math.floor(s.low) + 1 if s.low_open else math.ceil(s.low)
            check_int(self.flag, value, low=low, optional=s.optional)
        elif s.kind == "float":
            check_number(self.flag, value, low=s.low, low_open=s.low_open, optional=s.optional)
        else:  # choices, paths, phrases: the field's check, naming the flag
            return s.validate(self.flag, value)
        return s.validate(self.name, value)  # a number's own check (caps, |weight|) names it as the library does


def _options() -> tuple[Option, ...]:
    """Every option some search takes, in :class:`DecodeOptions` field order."""
    seen: dict[str, list[tuple[Setting, Any, str]]] = {}
    for d in DECODERS:
        for cfg in (d.config, *d.extras):
            for n, s, default in cfg.settings():
                if s.cli:
                    seen.setdefault(option_name(n, s), []).append((s, default, d.name))
    out = []
    for name in (f.name for f in dataclasses.fields(DecodeOptions) if f.name != "decoder"):
        takes = seen.pop(name)
        defaults = {repr(d): d for _, d, _ in takes}
        s = takes[0][0]
        if len(defaults) == 1:
            out.append(Option(name, s.flag or "--" + name.replace("_", "-"), takes[0][1], s, s.help))
        else:
            own = ", ".join(dict.fromkeys(f"{dec}: {d!r}" for _, d, dec in takes))
            out.append(Option(name, s.flag or "--" + name.replace("_", "-"), None, s,
                              f"{' / '.join(dict.fromkeys(t[0].help for t in takes))} (default {own})"))
    if seen:
        raise RuntimeError(f"DecodeOptions has no field for the option(s) {sorted(seen)}")
    return tuple(out)


def options_for(kinds: Iterable[str] = KINDS) -> tuple[Option, ...]:
    """The options some decoder of ``kinds`` takes, in :data:`OPTIONS` order (the CLI's flags)."""
    kinds = tuple(kinds)
    used = {n for d in DECODERS if set(d.kinds) & set(kinds) for n in d.settings}
    return tuple(o for o in OPTIONS if o.name in used)


# ----------------------------------------------------------------------------------- DecodeOptions
@dataclass(frozen=True)
class DecodeOptions:
    """Every decoding choice of the pipeline: the decoder and one field per :data:`OPTIONS` entry (the
    searches' ``cli`` config fields; the defaults are read from the configs, where each is written once,
    with each option's help; ``window``'s ``None`` is each search's own: greedy 1, WIND beam 8).

    Made by :func:`resolve_options` (the bundle's tuned defaults applied) or directly; every field is
    checked as its config checks it, the error naming the CLI flag.
    """

    decoder: str = "greedy"
    beam: int = default_of(BeamSetting, "beam")
    method: str = default_of(TransducerBeamConfig, "method")
    window: Optional[int] = None
    expansion_gamma: Optional[float] = default_of(TransducerBeamConfig, "expansion_gamma")
    max_symbols: Optional[int] = default_of(MaxSymbolsSetting, "max_symbols")
    lm: Optional[str] = default_of(FusionConfig, "lm")
    lm_weight: float = default_of(FusionConfig, "lm_weight")
    beta: float = default_of(BetaSetting, "beta")
    word_lm: Optional[str] = default_of(FusionConfig, "word_lm")
    word_lm_weight: float = default_of(FusionConfig, "word_lm_weight")
    word_bonus: float = default_of(FusionConfig, "word_bonus")
    boost: tuple[str, ...] = default_of(BoostSetting, "boost")
    graph: Optional[str] = default_of(GraphConfig, "graph")
    acoustic_scale: float = default_of(WFSTConfig, "acoustic_scale")
    wfst_beam: float = default_of(WFSTConfig, "beam")
    max_active: int = default_of(WFSTConfig, "max_active")
    min_active: int = default_of(WFSTConfig, "min_active")
    engine: str = default_of(EngineSetting, "engine")
    compat: str = default_of(CompatConfig, "compat")
    nbest: int = default_of(NBestSetting, "nbest")

    #: field -> the CLI flag that sets it (used in error messages)
    FLAGS: ClassVar[dict[str, str]] = {"decoder": "--decoder"}
    #: options whose LM / boosting / graph tensors are built on the CPU
    CPU_ONLY: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.decoder not in decoder_names():
            raise DecodingInputError(f"decoder must be one of {list(decoder_names())}, got {self.decoder!r}")
        for o in OPTIONS:
            object.__setattr__(self, o.name, o.check(getattr(self, o.name)))

    @classmethod
    def from_mapping(cls, decoder: str = "greedy", options: Optional[Mapping[str, Any]] = None) -> "DecodeOptions":
        """Options from ``{field: value}`` (the CLI's flags as keys); unknown keys and wrong types are errors."""
        opts = dict(options or {})
        check_types(opts)
        return cls(decoder=decoder, **opts)

    @classmethod
    def for_bundle(cls, bundle: Any, **given: Any) -> "DecodeOptions":
        """:func:`resolve_options` of ``bundle`` with ``given`` (``None`` values count as not given)."""
        return resolve_options(bundle, given)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults (JSON-ready; what a run records)."""
        return {o.name: (list(v) if isinstance(v, tuple) else v) for o in OPTIONS
                if (v := getattr(self, o.name)) != o.default}

    def with_(self, **changes: Any) -> "DecodeOptions":
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def settings(self, config: type[SearchConfig], skip: Iterable[str] = ()) -> dict[str, Any]:
        """The keyword arguments of ``config``'s ``cli`` fields from these options (by field name: ``wfst_beam``
        is WFST's ``beam``); an option left ``None`` whose field has a default of its own (``window``) gets it."""
        out = {}
        for n, s, default in config.settings():
            if s.cli and n not in skip:
                v = getattr(self, option_name(n, s))
                out[n] = default if v is None and OPTION[option_name(n, s)].default is None else v
        return out


#: every decoding option, in ``--help`` order
OPTIONS: tuple[Option, ...] = _options()
OPTION = {o.name: o for o in OPTIONS}
DecodeOptions.FLAGS.update({o.name: o.flag for o in OPTIONS})
DecodeOptions.CPU_ONLY = tuple(o.name for o in OPTIONS if o.cpu_only)


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
def check_options(kind: str, options: Any) -> Search:
    """Check that every option set in ``options`` (differing from its default) applies to its decoder
    for a ``kind`` model and has what it requires; returns the decoder."""
    if not isinstance(options, DecodeOptions):
        raise DecodingInputError(f"options must be DecodeOptions, got {type(options).__name__}")
    dec = decoder_for(options.decoder, kind)
    for o in OPTIONS:
        if getattr(options, o.name) != o.default:
            _check_applies(o, dec, kind, options)
    return dec


def _check_applies(o: Option, dec: Search, kind: str, options: Any) -> None:
    if o.name not in dec.options:
        takers = [d.name for d in DECODERS if o.name in d.options and kind in d.kinds]
        where = (f"it is an option of --decoder {' / '.join(dict.fromkeys(takers))}" if takers
                 else f"no decoder of a {kind} model takes it")
        takes = ", ".join(OPTION[n].flag for n in dec.options) or "no options"
        raise DecodingInputError(f"{o.flag} does not apply to --decoder {dec.name} of a {kind} model ({where}; "
                                 f"--decoder {dec.name} takes {takes})")
    requires = dec.setting(o.name).requires
    need = requires(options) if requires is not None else None
    if need is not None:
        raise DecodingInputError(f"{o.flag} needs {need} (it is not applied without it)")


def bundle_defaults(bundle: Any) -> dict[str, Any]:
    """``bundle``'s ``decode_defaults`` (``{}`` for none), unknown keys a named error."""
    tuned = dict(getattr(bundle, "decode_defaults", None) or {})
    unknown = sorted(set(tuned) - set(OPTION) - {"decoder"})
    if unknown:
        raise DecodingInputError(f"{getattr(bundle, 'name', 'bundle')}.decode_defaults: unknown option(s) {unknown}")
    return tuned


def resolve_options(bundle: Any, given: Optional[Mapping[str, Any]] = None, *,
                    kind: Optional[str] = None) -> DecodeOptions:
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
    # a preset's defaults replace ours, not the user's values nor the bundle's tuned ones
    keep.update({k: v for k, v in COMPAT_DEFAULTS.get(compat, {}).items()
                 if k in dec.options and k not in given and k not in keep})
    while True:  # drop the tuned values whose requirement is missing (until none is)
        opts = DecodeOptions(decoder=name, **given, **keep)
        unmet = [k for k in keep if (req := dec.setting(k).requires) is not None and req(opts) is not None]
        if not unmet:
            break
        keep = {k: v for k, v in keep.items() if k not in unmet}
    for key in given:
        _check_applies(OPTION[key], dec, kind, opts)
    check_options(kind, opts)
    return opts
