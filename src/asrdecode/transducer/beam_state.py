"""The carried state of the streaming transducer beam search, and what moves it between chunks.

:class:`BeamState` holds the ``[B, S]`` hypothesis tensors, the backpointer tree, and per utterance the
projected encoder frames still needed (``tail``). :func:`chunk_buffer` builds the frames a chunk searches
(the tail, then the chunk's new frames), :func:`carry_state` (from a tensor-engine loop) and :func:`state_after`
(from any search's arrays: the one-call native engine's) the state after it, :func:`check_stream` checks a
state against a call, :func:`state_hypotheses` reads the current n-best out of a state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..beam_hyps import BeamTree, is_prefix_hash
from ..errors import DecodingInputError
from ..fusion import FusionScorer
from ..results import Hypothesis
from .durations import DurationRule

#: a :class:`~asrdecode.transducer.beam_loop.BeamLoop` (not imported: that module imports this one)
BeamLoop = Any

__all__ = ["BeamState", "chunk_buffer", "carry_state", "state_after", "check_stream", "state_hypotheses"]

_NEG_INF = float("-inf")


@dataclass
class BeamState:
    """What :func:`beam_search` carries from one chunk of encoder output to the next (streaming).

    Attributes:
        hyps: the ``[B, S]`` hypothesis tensors (``score``, ``time`` relative to ``offset``,
            ``symbols``, ``hash``, ``nlabels``, ``last``), ``pred_state`` (model pytree, batch
            ``B*S``), ``dec_proj`` ``[B*S, H]``, ``lm_states`` ``[B*S, M]``; ``S`` slots per
            utterance: ``beam``, for WIND ``(window + 1) * beam`` (its ring of frame lists).
        tree: the backpointer tree of every step so far (frames are global).
        offset: ``[B]`` global index of the first frame of ``tail``.
        received: ``[B]`` frames received so far.
        tail: per utterance, the projected frames ``[n_b, H]`` from ``offset`` on that are still
            needed (hypotheses not past them, or paused before them).
        config: (beam, method, window) of the search, checked on the next chunk.
    """

    hyps: dict[str, Any]
    tree: BeamTree
    offset: torch.Tensor
    received: torch.Tensor
    tail: list[torch.Tensor]
    config: tuple[int, str, int]

    @classmethod
    def join(cls, states: Sequence["BeamState"], /, *, pred_state: Any = None) -> "BeamState":
        """One batch state from batch-1 ``states`` (streams): tensors concatenated, per-utterance
        ``tail`` lists joined, the settings of the first, a fresh tree; ``pred_state`` is the batch's
        prediction-network state (model pytree; the streams keep theirs outside, see
        :class:`~asrdecode.streaming.state_batching.StatePool`)."""
        hyps: dict[str, Any] = {}
        for name, value in states[0].hyps.items():
            if name == "pred_state":
                hyps[name] = pred_state
            elif isinstance(value, torch.Tensor):
                hyps[name] = torch.cat([s.hyps[name] for s in states])
            else:
                raise TypeError(f"BeamState.hyps[{name!r}] is a {type(value).__name__}; only tensors and the "
                                "prediction state can be batched")
        return cls(hyps=hyps, tree=BeamTree(), offset=torch.cat([s.offset for s in states]),
                         received=torch.cat([s.received for s in states]),
                         tail=[x for s in states for x in s.tail], config=states[0].config)

    def split_into(self, states: Sequence["BeamState"], /) -> Any:
        """Give each batch-1 state its rows of this batch state (its tree extended by its row of the new
        steps); returns the batch's prediction-network state, which the states do not hold."""
        n = len(states)

        def rows(x: torch.Tensor, b: int) -> torch.Tensor:
            per = x.shape[0] // n
            return x[b * per:(b + 1) * per].clone()

        for b, st in enumerate(states):
            st.hyps = {**{k: rows(v, b) for k, v in self.hyps.items() if k != "pred_state"}, "pred_state": None}
            st.tree.extend(self.tree.take_rows(torch.tensor([b])))
            st.offset, st.received = rows(self.offset, b), rows(self.received, b)
            st.tail = [self.tail[b]]
        return self.hyps["pred_state"]


CARRIED = ("score", "time", "symbols", "hash", "nlabels", "last", "pred_state", "dec_proj", "lm_states")


def check_stream(state: BeamState | None, final: Any, batch: int, config: tuple[int, str, int],
                  device: torch.device) -> torch.Tensor:
    """The carried state fits this call; ``final`` as ``[B]`` flags."""
    if state is not None and (len(state.tail) != batch or state.config != config):
        raise DecodingInputError(f"state is for batch {len(state.tail)} and (beam, method, window) {state.config}, "
                                 f"not batch {batch} and {config}")
    if state is not None:
        check_carried_hypotheses(state)
    final_t = torch.as_tensor(final, dtype=torch.bool, device=device).reshape(-1)
    if final_t.numel() not in (1, batch):
        raise DecodingInputError(f"final must be one flag or {batch} flags, got {final_t.numel()}")
    return final_t.expand(batch).clone()


