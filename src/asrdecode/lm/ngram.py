"""The n-gram LM as tensors: whole-vocabulary scores for a batch of states in one pass.

:class:`NGramLM` turns an ARPA model into a backoff automaton
(:class:`~asrdecode.lm._automaton.BackoffAutomaton`):

* one state per history that the model knows: the empty history (state 0), and every n-gram of
  order < N (``<s>`` included, so ``initial_states`` is the ``<s>`` history, as KenLM's
  ``BeginSentenceWrite``);
* one arc per n-gram ``h w``: from the state of ``h``, label ``w`` (a model token id), weight
  ``ln p(w | h)``, to the longest suffix of ``h w`` that is a state;
* each state backs off to its longest proper suffix state with weight ``ln backoff(h)``
  (0 where the file gives none); final weights are ``ln p(</s> | h)`` resolved along the chain.

Scores are natural logs (ARPA's log10 times ln 10). Model tokens that have no word in the LM score
as ``<unk>`` (exactly as KenLM treats out-of-vocabulary words); a file without ``<unk>`` gets
KenLM's substitute, log10 p = -100. The blank column scores 0 and keeps the state (see
:mod:`asrdecode.fusion`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from ._automaton import BackoffAutomaton
from ._trie import NGramTrie
from .arpa import BOS, EOS, UNK, ArpaModel, read_arpa
from .tokens import TokenMap

__all__ = ["NGramLM"]

LN10 = math.log(10.0)
_FORMAT = "asrdecode.ngram_lm"
_VERSION = 1


class NGramLM:
    """A back-off n-gram LM over the model's token ids, implementing :class:`~asrdecode.fusion.FusionModel`.

    Build it with :meth:`from_arpa` (or :meth:`load` for the binary form written by
    :meth:`save`). States are int64 ids; ``advance`` scores all ``vocab_size`` tokens.

    Attributes:
        vocab_size: the model's vocabulary size (blank included).
        blank_id: the blank id (its column scores 0 and keeps the state), or ``None``.
        order: the n-gram order.
        token_map: the :class:`TokenMap` between token ids and LM words.
    """

    #: its score tables are checked when built (no NaN or +inf): searches need not watch its scores
    scores_checked = True

    def __init__(
        self,
        automaton: BackoffAutomaton,
        *,
        order: int,
        bos_state: int,
        token_map: TokenMap,
        num_ngrams: Sequence[int],
    ) -> None:
        self.automaton = automaton
        self.vocab_size = automaton.vocab_size
        self.blank_id = automaton.blank_id
        self.order = int(order)
        self.bos_state = int(bos_state)
        self.token_map = token_map
        self.num_ngrams = [int(c) for c in num_ngrams]
        self.validate()

    def validate(self) -> None:
        """Check the automaton's arrays and the start state (raises :class:`DecodingInputError`); the
        engines require this mark (:meth:`BackoffAutomaton.ensure_valid`)."""
        self.automaton.ensure_valid()
        if not 0 <= self.bos_state < self.automaton.num_states:
            raise DecodingInputError(f"NGramLM: bos_state must be in [0, {self.automaton.num_states}), "
                                     f"got {self.bos_state}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arpa(
        cls,
        path: str | os.PathLike,
        vocab_size: int | None = None,
        blank_id: int | None = None,
        token_map: TokenMap | Mapping[str, int] | None = None,
        *,
        offset: int = 100,
        ignore_unmapped_words: bool = False,
        dense_memory_mb: float = 64.0,
        min_dense_degree: int = 8,
        device: torch.device | str | None = None,
    ) -> "NGramLM":
        """Read an ARPA file and build the tensor LM.

        Args:
            path: the ARPA file (``.gz`` allowed).
            vocab_size: the model's vocabulary size, blank included (taken from ``token_map``
                when that is a :class:`TokenMap`).
            blank_id: the model's blank id (or ``None`` for a model without one).
            token_map: how LM words name token ids: a :class:`TokenMap`, a ``{word: id}``
                mapping, or ``None`` for ``TokenMap.offset(vocab_size, blank_id, offset)``.
            offset: the character offset of the default token map (NeMo uses 100).
            ignore_unmapped_words: LM words that name no model token are an error unless this
                is set (then they are never predicted).
            dense_memory_mb, min_dense_degree: see :class:`BackoffAutomaton` (speed/memory).
            device: where the tensors live.

        Raises:
            FileFormatError: malformed file, missing ``<s>``/``</s>``, or a word that names no
                model token (with the file and line).
        """
        model = read_arpa(path)
        return cls.from_arpa_model(
            model, vocab_size, blank_id, token_map, offset=offset, ignore_unmapped_words=ignore_unmapped_words,
            dense_memory_mb=dense_memory_mb, min_dense_degree=min_dense_degree, device=device,
        )

    @classmethod
    def from_arpa_model(
        cls,
        model: ArpaModel,
        vocab_size: int | None = None,
        blank_id: int | None = None,
        token_map: TokenMap | Mapping[str, int] | None = None,
        *,
        offset: int = 100,
        ignore_unmapped_words: bool = False,
        dense_memory_mb: float = 64.0,
        min_dense_degree: int = 8,
        device: torch.device | str | None = None,
    ) -> "NGramLM":
        """Build from an in-memory :class:`ArpaModel` (same arguments as :meth:`from_arpa`)."""
        tmap = _resolve_token_map(token_map, vocab_size, blank_id, offset)
        V = tmap.vocab_size
        where = model.path
        index = model.word_index()
        for marker in (BOS, EOS):
            if marker not in index:
                raise FileFormatError(where, None, f"the 1-grams have no {marker} (KenLM rejects such files too)")
        if UNK not in index:
            model = _with_unk(model, -100.0)
            index = model.word_index()
        trie = NGramTrie.build(model)
        N = model.order
        label_of = _label_of_words(model, index, tmap, ignore_unmapped_words)
        mapped = set(int(x) for x in label_of[label_of >= 0])
        unk_tokens = np.array([t for t in range(V) if t != tmap.blank_id and t not in mapped], dtype=np.int64)
        S = 1 + sum(model.counts()[: N - 1])  # states: root + every n-gram of order < N
        backoff_state, backoff_weight = _backoff_arcs(model, trie, S)
        offsets, lab, wts, dst, final_direct = _token_arcs(model, trie, label_of, unk_tokens, V, S)
        final = _final_weights(model, final_direct, backoff_state, backoff_weight)
        terminal = np.zeros(S, dtype=bool)
        terminal[0] = True
        bos_node = trie.lookup(np.array([[index[BOS]]]))[0]
        bos_state = int(bos_node) if N > 1 else 0
        del trie, final_direct  # before the automaton's own tables: the trie's keys are 24 bytes an n-gram
        t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dt, device=device)  # noqa: E731
        automaton = BackoffAutomaton(
            vocab_size=V,
            blank_id=tmap.blank_id,
            arc_offsets=t(offsets, torch.int64),
            arc_label=t(lab, torch.int64),
            arc_weight=t(wts, torch.float32),
            arc_dest=t(dst, torch.int64),
            backoff_state=t(backoff_state, torch.int64),
            backoff_weight=t(backoff_weight, torch.float32),
            final_weight=t(final, torch.float32),
            terminal=t(terminal, torch.bool),
            root_fill=float("-inf"),
            dense_memory_mb=dense_memory_mb,
            min_dense_degree=min_dense_degree,
        )
        return cls(automaton, order=N, bos_state=bos_state, token_map=tmap, num_ngrams=model.counts())

    # ------------------------------------------------------------------ FusionModel
    @property
    def device(self) -> torch.device:
        return self.automaton.arc_offsets.device

    @property
    def num_states(self) -> int:
        return self.automaton.num_states

    @property
    def num_arcs(self) -> int:
        return self.automaton.num_arcs

    def initial_states(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """States ``[n]`` (int64) of the sentence start (the ``<s>`` history)."""
        return torch.full((int(n),), self.bos_state, dtype=torch.int64, device=device or self.device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``[N, V]`` (float32, natural log) and next states ``[N, V]`` (int64) from ``states [N]``.

        Vectorised along the backoff chain: a fixed number of masked tensor steps for the
        whole batch, no host synchronisation, no loop over states or tokens.
        """
        return self.automaton.advance(states)

    def prepare_advance(self, states: torch.Tensor) -> Any:
        """:meth:`advance` of a fixed ``states [N]`` tensor with its buffers made once (``.run()``; the
        blank column's score 0, its state valid), or ``None``: see :meth:`BackoffAutomaton.prepare_advance`."""
        return self.automaton.prepare_advance(states)

    def score_tokens(self, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and next states ``[N, K]`` of only ``tokens [N, K]`` from ``states [N]`` (early pruning)."""
        return self.automaton.score_tokens(states, tokens)

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """End-of-sentence scores ``ln p(</s> | state)`` ``[N]``."""
        return self.automaton.final(states)

    def score_sequence(self, tokens: Sequence[int] | torch.Tensor, *, bos: bool = True, eos: bool = True) -> float:
        """Total natural-log probability of ``tokens`` (from ``<s>`` when ``bos``, plus ``</s>`` when ``eos``).

        Blank ids score 0 (as in ``advance``). Raises :class:`DecodingInputError` for ids
        outside ``0..vocab_size-1``.
        """
        ids = _check_token_list("tokens", tokens, self.vocab_size)
        state = torch.tensor([self.bos_state if bos else 0], dtype=torch.int64, device=self.device)
        total = 0.0
        for t in ids:
            s, n = self.score_tokens(state, torch.tensor([[t]], dtype=torch.int64, device=self.device))
            total += float(s[0, 0])
            state = n[:, 0]
        if eos:
            total += float(self.final(state)[0])
        return total

    def score_sequences(
        self, labels: torch.Tensor, lengths: torch.Tensor | None = None, *, bos: bool = True, eos: bool = True
    ) -> torch.Tensor:
        """Natural-log scores ``[B]`` of padded token sequences ``labels [B, L]`` (``lengths [B]``), batched.

        For n-best rescoring; one ``score_tokens`` step per position for the whole batch.
        """
        if not isinstance(labels, torch.Tensor) or labels.dim() != 2 or labels.is_floating_point():
            raise DecodingInputError("labels must be a 2-D integer tensor [B, L]")
        B, L = labels.shape
        labels = labels.to(device=self.device, dtype=torch.int64)
        if lengths is None:
            lengths = torch.full((B,), L, dtype=torch.int64, device=self.device)
        else:
            if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.is_floating_point():
                raise DecodingInputError(f"lengths must be an integer tensor of shape [{B}]")
            lengths = lengths.to(device=self.device, dtype=torch.int64)
            if B and (int(lengths.min()) < 0 or int(lengths.max()) > L):
                raise DecodingInputError(f"lengths must be in 0..{L}")
        mask = torch.arange(L, device=self.device)[None, :] < lengths[:, None]
        if bool(((labels < 0) | (labels >= self.vocab_size))[mask].any()):
            raise DecodingInputError(f"labels hold ids outside the vocabulary 0..{self.vocab_size - 1}")
        state = torch.full((B,), self.bos_state if bos else 0, dtype=torch.int64, device=self.device)
        total = torch.zeros(B, dtype=torch.float32, device=self.device)
        safe = torch.where(mask, labels, 0)
        for i in range(L):
            sc, nx = self.score_tokens(state, safe[:, i : i + 1])
            total += torch.where(mask[:, i], sc[:, 0], 0.0)
            state = torch.where(mask[:, i], nx[:, 0], state)
        if eos:
            total += self.final(state)
        return total

    # ------------------------------------------------------------------ storage
    def save(self, path: str | os.PathLike) -> Path:
        """Write the compact binary form (arcs and states, no dense rows); :meth:`load` reads it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "format": _FORMAT,
                "version": _VERSION,
                "order": self.order,
                "bos_state": self.bos_state,
                "num_ngrams": self.num_ngrams,
                "token_words": ["" if w is None else w for w in self.token_map.words()],
                "token_offset": -1 if self.token_map.offset_value is None else self.token_map.offset_value,
                "automaton": self.automaton.state_dict(),
            },
            path,
        )
        return path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        device: torch.device | str | None = None,
        *,
        dense_memory_mb: float | None = None,
        min_dense_degree: int | None = None,
    ) -> "NGramLM":
        """Read a file written by :meth:`save` (raises :class:`FileFormatError` for anything else)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"LM file {path} does not exist")
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unpickling failure means "not our file"
            raise FileFormatError(path, None, f"not an asrdecode n-gram LM file ({type(err).__name__})") from None
        if not isinstance(d, dict) or d.get("format") != _FORMAT:
            raise FileFormatError(path, None, "not an asrdecode n-gram LM file")
        if d.get("version") != _VERSION:
            raise FileFormatError(path, None, f"unsupported version {d.get('version')!r} (expected {_VERSION})")
        over = {}
        if dense_memory_mb is not None:
            over["dense_memory_mb"] = dense_memory_mb
        if min_dense_degree is not None:
            over["min_dense_degree"] = min_dense_degree
        try:
            automaton = BackoffAutomaton.from_state_dict(d["automaton"], device=device, **over)
            words = [w or None for w in d["token_words"]]
            off = int(d["token_offset"])
            tmap = TokenMap(automaton.vocab_size, automaton.blank_id, words, offset=None if off < 0 else off)
            return cls(automaton, order=d["order"], bos_state=d["bos_state"], token_map=tmap,
                       num_ngrams=d["num_ngrams"])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:
            raise FileFormatError(path, None, f"bad n-gram LM file ({type(err).__name__}: {err})") from None

    def to(self, device: torch.device | str) -> "NGramLM":
        """A copy on ``device``."""
        return self._with(self.automaton.to(device))

    def with_dense_rows(self, memory_mb: float | None = None) -> "NGramLM":
        """A copy in which every state has a dense row of scores and next states when they fit in
        ``memory_mb`` (``None``: whatever they take, ``num_states * vocab_size * 12`` bytes; 432 MB for the bundled
        token 4-gram), else the states with the most arcs. Scoring then never walks a back-off chain: a
        decoder's LM step is a few row gathers (the CTC prefix beam's device round: 79 ATen ops a frame with
        the bundled 4-gram instead of 90; ALSD++'s: 125 a step instead of 133). Memory for launches: for
        decoding on a GPU. Scores are the walk's up to float rounding (the same best hypotheses on the bundled
        data); the native CPU engine runs as fast with either."""
        return self._with(self.automaton.with_dense_rows(memory_mb))

    def _with(self, automaton: BackoffAutomaton) -> "NGramLM":
        return NGramLM(automaton, order=self.order, bos_state=self.bos_state, token_map=self.token_map,
                       num_ngrams=self.num_ngrams)

    def memory_bytes(self) -> int:
        """Bytes held by the LM's tensors (dense rows included)."""
        return self.automaton.memory_bytes()

    def __repr__(self) -> str:
        return (f"NGramLM(order={self.order}, vocab_size={self.vocab_size}, blank_id={self.blank_id}, "
                f"ngrams={self.num_ngrams}, states={self.num_states}, arcs={self.num_arcs})")


