"""One frozen config per search: each setting's default, help, bounds, CLI flag and check, written once.

A search's settings are the fields of its config (:class:`CTCBeamConfig`, :class:`WFSTConfig`,
:class:`TransducerGreedyConfig`, :class:`TransducerBeamConfig`, :class:`CTCGreedyConfig`); the
pipeline's own options (LMs and boosting to fuse, the WFST graph file, the sherpa-onnx preset) are
:class:`FusionConfig`, :class:`GraphConfig` and :class:`CompatConfig`. Settings that several
searches share (``beam``, ``nbest``, ``max_symbols``, ``engine``, ``beta``) are declared once, in a
small base config that those searches' configs extend.

Every field is made by :func:`setting`, whose metadata holds its help line, bounds (``low`` /
``high``), choices, CLI flag (``cli=True``; ``flag=`` when the flag is not ``--field-name``) and
the registry's rules (``requires``: what the option needs; ``cpu_only``; ``tuned``). A config
checks every field when made (:meth:`SearchConfig.__post_init__`), so a bad value is a named
:class:`~asrdecode.errors.DecodingInputError` whichever door it came through.

The decoder classes and one-shot functions take ``config=`` and / or the fields as keywords
(:meth:`SearchConfig.build`); :func:`takes_config` writes those keywords, with the config's
defaults, into their signature. The registry (:mod:`asrdecode.registry`) derives the CLI's,
server's and Ray's options from the ``cli`` fields. Adding a setting to a search: one
:func:`setting` field here, plus its use in the search.

This module is one module for every search (not one per search) because the registry, the CLI and
the tests walk all of them, shared settings are declared once in a base config, and it imports
nothing but :mod:`asrdecode.errors`, so every search module can import it without a circle.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterator, Mapping, Optional, TypeVar, Union

from .errors import DecodingInputError, check_int, check_number, check_weight

__all__ = [
    "setting", "SearchConfig", "Setting", "UnknownSettingError", "takes_config",
    "EngineSetting", "AccelerationSetting", "BeamSetting", "NBestSetting", "BetaSetting", "MaxSymbolsSetting", "BoostSetting",
    "CTCGreedyConfig", "CTCBeamConfig", "WFSTConfig", "TransducerGreedyConfig", "TransducerBeamConfig",
    "SherpaBeamSetting", "SherpaModifiedBeamConfig", "SherpaNemoBeamConfig", "MAX_SHERPA_BEAM",
    "FusionConfig", "GraphConfig", "CompatConfig", "SEARCH_CONFIGS", "PIPELINE_CONFIGS",
    "KINDS", "TRANSDUCERS", "ENGINES", "METHODS", "COMPATS", "MAX_BEAM", "MAX_SYMBOLS_CEILING", "MAX_WINDOW",
]

#: the model kinds
KINDS = ("ctc", "rnnt", "tdt")
TRANSDUCERS = ("rnnt", "tdt")
#: the search engines (:mod:`asrdecode.native.choice` resolves them)
ENGINES = ("auto", "native", "torch")
#: transducer beam search methods
METHODS = ("alsd", "aes", "wind")
#: ``compat`` presets: our own decoding, or sherpa-onnx's (``models/sherpa_compat.py``)
COMPATS = ("none", "sherpa")
# The CTC prefix beam search scores beam * V candidates per frame and sorts and merges them, so
# time and memory grow with the beam: at 4096 (V = 257, one CPU thread) a frame takes ~0.1 s and
# a step's candidate tensors ~100 MB per utterance. Wider beams are refused with a clear error
# instead of running for minutes into an allocator failure (transducer beams are capped by the vocabulary).
MAX_BEAM = 4096
#: the largest max_symbols accepted: more labels on one frame than any model emits (a frame is
#: 10-80 ms); 10**9 would let a model that never emits blank run for hours
MAX_SYMBOLS_CEILING = 1_000
#: the widest WIND window (frames evaluated at once per hypothesis): its tensors grow with it
MAX_WINDOW = 1_024

Check = Callable[[str, Any], Any]
Requires = Callable[[Any], Optional[str]]


class UnknownSettingError(DecodingInputError, TypeError):
    """A keyword that is no setting of the search (a ``TypeError`` too, as for any unexpected keyword)."""


# ------------------------------------------------------------------------------------------ checks
def check_count(name: str, value: object, high: Optional[int] = None, why: str = "") -> int:
    """An integer ``>= 1`` (Python or numpy, not bool), ``<= high`` when given; returned as an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DecodingInputError(f"{name} must be an int >= 1, got {value!r}")
    if int(value) < 1:
        raise DecodingInputError(f"{name} must be >= 1, got {value}")
    if high is not None and int(value) > high:
        raise DecodingInputError(f"{name} must be <= {high}{why}, got {value}")
    return int(value)


