"""One adapter per decoder family: per-stream state, one batched streaming call, results, offline.

Each adapter keeps nothing per stream but the family's own carried state (each state type joins
and splits itself; prediction-network states live in a
:class:`~asrdecode.streaming.state_batching.StatePool`); the decoding is always the family's decoder object
(``transducer.GreedyDecoder``, ``transducer.BeamSearchDecoder``, ``ctc.CTCGreedyDecoder``,
``ctc.CTCBeamDecoder``, ``WFSTDecoder``: ``advance`` per step), and ``offline`` is its ``decode`` on the
whole utterance.

An adapter's interface (used by :class:`~asrdecode.streaming.StreamDecoder`):

- ``open(boosts) -> state`` and ``close(state)``;
- ``advance(states, frames, final)``: one batched call for the streams that have new frames
  ``[n_i, F]`` (or, where the family needs it, that end now);
- ``result(state, final) -> Hypothesis``: everything decoded so far (``final``: the stream ended);
- ``offline(frames, boosts) -> Hypothesis``: whole-utterance decoding of ``frames [T, F]``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from .. import ctc
from ..ctc.wfst import WFSTDecoder, WFSTStreamState
from ..errors import DecodingInputError, check_number
from ..fusion import FusionScorer
from ..hyps import BatchedHyps
from ..lm import BoostingTree
from ..models.bundle import check_bundle
from ..pipeline import DECODER_NAMES
from ..registry import decoder_for
from ..results import Hypothesis
from ..transducer import BeamSearchDecoder, BeamState, GreedyDecoder, GreedyState
from ..transducer.durations import DurationRule
from .state_batching import StatePool, shift_column

__all__ = ["make_family", "FAMILIES"]

Boosts = Mapping[str, float]



def pad_frames(frames: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-stream frames ``[n_i, F]`` -> padded ``[B, max n_i, F]`` and lengths ``[B]``."""
    lengths = torch.tensor([f.shape[0] for f in frames], dtype=torch.long)
    x = frames[0].new_zeros((len(frames), int(lengths.max()) if len(frames) else 0, frames[0].shape[1]))
    for b, f in enumerate(frames):
        x[b, : f.shape[0]] = f
    return x, lengths


def _check_options(decoder: str, options: dict[str, Any], call: Callable, reserved: Sequence[str]) -> None:
    """Reject options the stream decoder sets itself, and names ``call`` does not take."""
    for name in options:
        if name in reserved:
            raise DecodingInputError(f"decoder {decoder!r}: option {name!r} is set by the StreamDecoder itself")
    params = inspect.signature(call).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        allowed = sorted(p for p in params if p not in reserved and params[p].kind == inspect.Parameter.KEYWORD_ONLY)
        raise DecodingInputError(f"decoder {decoder!r} has no option(s) {unknown}; options: {allowed}")


def _compat_model(bundle: Any, decoder: str, compat: object) -> Any:
    """``bundle.model`` (``compat="none"``), or its copy that decodes as sherpa-onnx (``"sherpa"``: the
    registry's ``--compat``; ``max_symbols`` is the caller's)."""
    if compat == "none":
        return bundle.model
    if compat != "sherpa":
        raise DecodingInputError(f"decoder {decoder!r}: compat must be 'none' or 'sherpa', got {compat!r}")
    from ..decoders import check_sherpa_streams, sherpa_transducer

    check_sherpa_streams(sherpa_transducer(bundle), decoder)
    from ..decoders import sherpa_model

    return sherpa_model(bundle.model, decoder)


def _no_boosts(decoder: str) -> Callable[[Boosts | None], None]:
    def check(boosts: Boosts | None) -> None:
        if boosts:
            raise DecodingInputError(f"decoder {decoder!r} does not support per-stream boosts")
    return check


def _phrase_tree(decoder: str, boosts: Boosts | None, tokenizer: Any, empty: BoostingTree) -> BoostingTree:
    """The boosting tree of a stream's ``{phrase: bonus per token}`` (the empty tree for none)."""
    if not boosts:
        return empty
    if not isinstance(boosts, Mapping):
        raise DecodingInputError(f"decoder {decoder!r}: boosts must be a mapping {{phrase: bonus per token}}")
    return BoostingTree.from_phrases(list(boosts.items()), tokenizer)  # checks phrases and weights