def _resolve_token_map(token_map, vocab_size, blank_id, offset) -> TokenMap:
    if isinstance(token_map, TokenMap):
        if vocab_size is not None and int(vocab_size) != token_map.vocab_size:
            raise DecodingInputError(
                f"vocab_size {vocab_size} disagrees with the token map's vocab_size {token_map.vocab_size}"
            )
        if blank_id is not None and blank_id != token_map.blank_id:
            raise DecodingInputError(f"blank_id {blank_id} disagrees with the token map's blank_id {token_map.blank_id}")
        return token_map
    if vocab_size is None:
        raise DecodingInputError("vocab_size is required unless token_map is a TokenMap")
    if token_map is None:
        return TokenMap.offset(vocab_size, blank_id, offset)
    if isinstance(token_map, Mapping):
        return TokenMap.from_mapping(token_map, vocab_size, blank_id)
    raise DecodingInputError(f"token_map must be a TokenMap, a mapping or None, got {type(token_map).__name__}")


def _with_unk(model: ArpaModel, log10p: float) -> ArpaModel:
    """A copy of ``model`` with an ``<unk>`` 1-gram (log10 ``log10p``) appended."""
    uid = len(model.vocab)
    words = list(model.words)
    words[0] = np.concatenate([words[0], np.array([[uid]], dtype=np.int32)])
    lp, bo, hb = list(model.logprob), list(model.backoff), list(model.has_backoff)
    lp[0] = np.concatenate([lp[0], np.array([log10p], dtype=lp[0].dtype)])
    bo[0] = np.concatenate([bo[0], np.zeros(1, dtype=bo[0].dtype)])
    hb[0] = np.concatenate([hb[0], [False]])
    lines = list(model.lines)
    if lines:
        lines[0] = np.concatenate([lines[0], [0]])
    # a 1-gram appended moves no n-gram: the reader's trie links and line runs still hold (the runs end
    # before it: its line is unknown)
    return ArpaModel(model.vocab + [UNK], words, lp, bo, hb, lines, model.path, context=model.context,
                     suffix=model.suffix, line_runs=model.line_runs)


