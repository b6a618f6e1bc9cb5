"""The FusionModel protocol: what every beam search asks of an n-gram LM or a boosting tree.

A fusion model is a finite-state scorer over the *model's* token ids. Its states are int64
ids. ``advance`` scores every token for a batch of states at once, so a beam search can fuse
the whole vocabulary into its candidate scores in one tensor operation ("late pruning"), or
only the top acoustic candidates ("early pruning").

Convention for the blank: columns are indexed by model token id, ``vocab_size`` equals the
model's vocabulary size (blank included). The blank column (``blank_id``) always has score 0
and next state equal to the current state, so decoders never remap ids.

Scores are finite, or ``-inf`` for a token the model forbids. A model's NaN or ``+inf`` is an error
(:class:`FusionScoreError`) in every search and engine: the library's models check their tables when
they are built (their class says ``scores_checked = True``); a user model's scores are watched as the
search reads them (:meth:`FusionScorer.check_scores` once a search call ends: no host read per step).

Optional extras a fusion model may have (the library's :class:`~asrdecode.lm.NGramLM` and
:class:`~asrdecode.lm.BoostingTree` have both):

* ``score_tokens(states [N], tokens [N, K]) -> (scores [N, K], next_states [N, K])``: the same
  values as ``advance`` gathered at ``tokens``, computed without the full ``[N, V]`` rows
  (early pruning);
* ``initial_states(n, device, utterances=None)``: per-utterance models (stacked boosting trees)
  take the utterance index of each hypothesis; without it they assume the batch-major layout
  ``[B, beam]`` flattened.

:class:`FusionScorer` combines several ``(model, weight)`` pairs into one weighted score with
batched states ``[N, M]`` (one column per model), which is what every beam search keeps. The
searches treat those states as opaque: they move them only through the scorer's
:meth:`~FusionScorer.select`, :meth:`~FusionScorer.gather` and :meth:`~FusionScorer.where`, so a
scorer whose states are not int64 columns (a neural LM's hidden state) changes only this class.
"""

from __future__ import annotations

import inspect
import math
from typing import Protocol, Sequence, runtime_checkable

import torch

from .errors import DecodingInputError, check_weight

__all__ = ["FusionModel", "FusionScorer", "FusionScoreError", "PreparedFusion", "check_fusion", "gather_next_states",
           "check_model_scores"]


class FusionScoreError(DecodingInputError):
    """A fusion model returned NaN or +inf scores (a score must be finite, or -inf for a forbidden token)."""


def _fusion_score_error(i: int, model: object) -> FusionScoreError:
    return FusionScoreError(f"fusion[{i}] ({type(model).__name__}) returned NaN or +inf scores; a fusion model's "
                            "scores must be finite, or -inf for a token it forbids")


def scores_checked(model: object) -> bool:
    """Whether ``model``'s scores were checked when it was built (the library's n-gram LMs, word LMs and
    boosting trees), so that a search need not watch them."""
    return bool(getattr(model, "scores_checked", False))


def check_model_scores(i: int, model: object, scores: torch.Tensor) -> None:
    """Raise :class:`FusionScoreError` if ``scores`` (any shape) of ``fusion[i]`` hold a NaN or +inf (one host
    read: for the CPU paths and the oracles; a search on a device watches through its :class:`FusionScorer`)."""
    if scores.numel() and not bool((scores < math.inf).all()):
        raise _fusion_score_error(i, model)