def check_real(name: str, value: object, *, low: Optional[float] = None, low_open: bool = False,
               allow_inf: bool = False) -> float:
    """A real number (a numeric string too, as ``float()`` reads it), finite unless ``allow_inf``, with
    ``value >= low`` (``> low`` with ``low_open``); returned as a float."""
    if isinstance(value, bool):
        raise DecodingInputError(f"{name} must be a number, got {value!r}")
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise DecodingInputError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise DecodingInputError(f"{name} must be finite, got {v}")
    if low is not None and not (v > low if low_open else v >= low):
        raise DecodingInputError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {v}")
    return v


def _positive_or_inf(name: str, value: object) -> float:
    """A number ``> 0``, ``inf`` included (a beam that prunes nothing)."""
    return check_real(name, value, low=0, low_open=True, allow_inf=True)


def _check_beta(name: str, value: object) -> float:
    """An insertion bonus: a real number with ``|value| <= MAX_ABS_WEIGHT``."""
    if not isinstance(value, (numbers.Real,)) or isinstance(value, bool):
        raise DecodingInputError(f"{name} must be a finite number, got {value!r}")
    return check_weight(name, value)


def _check_max_symbols(name: str, value: object) -> Optional[int]:
    """The per-frame symbol cap: an int in ``1..MAX_SYMBOLS_CEILING``, or None (no cap)."""
    checked = check_int(name, value, low=1, optional=True)
    if checked is not None and checked > MAX_SYMBOLS_CEILING:
        raise DecodingInputError(f"{name} must be <= {MAX_SYMBOLS_CEILING} (labels on one frame), got {checked}")
    return checked


def _check_window(name: str, value: object) -> int:
    """A WIND window: an int in ``1..MAX_WINDOW``."""
    size = check_int(name, value, low=1)
    if size > MAX_WINDOW:
        raise DecodingInputError(f"{name} must be <= {MAX_WINDOW} frames, got {size}")
    return size


def _check_gamma(name: str, value: object) -> Optional[float]:
    """WIND's expansion threshold: None (off) or a finite number >= 0."""
    return None if value is None else float(check_number(name, value, low=0))


def _check_phrases(name: str, value: object) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value or ())  # type: ignore[arg-type]
    if not all(isinstance(b, str) for b in items):
        raise DecodingInputError(f"{name} must be a list of 'PHRASE:WEIGHT' strings, got {value!r}")
    return items


def _check_path(name: str, value: object) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise DecodingInputError(f"{name} must be a path, got {type(value).__name__}")


# ----------------------------------------------------------------------------------------- setting
@dataclass(frozen=True)
class Setting:
    """What :func:`setting` records of a field (its ``metadata["setting"]``); see :func:`setting`."""

    help: str
    kind: str
    low: Optional[float] = None
    low_open: bool = False
    high: Optional[float] = None
    choices: Optional[tuple[str, ...]] = None
    optional: bool = False
    cli: bool = False
    flag: Optional[str] = None
    metavar: Optional[str] = None
    requires: Optional[Requires] = None
    cpu_only: bool = False
    tuned: bool = False
    check: Optional[Check] = None

    def validate(self, name: str, value: Any) -> Any:
        """``value`` checked (and normalised: numpy ints to int, paths to str, phrases to a tuple)."""
        if value is None and self.optional:
            return None
        if self.check is not None:
            return self.check(name, value)
        if self.choices is not None:
            if value not in self.choices:
                raise DecodingInputError(f"{name} must be one of {', '.join(map(repr, self.choices))}, got {value!r}")
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise DecodingInputError(f"{name} must be True or False, got {value!r}")
            return value
        if self.kind == "int":
            return check_int(name, value if not isinstance(value, numbers.Integral) or isinstance(value, bool)
                             else int(value), low=None if self.low is None else math.ceil(self.low),
                             high=None if self.high is None else math.floor(self.high))
        if self.kind == "float":
            return check_real(name, value, low=self.low, low_open=self.low_open)
        return value