def _check_token_list(name: str, tokens, vocab_size: int) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise DecodingInputError(f"{name} must be a 1-D integer tensor, got {tokens.dtype} {tuple(tokens.shape)}")
        ids = [int(x) for x in tokens.tolist()]
    else:
        ids = []
        for i, x in enumerate(tokens):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                raise DecodingInputError(f"{name}[{i}] must be an int, got {x!r}")
            ids.append(int(x))
    for i, x in enumerate(ids):
        if not 0 <= x < vocab_size:
            raise DecodingInputError(f"{name}[{i}] = {x} is outside the vocabulary 0..{vocab_size - 1}")
    return ids


# ---------------------------------------------------------------- from_arpa_model's steps
def _label_of_words(model: ArpaModel, index: Mapping[str, int], tmap: TokenMap,
                    ignore_unmapped_words: bool) -> np.ndarray:
    """Word id -> model label ``[n_words]``: a token id, or -1 never predicted, -2 ``<unk>``, -3 ``</s>``."""
    token = tmap.token
    special = {UNK: -2, EOS: -3, BOS: -1}
    found = [special.get(w, None) if w in special else token(w) for w in index]  # one look-up per word
    label_of = np.full(len(model.vocab), -1, dtype=np.int64)
    ids = np.fromiter(index.values(), dtype=np.int64, count=len(index))
    mapped = np.fromiter((-4 if t is None else t for t in found), dtype=np.int64, count=len(found))
    label_of[ids] = np.where(mapped == -4, -1, mapped)
    if not ignore_unmapped_words and bool((mapped == -4).any()):
        j = int(np.flatnonzero(mapped == -4)[0])
        w, i = list(index)[j], int(ids[j])
        k = int(np.flatnonzero(model.words[0][:, 0] == i)[0])
        raise FileFormatError(
            model.path, model.line_of(1, k), f"the LM word {w!r} names no model token under {tmap!r} "
            "(for a word-level LM use WordNGramLM / --word-lm)"
        )
    return label_of


