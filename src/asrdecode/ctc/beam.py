"""Batched CTC prefix beam search with shallow fusion (n-gram LM, phrase boosting) and blank collapse.

All hypotheses of all utterances live in ``[B, K]`` tensors (``K = beam``): for each prefix the
CTC prefix recursion keeps two acoustic log-probabilities, ``p_b`` (paths ending in blank) and
``p_nb`` (paths ending in the prefix's last token), plus the accumulated weighted fusion score,
the fusion models' states, the prefix length, its last token and an incremental hash. One frame:

1. every hypothesis ``c`` *stays* (``p_b' = p_tot(c) + y[blank]``, ``p_nb' = p_nb(c) + y[last(c)]``)
   and is *extended* by every non-blank token ``k`` (``p_nb'(c+k) = p(c) + y[k]`` with
   ``p = p_b`` when ``k == last(c)``, else ``p_tot``), the extension's fusion score being
   ``fusion(c) + sum_i w_i * score_i(state_i(c), k)`` (late fusion: the full vocabulary is scored
   before pruning);
2. an extension ``c+k`` that is already in the beam (found in O(K^2) by comparing each
   hypothesis's parent hash with the others' hashes) is merged into that hypothesis's stay
   candidate and removed;
3. the ``K`` best candidates by ``score = logaddexp(p_b, p_nb) + fusion + beta * length`` are kept,
   and of those, the ones more than ``beam_threshold`` below the best are dropped (score ``-inf``).

The step is sync-free (no ``.item()``, no Python branch on tensor values) and keeps static
shapes; the driver loops over frames. The token sequences are kept as a backpointer tree
(:class:`asrdecode.beam_hyps.BeamTree`) and recovered once at the end, with token timestamps in
original frames (also with blank collapse, through the collapse's frame index).
:func:`asrdecode.ctc.reference_beam_search` is the same algorithm written with dictionaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import NamedTuple, Optional, Sequence, Union

import torch

from ..beam_hyps import EMPTY_HASH, BeamTree, extend_hash
from ..errors import DecodingInputError
from ..fusion import FusionModel, FusionScorer
from ..native import _lib
from ..native.choice import use_native
from ..native.ctc_beam import collapse as native_collapse
from ..native.ctc_beam import decode as native_decode
from ..native.ctc_beam import finalize as native_finalize
from ..native.ctc_beam import run_frames
from ..results import Hypothesis, Tokenizer, attach_text
from ._checks import check_beam_search_args, check_positive_int
from .collapse import CollapseState, _check_threshold, stream_collapse

__all__ = ["beam_search", "CTCBeamState", "parse_collapse"]

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
    return True, _check_threshold(blank_collapse)


@dataclass
class CTCBeamState:
    """The carried state of a (streaming) batched CTC prefix beam search; all tensors ``[B, K]`` unless noted.

    Pass it back to :func:`beam_search` with the next chunk (``state=...``); the call updates it in
    place and returns it while ``final=False``.
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

    @staticmethod
    def cat(template: "CTCBeamState", states: Sequence["CTCBeamState"]) -> "CTCBeamState":
        """One batch state from batch-1 ``states`` (streams), written into ``template``: a fresh state of
        the batch's size and settings (the search's fusion models may differ per batch: stacked
        boosting trees). The batch's tree starts empty; :meth:`split_into` hands each stream its rows."""
        for f in fields(CTCBeamState):
            if f.name == "collapse":
                template.collapse = None if states[0].collapse is None else CollapseState.cat([s.collapse for s in states])
            elif isinstance(getattr(states[0], f.name), torch.Tensor):
                setattr(template, f.name, torch.cat([getattr(s, f.name) for s in states]))
        return template

    def split_into(self, states: Sequence["CTCBeamState"]) -> None:
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


