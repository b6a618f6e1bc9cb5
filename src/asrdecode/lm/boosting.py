"""Phrase boosting (context biasing) as a fusion model: an Aho-Corasick trie over token ids.

:class:`BoostingTree` rewards hypotheses that spell user phrases (names, product terms). It is a
:class:`~asrdecode.fusion.FusionModel`, so every beam search fuses it exactly like an n-gram LM,
for the whole vocabulary at once, and both can be used together.

Scoring. Each phrase ``p`` (token ids ``t1..tL``, bonus ``w`` per token) earns ``w * L`` once it
is completed; a partial match is credited as it grows (so that the beam keeps it) and the credit
is taken back when the match is abandoned. Formally each trie node ``v`` has a *potential*
``phi(v)`` (the credit of the partial match it stands for: ``w * depth`` for a node that can still
grow, and the potential of its failure target for a leaf) and ``out(v)``, the total bonus of the
phrases that end at ``v`` (its own and those reached by failure links, so overlapping phrases
all count). Moving from ``u`` to ``v = goto(u, t)`` scores ``phi(v) - phi(u) + out(v)``, and
``final(v) = -phi(v)``. Hence the total over an utterance (with ``final``) is exactly the sum of
the bonuses of the completed phrase occurrences, and an abandoned prefix nets zero.

The automaton is the same tensor structure as the n-gram LM (failure links are back-off links
whose weights ``phi(fail(u)) - phi(u)`` cancel the partial credit), so ``advance`` is the same
vectorised pass: no loop over states or tokens.

Per-utterance phrase lists: :meth:`BoostingTree.stack` puts several trees into one structure
with one root per utterance; :meth:`~BoostingTree.initial_states` then takes the utterance of
each hypothesis (``utterances [N]``), or assumes the batch-major layout ``[B, beam]`` flattened
(hypotheses of utterance ``b`` at ``b * beam .. (b + 1) * beam - 1``) when only ``n`` is given.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence, Union

import numpy as np
import torch

from ..errors import DecodingInputError, check_weight
from ..tokenizers import UNKNOWN_POLICIES, spell
from ._automaton import BackoffAutomaton

__all__ = ["BoostingTree"]

Phrase = Union[str, tuple[str, float]]


class BoostingTree:
    """Aho-Corasick phrase boosting over model token ids, with the FusionModel interface.

    Attributes:
        vocab_size: the model's vocabulary size (blank included).
        blank_id: blank id (score 0, state kept), or ``None``.
        num_trees: number of stacked per-utterance trees (1 for a single phrase list).
        roots: int64 ``[num_trees]`` root state of each tree.
    """

    #: its score tables are checked when built (no NaN or +inf): searches need not watch its scores
    scores_checked = True

    def __init__(self, automaton: BackoffAutomaton, roots: torch.Tensor, phrases: list[list[tuple[list[int], float]]]):
        self.automaton = automaton
        self.vocab_size = automaton.vocab_size
        self.blank_id = automaton.blank_id
        self.roots = roots.to(torch.int64)
        self.num_trees = int(roots.numel())
        self.phrases = phrases  # per tree: [(token ids, per-token weight)]
        self.skipped: list[str] = []  # phrases from_phrases(on_unknown="skip") left out
        self.validate()

    def validate(self) -> None:
        """Check the automaton's arrays and the roots (raises :class:`DecodingInputError`); the engines
        require this mark (:meth:`BackoffAutomaton.ensure_valid`)."""
        self.automaton.ensure_valid()
        if self.roots.dim() != 1 or self.roots.numel() < 1:
            raise DecodingInputError(f"BoostingTree: roots must be a 1-D tensor of >= 1 states, got "
                                     f"shape {tuple(self.roots.shape)}")
        S = self.automaton.num_states
        if self.roots.device.type != "meta" and int(self.roots.min()) < 0 or int(self.roots.max()) >= S:
            raise DecodingInputError(f"BoostingTree: roots must be states in [0, {S})")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_phrases(
        cls,
        phrases: Sequence[Phrase],
        tokenizer: object,
        weight: float = 1.0,
        *,
        vocab_size: int | None = None,
        blank_id: int | None = None,
        device: torch.device | str | None = None,
        dense_memory_mb: float = 16.0,
        on_unknown: str = "error",
    ) -> "BoostingTree":
        """Build from text phrases tokenised by ``tokenizer``.

        Args:
            phrases: strings, or ``(string, weight)`` pairs to override ``weight`` per phrase.
            tokenizer: an object with ``encode(text) -> list[int]`` (model token ids), or such a
                callable; ``vocab_size`` / ``blank_id`` default to its attributes.
            weight: bonus per token (natural-log units); a completed phrase of ``L`` tokens earns
                ``weight * L``.
            on_unknown: what to do with a phrase holding characters the tokenizer cannot spell
                (digits, CJK, emoji outside a sentencepiece vocabulary become ``<unk>``, and
                ``"word1"`` / ``"word2"`` would both boost ``▁wor d <unk>``): "error" (default)
                raises naming the phrase and the characters; "skip" leaves the phrase out (the
                skipped phrases are listed in ``tree.skipped``).

        Note: a subword tokenizer may split a phrase differently inside a sentence than alone
        (e.g. sentencepiece's word-initial ``▁``); phrases are matched as tokenised alone.

        Raises:
            DecodingInputError: empty phrase list, a phrase that is not a string, tokenises to
                nothing, holds characters the tokenizer cannot spell (``on_unknown="error"``), or
                gives token ids outside the vocabulary or equal to the blank; no phrase left
                after skipping.
        """
        if not (hasattr(tokenizer, "encode") or callable(tokenizer)):
            raise DecodingInputError("tokenizer must have an encode(text) method or be callable")
        if vocab_size is None:
            vocab_size = getattr(tokenizer, "vocab_size", None)
            if vocab_size is None:
                raise DecodingInputError("vocab_size is required (the tokenizer has no vocab_size)")
        if blank_id is None:
            blank_id = getattr(tokenizer, "blank_id", None)
        if on_unknown not in UNKNOWN_POLICIES:
            raise DecodingInputError(f"on_unknown must be one of {UNKNOWN_POLICIES}, got {on_unknown!r}")
        items = _check_phrases(phrases, weight)
        seqs, names, skipped = [], [], []
        for i, (text, w) in enumerate(items):
            ids, unknown = spell(tokenizer, text)
            if unknown:
                if on_unknown == "skip":
                    skipped.append(text)
                    continue
                raise DecodingInputError(
                    f"phrases[{i}] = {text!r} holds characters the tokenizer cannot spell "
                    f"({', '.join(map(repr, unknown))}); the model cannot emit them. Remove or spell them "
                    "out, or pass on_unknown='skip'"
                )
            if not ids:
                raise DecodingInputError(f"phrases[{i}] = {text!r} has no tokenisation (encodes to no tokens)")
            seqs.append((ids, w))
            names.append(text)
        if not seqs:
            raise DecodingInputError(f"no phrase left: all {len(skipped)} phrases hold characters the tokenizer "
                                     f"cannot spell (first: {skipped[0]!r})")
        tree = cls.from_token_sequences(
            seqs, vocab_size=int(vocab_size), blank_id=blank_id, device=device, dense_memory_mb=dense_memory_mb,
            _names=names,
        )
        tree.skipped = skipped
        return tree

    @classmethod
    def from_token_sequences(
        cls,
        sequences: Sequence[Sequence[int] | tuple[Sequence[int], float]],
        vocab_size: int,
        blank_id: int | None,
        weight: float = 1.0,
        *,
        device: torch.device | str | None = None,
        dense_memory_mb: float = 16.0,
        _names: Sequence[str] | None = None,
    ) -> "BoostingTree":
        """Build from phrases already given as token ids (optionally ``(ids, weight)`` pairs)."""
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise DecodingInputError(f"vocab_size must be a positive int, got {vocab_size!r}")
        if blank_id is not None and not (isinstance(blank_id, int) and 0 <= blank_id < vocab_size):
            raise DecodingInputError(f"blank_id must be None or in 0..{vocab_size - 1}, got {blank_id!r}")
        _check_weight("weight", weight)
        if isinstance(sequences, (str, bytes)) or len(sequences) == 0:
            raise DecodingInputError("the phrase list is empty")
        seqs: list[tuple[list[int], float]] = []
        for i, item in enumerate(sequences):
            name = repr(_names[i]) if _names is not None else f"sequences[{i}]"
            if isinstance(item, tuple) and len(item) == 2 and not isinstance(item[1], (list, tuple)) \
                    and isinstance(item[0], (list, tuple, torch.Tensor, np.ndarray)):
                ids_raw, w = item
                _check_weight(f"weight of {name}", w)
            else:
                ids_raw, w = item, weight
            ids = [int(t) for t in (ids_raw.tolist() if isinstance(ids_raw, (torch.Tensor, np.ndarray)) else ids_raw)]
            if not ids:
                raise DecodingInputError(f"phrase {name} has no tokens")
            for t in ids:
                if not 0 <= t < vocab_size:
                    raise DecodingInputError(f"phrase {name}: token id {t} is outside the vocabulary 0..{vocab_size - 1}")
                if t == blank_id:
                    raise DecodingInputError(f"phrase {name}: token id {t} is the blank")
            seqs.append((ids, float(w)))
        arrays = _build_arrays(seqs, vocab_size)
        automaton = _automaton_from_arrays([arrays], vocab_size, blank_id, device, dense_memory_mb)
        roots = torch.zeros(1, dtype=torch.int64, device=automaton.arc_offsets.device)
        return cls(automaton, roots, [seqs])

    @classmethod
    def empty(cls, vocab_size: int, blank_id: int | None, *, device: torch.device | str | None = None) -> "BoostingTree":
        """A tree without phrases (every score 0): the entry of an utterance with no phrases in :meth:`stack`."""
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
            raise DecodingInputError(f"vocab_size must be a positive int, got {vocab_size!r}")
        if blank_id is not None and not (isinstance(blank_id, int) and 0 <= blank_id < vocab_size):
            raise DecodingInputError(f"blank_id must be None or in 0..{vocab_size - 1}, got {blank_id!r}")
        automaton = _automaton_from_arrays([_build_arrays([], vocab_size)], vocab_size, blank_id, device, 16.0)
        return cls(automaton, torch.zeros(1, dtype=torch.int64, device=automaton.arc_offsets.device), [[]])

    @classmethod
    def stack(cls, trees: Sequence["BoostingTree"], *, dense_memory_mb: float = 16.0) -> "BoostingTree":
        """One structure holding ``trees`` (tree ``i`` = utterance ``i``) with one root each."""
        if len(trees) == 0:
            raise DecodingInputError("stack() needs at least one BoostingTree")
        V, blank = trees[0].vocab_size, trees[0].blank_id
        for i, t in enumerate(trees):
            if not isinstance(t, BoostingTree):
                raise DecodingInputError(f"trees[{i}] is not a BoostingTree")
            if t.vocab_size != V or t.blank_id != blank:
                raise DecodingInputError(
                    f"trees[{i}] has vocab_size {t.vocab_size}, blank_id {t.blank_id}; trees[0] has {V}, {blank}"
                )
        parts = [_arrays_from_automaton(t.automaton) for t in trees]
        device = trees[0].automaton.arc_offsets.device
        automaton = _automaton_from_arrays(parts, V, blank, device, dense_memory_mb)
        sizes = [p["backoff_state"].shape[0] for p in parts]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        roots = []
        for t, s in zip(trees, starts):
            roots.extend((t.roots.cpu().numpy() + s).tolist())
        phrases = [ph for t in trees for ph in t.phrases]
        return cls(automaton, torch.tensor(roots, dtype=torch.int64, device=device), phrases)

    # ------------------------------------------------------------------ FusionModel
    @property
    def device(self) -> torch.device:
        return self.automaton.arc_offsets.device

    @property
    def num_states(self) -> int:
        return self.automaton.num_states

    def initial_states(
        self, n: int, device: torch.device | str | None = None, utterances: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Root states ``[n]``.

        With several stacked trees: ``utterances [n]`` gives the tree of each hypothesis; without
        it ``n`` must be a multiple of ``num_trees`` and the layout is batch-major
        (``[num_trees, n // num_trees]`` flattened). A single tree serves every utterance, so
        its ``utterances`` may hold any utterance index.
        """
        device = device or self.device
        roots = self.roots.to(device)
        if utterances is not None:
            if not isinstance(utterances, torch.Tensor) or utterances.dim() != 1 or utterances.shape[0] != n:
                raise DecodingInputError(f"utterances must be a 1-D tensor of {n} tree indices")
            if utterances.is_floating_point() or utterances.dtype == torch.bool:
                raise DecodingInputError(f"utterances must be an integer tensor, got {utterances.dtype}")
            if self.num_trees == 1:
                return roots.expand(int(n)).clone()
            if n and (int(utterances.min()) < 0 or int(utterances.max()) >= self.num_trees):
                raise DecodingInputError(f"utterances must be in 0..{self.num_trees - 1}")
            return roots[utterances.to(device=device, dtype=torch.int64)]
        if self.num_trees == 1:
            return roots.expand(int(n)).clone()
        if n % self.num_trees:
            raise DecodingInputError(
                f"{self.num_trees} stacked trees need n to be a multiple of {self.num_trees} "
                f"(batch-major [B, beam] layout) or explicit utterances; got n={n}"
            )
        return roots.repeat_interleave(n // self.num_trees)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (bonus increments, float32) and next states ``[N, V]`` (int64) from ``states [N]``."""
        return self.automaton.advance(states)

    def prepare_advance(self, states: torch.Tensor) -> Any:
        """:meth:`advance` of a fixed ``states [N]`` tensor with its buffers made once (``.run()``; the
        blank column's score 0, its state valid), or ``None``: see :meth:`BackoffAutomaton.prepare_advance`."""
        return self.automaton.prepare_advance(states)

    def score_tokens(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and next states ``[N, K]`` of only ``tokens [N, K]``."""
        return self.automaton.score_tokens(states, tokens)

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """``[N]``: minus the partial credit still held by ``states`` (unfinished phrases net zero)."""
        return self.automaton.final(states)

    def score_sequence(self, tokens: Sequence[int], *, tree: int = 0, final: bool = True) -> float:
        """Total bonus of a token sequence (with ``final``: exactly the completed phrases' bonuses)."""
        ids = []
        for i, x in enumerate(tokens):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < self.vocab_size:
                raise DecodingInputError(f"tokens[{i}] = {x!r} is not a token id in 0..{self.vocab_size - 1}")
            ids.append(int(x))
        if not 0 <= tree < self.num_trees:
            raise DecodingInputError(f"tree must be in 0..{self.num_trees - 1}, got {tree}")
        state = self.roots[tree : tree + 1]
        total = 0.0
        for t in ids:
            s, n = self.score_tokens(state, torch.tensor([[t]], device=self.device))
            total += float(s[0, 0])
            state = n[:, 0]
        if final:
            total += float(self.final(state)[0])
        return total

    def to(self, device: torch.device | str) -> "BoostingTree":
        """A copy on ``device``."""
        return BoostingTree(self.automaton.to(device), self.roots.to(device), self.phrases)

    def __repr__(self) -> str:
        n = sum(len(p) for p in self.phrases)
        return (f"BoostingTree(trees={self.num_trees}, phrases={n}, states={self.num_states}, "
                f"vocab_size={self.vocab_size}, blank_id={self.blank_id})")


# ---------------------------------------------------------------------- building
def _check_weight(name: str, w: object) -> None:
    if isinstance(w, bool) or not isinstance(w, (int, float)):
        raise DecodingInputError(f"{name} must be a finite number, got {w!r}")
    check_weight(name, w)  # finite, |w| <= MAX_ABS_WEIGHT


def _check_phrases(phrases: object, weight: float) -> list[tuple[str, float]]:
    _check_weight("weight", weight)
    if isinstance(phrases, (str, bytes)):
        raise DecodingInputError("phrases must be a list of strings, not a single string")
    try:
        items = list(phrases)  # type: ignore[call-overload]  # any iterable; TypeError is caught
    except TypeError:
        raise DecodingInputError(f"phrases must be a list of strings, got {type(phrases).__name__}") from None
    if not items:
        raise DecodingInputError("the phrase list is empty")
    out = []
    for i, p in enumerate(items):
        if isinstance(p, tuple) and len(p) == 2:
            text, w = p
            _check_weight(f"phrases[{i}] weight", w)
        else:
            text, w = p, weight
        if not isinstance(text, str):
            raise DecodingInputError(f"phrases[{i}] must be a str or (str, weight), got {p!r}")
        if not text.strip():
            raise DecodingInputError(f"phrases[{i}] is empty")
        out.append((text, float(w)))
    return out


def _build_arrays(seqs: list[tuple[list[int], float]], vocab_size: int) -> dict[str, np.ndarray]:
    """Aho-Corasick arrays of one tree (node 0 = root): arcs, failure links, potentials, finals."""
    children: list[dict[int, int]] = [{}]
    depth = [0]
    node_w = [0.0]
    own_bonus: dict[int, float] = {}
    for ids, w in seqs:
        v = 0
        for t in ids:
            nxt = children[v].get(t)
            if nxt is None:
                nxt = len(children)
                children[v][t] = nxt
                children.append({})
                depth.append(depth[v] + 1)
                node_w.append(w)
            else:
                node_w[nxt] = max(node_w[nxt], w)
            v = nxt
        # the same phrase twice: keep the larger bonus
        own_bonus[v] = max(own_bonus.get(v, float("-inf")), w * len(ids))
    n = len(children)
    fail = [0] * n
    order = []
    queue = deque([0])
    while queue:
        u = queue.popleft()
        order.append(u)
        for t, c in children[u].items():
            if u == 0:
                fail[c] = 0
            else:
                f = fail[u]
                while f and t not in children[f]:
                    f = fail[f]
                fail[c] = children[f].get(t, 0)
            queue.append(c)
    out = [0.0] * n
    phi = [0.0] * n
    for v in order:  # BFS: failure targets are shallower, already done
        if v == 0:
            continue
        out[v] = own_bonus.get(v, 0.0) + out[fail[v]]
        phi[v] = node_w[v] * depth[v] if children[v] else phi[fail[v]]
    src, lab, wts, dst = [], [], [], []
    for u in range(n):
        for t, c in sorted(children[u].items()):
            src.append(u)
            lab.append(t)
            wts.append(phi[c] - phi[u] + out[c])
            dst.append(c)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.array(src, dtype=np.int64), minlength=n), out=offsets[1:])
    phi_a = np.array(phi, dtype=np.float64)
    fail_a = np.array(fail, dtype=np.int64)
    terminal = np.zeros(n, dtype=bool)
    terminal[0] = True
    return {
        "arc_offsets": offsets,
        "arc_label": np.array(lab, dtype=np.int64),
        "arc_weight": np.array(wts, dtype=np.float64),
        "arc_dest": np.array(dst, dtype=np.int64),
        "backoff_state": fail_a,
        "backoff_weight": np.where(terminal, 0.0, phi_a[fail_a] - phi_a),
        "final_weight": -phi_a,
        "terminal": terminal,
    }


def _arrays_from_automaton(a: BackoffAutomaton) -> dict[str, np.ndarray]:
    d = a.state_dict()
    return {k: v.numpy() for k, v in d.items() if k != "meta"}


def _automaton_from_arrays(parts, vocab_size, blank_id, device, dense_memory_mb) -> BackoffAutomaton:
    """Concatenate per-tree arrays (state ids shifted) into one automaton."""
    state_base = 0
    arc_base = 0
    cat: dict[str, list[np.ndarray]] = {k: [] for k in parts[0]}
    for i, p in enumerate(parts):
        n = p["backoff_state"].shape[0]
        offs = p["arc_offsets"]
        cat["arc_offsets"].append((offs if i == len(parts) - 1 else offs[:-1]) + arc_base)
        cat["arc_label"].append(p["arc_label"])
        cat["arc_weight"].append(p["arc_weight"])
        cat["arc_dest"].append(p["arc_dest"] + state_base)
        cat["backoff_state"].append(p["backoff_state"] + state_base)
        cat["backoff_weight"].append(p["backoff_weight"])
        cat["final_weight"].append(p["final_weight"])
        cat["terminal"].append(p["terminal"])
        state_base += n
        arc_base += int(offs[-1])
    dtypes = {"arc_weight": torch.float32, "backoff_weight": torch.float32, "final_weight": torch.float32,
              "terminal": torch.bool}
    tensors = {
        k: torch.from_numpy(np.ascontiguousarray(np.concatenate(v))).to(dtype=dtypes.get(k, torch.int64), device=device)
        for k, v in cat.items()
    }
    return BackoffAutomaton(
        vocab_size=vocab_size, blank_id=blank_id, root_fill=0.0, dense_memory_mb=dense_memory_mb,
        min_dense_degree=8, **tensors,
    )