class _Family:
    """What every adapter shares: the streams with new frames (or, with ``steps_on_final``, that end
    now) are padded into one batch and handed to the family's :meth:`step` (gather, one batched
    streaming call, scatter)."""

    name = ""
    steps_on_final = False
    #: the registry search's decoder class this adapter streams
    decoder_class: type = object

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        """The adapter of ``bundle`` with the decoder's ``options`` (its keyword arguments)."""
        raise NotImplementedError

    def advance(self, streams: Sequence[Any], frames: Sequence[torch.Tensor], final: Sequence[bool]) -> None:
        pick = [i for i, f in enumerate(frames) if f.shape[0] or (self.steps_on_final and final[i])]
        if pick:
            x, lengths = pad_frames([frames[i] for i in pick])
            self.step([streams[i] for i in pick], x, lengths, [final[i] for i in pick])

    def step(self, streams: Sequence[Any], x: torch.Tensor, lengths: torch.Tensor, final: Sequence[bool]) -> None:
        """Advance ``streams`` by their frames ``x [n, T, F]`` (``lengths [n]``) in one batched call."""
        raise NotImplementedError

    def close(self, stream: Any) -> None:
        pass


# -- transducer greedy -----------------------------------------------------------------------------


@dataclass
class GreedyRow:
    """One stream's greedy state: its pool slot, the last prediction output and the transcript so far."""

    slot: int
    dec_out: torch.Tensor  # [1, P]
    skip: int = 0
    offset: int = 0
    tokens: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    durations: list[int] | None = None
    score: float = 0.0


class TransducerGreedy(_Family):
    """``transducer.greedy`` (RNN-T and TDT, every greedy option) per stream."""

    decoder_class = GreedyDecoder

    name = "greedy"

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        options = dict(options)
        self.model = _compat_model(bundle, "greedy", options.pop("compat", "none"))
        _check_options("greedy", options, GreedyDecoder, ("tokenizer", "state", "return_state"))
        self.options = options
        self.decoder = GreedyDecoder(self.model, **options)
        self.width = bundle.encoder_dim
        self.tdt = self.model.durations is not None
        self.pool = StatePool(self.model, 1)
        self.check_boosts = _no_boosts("greedy")
        self._fresh()  # validates the options

    def _fresh(self) -> Any:
        # a greedy step on an empty chunk also checks the options against the model
        return self.decoder.advance(self.decoder.init_state(1, dtype=torch.float32), torch.zeros(1, 0, self.width),
                                    torch.zeros(1, dtype=torch.long))

    def open(self, boosts: Boosts | None) -> GreedyRow:
        st = GreedyState.initial(self.model, 1)
        return GreedyRow(self.pool.add(st.pred_state), st.dec_out, durations=[] if self.tdt else None)

    def close(self, row: GreedyRow) -> None:
        self.pool.release(row.slot)

    def step(self, rows: Sequence[GreedyRow], x: torch.Tensor, lengths: torch.Tensor, final: Sequence[bool]) -> None:
        state = self.decoder.advance(self._gather(rows, x.dtype), x, lengths)
        self._scatter(rows, state)

    def _gather(self, rows: Sequence[GreedyRow], score_dtype: torch.dtype) -> GreedyState:
        """A batch :class:`GreedyState` of ``rows``: their prediction states and outputs, and empty
        hypotheses holding their scores (the batched call appends this chunk's labels only)."""
        hyps = BatchedHyps(len(rows), 8, torch.device("cpu"), score_dtype=score_dtype, with_durations=self.tdt)
        hyps.scores = torch.tensor([r.score for r in rows], dtype=score_dtype)
        return GreedyState(pred_state=self.pool.gather([r.slot for r in rows]),
                           dec_out=torch.cat([r.dec_out for r in rows]),
                           skip=torch.tensor([r.skip for r in rows], dtype=torch.long),
                           offset=torch.tensor([r.offset for r in rows], dtype=torch.long), hyps=hyps)

    def _scatter(self, rows: Sequence[GreedyRow], state: GreedyState) -> None:
        """Write a batch state back: prediction states, outputs, skips, offsets; append each row's new
        labels to its transcript and take its total score."""
        self.pool.scatter([r.slot for r in rows], state.pred_state)
        skip, offset = state.skip.tolist(), state.offset.tolist()
        for b, (row, hyp) in enumerate(zip(rows, state.hyps.to_hypotheses())):
            row.dec_out = state.dec_out[b:b + 1].clone()
            row.skip, row.offset, row.score = skip[b], offset[b], hyp.score
            row.tokens.extend(hyp.tokens)
            row.timestamps.extend(hyp.timestamps)
            if row.durations is not None:
                row.durations.extend(hyp.durations or [])

    def result(self, row: GreedyRow, final: bool) -> Hypothesis:
        return Hypothesis(list(row.tokens), list(row.timestamps), row.score,
                          durations=None if row.durations is None else list(row.durations))

    def offline(self, frames: torch.Tensor, boosts: Boosts | None) -> Hypothesis:
        return self.decoder.decode(frames[None], torch.tensor([frames.shape[0]]))[0]