@runtime_checkable
class FusionModel(Protocol):
    """A scorer with integer states over the model's vocabulary (natural-log scores)."""

    vocab_size: int
    blank_id: int | None

    def initial_states(self, n: int, device: torch.device | None = None) -> torch.Tensor:
        """States ``[n]`` (int64) for ``n`` fresh hypotheses."""
        ...

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (float) and next states ``[N, V]`` (int64) of every token from ``states [N]``."""
        ...

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """End-of-sentence scores ``[N]`` for ``states [N]``."""
        ...


def check_fusion(fusion: Sequence[tuple[FusionModel, float]] | None, vocab_size: int) -> list[tuple[FusionModel, float]]:
    """Validate ``[(model, weight), ...]`` against the decoder's vocabulary size; return it as a list.

    Every weight must be a real number with ``|w| <= MAX_ABS_WEIGHT`` (:func:`~asrdecode.errors.check_weight`:
    a NaN, infinite or huge weight would turn every fused score into NaN / inf and the beam into
    empty or wrong hypotheses).
    """
    out: list[tuple[FusionModel, float]] = []
    if fusion is not None and not isinstance(fusion, (list, tuple)):
        raise DecodingInputError(f"fusion must be a list of (FusionModel, weight) pairs, got {type(fusion).__name__}")
    for i, item in enumerate(fusion or ()):
        try:
            model, weight = item
        except (TypeError, ValueError):
            raise DecodingInputError(f"fusion[{i}] must be a (FusionModel, weight) pair") from None
        if not _is_fusion_model(model):
            raise DecodingInputError(f"fusion[{i}] model does not implement FusionModel")
        if int(model.vocab_size) != int(vocab_size):
            raise DecodingInputError(
                f"fusion[{i}] has vocab_size {model.vocab_size} but the acoustic model has {vocab_size}"
            )
        out.append((model, _finite_weight(i, weight)))
    return out


def _finite_weight(i: int, weight: object) -> float:
    return check_weight(f"fusion[{i}] weight", weight)


_FUSION_TYPES: set = set()


def _is_fusion_model(model: object) -> bool:
    """``isinstance(model, FusionModel)``, remembered per type once true (the protocol check is slow)."""
    if type(model) in _FUSION_TYPES and hasattr(model, "vocab_size") and hasattr(model, "blank_id"):
        return True
    if isinstance(model, FusionModel):
        _FUSION_TYPES.add(type(model))
        return True
    return False


class FusionScorer:
    """Weighted sum of several fusion models, with batched states ``[N, M]`` (``M`` models).

    ``scores = sum_i weight_i * score_i``; the states of model ``i`` are column ``i``. With no
    models (``M = 0``) every score is 0 and states have shape ``[N, 0]``, so a decoder can use one
    code path with or without fusion.

    Args:
        fusion: ``[(model, weight), ...]``.
        vocab_size: the acoustic model's vocabulary size (checked against every model).
        blank_id: the acoustic model's blank id; a model with a different (non-None) blank_id is
            an error.
    """

    def __init__(self, fusion: Sequence[tuple[FusionModel, float]] | None, vocab_size: int,
                 blank_id: int | None = None) -> None:
        from .errors import DecodingInputError

        self.fusion = check_fusion(fusion, vocab_size)
        self.vocab_size = int(vocab_size)
        self.blank_id = blank_id
        for i, (m, _) in enumerate(self.fusion):
            mb = getattr(m, "blank_id", None)
            if blank_id is not None and mb is not None and int(mb) != int(blank_id):
                raise DecodingInputError(f"fusion[{i}] has blank_id {mb} but the acoustic model's is {blank_id}")
        self.models = [m for m, _ in self.fusion]
        self.weights = [w for _, w in self.fusion]
        self._watched = [not scores_checked(m) for m in self.models]
        self._bad: torch.Tensor | None = None  # [M] bool on the scores' device: a watched model's NaN / +inf
        self._has_score_tokens = [callable(getattr(m, "score_tokens", None)) for m in self.models]
        self._takes_utterances = [_accepts(m.initial_states, "utterances") for m in self.models]

    def graph_key(self) -> tuple:
        """The models' identity, weights and tensors by address: a captured CUDA graph reads the tensors
        by address, so a model whose tensors were rebuilt is a new key for the loops' caches. Each model
        is validated first (``ensure_valid``), so derived tensors are rebuilt here, not inside a captured
        step."""
        return tuple((id(m), w, _tensor_addresses(m, 3)) for m, w in self.fusion)

    @property
    def takes_utterances(self) -> list[bool]:
        """Per model: whether its ``initial_states`` takes the hypotheses' utterances (per-utterance models)."""
        return self._takes_utterances

    @property
    def num_models(self) -> int:
        return len(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def initial(self, n: int, device: torch.device | None = None,
                utterances: torch.Tensor | None = None) -> torch.Tensor:
        """States ``[n, M]`` (int64) of fresh hypotheses (``utterances [n]``: see the module docstring)."""
        self.watch_on(torch.device("cpu") if device is None else torch.device(device))
        cols = []
        for m, takes in zip(self.models, self._takes_utterances):
            if utterances is not None and takes:
                s = m.initial_states(n, device=device, utterances=utterances)  # type: ignore[call-arg]  # optional extension (takes)
            else:
                s = m.initial_states(n, device=device)
            cols.append(s.to(dtype=torch.int64))
        if not cols:
            return torch.zeros((n, 0), dtype=torch.int64, device=device)
        return torch.stack(cols, dim=1)

    def advance(self, states: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted scores ``[N, V]`` and next states ``[N, V, M]`` of every token from ``states [N, M]``."""
        N = states.shape[0]
        if not self.models:
            return (torch.zeros((N, self.vocab_size), dtype=dtype, device=states.device),
                    torch.zeros((N, self.vocab_size, 0), dtype=torch.int64, device=states.device))
        total = None
        nexts = []
        for i, (m, w) in enumerate(self.fusion):
            sc, nx = m.advance(states[:, i].contiguous())
            self._watch(i, sc)
            term = weigh(sc if sc.dtype == dtype else sc.to(dtype), w)
            total = term if total is None else total.add_(term)
            nexts.append(nx)
        assert total is not None  # self.models is not empty
        return total, (nexts[0].unsqueeze(-1) if len(nexts) == 1 else torch.stack(nexts, dim=-1))

    def prepare(self, states: torch.Tensor, out: torch.Tensor, dtype: torch.dtype = torch.float32) -> "PreparedFusion":
        """:meth:`advance` of a fixed states tensor ``states [N, M]`` (a view its owner updates in place),
        for a loop calling it every frame: the weighted scores written into ``out`` (``N * V`` elements,
        any shape and strides, e.g. a view of a candidate buffer), the next states returned. One model
        with ``prepare_advance`` (the library's n-gram LM and boosting tree) runs with its buffers made
        once; others call :meth:`advance` and copy. The blank column's score and state are unspecified
        (finite, valid): for callers that mask the blank's extensions."""
        return PreparedFusion(self, states, out, dtype)

    def score_tokens(self, states: torch.Tensor, tokens: torch.Tensor,
                     dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted scores ``[N, K]`` and next states ``[N, K, M]`` of ``tokens [N, K]`` only."""
        N, K = tokens.shape
        if not self.models:
            return (torch.zeros((N, K), dtype=dtype, device=tokens.device),
                    torch.zeros((N, K, 0), dtype=torch.int64, device=tokens.device))
        total = None
        nexts = []
        for i, (m, w) in enumerate(self.fusion):
            s = states[:, i].contiguous()
            if self._has_score_tokens[i]:
                sc, nx = m.score_tokens(s, tokens)  # type: ignore[attr-defined]  # optional method (checked)
            else:
                sc, nx = m.advance(s)
                sc, nx = sc.gather(1, tokens), nx.gather(1, tokens)
            self._watch(i, sc)
            term = weigh(sc.to(dtype), w)
            total = term if total is None else total.add_(term)
            nexts.append(nx)
        assert total is not None  # self.models is not empty
        return total, torch.stack(nexts, dim=-1)

    # -- moving states with their hypotheses (the searches never index states themselves) --

    def select(self, states: torch.Tensor, index: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The states of the hypotheses ``index`` picks: ``states [N, ..., M]`` indexed on its leading
        dimension(s) (``index`` a tensor of rows, or a tuple of index tensors), shape ``[*index, M]``."""
        return states[index]

    def gather(self, states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Per-row pick: ``states [B, P, M]`` at ``index [B, Q]`` along dimension 1, shape ``[B, Q, M]``.

        Also picks the states reached by ``tokens [N, K]`` from ``advance``'s next states ``[N, V, M]``."""
        return gather_next_states(states, index)

    def where(self, take_new: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        """``new`` where the boolean ``take_new [...]`` is true, else ``old`` (states ``[..., M]``; ``take_new``
        broadcasts over the leading dimensions)."""
        return torch.where(take_new[..., None], new, old)

    def check_states(self, states: torch.Tensor, name: str = "lm_states") -> None:
        """Every state ``[N, M]`` of an n-gram LM, boosting tree (their automaton's states) or word LM (its
        ``state_error``) is one of its states, else a named error (a host read: for states that come from outside, as a carried stream's)."""
        from .lm._automaton import BackoffAutomaton

        for i, m in enumerate(self.models):
            state_error = getattr(m, "state_error", None)  # a model with states of its own encoding
            if callable(state_error) and states.shape[0]:
                why = state_error(states[:, i])
                if why is not None:
                    raise DecodingInputError(f"{name}[:, {i}] (fusion[{i}]'s states) {why}")
                continue
            auto = getattr(m, "automaton", None)
            if not isinstance(auto, BackoffAutomaton) or states.shape[0] == 0:
                continue
            col, n = states[:, i], auto.final_weight.shape[0]
            lo, hi = int(col.min()), int(col.max())
            if lo < 0 or hi >= n:
                raise DecodingInputError(f"{name}[:, {i}] must be in [0, {n}) (fusion[{i}]'s states), "
                                         f"found values in [{lo}, {hi}]")

    def _watch(self, i: int, scores: torch.Tensor) -> None:
        """Note a NaN or +inf in a watched model's ``scores`` (a flag on their device, updated in place: a
        captured CUDA graph keeps updating it; no host read)."""
        if not self._watched[i] or scores.numel() == 0:
            return
        self._flag(scores.device)[i].logical_or_(~(scores.amax() < math.inf))  # (NaN propagates through amax)

    def watch_on(self, device: torch.device) -> None:
        """Make the watch's flag on ``device`` now (with a watched model): a loop that will capture its rounds
        calls it first (``initial`` does), so that the flag is not made inside a capture (a captured fill would
        clear it every replay)."""
        if any(self._watched):
            self._flag(device)

    def _flag(self, device: torch.device) -> torch.Tensor:
        """The watch's flags ``[M]`` (bool) on ``device``, made on first use there."""
        bad = self._bad
        if bad is None or bad.device.type != device.type or device.index not in (None, bad.device.index):
            self._bad = bad = torch.zeros(len(self.models), dtype=torch.bool, device=device)
        return bad

    def check_scores(self) -> None:
        """Raise :class:`FusionScoreError` if a watched model returned NaN or +inf scores since the last check
        (a search calls it once its call ends: one host read, only with a watched model), then reset."""
        if self._bad is None:
            return
        bad = self._bad.tolist()
        self._bad.zero_()
        if any(bad):
            i = bad.index(True)
            raise _fusion_score_error(i, self.models[i])

    def final(self, states: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Weighted end-of-sentence scores ``[N]`` of ``states [N, M]``."""
        total = None
        for i, (m, w) in enumerate(self.fusion):
            sc = m.final(states[:, i].contiguous())
            self._watch(i, sc)
            term = weigh(sc.to(dtype), w)
            total = term if total is None else total.add_(term)
        if total is None:
            return torch.zeros(states.shape[0], dtype=dtype, device=states.device)
        return total


class PreparedFusion:
    """:meth:`FusionScorer.prepare`'s result: ``run()`` writes the weighted scores into ``out`` and returns
    the next states ``[N, V, M]`` (the same tensor every call when ``stable``)."""

    def __init__(self, scorer: FusionScorer, states: torch.Tensor, out: torch.Tensor, dtype: torch.dtype) -> None:
        self.scorer, self.states, self.out, self.dtype = scorer, states, out, dtype
        self.ready = None
        if len(scorer.models) == 1:
            prep = getattr(scorer.models[0], "prepare_advance", None)
            self.ready = prep(states[:, 0]) if callable(prep) else None
        self.stable = self.ready is not None
        if self.ready is not None:
            self.weight = scorer.weights[0]
            self.scores_view = self.ready.scores.view(out.shape)
            self.next = self.ready.nxt[:, :, None]
            self.same_dtype = self.ready.scores.dtype == dtype

    def run(self) -> torch.Tensor:
        if self.ready is None:
            sc, nx = self.scorer.advance(self.states, self.dtype)
            self.out.copy_(sc.view(self.out.shape))
            return nx
        self.ready.run()
        sc = self.scores_view if self.same_dtype else self.scores_view.to(self.dtype)
        if torch.compiler.is_compiling():
            self.out.copy_(weigh(sc, self.weight))  # (Dynamo breaks the graph at a strided out=)
        else:
            weigh(sc, self.weight, out=self.out)
        return self.next


def weigh(scores: torch.Tensor, weight: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """A fusion model's ``scores`` at ``weight``: ``weight * scores``, except that ``-inf`` (the model forbids
    the token: a word a lexicon-mode LM cannot spell) stays ``-inf`` at a weight ``<= 0``, where the product
    would be ``+inf`` (every search would take the forbidden token) or NaN. Every engine weighs so. ``out``:
    written in place (any strides) instead of a new tensor."""
    if weight > 0:
        return torch.mul(scores, weight, out=out)
    return torch.where(scores == -math.inf, scores, scores * weight, out=out)


def weigh_float(score: float, weight: float) -> float:
    """:func:`weigh` of one Python float (the oracles)."""
    return score if score == -math.inf and weight <= 0 else weight * score


def gather_next_states(next_states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """States ``[N, K, M]`` reached by ``tokens [N, K]`` from ``next_states [N, V, M]`` (``advance``'s output)."""
    M = next_states.shape[-1]
    return next_states.gather(1, tokens[:, :, None].expand(-1, -1, M))


def _accepts(fn: object, name: str) -> bool:
    func = getattr(fn, "__func__", fn)  # a bound method's function: the same for every instance
    try:
        key = (func, name)
        hit = _ACCEPTS_CACHE.get(key)
    except TypeError:  # unhashable callable
        return _signature_has(fn, name)
    if hit is None:
        hit = _ACCEPTS_CACHE[key] = _signature_has(fn, name)
    return hit


_ACCEPTS_CACHE: dict = {}


def _signature_has(fn: object, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _tensor_addresses(obj: object, depth: int) -> tuple:
    """``(name, address, shape, dtype)`` of the tensors among ``obj``'s attributes, ``depth`` objects deep."""
    ensure = getattr(obj, "ensure_valid", None)
    if callable(ensure):
        ensure()
    out: list[tuple] = []
    for name, value in sorted(vars(obj).items()) if hasattr(obj, "__dict__") else ():
        if isinstance(value, torch.Tensor):
            out.append((name, value.data_ptr(), tuple(value.shape), value.dtype))
        elif depth > 0 and hasattr(value, "__dict__") and not isinstance(value, type):
            out.append((name, _tensor_addresses(value, depth - 1)))
    return tuple(out)