def check_carried_hypotheses(state: BeamState) -> None:
    """Every live carried hypothesis (score ``[B, S]`` above -inf) is on a frame ``>= 0`` (its ``time [B, S]``:
    the per-step path indexes the buffer with it) and has a prefix hash that :func:`extend_hash` makes (both
    residues in range); the one-call engine refuses them alike."""
    score, time, hsh = state.hyps["score"], state.hyps["time"], state.hyps["hash"]
    if score.shape != time.shape or score.shape != hsh.shape:
        raise DecodingInputError(f"state: score {tuple(score.shape)}, time {tuple(time.shape)} and hash "
                                 f"{tuple(hsh.shape)} differ in shape")
    live = score > float("-inf")
    if bool(((time < 0) & live).any()):
        raise DecodingInputError("state: carried frames must be >= 0 (a live hypothesis has time < 0)")
    if bool((~is_prefix_hash(hsh) & live).any()):
        raise DecodingInputError("state: a live hypothesis's hash is not a prefix hash (state damaged?)")


def chunk_buffer(
    proj: torch.Tensor, lengths: torch.Tensor, state: BeamState | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The frames a chunk call searches: per utterance the carried tail, then the new chunk's projected
    frames ``proj [B, T, H]`` from the carried offset on. Returns (buffer ``[B, T', H]``, lengths ``[B]``,
    offset ``[B]`` (global index of buffer frame 0), frames received ``[B]`` after this chunk)."""
    B = proj.shape[0]
    if state is None:
        zeros = torch.zeros(B, dtype=torch.long, device=proj.device)
        return proj, lengths, zeros, lengths.clone()
    n = lengths.tolist()
    off, rec = state.offset.tolist(), state.received.tolist()
    rows = []
    for b in range(B):
        drop = min(max(off[b] - rec[b], 0), n[b])  # frames a TDT jump already passed
        rows.append(torch.cat([state.tail[b], proj[b, drop : n[b]]]))
    new_len = torch.tensor([r.shape[0] for r in rows], dtype=torch.long, device=proj.device)
    buf = proj.new_zeros((B, max(int(new_len.max()) if B else 0, 1), proj.shape[-1]))
    for b, r in enumerate(rows):
        buf[b, : r.shape[0]] = r
    return buf, new_len, state.offset, state.received + lengths


def carry_state(loop: BeamLoop, received: torch.Tensor, config: tuple[int, str, int]) -> BeamState:
    """The state after a chunk: frames before each utterance's earliest hypothesis are dropped."""
    hyps = {name: getattr(loop, name) for name in CARRIED}
    return state_after(hyps, loop.tree, loop.enc_proj, loop.lengths[:, 0], loop.offset[:, 0], received, config)


def state_after(hyps: dict[str, Any], tree: BeamTree, enc_proj: torch.Tensor, lengths: torch.Tensor,
                offset: torch.Tensor, received: torch.Tensor, config: tuple[int, str, int]) -> BeamState:
    """The state after a chunk searched on the buffer ``enc_proj [B, T, H]`` (``lengths [B]`` frames, buffer
    frame 0 at global frame ``offset [B]``) that left the hypotheses ``hyps`` (:data:`CARRIED`; ``time``
    relative to the buffer) and ``tree``: times re-based to each utterance's earliest hypothesis, the frames
    before it dropped (``hyps`` is updated)."""
    score, time = hyps["score"], hyps["time"]
    big = torch.iinfo(torch.long).max
    start = torch.where(score > _NEG_INF, time, big).min(dim=1).values  # [B]; every utterance has a hypothesis
    hyps["time"] = time - start[:, None]
    st, ln = start.tolist(), lengths.tolist()
    tail = [enc_proj[b, min(st[b], ln[b]) : ln[b]].clone() for b in range(score.shape[0])]
    return BeamState(hyps=hyps, tree=tree, offset=offset + start, received=received, tail=tail, config=config)


def state_hypotheses(state: BeamState, scorer: FusionScorer, rule: DurationRule, nbest: int) -> list[list[Hypothesis]]:
    """The ``nbest`` best hypotheses per utterance of ``state`` (best first), ranked as the search ranks
    them at its end (``scorer``'s end-of-sentence scores added); the state is not changed."""
    score = state.hyps["score"]
    if scorer.num_models:
        scorer.check_states(state.hyps["lm_states"], "state lm_states")
        score = score + scorer.final(state.hyps["lm_states"], dtype=score.dtype).view(score.shape)
    vals, slots = score.topk(min(nbest, score.shape[1]), dim=1)
    seqs = state.tree.backtrack(torch.where(vals > _NEG_INF, slots, -1))
    out: list[list[Hypothesis]] = []
    for b, row in enumerate(vals.tolist()):
        hyps = []
        for n, val in enumerate(row):
            if val == _NEG_INF:
                continue
            tokens, data = seqs[b][n]
            frames, durations = rule.unpack_data(data)
            hyps.append(Hypothesis(tokens=tokens, timestamps=frames, score=float(val), durations=durations))
        out.append(hyps)
    return out