# -- transducer beam -------------------------------------------------------------------------------


@dataclass
class _BeamStream:
    slot: int
    state: BeamState
    tree: BoostingTree | None
    scorer: FusionScorer


class _PhraseBoosts:
    """Per-stream phrase boosting for a beam search: with ``boost_weight`` set, every stream's fusion
    list ends with its own :class:`~asrdecode.lm.BoostingTree` (the empty tree when it has no
    phrases) at that weight; a batch uses the stack of its streams' trees."""

    name = "beam"

    def _init_boosts(self, boost_weight: object, base_fusion: list, vocab: int, blank: int, tokenizer: Any) -> None:
        self.base_fusion = base_fusion
        self.tokenizer = tokenizer
        self.boost_weight = boost_weight
        self.empty: BoostingTree | None = None
        self.boost_column: int | None = None
        if boost_weight is not None:
            check_number("boost_weight", boost_weight)
            self.empty = BoostingTree.empty(vocab, blank)
            self.boost_column = len(base_fusion)

    def check_boosts(self, boosts: Boosts | None) -> None:
        if boosts and self.boost_weight is None:
            raise DecodingInputError("decoder 'beam' supports per-stream boosts only when created with boost_weight=...")

    def _tree(self, boosts: Boosts | None) -> BoostingTree | None:
        self.check_boosts(boosts)
        return None if self.empty is None else _phrase_tree("beam", boosts, self.tokenizer, self.empty)

    def _fusion(self, tree: BoostingTree | None) -> list:
        return self.base_fusion + ([(tree, float(self.boost_weight))] if tree is not None else [])  # type: ignore[arg-type]  # checked finite in _init_boosts

    def _stack(self, streams: Sequence[Any]) -> tuple[list, list[int]]:
        """The fusion list of a batch and each stream's boosting-state shift in the stacked tree."""
        if self.boost_column is None:
            return self.base_fusion, []
        trees = [s.tree for s in streams]
        stacked = trees[0] if len(trees) == 1 else BoostingTree.stack(trees)
        shifts = [int(r) - int(t.roots[0]) for r, t in zip(stacked.roots.tolist(), trees)]
        return self._fusion(stacked), shifts


class TransducerBeam(_PhraseBoosts, _Family):
    """``transducer.BeamSearchDecoder`` (ALSD++, AES++, WIND; fusion) per stream, with optional per-stream
    phrase boosting (``boost_weight``: the fusion weight of every stream's boosting tree)."""

    decoder_class = BeamSearchDecoder

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        options = dict(options)
        boost_weight = options.pop("boost_weight", None)
        self.model = _compat_model(bundle, "beam", options.pop("compat", "none"))
        _check_options("beam", options, BeamSearchDecoder,
                       ("tokenizer", "state", "return_state", "final", "nbest"))
        self._init_boosts(boost_weight, list(options.pop("fusion", ())), self.model.vocab_size, self.model.blank_id,
                          bundle.tokenizer)
        self.options = options
        self.width = bundle.encoder_dim
        self.rule = DurationRule.of(self.model)  # how the search packs a label's frame and duration
        probe = self._initial(self._fusion(self.empty))  # validates the options
        # prediction-state rows per stream: the hypothesis slots per utterance (beam, or more for WIND)
        self.pool = StatePool(self.model, probe.hyps["score"].shape[1])

    def _decoder(self, fusion: list) -> BeamSearchDecoder:
        """The search with this family's options and a batch's (or a stream's) fusion list."""
        return BeamSearchDecoder(self.model, fusion=fusion, **self.options)

    def _initial(self, fusion: list) -> BeamState:
        return self._decoder(fusion).init_state(1, self.width)

    def open(self, boosts: Boosts | None) -> _BeamStream:
        tree = self._tree(boosts)
        fusion = self._fusion(tree)
        st = self._initial(fusion)
        slot = self.pool.add(st.hyps["pred_state"])
        st.hyps["pred_state"] = None  # lives in the pool
        return _BeamStream(slot, st, tree, FusionScorer(fusion, self.model.vocab_size, self.model.blank_id))

    def close(self, stream: _BeamStream) -> None:
        self.pool.release(stream.slot)

    steps_on_final = True  # an ending stream's search may still have hypotheses to finish

    def step(self, streams: Sequence[_BeamStream], x: torch.Tensor, lengths: torch.Tensor,
             final: Sequence[bool]) -> None:
        fusion, shifts = self._stack(streams)
        slots = [s.slot for s in streams]
        states = [s.state for s in streams]
        batch = BeamState.join(states, pred_state=self.pool.gather(slots))
        if "lm_states" in batch.hyps:  # each stream's boosting states, numbered in the stacked tree
            batch.hyps["lm_states"] = shift_column(batch.hyps["lm_states"], self.boost_column, shifts)
        batch = self._decoder(fusion).advance(batch, x, lengths, final=torch.tensor(list(final)))
        if "lm_states" in batch.hyps:
            batch.hyps["lm_states"] = shift_column(batch.hyps["lm_states"], self.boost_column, [-d for d in shifts])
        self.pool.scatter(slots, batch.split_into(states))

    def result(self, stream: _BeamStream, final: bool) -> Hypothesis:
        """The best hypothesis so far, as the search ranks them (fusion end scores included)."""
        hyps = stream.state.hyps
        score = hyps["score"]
        if stream.scorer.num_models:
            score = score + stream.scorer.final(hyps["lm_states"], dtype=score.dtype).view(score.shape)
        val, slot = score.topk(1, dim=1)
        (tokens, data), = stream.state.tree.backtrack(slot)[0]
        frames, durations = self.rule.unpack_data(data)
        return Hypothesis(tokens, frames, float(val[0, 0]), durations=durations)

    def offline(self, frames: torch.Tensor, boosts: Boosts | None) -> Hypothesis:
        return self._decoder(self._fusion(self._tree(boosts))).decode(frames[None],
                                                                      torch.tensor([frames.shape[0]]))[0][0]


