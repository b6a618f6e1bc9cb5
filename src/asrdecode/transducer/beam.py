"""Batched beam search for RNN-T and TDT: ALSD++ and AES++ (Grigoryan et al.), with shallow fusion,
and WIND beam search (RNN-T, windowed expansion; Algorithm 3 of the WIND paper): the decoder object
and its driver.

Both methods keep exactly ``beam`` hypotheses per utterance in fixed ``[B, K]`` tensors (``K`` =
beam); a removed hypothesis has score ``-inf``. Transcripts live in a backpointer tree
(:class:`~asrdecode.beam_hyps.BeamTree`), and equal transcripts are found in constant time by an
incremental hash (:func:`~asrdecode.beam_hyps.extend_hash`) plus the transcript length and last
token. One step is a sync-free function of the loop state (masked tensor ops only): one joint
call for all ``B*K`` hypotheses, one prediction-network call (``model.predict``, with
``select_state`` / ``replace_state``) for all ``B*K`` hypotheses, fusion scores for all of them,
selection, merging. A round (step, prediction network, done flag) is replayed on the device by
:func:`~asrdecode.accel.run_until_done`, which reads the done flag at O(log) check points only. The modules:

- :mod:`.beam_state`: :class:`BeamState` (what a stream carries) and the chunk buffer;
- :mod:`.beam_loop`: the loop state of one call (:class:`~.beam_loop.BeamLoop`), the settings;
- :mod:`.beam_alsd`: one ALSD++ / AES++ step; :mod:`.beam_wind`: one WIND step;
- this module: :class:`BeamSearchDecoder` (settings checked once; ``init_state`` / ``advance`` /
  ``finalize`` / ``partial`` / ``decode``), the step driver, and the one-shot :func:`beam_search`.

The search is exactly the one of :func:`~asrdecode.transducer.reference_beam.reference_beam_search`
(see its module docstring for the rules); ``method="wind"`` is the search of
:func:`~asrdecode.transducer.reference_wind_beam.reference_wind_beam_search`; tests compare them.

Streaming (every method, RNN-T and TDT): ``state = dec.init_state(B)``, then ``state =
dec.advance(state, chunk, lengths, final=...)`` per chunk and ``dec.finalize(state)``. A chunk that is
not an utterance's last (``final=False``) pauses that utterance's search at the step that would read
frames not yet received (ALSD: a hypothesis reached the chunk end; WIND: the window passes it; AES
never reads ahead), and a TDT jump past the chunk end is kept for the next chunk, so chunked decoding
takes exactly the whole-utterance steps when the last chunk is marked ``final=True`` (tests: random
chunk boundaries). ``finalize`` ends the utterances not ended yet with an empty final chunk. Where the
native engine reads the model and the fusion models (:mod:`asrdecode.native.transducer_search`), a chunk is
one engine call with the networks in C++ (the state converted at the boundary), else the per-step path.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Sequence, cast

import torch

from ..accel import (LoopCache, LoopStats, PureStep, StepRunner, bucket, compiles, mark_lengths_dynamic, parameters_key,
                     resolve_mode, run_until_done)
from ..configs import TransducerBeamConfig, takes_config
from ..errors import DecodingInputError, check_emissions, check_finite, check_int, check_lengths
from ..fusion import FusionModel, FusionScorer
from ..native.choice import native_fit, use_native
from ..recent import RecentValues
from ..results import Hypothesis, Tokenizer, attach_text
from . import _checks
from ._checks import (MISSING, encoder_width, check_beam_args, check_encoder_output, check_tokenizer,
                      check_window, deprecated_max_symbols)
from .beam_loop import SearchSettings, BeamLoop
from .beam_state import BeamState, carry_state, check_stream, chunk_buffer, state_hypotheses
from .durations import DurationRule
from .model import TransducerModel, check_joint_width, check_model

__all__ = ["beam_search", "BeamState", "BeamSearchDecoder", "initial_beam_state"]

_NEG_INF = float("-inf")
_UNSET: Any = object()  # the deprecated ``final=`` was not passed
#: rounds per frame of earlier calls, per (method, TDT), shared by every decoder (one-shot ``beam_search``
#: calls too): where a device loop first reads its done flag
_STATS: dict[tuple[str, bool], LoopStats] = {}


@takes_config(TransducerBeamConfig)
class BeamSearchDecoder:
    """Batched ALSD++ / AES++ / WIND beam search of RNN-T / TDT encoder output, with optional shallow
    fusion: settings checked once, any number of (streaming) searches.

    Args:
        model: a :class:`TransducerModel` (TDT when ``model.durations`` is set).
        config: the search's settings (:class:`~asrdecode.configs.TransducerBeamConfig`: ``beam`` (at most
            ``model.vocab_size``), ``method``, ``window``, ``expansion_gamma``, ``blank_scoring``, ``pruning``,
            ``max_symbols``, ``beta``, ``nbest``, ``acceleration``, ``engine``; their help and defaults are
            written there); any of them may be given as a keyword instead or on top.
        fusion: ``[(FusionModel, weight), ...]`` (n-gram LMs, boosting trees) over the model's ids.
        tokenizer: fills ``Hypothesis.text`` when given.
        max_symbols_per_frame: deprecated alias of ``max_symbols`` (warns).

    Methods: "alsd" (ALSD++, every active hypothesis expands each step), "aes" (AES++, frame
    synchronous: hypotheses on the earliest frame expand until they leave it) or "wind" (WIND beam
    search, RNN-T: per-frame hypothesis lists; the list of the earliest frame reads a window of
    ``window`` frames and its hypotheses may emit their next label on any of them; see
    :mod:`~asrdecode.transducer.reference_wind_beam`). ``acceleration`` is checked against the encoder
    output's device at each call; the engines give the same hypotheses and the same streaming state.

    Results: ``B`` lists of up to ``nbest`` hypotheses, best first (``[0]`` is the best); scores are the
    summed fused log-scores plus the fusion end-of-sentence scores; timestamps are global frames.

    Threads: the decoder holds only its checked settings (read-only); every search's state lives in
    the :class:`BeamState` it returns, so one decoder may serve several threads at once (one state per
    thread: a state itself must not be advanced by two threads at once). In a static mode ("compile",
    "cuda_graphs") whole-utterance calls reuse loops (buffers, graphs) kept on the decoder, one call at
    a time (a lock).
    """

    def __init__(self, model: TransducerModel, *, config: TransducerBeamConfig | None = None,
                 fusion: Sequence[tuple[FusionModel, float]] = (), tokenizer: Tokenizer | None = None,
                 max_symbols_per_frame: Any = MISSING, **settings: Any) -> None:
        cfg = TransducerBeamConfig.build(config, deprecated_max_symbols(settings, max_symbols_per_frame),
                                         caller="BeamSearchDecoder")
        check_model(model)
        wind = cfg.method == "wind"
        check_beam_args(model, cfg.beam, "aes" if wind else cfg.method, cfg.blank_scoring, cfg.pruning,
                        cfg.max_symbols, cfg.nbest)
        if wind:
            check_window(model, cfg.window)
        check_tokenizer(tokenizer, model)
        scorer = FusionScorer(fusion, model.vocab_size, model.blank_id)
        self.model = model
        self.config = cfg
        self.settings = SearchSettings(cfg.beam, cfg.method, scorer, cfg.blank_scoring, cfg.pruning, cfg.max_symbols,
                                       float(cfg.beta), cfg.window if wind else 1, cfg.expansion_gamma)
        self.tokenizer = tokenizer
        self.rule = DurationRule.of(model)
        # static (compile / CUDA graphs) loops of whole-utterance calls kept between calls, and the rounds per
        # frame of earlier calls (where the device loop first reads its flag); per-utterance fusion models
        # (stacked boosting trees) fix the batch, so their calls are not cached
        self._loops = LoopCache(4)
        self._loops_lock = threading.Lock()
        self._stats = _STATS.setdefault((cfg.method, self.rule.tdt), LoopStats())
        self._per_utterance = any(int(getattr(m, "num_trees", 1)) > 1 for m in scorer.models)

    # -- the streaming convention ------------------------------------------------------------------

    @torch.inference_mode()
    def init_state(self, batch: int, encoder_dim: int | None = None, *, dtype: torch.dtype | None = None,
                   device: torch.device | str | None = None) -> BeamState:
        """A fresh state of ``batch`` streams (no frame yet). ``encoder_dim``: the width ``D`` of the
        encoder output the chunks will have (default: the model's, when it declares one); ``dtype`` /
        ``device``: those of the model's parameters by default. States of one decoder batch together
        (:meth:`BeamState.cat`)."""
        check_int("batch", batch, low=0)
        if encoder_dim is None:
            encoder_dim = encoder_width(self.model)
            if encoder_dim is None:
                raise DecodingInputError("encoder_dim is needed: this model does not declare its encoder width")
        check_int("encoder_dim", encoder_dim, low=1)
        param = next(iter(self.model.parameters()), None) if hasattr(self.model, "parameters") else None
        dtype = dtype or (param.dtype if param is not None else torch.float32)
        device = device if device is not None else (param.device if param is not None else torch.device("cpu"))
        no_frames = torch.zeros((batch, 0, encoder_dim), dtype=dtype, device=device)
        return self._chunk(None, no_frames, torch.zeros(batch, dtype=torch.long, device=device), False,
                           results=False)[1]

    @torch.inference_mode()
    def advance(self, state: BeamState, encoder_output: torch.Tensor,
                lengths: torch.Tensor | Sequence[int] | None = None,
                final: bool | Sequence[bool] | torch.Tensor = False) -> BeamState:
        """Search one chunk ``encoder_output [B, T, D]`` (``lengths [B]`` valid frames of it, default all).

        ``final`` (one flag or ``[B]``): the chunk ends those utterances (their search then runs to the
        end; later chunks must have no frames for them). Before an utterance's last chunk the search
        waits where its next step would read frames not received yet, so the hypotheses equal
        whole-utterance decoding exactly when the last chunk is marked final. Returns the new state;
        the one passed in is consumed (its tree is extended in place), use the returned one."""
        if not isinstance(state, BeamState):
            raise DecodingInputError(f"state must be a BeamState from init_state / advance, got {type(state).__name__}")
        return self._chunk(state, encoder_output, lengths, final, results=False)[1]

    @torch.inference_mode()
    def finalize(self, state: BeamState) -> list[list[Hypothesis]]:
        """End every utterance of ``state`` (an empty final chunk: what is still pending is searched to the
        end) and return its n-best lists. Use the state no further.

        Exact (= :meth:`decode` on the whole utterances) when each utterance's last chunk was passed with
        ``final=True``, and for RNN-T also without; for TDT mark the last chunk: a duration jump past the
        end is clamped (and merged) on the step that makes it, which an unmarked chunk cannot know."""
        if not isinstance(state, BeamState):
            raise DecodingInputError(f"state must be a BeamState from init_state / advance, got {type(state).__name__}")
        pending = any(bool(((s > _NEG_INF) & (t < tail.shape[0])).any())
                      for s, t, tail in zip(state.hyps["score"], state.hyps["time"], state.tail))
        if not pending:  # nothing left to search: the results of the state as it is
            return self._text(state_hypotheses(state, self.settings.scorer, self.rule, self.config.nbest))
        proj = state.tail[0].new_zeros((len(state.tail), 0, state.tail[0].shape[-1]))
        zeros = torch.zeros(len(state.tail), dtype=torch.long, device=proj.device)
        final_t = check_stream(state, True, len(state.tail), self.settings.config, proj.device)
        st = self._native_chunk(state, proj, zeros, final_t, projected=True)
        if st is not None:
            return self._text(state_hypotheses(st, self.settings.scorer, self.rule, self.config.nbest))
        loop, _ = self._search(state, proj, zeros, final_t)
        return self._text(loop.results(self.config.nbest))

    def partial(self, state: BeamState) -> list[list[Hypothesis]]:
        """The current n-best lists of ``state`` (partial results; fusion end scores included); the state
        is not changed."""
        return self._text(state_hypotheses(state, self.settings.scorer, self.rule, self.config.nbest))

    @torch.inference_mode()
    def decode(self, encoder_output: torch.Tensor,
               lengths: torch.Tensor | Sequence[int] | None = None) -> list[list[Hypothesis]]:
        """Whole utterances ``encoder_output [B, T, D]`` (``lengths [B]``): the n-best lists."""
        return self._chunk(None, encoder_output, lengths, True, results=True, want_state=False)[0]

    __call__ = decode

    # -- one call ----------------------------------------------------------------------------------

    def _chunk(self, state: BeamState | None, encoder_output: object, lengths: Any, final: Any,
               results: bool, want_state: bool = True) -> tuple[list[list[Hypothesis]], Any]:
        """One chunk from ``state`` (None: a fresh one): its n-best lists (when ``results``) and the state
        after it (when ``want_state``, else None)."""
        out = self._chunk_search(state, encoder_output, lengths, final, results, want_state)
        if not results:  # (with results, _text has read the fusion watch: one read a call)
            self.settings.scorer.check_scores()  # a user fusion model's NaN / +inf
        return out

    def _chunk_search(self, state: BeamState | None, encoder_output: object, lengths: Any, final: Any,
                      results: bool, want_state: bool) -> tuple[list[list[Hypothesis]], Any]:
        enc = check_emissions("encoder_output", encoder_output, ndim=3)
        check_encoder_output(self.model, enc)
        check_finite("encoder_output", enc)
        B, T, _ = enc.shape
        lengths = check_lengths(lengths, B, T, device=enc.device)
        fresh_whole = state is None and final is True  # decode(): whole utterances, no stream flags to check
        final_t = None if fresh_whole else check_stream(state, final, B, self.settings.config, enc.device)
        whole = fresh_whole or (state is None and bool(cast(torch.Tensor, final_t).all()))
        if whole and not want_state:
            nb = self._native_search(enc, lengths)
            if nb is not None:  # the whole search in one engine call, the networks in C++
                return (self._text(nb) if results else []), None
        if final_t is None:  # (check_stream's flags of final=True)
            final_t = torch.ones(B, dtype=torch.bool, device=enc.device)
        if not (whole and not want_state):
            st = self._native_chunk(state, enc, lengths, final_t)
            if st is not None:  # the chunk in one engine call, the networks in C++
                nb = self._text(state_hypotheses(st, self.settings.scorer, self.rule, self.config.nbest)) if results else []
                return nb, (st if want_state else None)
        if whole and not want_state:  # a cached static loop is reused by the next call: one call at a time
            with self._loops_lock:
                loop, _ = self._search(None, self.model.project_encoder(enc), lengths, final_t, whole=True, cached=True)
                return (self._text(loop.results(self.config.nbest, rows=B)) if results else []), None
        loop, received = self._search(state, self.model.project_encoder(enc), lengths, final_t, whole=whole)
        nb = self._text(loop.results(self.config.nbest)) if results else []
        return nb, (carry_state(loop, received, self.settings.config) if want_state else None)

    def _one_call(self, device: torch.device) -> bool:
        """Whether the engine rule and the acceleration mode let the one-call native engine search here."""
        try:
            eager = resolve_mode(self.config.acceleration, device) == "eager"
        except ValueError:
            return False  # _search reports it
        return eager and use_native(self.config.engine, device, "encoder_output")

    def _native_search(self, enc: torch.Tensor, lengths: torch.Tensor) -> list[list[Hypothesis]] | None:
        """Whole utterances ``enc [B, T, D]`` on the native engine with the networks in C++
        (:func:`asrdecode.native.transducer_search.search`), or None: the engine rule or the model, its dtype,
        the method or a fusion model do not allow it (the per-step path then searches)."""
        if not self._one_call(enc.device):
            return None
        from ..native.transducer_search import search

        return search(self.model, self.settings, enc, lengths, self.config.nbest, _checks.MAX_SYMBOLS_GUARD)

    def _native_chunk(self, state: BeamState | None, frames: torch.Tensor, lengths: torch.Tensor,
                      final_t: torch.Tensor, projected: bool = False) -> BeamState | None:
        """One chunk ``frames [B, T, D]`` (``projected``: ``[B, T, H]``, as ``project_encoder`` gives them) of the streams
        of ``state`` (None: fresh) on the native engine with the networks in C++
        (:func:`asrdecode.native.transducer_search.search_chunk`): the state after it, or None where that path
        does not apply (the per-step path then searches)."""
        if not self._one_call(frames.device):
            return None
        from ..native.transducer_search import search_chunk

        return search_chunk(self.model, self.settings, state, frames, lengths, final_t, _checks.MAX_SYMBOLS_GUARD,
                            projected=projected)

    def _search(self, state: BeamState | None, proj: torch.Tensor, lengths: torch.Tensor, final_t: torch.Tensor,
                whole: bool = False, cached: bool = False) -> tuple[BeamLoop, torch.Tensor]:
        """Run the search on the projected chunk ``proj [B, T, H]`` until no hypothesis can step; returns the
        loop and the frames received per utterance. ``cached``: a static loop of whole utterances may be one
        kept between calls (its first ``B`` rows are this call's)."""
        mode = resolve_mode(self.config.acceleration, proj.device)
        if whole:  # whole utterances (or a first and last chunk)
            enc_proj, offset, received = proj, None, lengths
        else:
            enc_proj, lengths, offset, received = chunk_buffer(proj, lengths, state)
        static = mode != "eager"
        native = _native_dtype_fit(self.config.engine, proj, eager=not static)
        if static and whole and cached and not self._per_utterance:
            return self._search_cached(mode, proj, lengths), received
        loop = BeamLoop(self.model, enc_proj, lengths, self.settings, carried=state, offset=offset,
                         final=None if whole else final_t, static=static, native=native)
        if loop.B and loop.T:
            check_joint_width(self.model, loop.enc_proj[:1, 0], loop.dec_proj[:1])
        _drive(loop, StepRunner(mode, BeamLoop.STATE), self._stats, self.settings.max_symbols)
        loop.finish()
        return loop, received

    def _search_cached(self, mode: str, proj: torch.Tensor, lengths: torch.Tensor) -> BeamLoop:
        """Whole utterances on a static loop kept between calls (:class:`~asrdecode.accel.LoopCache`, keyed by
        the model's parameters, the mode and the bucketed ``B`` / ``T``, dtype and device): the chunk is
        copied into its buffers (rows and frames padded), its state reset in place, and its runner's graphs
        replayed (a warm call of a seen bucket captures nothing). Its tree stays preallocated: the results
        are read before the next call reuses it (calls on one decoder take turns)."""
        B, T, H = proj.shape
        key = (parameters_key(self.model), self.settings.scorer.graph_key(), mode, bucket(B, 4), bucket(T, 16), H,
               proj.dtype, proj.device)

        def make() -> tuple[BeamLoop, StepRunner]:
            Bb, Tb = key[3], key[4]
            buf = proj.new_zeros((Bb, Tb, H))
            # tree room for twice the rounds of earlier calls: a later call rarely grows it (a new capture)
            loop = BeamLoop(self.model, buf, torch.zeros(Bb, dtype=torch.long, device=proj.device), self.settings,
                             static=True, capacity=2 * self._stats.estimate(Tb))
            return loop, StepRunner(mode, BeamLoop.STATE)

        loop, run = self._loops.get(key, make)
        loop.reset(proj, lengths)
        if B and T:
            check_joint_width(self.model, loop.enc_proj[:1, 0], loop.dec_proj[:1])
        _drive(loop, run, self._stats, self.settings.max_symbols)
        return loop

    def _text(self, nb: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        self.settings.scorer.check_scores()  # (first: a fusion model's NaN is not the joint's)
        _checks.check_nbest_lists(nb)
        for row in nb:
            attach_text(row, self.tokenizer)
        return nb


# -- the driver --------------------------------------------------------------------------------------


def _round(loop: BeamLoop) -> None:
    """One round of the device loop (what torch.compile compiles and a CUDA graph captures)."""
    loop.round()


def _pure_round(loop: BeamLoop) -> tuple:
    """:func:`_round` as a pure function (:class:`~asrdecode.accel.PureStep`): the round on a
    :meth:`~BeamLoop.shadow` of ``loop`` (``loop``'s tensors read, not written); its new state and tree step."""
    sh, step = loop.shadow()
    sh.round()
    return sh.state_values(), step.step


def _write_round(loop: BeamLoop, out: tuple) -> None:
    loop.write_state(*out)


_round.pure = PureStep(lambda loop: (loop,), _pure_round, _write_round)  # type: ignore[attr-defined]


def _done(loop: BeamLoop) -> torch.Tensor:
    return loop.done


def _drive(loop: BeamLoop, run: StepRunner, stats: LoopStats, max_symbols: int | None) -> None:
    """Run ``loop``'s rounds until no hypothesis is active (:func:`~asrdecode.accel.run_until_done`: the done
    flag is read at O(log) check points only, every round a masked no-op once the search ended). A static
    loop's tree gets room for each batch of rounds before it runs (``on_check``); the native engine's
    loop is host-driven (CPU)."""
    if loop._engine is not None:
        _drive_native(loop, max_symbols)
        return
    if loop.B == 0 or loop.T == 0:  # no frame: no hypothesis can step
        return
    if compiles(run.mode):  # the encoder's frames symbolic: one compiled round for every length bucket
        mark_lengths_dynamic((loop.enc_proj, 1))
    cap = max_symbols if max_symbols is not None else _checks.MAX_SYMBOLS_GUARD
    # every round raises the least (frame, labels on it) of the active hypotheses: a bound on the rounds
    limit = (loop.T + 1) * (cap + 2) + 16

    def on_check(rounds: int) -> None:
        if max_symbols is None and int(loop.symbols.max()) > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()
        if loop.static:  # each round records one tree step
            loop.tree.reserve(rounds)
            loop.tree.advance(rounds)

    run_until_done(run, _round, loop, _done, first_check=stats.estimate(loop.T), limit=limit,
                            on_check=on_check)
    stats.update(int(loop.busy), loop.T)  # the rounds needed, not the overshoot (one read)


def _native_dtype_fit(engine: object, proj: torch.Tensor, *, eager: bool) -> bool:
    """Whether the per-step search of ``proj [B, T, H]`` runs on the native engine: the engine rule, and a dtype
    it reads (float16 / bfloat16 searches run on the tensor engine; ``engine="native"`` is a named error)."""
    def fit() -> tuple[bool | None, str]:
        from ..native.transducer_beam import SEARCH_DTYPES  # (asked only once the native engine is picked)

        if proj.dtype not in SEARCH_DTYPES:
            return None, f"the encoder output is {proj.dtype}; the C++ beam search is float32 or float64"
        return True, ""

    return bool(native_fit(engine, proj.device, "encoder_output", fit, "search this call", eager=eager))


def _drive_native(loop: BeamLoop, max_symbols: int | None) -> None:
    """Step ``loop`` on the native engine until no hypothesis is active; the prediction network runs on
    the rows that emitted (none: skipped)."""
    eng = loop._engine
    n_rows = loop.B * loop.S
    steps = 0
    while eng.num_active:
        loop.step()
        n = eng.num_emitted
        if n:
            loop.predict_step(None if n == n_rows else eng.emit_rows[:n])
        steps += 1
        if max_symbols is None and steps % 1024 == 0 and int(loop.symbols.max()) > _checks.MAX_SYMBOLS_GUARD:
            raise _checks.runaway_error()


# -- one-shot function and the deprecated streaming flags -------------------------------------------


#: the configs of one-shot :func:`beam_search` calls made from keyword settings alone, by the settings (each
#: value with its type: 4 and 4.0 are different arguments): a repeated call skips building and checking the same
#: frozen config again (the last 64 kept)
_CONFIGS: RecentValues[TransducerBeamConfig] = RecentValues(64)


def _one_shot_config(config: TransducerBeamConfig | None, settings: dict[str, Any]) -> TransducerBeamConfig:
    """``TransducerBeamConfig.build(config, settings)`` (checked); for keyword settings alone the config built
    for the same settings before."""
    if config is not None:
        return TransducerBeamConfig.build(config, settings, caller="beam_search")
    try:
        key = tuple((name, type(value), value) for name, value in sorted(settings.items()))
        hit = _CONFIGS.get(key)
    except TypeError:  # an unhashable value: built (and checked) every call
        return TransducerBeamConfig.build(config, settings, caller="beam_search")
    if hit is None:
        hit = _CONFIGS.put(key, TransducerBeamConfig.build(config, settings, caller="beam_search"))
    return hit


@takes_config(TransducerBeamConfig)
def beam_search(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None = None,
    *,
    config: TransducerBeamConfig | None = None,
    fusion: Sequence[tuple[FusionModel, float]] = (),
    tokenizer: Tokenizer | None = None,
    state: BeamState | None = None,
    return_state: bool = False,
    final: Any = _UNSET,
    max_symbols_per_frame: Any = MISSING,
    **settings: Any,
) -> list[list[Hypothesis]] | tuple[list[list[Hypothesis]], BeamState]:
    """``BeamSearchDecoder(model, ...).decode(encoder_output, lengths)``: ``B`` n-best lists of
    ``encoder_output [B, T, D]`` (``lengths [B]`` valid frames, default all); ``config`` and / or its fields
    as keywords (:class:`~asrdecode.configs.TransducerBeamConfig`), every other argument and the results
    as :class:`BeamSearchDecoder`.

    Deprecated streaming flags (they warn): ``state=`` (the previous chunk's state), ``return_state=True``
    (also return the state) and ``final=`` (the chunk ends the utterances; one flag or ``[B]``). Use
    ``dec.init_state`` / ``dec.advance(state, chunk, lengths, final=...)`` / ``dec.finalize`` instead.
    """
    dec = BeamSearchDecoder(model, config=_one_shot_config(config, deprecated_max_symbols(settings, max_symbols_per_frame)),
                            fusion=fusion, tokenizer=tokenizer)
    if state is None and not return_state and final is _UNSET:
        return dec.decode(encoder_output, lengths)
    warnings.warn("transducer.beam_search(state=, return_state=, final=) is deprecated: use "
                  "BeamSearchDecoder(model, ...) with init_state(batch), advance(state, chunk, lengths, final=) "
                  "and finalize(state) (partial(state) for the current n-best)", DeprecationWarning, stacklevel=2)
    if state is not None and not isinstance(state, BeamState):
        raise DecodingInputError(f"state must be a BeamState, got {type(state).__name__}")
    with torch.inference_mode():
        nb, st = dec._chunk(state, encoder_output, lengths, True if final is _UNSET else final, results=True,
                            want_state=return_state)
    return (nb, st) if return_state else nb


@takes_config(TransducerBeamConfig)
def initial_beam_state(model: TransducerModel, batch: int, encoder_dim: int, *, dtype: torch.dtype | None = None,
                       config: TransducerBeamConfig | None = None, **options: Any) -> BeamState:
    """``BeamSearchDecoder(model, **options).init_state(batch, encoder_dim, dtype=dtype)``: a fresh stream
    state for ``batch`` utterances of the search with ``options`` (checked the same way)."""
    check_int("batch", batch, low=0)
    check_int("encoder_dim", encoder_dim, low=1)
    for name in ("state", "return_state", "final", "nbest", "tokenizer"):
        if name in options:
            raise DecodingInputError(f"initial_beam_state takes the search's settings only, not {name!r}")
    return BeamSearchDecoder(model, config=config, **options).init_state(batch, encoder_dim, dtype=dtype)
