"""What each registry decoder runs: its search keyword arguments and its offline builder.

Each search of :data:`asrdecode.registry.DECODERS` names two functions here: ``*_kwargs(bundle,
options)``, the keyword arguments of its search (its config's options by field name,
:meth:`~asrdecode.registry.DecodeOptions.settings`, plus fusion models and graphs built from the option
values), which the streaming family receives as they are; and a builder ``(bundle, options) ->
decode_nbest(x [B, T, F], lengths [B]) -> [[Hypothesis]]`` (one list per utterance, best first) that
calls the same search on whole utterances. ``bundle`` needs ``kind``, ``model`` (``vocab_size``;
transducers: the :class:`~asrdecode.transducer.TransducerModel`), ``blank_id`` and ``tokenizer``.

Nothing here checks whether options fit: :func:`asrdecode.registry.check_options` did that.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence, cast

import torch

from .configs import CTCBeamConfig, SearchConfig, TransducerBeamConfig, TransducerGreedyConfig, WFSTConfig
from .errors import DecodingInputError, FileFormatError
from .results import Hypothesis

__all__ = ["parse_boost", "build_fusion", "best_of", "DecodeNBest", "DecodeOptions"]


class DecodeOptions(Protocol):
    """What the builders read of :class:`asrdecode.registry.DecodeOptions` (which conforms: the registry
    passes its options to them, and mypy checks each call). A Protocol, so this module needs nothing of
    the registry, which imports it."""

    @property
    def decoder(self) -> str: ...
    @property
    def beam(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def window(self) -> Optional[int]: ...
    @property
    def expansion_gamma(self) -> Optional[float]: ...
    @property
    def max_symbols(self) -> Optional[int]: ...
    @property
    def lm(self) -> Optional[str]: ...
    @property
    def lm_weight(self) -> float: ...
    @property
    def word_lm(self) -> Optional[str]: ...
    @property
    def word_lm_weight(self) -> float: ...
    @property
    def word_bonus(self) -> float: ...
    @property
    def boost(self) -> tuple[str, ...]: ...
    @property
    def graph(self) -> Optional[str]: ...
    @property
    def engine(self) -> str: ...
    @property
    def compat(self) -> str: ...
    @property
    def nbest(self) -> int: ...

    def settings(self, config: type[SearchConfig], skip: Iterable[str] = ()) -> dict[str, Any]:
        """The keyword arguments of ``config``'s ``cli`` fields from these options."""
        ...

#: ``decode_nbest(x [B, T, F], lengths [B]) -> [[Hypothesis]]``
Hyps = list[Hypothesis]
#: one n-best list (best first) per utterance
NBest = list[list[Hypothesis]]
DecodeNBest = Callable[[torch.Tensor, torch.Tensor], NBest]

#: the ``search`` of :func:`~asrdecode.models.sherpa_compat.sherpa_options` -> what the preset runs
SHERPA_SEARCHES = {"modified": "an icefall model is sherpa-onnx's modified beam search",
                   "nemo": "a NeMo model is sherpa-onnx's NeMo modified beam search"}


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
    """The ``[(FusionModel, weight), ...]`` of ``opts`` (token LM, word LM, phrase boosting) for a beam search
    (the registry's :func:`~asrdecode.registry.check_options` refuses them for a search that fuses nothing)."""
    fusion: list = []
    if opts.lm:
        from .lm import NGramLM

        if not Path(opts.lm).is_file():
            raise FileFormatError(opts.lm, None, "no such LM file")
        fusion.append((NGramLM.from_arpa(opts.lm, vocab_size=vocab, blank_id=blank), float(opts.lm_weight)))
    if opts.word_lm:
        from .lm.word_cache import cached_word_lm_fusion

        if tokenizer is None:
            raise DecodingInputError("--word-lm needs a model with a tokenizer")
        fusion.append(cached_word_lm_fusion(opts.word_lm, tokenizer, vocab_size=vocab, blank_id=blank,
                                            weight=opts.word_lm_weight, word_bonus=opts.word_bonus))
    if opts.boost:
        from .lm import BoostingTree

        if tokenizer is None:
            raise DecodingInputError("--boost needs a model with a tokenizer")
        from .tokenizers import spell

        phrases = [parse_boost(b) for b in opts.boost]
        for spec, (text, _) in zip(opts.boost, phrases):  # the CLI's words, not the Python argument's
            unknown = spell(tokenizer, text)[1]
            if unknown:
                raise DecodingInputError(f"--boost {spec!r}: the model's tokenizer cannot spell "
                                         f"{', '.join(map(repr, unknown))}, so the model never emits it; "
                                         "leave this --boost out or spell the phrase with the model's characters")
        tree = BoostingTree.from_phrases(phrases, tokenizer, vocab_size=vocab, blank_id=blank)
        fusion.append((tree, 1.0))
    return fusion