# -- CTC greedy ------------------------------------------------------------------------------------


class CTCGreedy(_Family):
    """``ctc.CTCGreedyDecoder`` with its streaming state (:class:`~asrdecode.ctc.CTCGreedyState`) per stream."""

    decoder_class = ctc.CTCGreedyDecoder

    name = "greedy"

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        if options:
            raise DecodingInputError(f"decoder 'greedy' of a CTC model has no options, got {sorted(options)}")
        self.blank = bundle.blank_id
        self.decoder = ctc.CTCGreedyDecoder(self.blank)
        self.check_boosts = _no_boosts("greedy")

    def open(self, boosts: Boosts | None) -> ctc.CTCGreedyState:
        return ctc.CTCGreedyState.initial(1)

    def step(self, states: Sequence[ctc.CTCGreedyState], x: torch.Tensor, lengths: torch.Tensor,
             final: Sequence[bool]) -> None:
        self.decoder.advance(ctc.CTCGreedyState.join(states), x, lengths).split_into(states)

    def result(self, state: ctc.CTCGreedyState, final: bool) -> Hypothesis:
        h = state.hyps[0]
        return Hypothesis(list(h.tokens), list(h.timestamps), h.score)

    def offline(self, frames: torch.Tensor, boosts: Boosts | None) -> Hypothesis:
        return self.decoder.decode(frames[None], torch.tensor([frames.shape[0]]))[0]


# -- CTC beam --------------------------------------------------------------------------------------


@dataclass
class _CTCBeamStream:
    state: ctc.CTCBeamState
    tree: BoostingTree | None
    fusion: list


class CTCBeam(_PhraseBoosts, _Family):
    """``ctc.CTCBeamDecoder`` (fusion, blank collapse, token beam) per stream, with optional per-stream
    phrase boosting (``boost_weight``). Each stream keeps a batch-1 ``CTCBeamState``: partial
    results are its ``hypotheses()``, the final one the decoder's ``finalize`` (which adds the fusion
    models' end-of-sentence scores)."""

    decoder_class = ctc.CTCBeamDecoder

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        options = dict(options)
        boost_weight = options.pop("boost_weight", None)
        _check_options("beam", options, ctc.CTCBeamDecoder,
                       ("tokenizer", "state", "final", "nbest", "log_softmax", "vocab_size"))
        self.blank = bundle.blank_id
        self.vocab = bundle.model.vocab_size
        self._init_boosts(boost_weight, list(options.pop("fusion", ())), self.vocab, self.blank, bundle.tokenizer)
        self.options = options
        self.initial_state(1, self._fusion(self.empty))  # validates the options

    def _decoder(self, fusion: list) -> ctc.CTCBeamDecoder:
        """The search with this family's options and a batch's (or a stream's) fusion list."""
        return ctc.CTCBeamDecoder(self.blank, vocab_size=self.vocab, fusion=fusion, **self.options)

    def initial_state(self, n: int, fusion: list) -> ctc.CTCBeamState:
        """A fresh batch-``n`` state for this family's settings and ``fusion``."""
        return self._decoder(fusion).init_state(n)

    def open(self, boosts: Boosts | None) -> _CTCBeamStream:
        tree = self._tree(boosts)
        fusion = self._fusion(tree)
        return _CTCBeamStream(self.initial_state(1, fusion), tree, fusion)

    def step(self, streams: Sequence[_CTCBeamStream], x: torch.Tensor, lengths: torch.Tensor,
             final: Sequence[bool]) -> None:
        fusion, shifts = self._stack(streams)
        states = [s.state for s in streams]
        batch = ctc.CTCBeamState.join(states, template=self.initial_state(len(streams), fusion))
        batch.fstates = shift_column(batch.fstates, self.boost_column, shifts)  # numbered in the stacked tree
        batch = self._decoder(fusion).advance(batch, x, lengths)
        batch.fstates = shift_column(batch.fstates, self.boost_column, [-d for d in shifts])
        batch.split_into(states)

    def result(self, stream: _CTCBeamStream, final: bool) -> Hypothesis:
        if final:  # ends the search: adds the fusion models' end-of-sentence scores
            return self._decoder(stream.fusion).finalize(stream.state)[0][0]
        return stream.state.hypotheses(1)[0][0]

    def offline(self, frames: torch.Tensor, boosts: Boosts | None) -> Hypothesis:
        return self._decoder(self._fusion(self._tree(boosts))).decode(frames[None],
                                                                      torch.tensor([frames.shape[0]]))[0][0]