def setting(default: Any, help: str, *, kind: Optional[str] = None, low: Optional[float] = None,
            low_open: bool = False, high: Optional[float] = None, choices: Optional[tuple[str, ...]] = None,
            optional: Optional[bool] = None, cli: bool = False, flag: Optional[str] = None,
            metavar: Optional[str] = None, requires: Optional[Requires] = None, cpu_only: bool = False,
            tuned: bool = False, check: Optional[Check] = None) -> Any:
    """A config field: its ``default`` and, once, everything else about it.

    Args:
        default: the value when nobody sets it.
        help: one line for ``--help`` and the docs.
        kind: ``"int"``, ``"float"``, ``"str"``, ``"bool"``, ``"path"``, ``"phrases"`` or ``"any"``
            (default: from the default's type; ``"str"`` with ``choices``).
        low, low_open, high: bounds (``value >= low``, ``> low`` with ``low_open``, ``<= high``).
        choices: the accepted strings.
        optional: ``None`` is a valid value (default: when the default is ``None``).
        cli: a decoding option of the CLI, server and Ray (the registry's); else library-only.
        flag: the CLI flag when it is not ``--field-name`` (``--wfst-beam`` for WFST's ``beam``).
        metavar: the CLI's metavar.
        requires: ``requires(options) -> None`` when the option may be set, else what it needs.
        cpu_only: its tensors (LM, graph, boosting tree) are built on the CPU.
        tuned: bundles tune it (``decode_defaults``); ``--help`` says so.
        check: ``check(name, value) -> value`` when the bounds above do not say it all.
    """
    if kind is None:
        kind = ("str" if choices else "bool" if isinstance(default, bool) else "int" if isinstance(default, int)
                else "float" if isinstance(default, float) else "any")
    meta = Setting(help=help, kind=kind, low=low, low_open=low_open, high=high, choices=choices,
                   optional=default is None if optional is None else optional, cli=cli, flag=flag, metavar=metavar,
                   requires=requires, cpu_only=cpu_only, tuned=tuned, check=check)
    return field(default=default, metadata={"setting": meta})


C = TypeVar("C", bound="SearchConfig")


@dataclass(frozen=True)
class SearchConfig:
    """Base of every config: checks each field when made; :meth:`build` from keywords."""

    #: the search it configures (for messages)
    what: ClassVar[str] = "the search"

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, spec(f).validate(f.name, getattr(self, f.name)))

    @classmethod
    def settings(cls) -> Iterator[tuple[str, Setting, Any]]:
        """``(field name, Setting, default)`` of every field, in declaration order."""
        for f in fields(cls):
            yield f.name, spec(f), f.default

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def build(cls: type[C], config: Optional[C] = None, settings: Optional[Mapping[str, Any]] = None,
              *, caller: str = "") -> C:
        """``config`` (default: the defaults) with ``settings`` (field keywords) replaced, checked.

        Raises:
            UnknownSettingError: a keyword that is not a field.
            DecodingInputError: ``config`` of another type, or a bad value.
        """
        settings = dict(settings or {})
        unknown = sorted(set(settings) - set(cls.names()))
        if unknown:
            where = f"{caller}() " if caller else ""
            raise UnknownSettingError(f"{where}got unknown setting(s) {unknown}; the settings of {cls.what} are "
                                      f"{list(cls.names())} ({cls.__name__})")
        if config is None:
            return cls(**settings)
        if not isinstance(config, cls):
            raise DecodingInputError(f"config must be a {cls.__name__}, got {type(config).__name__}")
        return dataclasses.replace(config, **settings) if settings else config

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults."""
        return {n: getattr(self, n) for n, _, d in self.settings() if getattr(self, n) != d}


def default_of(config_cls: type[SearchConfig], name: str) -> Any:
    """The default of ``config_cls``'s field ``name``."""
    return next(d for n, _, d in config_cls.settings() if n == name)


def check_setting(config_cls: type[SearchConfig], name: str, value: Any) -> Any:
    """``value`` checked as ``config_cls``'s field ``name`` is (the check of its :func:`setting`)."""
    return next(s for n, s, _ in config_cls.settings() if n == name).validate(name, value)


def spec(f: dataclasses.Field) -> Setting:
    """The :class:`Setting` of a config field."""
    return f.metadata["setting"]