class _Stepper:
    """One frame of the batched prefix beam search over a :class:`CTCBeamState` (sync-free).

    Extensions are scored for a set of ``M`` candidate tokens per utterance: the whole vocabulary,
    the ``token_beam`` acoustically best non-blank tokens of the frame, or, without fusion models,
    the ``2 * beam`` best ones, which is exact: an extension's score is the parent's score plus
    the token's log-prob except for at most ``beam`` entries per parent (blank, the repeated last
    token, the children already in the beam) whose score is lower, so a token outside the ``2 *
    beam`` best loses to ``beam`` better extensions of the same parent.
    """

    def __init__(self, batch: int, beam: int, vocab: int, blank: int, scorer: FusionScorer,
                 beta: float, beam_threshold: float, token_beam: Optional[int], dtype: torch.dtype,
                 device: torch.device) -> None:
        self.B, self.K, self.V = batch, beam, vocab
        self.blank = blank
        self.scorer = scorer
        fusion = scorer.fusion
        self.beta = beta
        self.thr = beam_threshold
        self.dtype = dtype
        # M: candidate tokens per frame; None: the full vocabulary (blank column masked).
        if token_beam is not None:
            m = min(token_beam, vocab - 1)
        elif not fusion:
            m = min(2 * beam, vocab - 1)
        else:
            m = None
        self.M = m if (m is not None and m < vocab - 1) else None
        # Merges of children into stays are computed whenever the search is over the full vocabulary.
        self.merge_all = token_beam is None or token_beam >= vocab - 1
        self.slots = torch.arange(beam, device=device)[None, :].expand(batch, beam)
        self.blank_t = torch.tensor([blank], device=device)
        m_used = self.M if self.M is not None else vocab
        self.slot_base = {m_used: self.slots * m_used + beam}  # where slot j's extensions start in cand

    def __call__(self, st: CTCBeamState, e: torch.Tensor, active: Optional[torch.Tensor], times: torch.Tensor) -> None:
        out = self.core(st.p_b, st.p_nb, st.fscore, st.length, st.last, st.hash, st.parent_hash, st.peak,
                        st.fstates, e, active)
        (st.p_b, st.p_nb, st.fscore, st.length, st.last, st.hash, st.parent_hash, st.peak, st.fstates,
         tok, parents) = out
        st.tree.record(tok, parents, times)

    def core(self, p_b: torch.Tensor, p_nb: torch.Tensor, fscore: torch.Tensor, length: torch.Tensor,
             last: torch.Tensor, hsh: torch.Tensor, parent_hash: torch.Tensor, peak: torch.Tensor,
             fstates: torch.Tensor, e: torch.Tensor, active: Optional[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """One frame as a pure function of the state tensors; returns the new ones, tokens and parents.

        ``active [B]`` (or ``None``: all) marks utterances that have this frame; the others keep
        their state. Invalid slots carry ``hash == -1`` (``parent_hash == -2``), so the parent
        look-up needs no validity mask. Returns the new state tensors, then the tree's tokens and
        parents for this step.

        Timestamps: the tree keeps, for each prefix, the path of its best *arrival*: the frame where
        the paths that start its last token (``p(parent) + y[token]``) were most likely while it was
        in the beam, appended to the parent's own path as of the frame before. A prefix whose
        arrival beats its best so far re-links its tree node to the parent (token re-appended).
        """
        c = self._extensions(p_b, p_nb, fscore, length, last, fstates, e)
        stay = self._stays(c, p_b, p_nb, last, hsh, parent_hash, peak, e)
        new, tok_rec, par_rec = self._select(c, stay, p_b, fscore, length, last, hsh, parent_hash, fstates, e)
        if active is None:
            return (*new, tok_rec, par_rec)
        act = active[:, None]
        old = (p_b, p_nb, fscore, length, last, hsh, parent_hash, peak)
        out = [torch.where(act, n, o) for n, o in zip(new[:8], old)]
        out.append(self.scorer.where(act, new[8], fstates) if c.lm_s is not None else fstates)
        return (*out, tok_rec.masked_fill(~act, -1), torch.where(act, par_rec, self.slots))

    def _extensions(self, p_b: torch.Tensor, p_nb: torch.Tensor, fscore: torch.Tensor, length: torch.Tensor,
                    last: torch.Tensor, fstates: torch.Tensor, e: torch.Tensor) -> "_Candidates":
        """Step 1: the candidate buffer ``[B, K + K*M + 1]`` (stays, then every slot's extensions by
        the ``M`` candidate tokens, then a dummy scatter target) with the extensions scored, fusion
        included; a slot's extension by its own last token counts only paths ending in blank."""
        B, K, V = self.B, self.K, self.V
        neg = -math.inf
        p_tot = torch.logaddexp(p_b, p_nb)  # [B, K]
        last_c = last.clamp(min=0)
        e_last = torch.gather(e, 1, last_c)  # (the empty prefix has p_nb = -inf, so its value is unused)
        bonus = fscore + self.beta * length if self.beta else fscore  # non-acoustic score of a stay
        bonus1 = bonus + self.beta if self.beta else bonus  # ... and of an extension
        if self.M is None:  # candidate tokens [B, M] and their log-probs
            M, tok_ids, e_ext = V, None, e
        else:
            M = self.M
            e_ext, tok_ids = torch.topk(e.index_fill(1, self.blank_t, neg), M, dim=1)
        dummy = K + K * M
        cand = torch.empty((B, dummy + 1), dtype=self.dtype, device=e.device)
        ext = cand[:, K:dummy].view(B, K, M)
        torch.add((p_tot + bonus1)[:, :, None], e_ext[:, None, :], out=ext)
        # Fusion: the scorer's weighted sum over every token, gathered at the candidate tokens
        # (one row lookup is cheaper than per-token lookups).
        lm_s = lm_nx = None
        if self.scorer.num_models > 0:
            lm_s, lm_nx = self.scorer.advance(fstates.reshape(B * K, -1), dtype=self.dtype)  # [B*K, V], [B*K, V, Mm]
            if tok_ids is not None:
                idx3 = tok_ids[:, None, :].expand(B, K, M).reshape(B * K, M)
                lm_s, lm_nx = torch.gather(lm_s, 1, idx3), self.scorer.gather(lm_nx, idx3)
            ext.add_(lm_s.view(B, K, M))
            lm_s, lm_nx = lm_s.view(B, K * M), lm_nx.reshape(B, K * M, -1)
        if tok_ids is None:
            ext[:, :, self.blank] = neg
            last_in, last_pos = last >= 0, last_c
        else:
            last_in, last_pos = (tok_ids[:, None, :] == last[:, :, None]).max(dim=2)
        own = self.slot_base[M] + last_pos  # index of (j, last(j)) in cand
        fixed = p_b + e_last + bonus1
        if lm_s is not None:
            fixed = fixed + torch.gather(lm_s, 1, own - K)
        cand.scatter_(1, own.masked_fill(~last_in, dummy), fixed)
        return _Candidates(cand=cand, M=M, tok_ids=tok_ids, lm_s=lm_s, lm_nx=lm_nx, p_tot=p_tot, e_last=e_last,
                           bonus=bonus, last_in=last_in, last_pos=last_pos)

    def _stays(self, c: "_Candidates", p_b: torch.Tensor, p_nb: torch.Tensor, last: torch.Tensor,
               hsh: torch.Tensor, parent_hash: torch.Tensor, peak: torch.Tensor, e: torch.Tensor) -> "_Stays":
        """Step 2: each prefix staying (blank, or its last token repeated), merged with its parent's
        extension by the same token (which leaves the candidates); written to ``cand[:, :K]``."""
        K, M, neg = self.K, c.M, -math.inf
        has_parent, parent = (parent_hash[:, :, None] == hsh[:, None, :]).max(dim=2)
        par_from = torch.where(torch.gather(last, 1, parent) == last, torch.gather(p_b, 1, parent),
                               torch.gather(c.p_tot, 1, parent))
        child_in = has_parent if c.tok_ids is None else has_parent & c.last_in
        child = parent * M + c.last_pos + K
        merge = has_parent if self.merge_all else child_in
        stay_b = c.p_tot + e[:, self.blank, None]
        stay_nb = p_nb + c.e_last
        arrival = par_from + c.e_last
        stay_nb = torch.where(merge, torch.logaddexp(stay_nb, arrival), stay_nb)
        later_peak = merge & (arrival > peak)
        stay_peak = torch.where(later_peak, arrival, peak)
        c.cand.scatter_(1, child.masked_fill(~child_in, K + K * M), neg)
        torch.add(torch.logaddexp(stay_b, stay_nb), c.bonus, out=c.cand[:, :K])
        return _Stays(b=stay_b, nb=stay_nb, peak=stay_peak, later_peak=later_peak, parent=parent)

    def _select(self, c: "_Candidates", stay: "_Stays", p_b: torch.Tensor, fscore: torch.Tensor,
                length: torch.Tensor, last: torch.Tensor, hsh: torch.Tensor, parent_hash: torch.Tensor,
                fstates: torch.Tensor, e: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Step 3: the ``K`` best candidates minus those more than ``beam_threshold`` below the best
        (or impossible): their state tensors, and the tree's tokens and parents."""
        K, M, neg = self.K, c.M, -math.inf
        top, idx = torch.topk(c.cand[:, :K + K * M], K, dim=1)
        floor = (top[:, :1] - self.thr).clamp(min=torch.finfo(self.dtype).min)
        drop = top < floor
        is_ext = idx >= K
        eidx = (idx - K).clamp(min=0)
        src = torch.where(is_ext, eidx // M, idx)
        tok = eidx % M if c.tok_ids is None else torch.gather(c.tok_ids, 1, eidx % M)

        def g(x: torch.Tensor) -> torch.Tensor:
            return torch.gather(x, 1, src)

        g_last, g_hash = g(last), g(hsh)
        ext_ac = torch.where(g_last == tok, g(p_b), g(c.p_tot)) + torch.gather(e, 1, tok)
        g_fscore = g(fscore)
        ext_f = g_fscore + torch.gather(c.lm_s, 1, eidx) if c.lm_s is not None else g_fscore
        new = [
            g(stay.b).masked_fill_(is_ext | drop, neg),
            torch.where(is_ext, ext_ac, g(stay.nb)).masked_fill_(drop, neg),
            torch.where(is_ext, ext_f, g_fscore),
            g(length) + is_ext,
            torch.where(is_ext, tok, g_last),
            torch.where(is_ext, extend_hash(g_hash, tok), g_hash).masked_fill_(drop, -1),
            torch.where(is_ext, g_hash, g(parent_hash)).masked_fill_(drop, -2),
            torch.where(is_ext, ext_ac, g(stay.peak)),
        ]
        if c.lm_nx is not None:
            sc = self.scorer
            new.append(sc.where(is_ext, sc.gather(c.lm_nx, eidx), sc.gather(fstates, src)))
        else:
            new.append(fstates)
        # Tree: a new token from its parent, or a stay whose last token re-links to its best arrival.
        relink = g(stay.later_peak) & ~is_ext
        tok_rec = torch.where(is_ext, tok, g_last.masked_fill(~relink, -1))
        par_rec = torch.where(relink, g(stay.parent), src)
        return new, tok_rec, par_rec


@dataclass
class _Candidates:
    """One frame's candidate buffer and what the later steps need from building it (shapes ``[B, K]``
    unless said)."""

    cand: torch.Tensor  # [B, K + K*M + 1]
    M: int  # candidate tokens per slot
    tok_ids: Optional[torch.Tensor]  # [B, M] token of each candidate column; None: the whole vocabulary
    lm_s: Optional[torch.Tensor]  # [B, K*M] weighted fusion score of each extension; None without fusion
    lm_nx: Optional[torch.Tensor]  # [B, K*M, Mm] fusion states each extension reaches
    p_tot: torch.Tensor
    e_last: torch.Tensor  # the frame's log-prob of each slot's last token
    bonus: torch.Tensor  # non-acoustic score of a stay
    last_in: torch.Tensor  # whether each slot's last token is among the candidates
    last_pos: torch.Tensor  # its candidate column


@dataclass
class _Stays:
    """Each slot's stay after merging (``[B, K]``): blank / non-blank log-probs, best arrival, whether
    it is a later arrival (tree re-link), and the slot of its parent prefix."""

    b: torch.Tensor
    nb: torch.Tensor
    peak: torch.Tensor
    later_peak: torch.Tensor
    parent: torch.Tensor


def _finalize(st: CTCBeamState, scorer: Optional[FusionScorer], beta: float, nbest: int,
              tokenizer: Optional[Tokenizer]) -> list[list[Hypothesis]]:
    """N-best lists from the state (``scorer``: add its end-of-sentence scores; ``None``: don't).

    On CPU with the native engine loaded, the same computation runs there (one call)."""
    if st.p_b.device.type == "cpu" and _lib.loaded():
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


def _use_native(engine: object, x: torch.Tensor) -> bool:
    """Resolve ``engine`` for emissions ``x``: True for the native engine (see :func:`beam_search`)."""
    return use_native(engine, x.device, "log_probs")


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


def initial_beam_state(
    batch: int,
    vocab_size: int,
    blank_id: int,
    *,
    beam: int = 16,
    fusion: FusionArg = (),
    beta: float = 0.0,
    beam_threshold: float = 20.0,
    blank_collapse: CollapseArg = None,
    token_beam: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[torch.device, str] = "cpu",
) -> CTCBeamState:
    """A fresh stream state for ``batch`` utterances of a ``vocab_size``-class model: what
    :func:`beam_search` starts from with ``state=None`` (same settings, same checks). Pass it as
    ``state=`` with the first chunk; states of one setting batch together (``CTCBeamState.cat``)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise DecodingInputError(f"batch must be an int >= 0, got {batch!r}")
    probe = torch.empty((batch, 0, check_positive_int("vocab_size", vocab_size)), dtype=dtype, device=device)
    _, _, blank, beam, _, beta, beam_threshold = check_beam_search_args(
        probe, None, blank_id, None, beam=beam, nbest=1, beta=beta, beam_threshold=beam_threshold,
        log_softmax=False)
    return _start(None, batch, vocab_size, blank, beam, fusion, beta, beam_threshold, blank_collapse, token_beam,
                  dtype, probe.device)[1]


def beam_search(
    log_probs: torch.Tensor,
    lengths: Optional[torch.Tensor],
    blank_id: int,
    *,
    beam: int = 16,
    fusion: FusionArg = (),
    beta: float = 0.0,
    beam_threshold: float = 20.0,
    blank_collapse: CollapseArg = None,
    token_beam: Optional[int] = None,
    nbest: int = 1,
    tokenizer: Optional[Tokenizer] = None,
    log_softmax: bool = False,
    state: Optional[CTCBeamState] = None,
    final: bool = True,
    engine: str = "auto",
) -> Union[list[list[Hypothesis]], CTCBeamState]:
    """Batched CTC prefix beam search with shallow fusion.

    Args:
        log_probs: ``[B, T, V]`` log-probabilities (logits only with ``log_softmax=True``).
        lengths: ``[B]`` valid frames per utterance (``None``: all ``T``).
        blank_id: index of the blank class.
        beam: hypotheses kept per utterance (``K``, at most ``MAX_BEAM`` = 4096).
        fusion: ``[(model, weight), ...]`` fusion models (:class:`asrdecode.fusion.FusionModel`:
            n-gram LM, boosting tree), vocabulary indexed by model token id.
        beta: bonus per emitted token (insertion bonus; negative values penalise).
        beam_threshold: candidates scoring more than this below the frame's best are pruned.
        blank_collapse: ``None`` (off), a blank threshold in (0, 1) such as 0.999, or ``"weak"``;
            collapsible blank frames are removed before the search (see :func:`blank_collapse`).
        token_beam: if set, only the ``token_beam`` non-blank tokens with the highest log-prob
            at each frame extend hypotheses (token pruning, as ``beam_size_token`` in flashlight);
            ``None`` considers every token.
        nbest: hypotheses returned per utterance (at most ``beam``).
        tokenizer: optional, fills ``Hypothesis.text``; its vocabulary must match ``V``.
        log_softmax: normalise ``log_probs`` first.
        state: the state returned by the previous call of a stream (``final=False``), or ``None``.
        final: the chunk ends the stream: return hypotheses. ``final=False`` returns the updated
            :class:`CTCBeamState` instead, to pass with the next chunk (which must use the same
            batch size and settings; ``lengths`` are per chunk).
        engine: ``"native"`` (the C++ engine, CPU tensors), ``"torch"`` (the tensor engine, any
            device) or ``"auto"``: native for CPU tensors when it is available, else torch. Both
            give the same hypotheses and share the state (a stream may switch engines).

    Returns:
        With ``final=True``: per utterance, up to ``nbest`` :class:`Hypothesis` sorted best first (never
        none: an utterance whose every prefix scored ``-inf``, e.g. left a lexicon-mode word LM, gets one
        empty hypothesis with score ``-inf``);
        ``score = log p_ctc(prefix) + sum_i w_i * (LM_i(prefix) + LM_i(</s> | prefix)) + beta * len``,
        timestamps are original frame indices: the last token's is the frame where the paths that
        start it were most likely (while its prefix was in the beam), the earlier ones are those of
        its parent prefix at that moment. Otherwise the state.
    """
    x, lens, blank, beam, nbest, beta, beam_threshold = check_beam_search_args(
        log_probs, lengths, blank_id, tokenizer, beam=beam, nbest=nbest, beta=beta,
        beam_threshold=beam_threshold, log_softmax=log_softmax,
    )
    batch, max_len, vocab = x.shape
    native = _use_native(engine, x)
    if native and state is None and final and batch > 0:  # one engine call: search, collapse and n-best
        scorer, (collapse_on, collapse_th, token_beam), _ = _settings(
            batch, vocab, blank, beam, fusion, beta, beam_threshold, blank_collapse, token_beam, x.dtype)
        rows = native_decode(x, lens, scorer, beam=beam, blank=blank, beta=beta, beam_threshold=beam_threshold,
                             token_beam=token_beam,
                             collapse=0 if not collapse_on else 2 if collapse_th is None else 1,
                             collapse_threshold=collapse_th, nbest=nbest)
        if rows is not None:
            return [attach_text([Hypothesis(tokens=t, timestamps=ts, score=sc) for t, ts, sc in row] or _no_hypothesis(),
                                tokenizer) for row in rows]
    scorer, st, (collapse_on, collapse_th, token_beam) = _start(
        state, batch, vocab, blank, beam, fusion, beta, beam_threshold, blank_collapse, token_beam, x.dtype, x.device)
    if batch == 0:
        return [] if final else st
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
    else:
        step = _Stepper(batch, beam, vocab, blank, scorer, beta, beam_threshold, token_beam, x.dtype, x.device)
        n_all = int(lens_s.min()) if batch else 0  # frames that every utterance has: no masking needed
        for t in range(x.shape[1]):
            step(st, x[:, t], None if t < n_all else t < lens_s, frame_index[:, t])
    st.offsets = offsets + lens
    if not final:
        return st
    return _finalize(st, scorer, beta, nbest, tokenizer)
