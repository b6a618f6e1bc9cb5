"""Batched CTC prefix beam search with shallow fusion (n-gram LM, phrase boosting) and blank collapse.

All hypotheses of all utterances live in ``[B, K]`` tensors (``K = beam``): for each prefix the
CTC prefix recursion keeps two acoustic log-probabilities, ``p_b`` (paths ending in blank) and
``p_nb`` (paths ending in the prefix's last token), plus the accumulated weighted fusion score,
the fusion models' states, the prefix length, its last token and an incremental hash. One frame
(:mod:`asrdecode.ctc.beam_step`, or the native engine): stay or extend, merge, keep the ``K`` best.
This module holds the state (:class:`CTCBeamState`), the decoder object (:class:`CTCBeamDecoder`:
``init_state`` / ``advance`` / ``finalize`` / ``partial`` / ``decode``), its frame driver and the
one-shot :func:`beam_search`.

The step is sync-free (no ``.item()``, no Python branch on tensor values) and keeps static
shapes; the driver loops over frames. The token sequences are kept as a backpointer tree
(:class:`asrdecode.beam_hyps.BeamTree`) and recovered once at the end, with token timestamps in
original frames (also with blank collapse, through the collapse's frame index).
:func:`asrdecode.ctc.reference_beam_search` is the same algorithm written with dictionaries.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Optional, Sequence, Union, cast

import torch

from ..beam_hyps import EMPTY_HASH, BeamTree
from ..configs import CTCBeamConfig, takes_config
from ..errors import DecodingInputError, check_int
from ..fusion import FusionModel, FusionScorer
from ..native import _lib
from ..native.choice import use_native
from ..native.ctc_beam import collapse as native_collapse
from ..native.ctc_beam import decode as native_decode
from ..native.ctc_beam import finalize as native_finalize
from ..native.ctc_beam import run_frames
from ..results import Hypothesis, Tokenizer, attach_text
from .beam_loop import loop_mode, run_frames_on_device
from .beam_step import Stepper
from ._checks import check_beam_search_args, check_positive_int
from .collapse import CollapseState, check_threshold, stream_collapse

#: one n-best list (best first) per utterance
NBest = list[list[Hypothesis]]

__all__ = ["beam_search", "CTCBeamDecoder", "CTCBeamState", "initial_beam_state", "parse_collapse"]

_UNSET: Any = object()  # the deprecated ``final=`` was not passed

FusionArg = Sequence[tuple[FusionModel, float]]
CollapseArg = Union[None, float, str]


def parse_collapse(blank_collapse: CollapseArg) -> tuple[bool, Optional[float]]:
    """``None`` -> off; ``"weak"`` -> weak collapse; a float in (0, 1) -> threshold. Returns ``(on, threshold)``."""
    if blank_collapse is None:
        return False, None
    if isinstance(blank_collapse, str):
        if blank_collapse != "weak":
            raise DecodingInputError(f"blank_collapse must be None, 'weak' or a threshold in (0, 1), got {blank_collapse!r}")
        return True, None
    if isinstance(blank_collapse, bool):
        raise DecodingInputError("blank_collapse must be None, 'weak' or a threshold in (0, 1), got a bool")
    return True, check_threshold(blank_collapse)


@dataclass
class CTCBeamState:
    """The carried state of a (streaming) batched CTC prefix beam search; all tensors ``[B, K]`` unless noted.

    Made by :meth:`CTCBeamDecoder.init_state`; :meth:`CTCBeamDecoder.advance` updates it in place.
    """

    p_b: torch.Tensor  # log-prob of the prefix's paths ending in blank (-inf: invalid slot)
    p_nb: torch.Tensor  # ... ending in its last token
    fscore: torch.Tensor  # sum of weight x fusion score of its tokens
    length: torch.Tensor  # number of tokens (float, the emissions' dtype)
    last: torch.Tensor  # last token (-1: empty prefix)
    hash: torch.Tensor  # incremental prefix hash (-1: invalid slot)
    parent_hash: torch.Tensor  # hash of the prefix without its last token (-2: none)
    peak: torch.Tensor  # best log-prob of the last token's arrival (paths starting it at one frame)
    fstates: torch.Tensor  # [B, K, M] int64, one column per fusion model
    offsets: torch.Tensor  # [B] original frames consumed so far
    collapse: Optional[CollapseState]
    tree: BeamTree = field(default_factory=BeamTree)
    config: tuple = ()  # the settings it was made with (checked on every later call)
    beta: float = 0.0

    def hypotheses(self, nbest: int = 1, tokenizer: Optional[Tokenizer] = None) -> list[list[Hypothesis]]:
        """The current n-best per utterance (partial results of a stream), best first.

        Scores as :func:`beam_search` returns them, except that the fusion models' end-of-sentence
        scores are not added (the stream has not ended). The state is not modified.
        """
        nbest = check_positive_int("nbest", nbest)
        return _finalize(self, None, self.beta, nbest, tokenizer)

    @classmethod
    def join(cls, states: Sequence["CTCBeamState"], /, *, template: Optional["CTCBeamState"] = None) -> "CTCBeamState":
        """One batch state from batch-1 ``states`` (streams), written into ``template``: a fresh state of
        the batch's size and settings made by the decoder (``init_state``; the search's fusion models may
        differ per batch: stacked boosting trees). The batch's tree starts empty; :meth:`split_into` hands
        each stream its rows."""
        if template is None:
            raise DecodingInputError("CTCBeamState.join needs template=, a fresh state of the batch's size "
                                     "(CTCBeamDecoder.init_state)")
        for f in fields(CTCBeamState):
            if f.name == "collapse":
                template.collapse = None if states[0].collapse is None else CollapseState.cat([s.collapse for s in states])  # type: ignore[misc]  # all set when the first is
            elif isinstance(getattr(states[0], f.name), torch.Tensor):
                setattr(template, f.name, torch.cat([getattr(s, f.name) for s in states]))
        return template

    def split_into(self, states: Sequence["CTCBeamState"], /) -> None:
        """Give each batch-1 state its row of this batch state (its tree extended by its row of the new steps)."""
        n = len(states)
        for b, st in enumerate(states):
            for f in fields(CTCBeamState):
                value = getattr(self, f.name)
                if f.name == "collapse":
                    st.collapse = None if value is None else value.rows(b, b + 1)
                elif isinstance(value, torch.Tensor):
                    rows = value.shape[0] // n
                    setattr(st, f.name, value[b * rows:(b + 1) * rows].clone())
            st.tree.extend(self.tree.take_rows(torch.tensor([b])))

    @staticmethod
    def initial(
        batch: int, beam: int, vocab: int, scorer: FusionScorer, collapse_on: bool,
        dtype: torch.dtype, device: torch.device, config: tuple,
    ) -> "CTCBeamState":
        # three allocations for the ten [B, K] fields (each a contiguous slice)
        p_b, p_nb, peak = torch.full((3, batch, beam), -math.inf, dtype=dtype, device=device).unbind(0)
        p_b[:, 0] = 0.0
        fscore, length = torch.zeros((2, batch, beam), dtype=dtype, device=device).unbind(0)
        last, hash0, parent_hash = torch.full((3, batch, beam), -1, dtype=torch.long, device=device).unbind(0)
        hash0[:, 0] = EMPTY_HASH  # -1: invalid slot
        parent_hash.fill_(-2)
        fstates = _initial_fstates(scorer, batch, beam, device)
        return CTCBeamState(
            p_b=p_b, p_nb=p_nb, fscore=fscore, length=length, last=last, hash=hash0, parent_hash=parent_hash,
            peak=peak, fstates=fstates,
            offsets=torch.zeros(batch, dtype=torch.long, device=device),
            collapse=CollapseState.initial(batch, vocab, dtype, device) if collapse_on else None,
            config=config,
        )


def _finalize(st: CTCBeamState, scorer: Optional[FusionScorer], beta: float, nbest: int,
              tokenizer: Optional[Tokenizer]) -> list[list[Hypothesis]]:
    """N-best lists from the state (``scorer``: add its end-of-sentence scores; ``None``: don't).

    On CPU with the native engine loaded, the same computation runs there (one call)."""
    if st.p_b.device.type == "cpu" and _lib.loaded():
        if scorer is not None:  # the search's fusion watch (native_finalize checks the end scores it reads)
            scorer.check_scores()
        return [attach_text([Hypothesis(tokens=t, timestamps=ts, score=sc) for t, ts, sc in row] or _no_hypothesis(),
                            tokenizer) for row in native_finalize(st, scorer, beta, nbest)]
    B, K = st.p_b.shape
    score = torch.logaddexp(st.p_b, st.p_nb)
    valid = score > -math.inf
    score = score + st.fscore
    if beta:
        score = score + beta * st.length
    if scorer is not None and scorer.num_models:
        score = score + scorer.final(st.fstates.reshape(B * K, -1), score.dtype).reshape(B, K)
        scorer.check_scores()  # the search's fusion watch and the end scores: one read
    score = torch.where(valid, score, -math.inf)
    n = min(nbest, K)
    top, slots = torch.topk(score, n, dim=1)
    ok = top > -math.inf
    seqs = st.tree.backtrack(torch.where(ok, slots, -1))
    top_l = top.tolist()
    ok_l = ok.tolist()
    out: list[list[Hypothesis]] = []
    for b in range(B):
        hyps = [
            Hypothesis(tokens=seqs[b][j][0], timestamps=seqs[b][j][1], score=top_l[b][j])
            for j in range(n)
            if ok_l[b][j]
        ]
        out.append(attach_text(hyps or _no_hypothesis(), tokenizer))
    return out


def _no_hypothesis() -> list[Hypothesis]:
    """The n-best list of an utterance whose every prefix scored ``-inf`` (e.g. each left a lexicon-mode
    word LM's words): one empty hypothesis with score ``-inf``, so ``res[b][0]`` always exists."""
    return [Hypothesis(tokens=[], timestamps=[], score=-math.inf)]


def _settings(batch: int, vocab: int, blank: int, beam: int, fusion: FusionArg, beta: float, beam_threshold: float,
              blank_collapse: CollapseArg, token_beam: Optional[int],
              dtype: torch.dtype) -> tuple[FusionScorer, "_Parsed", tuple]:
    """The fusion scorer, the parsed collapse / token-beam settings and the state's ``config`` of a call (checked)."""
    scorer = FusionScorer(fusion, vocab, blank)
    collapse_on, collapse_th = parse_collapse(blank_collapse)
    if token_beam is not None:
        token_beam = check_positive_int("token_beam", token_beam)
    config = (batch, beam, vocab, blank, tuple(id(m) for m, _ in scorer.fusion), tuple(scorer.weights),
              beta, beam_threshold, collapse_on, collapse_th, token_beam, dtype)
    return scorer, _Parsed(collapse_on, collapse_th, token_beam), config


def _initial_fstates(scorer: FusionScorer, batch: int, beam: int, device: torch.device) -> torch.Tensor:
    """The fusion states ``[B, K, M]`` of a fresh state (per-utterance models get each slot's utterance)."""
    utterances = (torch.arange(batch, device=device).repeat_interleave(beam)
                  if any(scorer.takes_utterances) else None)
    return scorer.initial(batch * beam, device=device, utterances=utterances).reshape(batch, beam, scorer.num_models)


def _start(state: Optional[CTCBeamState], batch: int, vocab: int, blank: int, beam: int, fusion: FusionArg,
           beta: float, beam_threshold: float, blank_collapse: CollapseArg, token_beam: Optional[int],
           dtype: torch.dtype, device: torch.device) -> tuple[FusionScorer, CTCBeamState, "_Parsed"]:
    """The fusion scorer and the state a call starts from (``state`` checked against the call's settings,
    its ``config``, or a fresh one), and the parsed collapse and token-beam settings."""
    scorer, parsed, config = _settings(batch, vocab, blank, beam, fusion, beta, beam_threshold, blank_collapse,
                                       token_beam, dtype)
    collapse_on = parsed.collapse_on
    if state is None:
        st = CTCBeamState.initial(batch, beam, vocab, scorer, collapse_on, dtype, device, config)
        st.beta = beta
        return scorer, st, parsed
    if not isinstance(state, CTCBeamState):
        raise DecodingInputError(f"state must be a CTCBeamState from a previous call, got {type(state).__name__}")
    if state.config != config:
        raise DecodingInputError(
            "state was made with different settings (batch size, beam, vocabulary, blank_id, fusion, beta, "
            "beam_threshold, blank_collapse, token_beam or dtype) than this call"
        )
    return scorer, state, parsed


class _Parsed(NamedTuple):
    collapse_on: bool
    collapse_th: Optional[float]
    token_beam: Optional[int]


@takes_config(CTCBeamConfig)
class CTCBeamDecoder:
    """Batched CTC prefix beam search with shallow fusion: settings checked once, whole utterances
    (:meth:`decode`) or streams (:meth:`init_state`, :meth:`advance` per chunk, :meth:`finalize`; the
    chunks' final n-best lists equal one call on the whole utterances).

    Args:
        blank_id: index of the blank class.
        vocab_size: the model's classes ``V`` (needed by :meth:`init_state` unless given there; the
            emissions of every call must have ``V`` classes).
        config: the search's settings (:class:`~asrdecode.configs.CTCBeamConfig`: ``beam``, ``beta``,
            ``beam_threshold``, ``blank_collapse``, ``token_beam``, ``nbest``, ``acceleration``, ``engine``;
            their help and defaults are written there); any of them may be given as a keyword instead or on top.
        fusion: ``[(model, weight), ...]`` fusion models (:class:`asrdecode.fusion.FusionModel`:
            n-gram LM, boosting tree), vocabulary indexed by model token id.
        tokenizer: optional, fills ``Hypothesis.text``; its vocabulary must match ``V``.
        log_softmax: normalise the emissions first (they are logits).

    The engines (``engine="native"``: C++, CPU tensors; ``"torch"``: any device; ``"auto"``) give the
    same hypotheses and share the state (a stream may switch engines).

    Results: per utterance, up to ``nbest`` :class:`Hypothesis` sorted best first (never none: an
    utterance whose every prefix scored ``-inf``, e.g. left a lexicon-mode word LM, gets one empty
    hypothesis with score ``-inf``);
    ``score = log p_ctc(prefix) + sum_i w_i * (LM_i(prefix) + LM_i(</s> | prefix)) + beta * len``,
    timestamps are original frame indices: the last token's is the frame where the paths that
    start it were most likely (while its prefix was in the beam), the earlier ones are those of
    its parent prefix at that moment.

    Threads: the decoder holds only its settings; a search's state lives in its
    :class:`CTCBeamState`, so one decoder may serve several threads (one state per thread).
    """

    def __init__(self, blank_id: int, *, vocab_size: Optional[int] = None, config: Optional[CTCBeamConfig] = None,
                 fusion: FusionArg = (), tokenizer: Optional[Tokenizer] = None, log_softmax: bool = False,
                 **settings: Any) -> None:
        cfg = CTCBeamConfig.build(config, settings, caller="CTCBeamDecoder")
        if vocab_size is not None:
            vocab_size = check_positive_int("vocab_size", vocab_size)
            check_beam_search_args(torch.empty((0, 0, vocab_size)), None, blank_id, tokenizer, log_softmax=False)
        self.blank_id, self.vocab_size, self.config = blank_id, vocab_size, cfg
        self.fusion, self.tokenizer, self.log_softmax = fusion, tokenizer, log_softmax

    def init_state(self, batch: int, *, vocab_size: Optional[int] = None, dtype: torch.dtype = torch.float32,
                   device: Union[torch.device, str] = "cpu") -> CTCBeamState:
        """A fresh state of ``batch`` streams (``vocab_size``: default the decoder's; ``dtype``: the emissions'
        after preparation, float32 or float64). States of one setting batch together (``CTCBeamState.cat``)."""
        check_int("batch", batch, low=0)
        vocab = vocab_size if vocab_size is not None else self.vocab_size
        if vocab is None:
            raise DecodingInputError("vocab_size is needed: give it to CTCBeamDecoder(...) or init_state(...)")
        probe = torch.empty((batch, 0, check_positive_int("vocab_size", vocab)), dtype=dtype, device=device)
        blank = check_beam_search_args(probe, None, self.blank_id, None, log_softmax=False)[2]
        cfg = self.config
        return _start(None, batch, vocab, blank, cfg.beam, self.fusion, cfg.beta, cfg.beam_threshold,
                      cfg.blank_collapse, cfg.token_beam, dtype, probe.device)[1]

    def advance(self, state: CTCBeamState, log_probs: torch.Tensor,
                lengths: Optional[torch.Tensor] = None) -> CTCBeamState:
        """Search one chunk ``log_probs [B, T, V]`` (``lengths [B]`` valid frames of it, default all):
        ``state`` is updated in place and returned."""
        if not isinstance(state, CTCBeamState):
            raise DecodingInputError(f"state must be a CTCBeamState from init_state / advance, got {type(state).__name__}")
        return cast(CTCBeamState, self._run(state, log_probs, lengths, final=False))

    def finalize(self, state: CTCBeamState) -> list[list[Hypothesis]]:
        """The n-best lists at the end of the streams (the fusion models' end-of-sentence scores added)."""
        if not isinstance(state, CTCBeamState):
            raise DecodingInputError(f"state must be a CTCBeamState from init_state / advance, got {type(state).__name__}")
        batch, vocab = state.p_b.shape[0], state.config[2] if state.config else 0
        return cast(NBest, self._run(state, torch.zeros((batch, 0, vocab), dtype=state.p_b.dtype,
                                                        device=state.p_b.device),
                                     torch.zeros(batch, dtype=torch.long, device=state.p_b.device), final=True))

    def partial(self, state: CTCBeamState) -> list[list[Hypothesis]]:
        """The current n-best lists (no end-of-sentence scores: the streams have not ended); ``state`` unchanged."""
        return state.hypotheses(self.config.nbest, self.tokenizer)

    def decode(self, log_probs: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> list[list[Hypothesis]]:
        """Whole utterances ``log_probs [B, T, V]`` (``lengths [B]``, default all ``T``): the n-best lists."""
        return cast(NBest, self._run(None, log_probs, lengths, final=True))

    __call__ = decode

    def _run(self, state: Optional[CTCBeamState], log_probs: object, lengths: object,
             final: bool) -> Union[list[list[Hypothesis]], CTCBeamState]:
        """One chunk from ``state`` (None: a fresh one); the n-best lists when ``final``, else the state."""
        x, lens, blank = check_beam_search_args(log_probs, lengths, self.blank_id, self.tokenizer,
                                                log_softmax=self.log_softmax)
        beam, nbest, beta, beam_threshold = (self.config.beam, self.config.nbest, self.config.beta,
                                             self.config.beam_threshold)
        if self.vocab_size is not None and x.shape[2] != self.vocab_size:
            raise DecodingInputError(f"log_probs has {x.shape[2]} classes, the decoder was made for {self.vocab_size}")
        mode = loop_mode(x.device, self.config.acceleration)
        native = use_native(self.config.engine, x.device, "log_probs", eager=mode == "eager")
        if native and state is None and final and x.shape[0] > 0:  # one engine call: search, collapse, n-best
            rows = _native_whole(x, lens, blank, beam, self.fusion, beta, beam_threshold, self.config.blank_collapse,
                                 self.config.token_beam, nbest)
            if rows is not None:
                return [attach_text([Hypothesis(tokens=t, timestamps=ts, score=sc) for t, ts, sc in row]
                                    or _no_hypothesis(), self.tokenizer) for row in rows]
        batch, max_len, vocab = x.shape
        scorer, st, (collapse_on, collapse_th, token_beam) = _start(
            state, batch, vocab, blank, beam, self.fusion, beta, beam_threshold, self.config.blank_collapse,
            self.config.token_beam, x.dtype, x.device)
        if batch == 0:
            return [] if final else st
        _search_chunk(st, x, lens, scorer, blank, beam, beta, beam_threshold, collapse_on, collapse_th, token_beam,
                      "native" if native else mode)
        if not final:
            scorer.check_scores()  # a user fusion model's NaN / +inf (one host read, with such a model only)
            return st
        return _finalize(st, scorer, beta, nbest, self.tokenizer)  # (it reads the watch: one read a call)


def _native_whole(x: torch.Tensor, lens: torch.Tensor, blank: int, beam: int, fusion: FusionArg, beta: float,
                  beam_threshold: float, blank_collapse: CollapseArg, token_beam: Optional[int],
                  nbest: int) -> Optional[list]:
    """Whole utterances in one native engine call (search, collapse and n-best); None if it declines."""
    batch, _, vocab = x.shape
    scorer, (collapse_on, collapse_th, token_beam), _ = _settings(
        batch, vocab, blank, beam, fusion, beta, beam_threshold, blank_collapse, token_beam, x.dtype)
    return native_decode(x, lens, scorer, beam=beam, blank=blank, beta=beta, beam_threshold=beam_threshold,
                         token_beam=token_beam, collapse=0 if not collapse_on else 2 if collapse_th is None else 1,
                         collapse_threshold=collapse_th, nbest=nbest)


def _search_chunk(st: CTCBeamState, x: torch.Tensor, lens: torch.Tensor, scorer: FusionScorer, blank: int, beam: int,
                  beta: float, beam_threshold: float, collapse_on: bool, collapse_th: Optional[float],
                  token_beam: Optional[int], mode: str) -> None:
    """The frames of one chunk ``x [B, T, V]`` (``lens [B]``) into ``st`` (in place): blank collapse, then the
    frame loop: ``mode`` "native" (the C++ engine), "eager" (the tensor engine's Python frame loop),
    "compile" or "cuda_graphs" (its device loop)."""
    native = mode == "native"
    batch, max_len, vocab = x.shape
    offsets = st.offsets
    if collapse_on:
        assert st.collapse is not None
        collapse_fn = native_collapse if native else stream_collapse
        x, lens_s, frame_index, st.collapse = collapse_fn(x, lens, offsets, blank, collapse_th, st.collapse)
    else:
        lens_s = lens
        frame_index = offsets[:, None] + torch.arange(max_len, device=x.device)[None, :]
    if native:
        run_frames(st, x, lens_s, frame_index, scorer, beam=beam, blank=blank, beta=beta,
                   beam_threshold=beam_threshold, token_beam=token_beam)
    elif mode != "eager":  # a device loop (CUDA graphs, torch.compile), its buffers and graphs kept between calls
        run_frames_on_device(st, x, lens_s, frame_index, scorer, beam=beam, blank=blank, beta=beta,
                             beam_threshold=beam_threshold, token_beam=token_beam, mode=mode)
    else:
        _eager_frames(st, x, lens_s, frame_index,
                      Stepper(batch, beam, vocab, blank, scorer, beta, beam_threshold, token_beam, x.dtype, x.device))
    st.offsets = offsets + lens


def _eager_frames(st: CTCBeamState, x: torch.Tensor, lens: torch.Tensor, frame_index: torch.Tensor,
                  step: Stepper) -> None:
    """The Python frame loop (no padding): ``x [B, T, V]`` into ``st`` through the step's packed buffers
    (loaded once, stored back once), one tree step per frame."""
    batch = x.shape[0]
    fb = step.buffers(x.device)
    fb.load(st, batch)
    lens_col = lens[:, None]
    n_all = int(lens.min()) if batch else 0  # frames that every utterance has: no masking needed
    for t in range(x.shape[1]):
        fb.e.copy_(x[:, t])
        step.frame(fb, None if t < n_all else t < lens_col)
        rec = fb.rec.clone()  # (the buffer serves the next frame)
        st.tree.record(rec[0], rec[1], frame_index[:, t])
    fb.store(st, batch)


@takes_config(CTCBeamConfig)
def initial_beam_state(batch: int, vocab_size: int, blank_id: int, *, config: Optional[CTCBeamConfig] = None,
                       fusion: FusionArg = (), dtype: torch.dtype = torch.float32,
                       device: Union[torch.device, str] = "cpu", **settings: Any) -> CTCBeamState:
    """``CTCBeamDecoder(blank_id, config=config, fusion=fusion, **settings).init_state(batch, vocab_size=vocab_size,
    dtype=, device=)``: a fresh stream state for ``batch`` utterances of a ``vocab_size``-class model."""
    check_int("batch", batch, low=0)
    check_positive_int("vocab_size", vocab_size)
    dec = CTCBeamDecoder(blank_id, config=config, fusion=fusion, **settings)
    return dec.init_state(batch, vocab_size=vocab_size, dtype=dtype, device=device)


@takes_config(CTCBeamConfig)
def beam_search(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    *,
    config: Optional[CTCBeamConfig] = None,
    fusion: FusionArg = (),
    tokenizer: Optional[Tokenizer] = None,
    log_softmax: bool = False,
    state: Optional[CTCBeamState] = None,
    final: Any = _UNSET,
    **settings: Any,
) -> Union[list[list[Hypothesis]], CTCBeamState]:
    """``CTCBeamDecoder(blank_id, ...).decode(log_probs, lengths)``: per utterance of ``log_probs [B, T, V]``
    (``lengths [B]``, ``None``: all ``T``) up to ``nbest`` hypotheses, best first; ``config`` and / or its
    fields as keywords (:class:`~asrdecode.configs.CTCBeamConfig`), every other argument and the results as
    :class:`CTCBeamDecoder`.

    Deprecated streaming flags (they warn): ``state=`` (the previous chunk's state) and ``final=``
    (``False``: return the updated state instead of hypotheses). Use ``dec.init_state`` /
    ``dec.advance`` / ``dec.finalize`` instead.
    """
    dec = CTCBeamDecoder(blank_id, config=CTCBeamConfig.build(config, settings, caller="beam_search"),
                         fusion=fusion, tokenizer=tokenizer, log_softmax=log_softmax)
    if state is None and final is _UNSET:
        return dec.decode(log_probs, lengths)
    warnings.warn("ctc.beam_search(state=, final=) is deprecated: use CTCBeamDecoder(blank_id, ...) with "
                  "init_state(batch), advance(state, chunk, lengths) and finalize(state) (partial(state) so far)",
                  DeprecationWarning, stacklevel=2)
    if state is not None and not isinstance(state, CTCBeamState):
        raise DecodingInputError(f"state must be a CTCBeamState from a previous call, got {type(state).__name__}")
    return dec._run(state, log_probs, lengths, final=True if final is _UNSET else bool(final))