T = TypeVar("T")


def takes_config(config_cls: type[SearchConfig]) -> Callable[[T], T]:
    """Decorate a function or class taking ``config=None, **settings``: its signature (``help()``,
    ``inspect.signature``) lists ``config_cls``'s fields as keyword-only parameters with their defaults
    in place of ``**settings``."""
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d) for n, _, d in config_cls.settings()]

    def wrap(obj: T) -> T:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
        params = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in params}
        obj.__signature__ = sig.replace(parameters=params + [p for p in extra if p.name not in taken])  # type: ignore[attr-defined]
        return obj

    return wrap


# ------------------------------------------------------------------------------- shared settings
def _needs_lm(o: Any) -> Optional[str]:
    return None if (o.lm or o.word_lm) else "--lm or --word-lm"


def _needs_token_lm(o: Any) -> Optional[str]:
    return None if o.lm else "--lm"


def _needs_word_lm(o: Any) -> Optional[str]:
    return None if o.word_lm else "--word-lm"


def _needs_wind(o: Any) -> Optional[str]:
    return None if o.method == "wind" else "--method wind"


@dataclass(frozen=True)
class EngineSetting(SearchConfig):
    engine: str = setting("auto", "search engine: native (C++, CPU), torch (tensors), auto (native on CPU when "
                          "built)", choices=ENGINES, cli=True)


# ------------------------------------------------------------- the sherpa-onnx searches' beam
#: the most hypotheses the sherpa-onnx searches keep (sherpa-onnx's default is 4): every frame ranks
#: beam x vocabulary candidates, so beam=10**6 would run for hours and allocate gigabytes
MAX_SHERPA_BEAM = 1024


@dataclass(frozen=True)
class SherpaBeamSetting(EngineSetting):
    beam: int = setting(4, "hypotheses kept (sherpa-onnx's max_active_paths)", low=1, high=MAX_SHERPA_BEAM,
                        check=lambda n, v: check_int(n, v, low=1, high=MAX_SHERPA_BEAM))


@dataclass(frozen=True)
class BeamSetting(SearchConfig):
    beam: int = setting(8, f"hypotheses kept by the beam search (with --compat sherpa: "
                        f"{default_of(SherpaBeamSetting, 'beam')}, sherpa-onnx's)", low=1,
                        cli=True, check=check_count)


@dataclass(frozen=True)
class BetaSetting(SearchConfig):
    beta: float = setting(0.0, "per-token bonus with an LM", requires=_needs_lm, tuned=True, cli=True,
                          check=_check_beta)


@dataclass(frozen=True)
class NBestSetting(SearchConfig):
    nbest: int = setting(1, "hypotheses per utterance in the output (transcribe --format json, eval -o)", low=1,
                         cli=True, check=check_count)


@dataclass(frozen=True)
class MaxSymbolsSetting(SearchConfig):
    max_symbols: Optional[int] = setting(10, "transducers: at most this many labels per frame, then time "
                                         "advances (Python: None, no cap)", low=1, high=MAX_SYMBOLS_CEILING, kind="int",
                                         optional=True, cli=True, check=_check_max_symbols)


@dataclass(frozen=True)
class AccelerationSetting(SearchConfig):
    acceleration: Optional[str] = setting(None, "eager, compile (torch.compile of the step), cuda_graphs (the step "
                                          "captured once and replayed), or None / auto (CUDA graphs on a GPU); "
                                          "checked against the device at each call (accel.resolve_mode)", kind="str")


@dataclass(frozen=True)
class BoostSetting(SearchConfig):
    boost: tuple[str, ...] = setting((), "boost a phrase by WEIGHT per token (repeatable); with --decoder wfst, a "
                                     "word by WEIGHT", kind="phrases", cpu_only=True, metavar='"PHRASE:WEIGHT"',
                                     cli=True, check=_check_phrases)


# ---------------------------------------------------------------------------------------- searches
@dataclass(frozen=True)
class CTCGreedyConfig(SearchConfig):
    """CTC best-path decoding (:class:`~asrdecode.ctc.CTCGreedyDecoder`): it has no settings."""

    what: ClassVar[str] = "CTC greedy decoding"


CollapseSetting = Union[None, float, str]