# -- WFST ------------------------------------------------------------------------------------------


class WFST(_Family):
    """:class:`~asrdecode.ctc.wfst.WFSTDecoder` (``graph=`` and its options) per stream, with
    per-stream word boosts ``{word: boost}``."""

    decoder_class = WFSTDecoder

    name = "wfst"

    def __init__(self, bundle: Any, options: dict[str, Any]) -> None:
        from ..ctc.wfst import DecodingGraph

        options = dict(options)
        graph = options.pop("graph", None)
        if not isinstance(graph, DecodingGraph):
            raise DecodingInputError("decoder 'wfst' needs graph=DecodingGraph (see asrdecode.ctc.wfst.build_tlg), or "
                                     "StreamDecoder.for_bundle(bundle, 'wfst') for the bundle's own graph")
        _check_options("wfst", options, WFSTDecoder, ("graph", "blank_id"))
        from ..decoders import check_graph_fits

        check_graph_fits(graph, bundle)  # a graph for another model: say which
        self.decoder = WFSTDecoder(graph, blank_id=bundle.blank_id, **options)
        if graph.vocab_size > bundle.model.vocab_size:
            raise DecodingInputError(f"the graph reads token ids up to {graph.vocab_size - 1}, the model has "
                                     f"{bundle.model.vocab_size} classes")

    def check_boosts(self, boosts: Boosts | None) -> None:
        if boosts is not None and not isinstance(boosts, Mapping):
            raise DecodingInputError("decoder 'wfst': boosts must be a mapping {word: boost}")

    def open(self, boosts: Boosts | None) -> Any:
        self.check_boosts(boosts)
        return self.decoder.init_state(1, boosts=[dict(boosts)] if boosts else None)

    def step(self, states: Sequence[Any], x: torch.Tensor, lengths: torch.Tensor, final: Sequence[bool]) -> None:
        batch = WFSTStreamState.join(states)
        self.decoder.advance(batch, x, lengths)
        batch.split_into(states)

    def result(self, state: Any, final: bool) -> Hypothesis:
        return (self.decoder.finalize(state) if final else self.decoder.partial(state))[0]

    def offline(self, frames: torch.Tensor, boosts: Boosts | None) -> Hypothesis:
        self.check_boosts(boosts)
        return self.decoder(frames[None], torch.tensor([frames.shape[0]]),
                            boosts=[dict(boosts)] if boosts else None)[0]


def make_family(bundle: Any, decoder: str, options: dict[str, Any]) -> Any:
    """The adapter of ``decoder`` for ``bundle``'s kind (the registry decoder's ``family``); a
    ValueError names the accepted names."""
    kind = check_bundle(bundle, "bundle").kind
    if decoder not in DECODER_NAMES[kind]:
        raise DecodingInputError(f"unknown decoder {decoder!r} for a {kind!r} model; choose one of {DECODER_NAMES[kind]}")
    return FAMILIES[decoder_for(decoder, kind).decoder](bundle, dict(options))


#: the adapter of each registry search's decoder class
FAMILIES: dict[type, type[_Family]] = {f.decoder_class: f for f in (TransducerGreedy, TransducerBeam, CTCGreedy,
                                                                    CTCBeam, WFST)}