def _backoff_arcs(model: ArpaModel, trie: NGramTrie, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Each state's back-off state ``[S]`` and natural-log back-off weight ``[S]`` (root: itself, 0)."""
    backoff_state = np.zeros(S, dtype=np.int64)
    backoff_weight = np.zeros(S, dtype=np.float64)
    for k in range(1, model.order):
        nodes = trie.node_of[k - 1]
        backoff_weight[nodes] = model.backoff[k - 1].astype(np.float64) * LN10
        backoff_state[nodes] = trie.suffix_nodes(model.words[k - 1], k)
    return backoff_state, backoff_weight


def _token_arcs(model: ArpaModel, trie: NGramTrie, label_of: np.ndarray, unk_tokens: np.ndarray, V: int,
                S: int) -> tuple[np.ndarray, ...]:
    """The n-grams as token arcs in CSR order: ``offsets [S+1]``, ``label``, ``weight`` (float32: the
    float64 ``log10 p * ln 10`` rounded once), ``dest`` (sorted by source, then label; ``<unk>`` n-grams
    fan out to every unmapped token) and each state's direct ``</s>`` weight ``[S]`` (float64, NaN where
    the state has none).

    Order ``k``'s arcs leave the states of order ``k - 1``, whose ids come in one block after those of
    the lower orders: each order is sorted on its own and written straight into the output arrays (no
    concatenated copy of every arc; an order's temporaries freed as soon as they are used)."""
    N = model.order
    U = unk_tokens.size
    total = 0
    for k in range(1, N + 1):
        lab = label_of[model.words[k - 1][:, -1]]
        total += int(np.count_nonzero(lab >= 0)) + int(np.count_nonzero(lab == -2)) * U
    out_lab = np.empty(total, dtype=np.int64)
    out_w = np.empty(total, dtype=np.float32)
    out_dst = np.empty(total, dtype=np.int64)
    per_state = np.zeros(S, dtype=np.int64)
    final_direct = np.full(S, np.nan, dtype=np.float64)
    at = 0
    for k in range(1, N + 1):
        s, lb, w, d = _order_arcs(model, trie, label_of, unk_tokens, k, final_direct)
        key = s * V
        key += lb
        per_state += np.bincount(s, minlength=S)
        del s
        perm = np.argsort(key, kind="stable")
        del key
        n = perm.shape[0]
        np.take(lb, perm, out=out_lab[at:at + n])
        np.take(w, perm, out=out_w[at:at + n])
        np.take(d, perm, out=out_dst[at:at + n])
        del lb, w, d, perm
        at += n
    offsets = np.zeros(S + 1, dtype=np.int64)
    np.cumsum(per_state, out=offsets[1:])
    return offsets, out_lab, out_w, out_dst, final_direct


def _order_arcs(model: ArpaModel, trie: NGramTrie, label_of: np.ndarray, unk_tokens: np.ndarray, k: int,
                final_direct: np.ndarray) -> tuple[np.ndarray, ...]:
    """Order ``k``'s token arcs, unsorted: source, label, float32 weight, dest ``[A_k]`` each; the direct
    ``</s>`` weights (float64) go into ``final_direct [S]``."""
    N = model.order
    U = unk_tokens.size
    lab = label_of[model.words[k - 1][:, -1]]
    lp32 = model.logprob[k - 1]
    src = trie.parent[k - 1]
    eos = np.flatnonzero(lab == -3)
    final_direct[src[eos]] = lp32[eos].astype(np.float64) * LN10
    ok = np.flatnonzero(lab >= 0)
    unk = np.flatnonzero(lab == -2) if U else np.zeros(0, dtype=np.int64)
    dst = trie.node_of[k - 1] if k < N else trie.suffix_nodes(model.words[k - 1], N)
    d = dst[ok] if not unk.size else np.concatenate([dst[ok], np.repeat(dst[unk], U)])
    del dst
    s = src[ok] if not unk.size else np.concatenate([src[ok], np.repeat(src[unk], U)])
    lb = lab[ok] if not unk.size else np.concatenate([lab[ok], np.tile(unk_tokens, unk.size)])
    del lab
    w = (lp32[ok].astype(np.float64) * LN10).astype(np.float32)  # the float64 product, rounded once
    if unk.size:
        w = np.concatenate([w, np.repeat((lp32[unk].astype(np.float64) * LN10).astype(np.float32), U)])
    return s, lb, w, d


def _final_weights(model: ArpaModel, final_direct: np.ndarray, backoff_state: np.ndarray,
                   backoff_weight: np.ndarray) -> np.ndarray:
    """End-of-sentence weight of every state ``[S]``, resolved along the back-off chain (states come in
    blocks of increasing order, so each block's back-off targets are already resolved)."""
    final = np.empty(final_direct.shape[0], dtype=np.float64)
    if np.isnan(final_direct[0]):
        raise FileFormatError(model.path, None, f"the 1-grams have no {EOS}")
    final[0] = final_direct[0]
    start = 1
    for k in range(1, model.order):
        stop = start + model.counts()[k - 1]
        d = final_direct[start:stop]
        fb = backoff_weight[start:stop] + final[backoff_state[start:stop]]
        final[start:stop] = np.where(np.isnan(d), fb, d)
        start = stop
    return final