def _check_collapse(name: str, value: object) -> CollapseSetting:
    if value is None or value == "weak":
        return value
    if isinstance(value, str) or isinstance(value, bool):
        raise DecodingInputError(f"{name} must be None, 'weak' or a threshold in (0, 1), got {value!r}")
    v = check_real(name, value)
    if not 0.0 < v < 1.0:
        raise DecodingInputError(f"{name} must be None, 'weak' or a threshold in (0, 1), got {value!r}")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class CTCBeamConfig(BeamSetting, BetaSetting, NBestSetting, AccelerationSetting, EngineSetting):
    """Batched CTC prefix beam search (:class:`~asrdecode.ctc.CTCBeamDecoder`, :func:`~asrdecode.ctc.beam_search`)."""

    what: ClassVar[str] = "the CTC prefix beam search"
    beam_threshold: float = setting(20.0, "candidates scoring more than this below the frame's best are pruned "
                                    "(inf: none)", low=0, low_open=True, check=_positive_or_inf)
    blank_collapse: CollapseSetting = setting(None, "None (off), a blank threshold in (0, 1) or 'weak': "
                                              "collapsible blank frames removed before the search", kind="any",
                                              check=_check_collapse)
    token_beam: Optional[int] = setting(None, "only the token_beam best non-blank tokens of a frame extend "
                                        "hypotheses (None: every token)", kind="int", check=check_count)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("beam", self.beam, MAX_BEAM, " (the CTC beam search's cost grows with beam * vocabulary)")
        if self.nbest > self.beam:
            raise DecodingInputError(f"nbest must be <= beam ({self.beam}), got {self.nbest}")


@dataclass(frozen=True)
class WFSTConfig(AccelerationSetting, EngineSetting):
    """Token passing over a TLG graph (:class:`~asrdecode.ctc.wfst.WFSTDecoder`)."""

    what: ClassVar[str] = "WFST decoding"
    beam: float = setting(17.0, "score beam of WFST decoding (natural log)", low=0, low_open=True, cli=True,
                          flag="--wfst-beam", check=_positive_or_inf)
    max_active: int = setting(10000, "most tokens per utterance and frame of WFST decoding", low=1, cli=True,
                              check=check_count)
    min_active: int = setting(0, "WFST decoding keeps at least this many tokens whatever the beam (kaldi's rule; "
                              "0: off)", low=0, cli=True)
    acoustic_scale: float = setting(1.0, "acoustic scale of WFST decoding (weight of the log-probs against the "
                                    "graph's scores)", low=0, low_open=True, cli=True, tuned=True,
                                    check=lambda n, v: check_weight(n, check_real(n, v, low=0, low_open=True)))
    lattice_beam: float = setting(8.0, "lattice / n-best recording keeps arcs within this of the best path",
                                  check=_positive_or_inf)
    dense_min_degree: int = setting(64, "states with at least this many emitting arcs get a dense token row",
                                    check=check_count)
    dense_memory_mb: float = setting(512.0, "memory cap of the dense token rows (MB)", low=0)
    loop: str = setting("auto", "the tensor engine's 1-best frame loop", choices=("auto", "fixed", "dynamic"))


@dataclass(frozen=True)
class TransducerGreedyConfig(MaxSymbolsSetting, AccelerationSetting, EngineSetting):
    """Greedy RNN-T / TDT decoding (:class:`~asrdecode.transducer.GreedyDecoder`, ``transducer.greedy``)."""

    what: ClassVar[str] = "transducer greedy decoding"
    window: int = setting(1, "WIND window of transducer greedy decoding (1: off)", low=1, high=MAX_WINDOW, cli=True,
                          check=_check_window)
    loop: str = setting("labels", "label-looping or the frame-looping baseline", choices=("labels", "frames"))
    precompute_projections: bool = setting(True, "project encoder output and labels once (paper 3.4)")