def best_of(nbest_lists: Sequence[Sequence[Hypothesis]]) -> list[Hypothesis]:
    """The best hypothesis of each utterance from a beam search's n-best lists (an empty list: an empty hypothesis)."""
    return [h[0] if h else Hypothesis([], [], -math.inf) for h in nbest_lists]


# --------------------------------------------------------------------------------- search kwargs
def no_kwargs(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """CTC greedy takes no options."""
    return {}


def transducer_greedy_kwargs(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """``transducer.greedy``: its config's options (WIND window, the symbols-per-frame cap: ``compat``'s with a
    preset, engine)."""
    kw = opts.settings(TransducerGreedyConfig)
    if opts.compat == "sherpa":  # the streaming family makes its model with sherpa_model
        kw.update(max_symbols=sherpa_preset(bundle, opts)["max_symbols"], compat="sherpa")
    return kw


def sherpa_preset(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """:func:`~asrdecode.models.sherpa_compat.sherpa_options` of ``bundle.model`` for ``opts.decoder``.

    Raises:
        DecodingInputError: the model is not a sherpa-onnx ONNX transducer (icefall or NeMo layout), or
            ``opts`` set what the preset sets (``max_symbols``) or what sherpa-onnx's modified beam
            search has no counterpart for (another method, fusion).
    """
    from .models.sherpa_compat import sherpa_options
    from .transducer._checks import DEFAULT_MAX_SYMBOLS

    model = sherpa_transducer(bundle)
    if opts.max_symbols != DEFAULT_MAX_SYMBOLS:
        raise DecodingInputError("--max-symbols does not combine with --compat sherpa (the preset sets it)")
    preset = sherpa_options(model, opts.decoder)
    if preset.get("search") in SHERPA_SEARCHES:
        extra = [flag for flag, set_ in (("--method", opts.method != "alsd"), ("--window", opts.window is not None),
                                         ("--expansion-gamma", opts.expansion_gamma is not None),
                                         ("--lm", bool(opts.lm)), ("--word-lm", bool(opts.word_lm)),
                                         ("--boost", bool(opts.boost))) if set_]
        if extra:
            raise DecodingInputError(f"--compat sherpa --decoder beam on {SHERPA_SEARCHES[preset['search']]}, "
                                     f"which has no {', '.join(extra)}")
    return preset


def sherpa_transducer(bundle: Any) -> Any:
    """``bundle.model`` when it is a sherpa-onnx ONNX transducer (icefall or NeMo layout), whose start context
    and ``<unk>`` handling ``--compat sherpa`` sets; else the one named error of every door."""
    from .models.nemo_onnx import NemoOnnxTransducer
    from .models.onnx_transducer import OnnxTransducer

    model = bundle.model
    if not isinstance(model, (OnnxTransducer, NemoOnnxTransducer)):
        raise DecodingInputError(f"--compat sherpa needs a sherpa-onnx ONNX transducer, got {type(model).__name__} "
                                 f"({getattr(bundle, 'name', 'the model')}; icefall or NeMo layout, whose start "
                                 "context and <unk> handling can be set)")
    return model


def check_sherpa_streams(model: Any, decoder: str) -> None:
    """A named error when ``--compat sherpa --decoder`` ``decoder`` on ``model`` is one of sherpa-onnx's own
    beam searches, which decode whole utterances only (streaming and serve take greedy)."""
    from .models.sherpa_compat import sherpa_options

    search = sherpa_options(model, decoder).get("search")
    if search in SHERPA_SEARCHES:
        what = SHERPA_SEARCHES[search].replace("'s NeMo modified", "'s modified")
        raise DecodingInputError(f"--compat sherpa --decoder {decoder} ({what}) decodes whole utterances only; "
                                 "streaming and serve take --decoder greedy")


def compat_model(bundle: Any, opts: DecodeOptions) -> Any:
    """``bundle.model``, or with ``opts.compat == "sherpa"`` its :func:`sherpa_model` (checked by :func:`sherpa_preset`)."""
    if opts.compat != "sherpa":
        return bundle.model
    sherpa_preset(bundle, opts)
    return sherpa_model(bundle.model, opts.decoder)


def sherpa_model(model: Any, decoder: str) -> Any:
    """A shallow copy of an ONNX transducer ``model`` (the sessions shared) with sherpa-onnx's start context
    and ``<unk>`` handling for ``decoder`` (``"greedy"`` / ``"beam"``)."""
    from .models.sherpa_compat import sherpa_options

    preset = sherpa_options(model, decoder)
    model = copy.copy(model)
    if "start_context" in preset:
        model.start_context = preset["start_context"]
    model.unk_as_blank = preset["unk_as_blank"]
    return model


def ctc_beam_kwargs(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """``ctc.beam_search``: beam, fusion models, bonus, engine; plus the bundle's own word search
    (:func:`bundle_word_search`) when it has one and no LM was given."""
    return _ctc_beam_kwargs(bundle, opts, bundle_word_search(bundle, opts))


def _ctc_beam_kwargs(bundle: Any, opts: DecodeOptions, words: tuple[list, Any] | None) -> dict[str, Any]:
    fusion = build_fusion(opts, bundle.tokenizer, bundle.model.vocab_size, bundle.blank_id)
    if words is not None:
        fusion = [*fusion, *words[0]]
    return {**opts.settings(CTCBeamConfig, skip=("nbest",)), "fusion": fusion}


def bundle_word_search(bundle: Any, opts: DecodeOptions) -> tuple[list, Any] | None:
    """``(fusion models, word tokenizer)`` that make a CTC model's beam search give words when its
    tokens are not spelled words (phone-ctc: the lexicon-mode word LM over its pronunciations, and the
    tokenizer that turns phone ids into words), from the bundle's ``beam_words()``; ``None`` for a
    bundle without one, or when the user fuses an LM of their own (``--lm`` / ``--word-lm``)."""
    make = getattr(bundle, "beam_words", None)
    if make is None or opts.lm or opts.word_lm:
        return None
    fusion, tokenizer = make()
    return list(fusion), tokenizer


def transducer_beam_kwargs(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """``transducer.beam_search``: its config's options (beam, method, WIND window and expansion threshold,
    cap: ``compat``'s with a preset, bonus, engine) and the fusion models."""
    kw = {**opts.settings(TransducerBeamConfig, skip=("nbest",)),
          "fusion": build_fusion(opts, bundle.tokenizer, bundle.model.vocab_size, bundle.blank_id)}
    if opts.compat == "sherpa":  # the streaming family makes its model with sherpa_model
        kw.update(max_symbols=sherpa_preset(bundle, opts)["max_symbols"], compat="sherpa")
    return kw


def _bundled_ctc_models(vocab: int, blank: int) -> list[str]:
    """The bundled CTC models whose vocabulary is ``vocab`` tokens with blank id ``blank`` (the models that
    cannot be loaded here, e.g. without hama, are left out)."""
    from .models import load_bundle

    found = []
    for name in ("demo-ctc", "phone-ctc"):
        try:
            tok = load_bundle(name).tokenizer
        except Exception:  # noqa: BLE001 - an optional model missing here is not this error's subject
            continue
        if (tok.vocab_size, tok.blank_id) == (vocab, blank):
            found.append(name)
    return found


def check_graph_fits(graph: Any, bundle: Any, path: Any = None) -> None:
    """A named error when ``graph`` (loaded from ``path``) was built for another model's tokens than
    ``bundle``'s (another blank id, or token ids past the model's): it says which bundled model the
    graph fits and how to build one for ``bundle``."""
    vocab = bundle.model.vocab_size
    if graph.blank_id == bundle.blank_id and graph.vocab_size <= vocab:
        return
    name = getattr(bundle, "name", None) or "the model"
    fits = _bundled_ctc_models(graph.vocab_size, graph.blank_id)
    built = f" (the tokens of {' / '.join(fits)}: pass --model {fits[0]})" if fits else ""
    raise DecodingInputError(
        f"--graph{'' if path is None else ' ' + str(path)} was built for a model of {graph.vocab_size} tokens with blank id {graph.blank_id}{built}, "
        f"not for {name} ({vocab} tokens, blank id {bundle.blank_id}); build a graph for it with "
        f"`asrdecode build-graph --model {name} --lm LM --out GRAPH` (build-graph's default --model is demo-ctc)")


def wfst_kwargs(bundle: Any, opts: DecodeOptions) -> dict[str, Any]:
    """``WFSTDecoder``: the loaded graph and the search settings (``boost`` is per utterance: :func:`word_boosts`)."""
    from .ctc.wfst import load_graph

    if not opts.graph:
        raise DecodingInputError("--decoder wfst needs --graph PATH (build one with `asrdecode build-graph`)")
    if not Path(opts.graph).is_file():
        raise FileFormatError(opts.graph, None, "no such graph file")
    return {"graph": load_graph(opts.graph), **opts.settings(WFSTConfig)}


def word_boosts(opts: DecodeOptions) -> dict[str, float] | None:
    """WFST: ``{word: boost}`` of ``opts.boost`` (``None``: no boosts)."""
    return dict(parse_boost(b) for b in opts.boost) or None


# -------------------------------------------------------------------------------------- builders
def ctc_greedy(bundle: Any, opts: DecodeOptions) -> DecodeNBest:
    from . import ctc

    tok, blank = bundle.tokenizer, bundle.blank_id
    return lambda x, n: [[h] for h in cast(Hyps, ctc.greedy(x, n, blank, tok))]


def transducer_greedy(bundle: Any, opts: DecodeOptions) -> DecodeNBest:
    from . import transducer as tr

    tok, model, kw = bundle.tokenizer, compat_model(bundle, opts), transducer_greedy_kwargs(bundle, opts)
    kw.pop("compat", None)
    return lambda x, n: [[h] for h in cast(Hyps, tr.greedy(model, x, n, tokenizer=tok, acceleration="eager", **kw))]


def ctc_beam(bundle: Any, opts: DecodeOptions) -> DecodeNBest:
    from . import ctc

    words = bundle_word_search(bundle, opts)  # once: its fusion and tokenizer serve the search and the text
    tok, blank, kw = bundle.tokenizer, bundle.blank_id, _ctc_beam_kwargs(bundle, opts, words)
    if words is None:
        return lambda x, n: cast(NBest, ctc.beam_search(x, n, blank, tokenizer=tok, nbest=opts.nbest, **kw))
    word_tok = words[1]

    def decode(x: torch.Tensor, n: torch.Tensor) -> NBest:
        nb = cast(NBest, ctc.beam_search(x, n, blank, tokenizer=word_tok, nbest=opts.nbest, **kw))
        for row in nb:
            for h in row:  # word times from the tokens of each pronunciation (first, last frame)
                h.words = word_tok.word_times(h.tokens, h.timestamps)
        return nb

    return decode


def transducer_beam(bundle: Any, opts: DecodeOptions) -> DecodeNBest:
    from . import transducer as tr

    tok, model, kw = bundle.tokenizer, compat_model(bundle, opts), transducer_beam_kwargs(bundle, opts)
    kw.pop("compat", None)
    search = sherpa_preset(bundle, opts).get("search") if opts.compat == "sherpa" else None
    if search == "modified":
        from .models.sherpa_search import modified_beam_search
        from .results import attach_text

        def modified(x: torch.Tensor, n: torch.Tensor) -> NBest:
            lists = modified_beam_search(model, x, n, beam=opts.beam, unk_id=model.unk_id,
                                         context_size=model.context_size, engine=opts.engine)
            return [attach_text(hs[:opts.nbest], tok) for hs in lists]

        return modified
    if search == "nemo":
        return _sherpa_nemo_beam(model, tok, opts, kw["max_symbols"])
    return lambda x, n: cast(NBest, tr.beam_search(model, x, n, tokenizer=tok, nbest=opts.nbest, **kw))


def _sherpa_nemo_beam(model: Any, tok: Any, opts: DecodeOptions, max_symbols: int) -> DecodeNBest:
    """sherpa-onnx's NeMo modified beam search (:func:`~asrdecode.models.sherpa_nemo_search.nemo_beam_search`)
    of the NeMo-layout ``model`` (its ``<unk>`` extends like blank)."""
    from .models.sherpa_nemo_search import nemo_beam_search
    from .results import attach_text

    def nemo(x: torch.Tensor, n: torch.Tensor) -> NBest:
        lists = nemo_beam_search(model, x, n, beam=opts.beam, unk_id=model.unk_id, max_symbols=max_symbols,
                                 engine=opts.engine)
        return [attach_text(hs[:opts.nbest], tok) for hs in lists]

    return nemo


def wfst(bundle: Any, opts: DecodeOptions) -> DecodeNBest:
    """Token passing through the graph; ``boost`` takes WORD:WEIGHT; text = the graph's output words."""
    from .ctc.wfst import WFSTDecoder

    kw = wfst_kwargs(bundle, opts)
    check_graph_fits(kw["graph"], bundle, opts.graph)
    decoder = WFSTDecoder(kw.pop("graph"), blank_id=bundle.blank_id, **kw)
    boosts = word_boosts(opts)

    def decode(x: torch.Tensor, n: torch.Tensor) -> list[list[Hypothesis]]:
        many = opts.nbest > 1
        out = decoder(x, n, boosts=[boosts] * x.shape[0] if boosts else None, nbest=opts.nbest if many else None)
        lists = out if many else [[h] for h in out]
        for hs in lists:
            for h in hs:
                h.text = " ".join(w for w, _, _ in h.words or [])
        return lists

    return decode