@dataclass(frozen=True)
class TransducerBeamConfig(BeamSetting, BetaSetting, NBestSetting, MaxSymbolsSetting, AccelerationSetting,
                           EngineSetting):
    """ALSD++ / AES++ / WIND beam search (:class:`~asrdecode.transducer.BeamSearchDecoder`, ``transducer.beam_search``)."""

    what: ClassVar[str] = "the transducer beam search"
    method: str = setting("alsd", "transducer beam search: ALSD++, AES++ or WIND beam search", choices=METHODS,
                          cli=True)
    window: int = setting(8, "WIND window of --method wind", low=1, high=MAX_WINDOW, cli=True, requires=_needs_wind,
                          check=_check_window)
    expansion_gamma: Optional[float] = setting(None, "--method wind: keep a hypothesis's expansions within GAMMA "
                                               "(log-score) of its best one (mAES's threshold: faster; default: "
                                               "off)", kind="float", low=0, requires=_needs_wind, metavar="GAMMA",
                                               cli=True, check=_check_gamma)
    blank_scoring: str = setting("lm_weighted", "lm_weighted (Eq. 3 of the ALSD++ paper) or none (Eq. 2)",
                                 choices=("lm_weighted", "none"))
    pruning: str = setting("late", "late (fuse the whole vocabulary, then select) or early", choices=("late", "early"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.expansion_gamma is not None and self.method != "wind":
            raise DecodingInputError("expansion_gamma is an option of method='wind' only")


# -------------------------------------------------------------------- sherpa-onnx's own searches
@dataclass(frozen=True)
class SherpaModifiedBeamConfig(SherpaBeamSetting):
    """sherpa-onnx's modified beam search of icefall models (:func:`~asrdecode.models.sherpa_search.modified_beam_search`)."""

    what: ClassVar[str] = "sherpa-onnx's modified beam search"
    length_norm: bool = setting(True, "the final choice by length-normalised score, as sherpa-onnx")


@dataclass(frozen=True)
class SherpaNemoBeamConfig(SherpaBeamSetting):
    """sherpa-onnx's NeMo modified beam search (:func:`~asrdecode.models.sherpa_nemo_search.nemo_beam_search`)."""

    what: ClassVar[str] = "sherpa-onnx's NeMo modified beam search"
    max_symbols: int = setting(10, "labels a hypothesis may emit on one frame (sherpa-onnx's NeMo search: 10)",
                               check=lambda n, v: check_int(n, v, low=1, high=MAX_SYMBOLS_CEILING))


# ---------------------------------------------------------------------------- pipeline options
@dataclass(frozen=True)
class FusionConfig(BoostSetting):
    """The models a beam search fuses (:func:`asrdecode.decoders.build_fusion` builds them)."""

    what: ClassVar[str] = "shallow fusion"
    lm: Optional[str] = setting(None, "token-level ARPA LM for shallow fusion (.arpa or .arpa.gz, e.g. from build-lm "
                                "--tokens)", kind="path", cpu_only=True, metavar="PATH", cli=True, check=_check_path)
    lm_weight: float = setting(0.7, "token LM weight", requires=_needs_token_lm, tuned=True, cli=True)
    word_lm: Optional[str] = setting(None, "word-level ARPA LM for shallow fusion (.arpa or .arpa.gz; KenLM "
                                     "binaries are not read)", kind="path", cpu_only=True, metavar="PATH", cli=True,
                                     check=_check_path)
    word_lm_weight: float = setting(0.5, "word LM weight", requires=_needs_word_lm, cli=True)
    word_bonus: float = setting(0.0, "per-word bonus with --word-lm", requires=_needs_word_lm, cli=True)


@dataclass(frozen=True)
class GraphConfig(SearchConfig):
    """The WFST decoder's graph file."""

    what: ClassVar[str] = "the WFST graph"
    graph: Optional[str] = setting(None, "TLG graph for --decoder wfst (from `asrdecode build-graph`)", kind="path",
                                   cpu_only=True, metavar="PATH", cli=True, check=_check_path)


@dataclass(frozen=True)
class CompatConfig(SearchConfig):
    """Decode as another toolkit does."""

    what: ClassVar[str] = "the compat preset"
    compat: str = setting("none", "transducers: sherpa = decode as sherpa-onnx does on its ONNX layouts (start "
                          "context, symbols per frame, <unk> as blank; beam: its modified beam search, icefall or "
                          "NeMo)", choices=COMPATS, cli=True)


#: every search's config
SEARCH_CONFIGS: tuple[type[SearchConfig], ...] = (CTCGreedyConfig, CTCBeamConfig, WFSTConfig,
                                                  TransducerGreedyConfig, TransducerBeamConfig,
                                                  SherpaModifiedBeamConfig, SherpaNemoBeamConfig)
#: the pipeline's own options around the searches
PIPELINE_CONFIGS: tuple[type[SearchConfig], ...] = (FusionConfig, GraphConfig, CompatConfig, BoostSetting,
                                                    NBestSetting)
