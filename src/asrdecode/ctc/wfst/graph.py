"""TLG building with OpenFst (through ``kaldifst``) and the tensor form the decoder runs on.

Recipe (as in the usual Kaldi / k2 one): G is the ARPA LM as a word acceptor whose back-off
arcs read the disambiguation symbol ``#0``; L is the lexicon as a token -> word transducer
whose ambiguous spellings (prefixes of others, homophones) end in ``#1, #2, ...`` and whose
loop state passes ``#0`` through; ``LG = minimize(determinize*(L o G))``; the disambiguation
symbols are then replaced by epsilon and epsilons removed; finally ``TLG = T o LG`` with T the
CTC topology (:mod:`.topology`). Weights are tropical costs in natural log (``-ln p``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..._validation import Checker, ValidationMark, verified_file
from ...errors import DecodingInputError, FileFormatError
from ...lm.arpa import ArpaModel, read_arpa
from .lexicon import add_disambig, check_lexicon, pronunciations, read_lexicon
from .topology import TOPOLOGIES, ctc_topology_text

__all__ = ["DecodingGraph", "build_tlg", "build_g_text", "build_l_text", "load_graph"]

_LN10 = math.log(10.0)
FORMAT_1 = "asrdecode.DecodingGraph/1"
#: the file format :meth:`DecodingGraph.save` writes
FORMAT = "asrdecode.DecodingGraph/2"
_SPECIAL = ("<s>", "</s>")


def _kaldifst():
    try:
        import kaldifst
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("graph building needs kaldifst: pip install kaldifst") from e
    return kaldifst


@dataclass
class DecodingGraph:
    """A decoding graph as tensors, arcs sorted by source state.

    Emitting arcs (``e_*``, reading model token ``e_ilabel`` in ``[0, V)``; graphs from
    :meth:`from_fst_text` sort a state's emitting arcs by token) and epsilon arcs
    (``p_*``, reading nothing) are kept apart; ``e_start [A] bool`` marks emitting arcs where a
    new output token starts; each set has ``src, dst [A] int64``,
    ``olabel [A] int64`` (word id, 0 = no word), ``score [A] float32`` (``-cost``) and
    ``ptr [S + 1] int64``: the arcs of state ``s`` are ``ptr[s]:ptr[s + 1]``.

    Attributes:
        start: the start state.
        final_score: ``[S]`` float32, ``-final cost`` or ``-inf`` for non-final states.
        words: word table, ``words[0] == "<eps>"``.
        vocab_size, blank_id: the model vocabulary the graph was built for.
        eps_depth: the longest chain of epsilon arcs (the decoder does that many closure passes).
        word_lengths: number of tokens spelling each word (from the lexicon; gives word times).
        pron_ptr, pron_tokens: the lexicon's pronunciations (word times of words with several):
            word ``w``'s are ``pron_tokens[pron_ptr[w]:pron_ptr[w + 1]]``, each ended by ``-1``
            (:meth:`pronunciations`); ``None`` in graphs built before they were recorded.
    """

    start: int
    final_score: torch.Tensor
    e_src: torch.Tensor
    e_dst: torch.Tensor
    e_ilabel: torch.Tensor
    e_olabel: torch.Tensor
    e_score: torch.Tensor
    e_ptr: torch.Tensor
    e_start: torch.Tensor
    p_src: torch.Tensor
    p_dst: torch.Tensor
    p_olabel: torch.Tensor
    p_score: torch.Tensor
    p_ptr: torch.Tensor
    words: list[str]
    vocab_size: int
    blank_id: int
    topology: str = ""
    eps_depth: int = 0
    word_lengths: list[int] | None = None
    pron_ptr: torch.Tensor | None = None
    pron_tokens: torch.Tensor | None = None
    _word_index: dict[str, int] | None = field(default=None, repr=False, compare=False)
    #: derived arrays of the decoder (``attach_search_index``), saved with the graph; not copied by ``to``
    _search_index: dict | None = field(default=None, repr=False, compare=False)
    _prons: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def num_states(self) -> int:
        return int(self.final_score.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.e_src.shape[0] + self.p_src.shape[0])

    @property
    def device(self) -> torch.device:
        return self.final_score.device

    def word_index(self) -> dict[str, int]:
        """Mapping word -> word id (output label)."""
        if self._word_index is None:
            self._word_index = {w: i for i, w in enumerate(self.words)}
        return self._word_index

    def pronunciations(self, word: int) -> list[tuple[int, ...]]:
        """The token ids of each pronunciation of word id ``word`` (``[]`` when the graph has none)."""
        if self.pron_ptr is None or self.pron_tokens is None or not 0 < word < len(self.words):
            return []
        if self._prons is None:
            self._prons = (self.pron_ptr.cpu().numpy(), self.pron_tokens.cpu().numpy())
        ptr, toks = self._prons
        block = toks[ptr[word]:ptr[word + 1]].tolist()
        out: list[tuple[int, ...]] = []
        cur: list[int] = []
        for t in block:
            if t < 0:
                out.append(tuple(cur))
                cur = []
            else:
                cur.append(t)
        return out

    def to(self, device: torch.device | str) -> "DecodingGraph":
        """A copy with every tensor on ``device``."""
        kw: dict[str, Any] = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self._fields().items()}
        return DecodingGraph(**kw)

    def _fields(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if not k.startswith("_")}

    def save(self, path: str | os.PathLike) -> None:
        """Save with ``torch.save`` (loadable with ``weights_only=True``, memory-mapped by :meth:`load`).

        Format 2: the word table as one UTF-8 ``uint8`` tensor (newline-separated; a list of 50k
        strings takes the weights-only unpickler ~0.5 s), word lengths as an ``int32`` tensor, and the
        decoder's search index when one is attached (:func:`asrdecode.ctc.wfst.attach_search_index`).
        """
        d = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in self._fields().items()}
        d["format"] = FORMAT
        if any("\n" in w for w in self.words):
            raise DecodingInputError("graph: a word contains a newline; the word table cannot be saved")
        d["words"] = torch.frombuffer(bytearray("\n".join(self.words).encode("utf-8")), dtype=torch.uint8) \
            if self.words else torch.zeros(0, dtype=torch.uint8)
        d["n_words"] = len(self.words)
        if self.word_lengths is not None:
            d["word_lengths"] = torch.tensor(self.word_lengths, dtype=torch.int32)
        if self._search_index is not None:
            d["search_index"] = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in self._search_index.items()}
        torch.save(d, path)

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> "DecodingGraph":
        """Load a graph written by :meth:`save` (format 1 or 2) into memory.

        The tensors are read, not memory-mapped: a mapped file that is truncated or rewritten in place
        while loaded (``cp new.pt graph.pt``, a rebuild writing the same path) kills the process with
        SIGBUS at the next page the decoder touches, and a private mapping does not help (its clean
        pages are still the file's). :meth:`validate` reads every array anyway, so a mapping saved
        no I/O, only page-cache sharing between processes. After loading, the graph never reads the
        file again: replacing or deleting it cannot affect a loaded graph.

        The graph is validated, except a file of the per-user cache that the cache has just checked
        against its record (every byte's CRC-32; the very file opened here, see
        :func:`asrdecode._validation.verified_file`) and whose record says these bytes passed the same
        rules (:func:`validation_fingerprint`); a full validation of such a file is written to its record.
        """
        try:
            with open(path, "rb") as f:
                verified = verified_file(path, os.fstat(f.fileno()))
                d = torch.load(f, map_location=device, weights_only=True)
        except OSError as e:
            raise FileFormatError(path, None, f"cannot read the decoding graph file ({e.strerror or e})") from e
        except Exception as e:
            raise FileFormatError(path, None, f"not a decoding graph file ({e})") from e
        fmt = d.pop("format", None) if isinstance(d, dict) else None
        if fmt not in (FORMAT_1, FORMAT):
            raise FileFormatError(path, None, "not a decoding graph file (missing format tag)")
        index = d.pop("search_index", None)
        try:
            if fmt == FORMAT:
                d["words"] = _words_from_bytes(d["words"], d.pop("n_words"))
                if isinstance(d.get("word_lengths"), torch.Tensor):
                    d["word_lengths"] = d["word_lengths"].tolist()
            g = cls(**d)
        except (TypeError, KeyError, ValueError) as e:
            raise FileFormatError(path, None, f"bad decoding graph file ({e})") from e
        g._search_index = index  # (checked by validate, after the graph's own arrays)
        fingerprint = validation_fingerprint()
        if fingerprint and verified is not None and verified.validated_by == fingerprint:
            # a cache file checked byte for byte against its record, which says these bytes passed these rules
            g._valid_mark = ValidationMark(g._validation_parts())
            return g
        try:
            g.validate()
        except DecodingInputError as e:
            raise FileFormatError(path, None, f"bad decoding graph file ({e})") from None
        if fingerprint and verified is not None:
            verified.remember(fingerprint)
        return g

    def _validation_parts(self) -> tuple:
        index = self._search_index
        saved = () if index is None else (index, *index.values(), *(index.get("dense") or ()))
        return (*self._fields().values(), len(self.words), *saved)

    def validate(self) -> None:
        """Check every array the search engines read (shapes, dtypes, monotone offsets, states, labels and
        words in range, finite scores, the lexicon's pronunciations, the epsilon depth, the attached search index) and mark the graph
        validated; raise :class:`DecodingInputError`."""
        _check_graph(self)
        _check_pronunciations(self)
        if self._search_index is not None:
            problem = _index_problem(self, self._search_index)
            if problem:
                raise DecodingInputError(f"graph: search_index: {problem}")
        self._valid_mark = ValidationMark(self._validation_parts())

    def ensure_valid(self) -> None:
        """Cheap when nothing changed since :meth:`validate`; else validate again (the engines call this)."""
        mark = self.__dict__.get("_valid_mark")
        if mark is None or not mark.matches(self._validation_parts()):
            self.validate()

    @classmethod
    def from_fst_text(
        cls, text: str, words: Sequence[str], vocab_size: int, blank_id: int, topology: str = ""
    ) -> "DecodingGraph":
        """Build from OpenFst text (labels as in :mod:`.topology`: input ``t + 1``, output word id).

        The first arc's source (or the first listed state) is taken as start, as ``fstprint`` writes it.
        """
        src_a, dst_a, il_a, ol_a, w_a, finals, start = _parse_fst_text(text)
        if start is None:
            raise DecodingInputError("graph: the FST is empty (no path survived composition)")
        S = max([start] + list(finals) + [int(x.max()) for x in (src_a, dst_a) if x.size]) + 1
        final = np.full(S, -np.inf, dtype=np.float32)
        for s, c in finals.items():
            final[s] = -c
        w_a = -w_a
        if il_a.size and int(il_a.max()) > 2 * vocab_size:
            raise DecodingInputError(
                f"graph: input label {int(il_a.max())} is not a token of a {vocab_size}-token model")
        start_a = il_a > vocab_size
        il_a = np.where(start_a, il_a - vocab_size, il_a)
        if ol_a.size and int(ol_a.max()) >= len(words):
            raise DecodingInputError("graph: output label beyond the word table")

        def part(mask: np.ndarray) -> tuple[torch.Tensor, ...]:
            order = np.lexsort((il_a[mask], src_a[mask]))  # by source state, then token
            s, d, i, o, sc, st = (x[mask][order] for x in (src_a, dst_a, il_a, ol_a, w_a, start_a))
            ptr = np.zeros(S + 1, dtype=np.int64)
            np.add.at(ptr, s + 1, 1)
            ptr = np.cumsum(ptr)
            t = torch.from_numpy
            return t(s), t(d), t(i - 1), t(o), t(sc.astype(np.float32)), t(ptr), t(st)

        es, ed, ei, eo, esc, ep, est = part(il_a > 0)
        ps, pd, _, po, psc, pp, _ = part(il_a == 0)
        g = cls(
            start=int(start), final_score=torch.from_numpy(final), e_src=es, e_dst=ed, e_ilabel=ei, e_olabel=eo,
            e_score=esc, e_ptr=ep, e_start=est, p_src=ps, p_dst=pd, p_olabel=po, p_score=psc, p_ptr=pp, words=list(words),
            vocab_size=int(vocab_size), blank_id=int(blank_id), topology=topology,
            eps_depth=_eps_depth(S, ps.numpy(), pd.numpy()),
        )
        g.validate()
        return g


class _Progress:
    """``log`` lines: a stage, the seconds since the build started, the process's peak resident memory."""

    def __init__(self, log: Callable[[str], None] | None) -> None:
        self.log = log
        self.t0 = time.perf_counter()

    def __call__(self, stage: str) -> None:
        if self.log is not None:
            self.log(f"{stage}: {time.perf_counter() - self.t0:.1f} s, peak memory {peak_rss_mb():.0f} MB")


def peak_rss_mb() -> float:
    """The process's peak resident memory so far in MB (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def _parse_fst_text(text: str, chunk: int = 1 << 20, block: int = 1 << 24):
    """OpenFst text -> arcs ``(src, dst, ilabel, olabel int64; weight float32)`` arrays, ``{final state: cost}``
    and the first listed state. Lines are split ``block`` characters at a time and arcs kept as Python
    numbers for at most ``chunk`` lines (a 20M-arc graph's text as Python lists took several GB)."""
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    buf: list[list] = [[], [], [], [], []]
    finals: dict[int, float] = {}
    start = None

    def flush() -> None:
        for i, dt in enumerate((np.int64, np.int64, np.int64, np.int64, np.float32)):
            cols[i].append(np.asarray(buf[i], dtype=dt))
            buf[i].clear()

    pos, n = 0, len(text)
    while pos < n:
        end = text.rfind("\n", pos, pos + block) if pos + block < n else n
        if end <= pos:  # a line longer than a block
            end = text.find("\n", pos + block)
            end = n if end < 0 else end
        for line in text[pos:end].splitlines():
            f = line.split()
            if not f:
                continue
            if start is None:
                start = int(f[0])
            if len(f) >= 4:
                buf[0].append(int(f[0]))
                buf[1].append(int(f[1]))
                buf[2].append(int(f[2]))
                buf[3].append(int(f[3]))
                buf[4].append(float(f[4]) if len(f) > 4 else 0.0)
                if len(buf[0]) >= chunk:
                    flush()
            else:
                finals[int(f[0])] = float(f[1]) if len(f) > 1 else 0.0
        pos = end + 1
    flush()
    src, dst, il, ol, w = (np.concatenate(c) for c in cols)
    return src, dst, il, ol, w, finals, start


def _eps_depth(S: int, src: np.ndarray, dst: np.ndarray) -> int:
    """Longest chain of epsilon arcs; raises on an epsilon cycle. One vectorised pass per chain link
    (per-state maxima by ``np.maximum.reduceat`` over the arcs grouped by source)."""
    if src.size == 0:
        return 0
    if np.any(src[1:] < src[:-1]):
        order = np.argsort(src, kind="stable")
        src, dst = src[order], dst[order]
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    heads = src[starts]
    depth = np.zeros(S, dtype=np.int64)
    for _ in range(S + 1):
        new = depth.copy()
        new[heads] = np.maximum(depth[heads], np.maximum.reduceat(depth[dst] + 1, starts))
        if np.array_equal(new, depth):
            return int(depth.max())
        depth = new
    raise DecodingInputError("graph: it has a cycle of epsilon arcs")


def build_g_text(model: ArpaModel, word_ids: Mapping[str, int], disambig0: int) -> tuple[str, int]:
    """G as OpenFst text: a word acceptor (labels from ``word_ids``), back-off arcs read ``disambig0``.

    Returns the text and the start state. Words of the LM missing from ``word_ids`` raise
    :class:`FileFormatError` naming the ARPA line.
    """
    where = model.path or "<arpa>"
    vocab = model.vocab
    N = model.order
    bos = vocab.index("<s>") if "<s>" in vocab else -1
    eos = vocab.index("</s>") if "</s>" in vocab else -1
    lab = np.zeros(len(vocab), dtype=np.int64)
    for i, w in enumerate(vocab):
        if i in (bos, eos):
            continue
        if w not in word_ids:
            if w == "<unk>":
                lab[i] = -1  # <unk> without a spelling: its n-grams are left out
                continue
            raise FileFormatError(where, model.line_of(1, i), f"word {w!r} of the LM is not in the lexicon")
        lab[i] = word_ids[w]
    states: dict[tuple[int, ...], int] = {(): 0}
    for k in range(1, N):
        for row in model.words[k - 1]:
            key = tuple(int(x) for x in row)
            if key[-1] != eos and key not in states:
                states[key] = len(states)

    def dest(h: tuple[int, ...]) -> int:
        h = h[-(N - 1):] if N > 1 else ()
        while h not in states:
            h = h[1:]
        return states[h]

    lines: list[str] = []
    finals: dict[int, float] = {}
    for k in range(1, N + 1):
        rows, lps, bos_w = model.words[k - 1], model.logprob[k - 1], model.backoff[k - 1]
        for j in range(rows.shape[0]):
            key = tuple(int(x) for x in rows[j])
            h, wid = key[:-1], key[-1]
            if wid == bos or (lab[wid] < 0) or any(lab[x] < 0 for x in h if x not in (bos, eos)):
                pass
            elif h not in states:
                raise FileFormatError(where, model.line_of(k, j), f"n-gram {[vocab[x] for x in key]} has no context n-gram")
            else:
                cost = -float(lps[j]) * _LN10
                if wid == eos:
                    finals[states[h]] = cost
                else:
                    lines.append(f"{states[h]} {dest(key)} {lab[wid]} {lab[wid]} {cost:.7g}")
            if k < N and key in states and key != ():
                b = -float(bos_w[j]) * _LN10
                lines.append(f"{states[key]} {dest(key[1:])} {disambig0} 0 {b:.7g}")
    start = states.get((bos,), 0)
    # fstcompile takes the first listed source as the start state: list it first
    head = [ln for ln in lines if ln.split()[0] == str(start)]
    rest = [ln for ln in lines if ln.split()[0] != str(start)]
    if not head:
        head = [f"{start} 0" if start not in finals else f"{start} {finals[start]:.7g}"]
        finals.pop(start, None)
    out = head + rest + [f"{s} {c:.7g}" for s, c in finals.items()]
    return "\n".join(out) + "\n", start


def build_l_text(
    lexicon: Mapping[str, Sequence[int] | Sequence[Sequence[int]]], word_ids: Mapping[str, int], vocab_size: int,
    disambig0_word: int
) -> tuple[str, int]:
    """L (with disambiguation symbols) as OpenFst text; returns the text and the largest token-side label.

    Token ``t`` is input label ``t + 1``; ``#k`` is ``vocab_size + 1 + k``.
    """
    items = [(w, p) for w in word_ids if w in lexicon for p in pronunciations(lexicon[w])]
    dis, top = add_disambig([p for _, p in items])
    lines = [f"0 0 {vocab_size + 1} {disambig0_word} 0"]
    n = 1
    for (w, p), d in zip(items, dis):
        labels = [t + 1 for t in p] + ([vocab_size + 1 + d] if d else [])
        s = 0
        for i, lab in enumerate(labels):
            nxt = 0 if i == len(labels) - 1 else n
            if nxt:
                n += 1
            lines.append(f"{s} {nxt} {lab} {word_ids[w] if i == 0 else 0} 0")
            s = nxt
    lines.append("0 0")
    return "\n".join(lines) + "\n", vocab_size + 1 + top


def build_tlg(
    tokens: Sequence[str] | int,
    lexicon: Mapping[str, Sequence[int] | Sequence[Sequence[int]]] | str | os.PathLike,
    arpa: str | os.PathLike | ArpaModel,
    topology: str = "compact",
    blank_id: int | None = None,
    log: Callable[[str], None] | None = None,
) -> DecodingGraph:
    """Build the TLG decoding graph of a CTC model.

    Args:
        tokens: the model's token symbols (``tokens[i]`` for id ``i``, blank included) or just
            the vocabulary size ``V`` when ``lexicon`` is given as token ids.
        lexicon: ``{word: [token ids]}``, ``{word: [[token ids], [token ids], ...]}`` (several
            pronunciations), or a lexicon file (``word sym sym ...`` lines, symbols of ``tokens``; every
            line of a word listed several times is a pronunciation).
        arpa: the word LM (ARPA file, ``.gz`` allowed, or a parsed :class:`ArpaModel`); every LM word
            except ``<s>``, ``</s>`` (and ``<unk>`` when not in the lexicon) must be in the lexicon.
        topology: ``"compact"`` or ``"normal"`` (:mod:`.topology`).
        blank_id: the blank's id; default: the symbol ``<blk>``/``<blank>``/``<b>`` of ``tokens``, else ``V - 1``.
        log: called with one line after each stage (elapsed seconds, the process's peak memory so far).
    """
    kf = _kaldifst()
    progress = _Progress(log)
    if topology not in TOPOLOGIES:
        raise DecodingInputError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
    V, blank_id, lexicon = _tlg_vocab_and_lexicon(tokens, lexicon, blank_id)
    model = arpa if isinstance(arpa, ArpaModel) else read_arpa(arpa)
    lm_words = _tlg_lm_words(model, lexicon)
    words = ["<eps>"] + lm_words
    word_ids = {w: i for i, w in enumerate(words) if i > 0}
    W = len(words) - 1
    g_text, _ = build_g_text(model, word_ids, W + 1)
    l_text, _ = build_l_text(lexicon, word_ids, V, W + 1)
    progress("G and L as text")
    G = kf.compile(g_text)
    L = kf.compile(l_text)
    del g_text, l_text
    LG = _compose_lg(kf, L, G, V, progress)
    T = kf.compile(ctc_topology_text(V, blank_id, topology))
    kf.arcsort(T, sort_type="olabel")
    TLG = kf.compose(T, LG)
    kf.connect(TLG)
    del T, LG
    progress("TLG composed")
    text = TLG.to_str(show_weight_one=True)
    del TLG
    g = DecodingGraph.from_fst_text(text, words, V, blank_id, topology)
    del text
    progress(f"graph arrays ({g.num_states} states, {g.num_arcs} arcs)")
    # tokens per word (gives word times); 0 when a word's pronunciations differ in length
    lens = [{len(p) for p in pronunciations(lexicon[w])} for w in lm_words]
    g.word_lengths = [0] + [n.pop() if len(n) == 1 else 0 for n in lens]
    g.pron_ptr, g.pron_tokens = _pron_arrays([pronunciations(lexicon[w]) for w in lm_words])
    return g


def _tlg_vocab_and_lexicon(
    tokens: Sequence[str] | int,
    lexicon: Mapping[str, Sequence[int] | Sequence[Sequence[int]]] | str | os.PathLike,
    blank_id: int | None,
) -> tuple[int, int, Mapping[str, Sequence[int] | Sequence[Sequence[int]]]]:
    """:func:`build_tlg`'s step 1: the vocabulary size, the blank's id and the checked lexicon
    (read from its file when given as a path)."""
    if isinstance(tokens, int):
        V, syms = tokens, None
    else:
        syms = list(tokens)
        V = len(syms)
    if blank_id is None:
        blank_id = V - 1
        if syms is not None:
            for b in ("<blk>", "<blank>", "<b>"):
                if b in syms:
                    blank_id = syms.index(b)
                    break
    if not 0 <= blank_id < V:
        raise DecodingInputError(f"blank_id must be in [0, {V}), got {blank_id}")
    if isinstance(lexicon, (str, os.PathLike)):
        if syms is None:
            raise DecodingInputError("a lexicon file needs the token symbols (tokens as a list of strings)")
        lex_path = lexicon
        lexicon = read_lexicon(lexicon, syms, all_pronunciations=True)
        for w, prons in lexicon.items():
            if any(blank_id in ids for ids in prons):
                raise FileFormatError(lex_path, None, f"word {w!r} is spelled with the blank token")
    check_lexicon(lexicon, V, blank_id)
    return V, blank_id, lexicon


def _tlg_lm_words(model: ArpaModel, lexicon: Mapping[str, Any]) -> list[str]:
    """:func:`build_tlg`'s step 2: the LM's words (all in the lexicon), in LM order."""
    lm_words = []
    for i, w in enumerate(model.vocab):
        if w in _SPECIAL or (w == "<unk>" and w not in lexicon):
            continue
        if w not in lexicon:
            raise FileFormatError(model.path or "<arpa>", model.line_of(1, i), f"word {w!r} of the LM is not in the lexicon")
        lm_words.append(w)
    if not lm_words:
        raise FileFormatError(model.path or "<arpa>", None, "the LM has no word")
    return lm_words


def _compose_lg(kf: Any, L: Any, G: Any, V: int, progress: Callable[[str], None]) -> Any:
    """:func:`build_tlg`'s step 3: L o G, determinised and minimised, without the disambiguation
    symbols and the epsilons they leave, sorted on its input labels."""
    kf.arcsort(L, sort_type="olabel")
    kf.arcsort(G, sort_type="ilabel")
    LG = kf.compose(L, G)
    kf.determinize_star(LG)
    kf.minimize_encoded(LG)
    progress("LG composed, determinised, minimised")
    # remove the disambiguation symbols (token-side labels > V) and the epsilons left
    lg_lines = []
    for line in LG.to_str(show_weight_one=True).splitlines():
        f = line.split()
        if len(f) >= 4 and int(f[2]) > V:
            f[2] = "0"
        lg_lines.append(" ".join(f))
    LG = kf.compile("\n".join(lg_lines) + "\n")
    del lg_lines
    kf.rmepsilon(LG)
    kf.arcsort(LG, sort_type="ilabel")
    return LG


def _check_pronunciations(g: DecodingGraph) -> None:
    """The optional ``pron_ptr`` / ``pron_tokens`` (word times): both or neither, offsets rising from 0 to
    the token count, one entry per word plus one, token ids or -1 (a pronunciation's end)."""
    if (g.pron_ptr is None) != (g.pron_tokens is None):
        raise DecodingInputError("graph: pron_ptr and pron_tokens come together")
    if g.pron_ptr is None or g.pron_tokens is None:
        return
    ptr, toks = g.pron_ptr, g.pron_tokens
    if ptr.dim() != 1 or ptr.shape[0] != len(g.words) + 1 or int(ptr[0]) != 0 \
            or int(ptr[-1]) != toks.shape[0] or bool((ptr[1:] < ptr[:-1]).any()):
        raise DecodingInputError(f"graph: pron_ptr must rise from 0 to the pron_tokens count in {len(g.words) + 1} entries")
    if toks.numel() and (int(toks.min()) < -1 or int(toks.max()) >= g.vocab_size):
        raise DecodingInputError("graph: pron_tokens must be token ids or -1")
    _check_word_arcs(g, ptr, toks)


#: the share of word-labelled emitting arcs (blank arcs aside) that may read a token none of the word's
#: pronunciations has; build_tlg's graphs have none (a word's label sits on an arc of its pronunciation)
WORD_ARC_TOLERANCE = 0.01


def _check_word_arcs(g: DecodingGraph, ptr: torch.Tensor, toks: torch.Tensor) -> None:
    """Every emitting arc that outputs word ``w`` (its token not blank) must read a token of one of ``w``'s
    pronunciations (``pron_ptr [W + 1]``, ``pron_tokens [N]``), all but WORD_ARC_TOLERANCE of them: arcs
    whose token ids were shifted or permuted contradict the lexicon the graph was built from."""
    V = g.vocab_size
    word = torch.repeat_interleave(torch.arange(ptr.shape[0] - 1, device=ptr.device), (ptr[1:] - ptr[:-1]).long())
    keep = toks.long() >= 0
    known = torch.unique(word[keep] * V + toks.long()[keep])  # (word, token) pairs of the lexicon
    arcs = (g.e_olabel.long() > 0) & (g.e_ilabel.long() != g.blank_id)
    if not bool(arcs.any()) or not known.numel():
        return
    pairs = g.e_olabel.long()[arcs] * V + g.e_ilabel.long()[arcs]
    has_pron = (ptr[1:] > ptr[:-1])[g.e_olabel.long()[arcs]]  # words without pronunciations are not checked
    bad = int((~torch.isin(pairs, known) & has_pron).sum())
    if bad > WORD_ARC_TOLERANCE * int(has_pron.sum()):
        raise DecodingInputError(
            f"graph: e_ilabel contradicts the lexicon's pronunciations: {bad} of {int(has_pron.sum())} emitting "
            f"arcs that output a word read a token none of its pronunciations has (token ids shifted or permuted?)")


def _pron_arrays(prons: Sequence[Sequence[Sequence[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(pron_ptr, pron_tokens) of :class:`DecodingGraph` for words ``1..W`` (word 0, ``<eps>``, has none)."""
    flat: list[int] = []
    ptr = [0, 0]
    for word in prons:
        for p in word:
            flat.extend(p)
            flat.append(-1)
        ptr.append(len(flat))
    return torch.tensor(ptr, dtype=torch.int64), torch.tensor(flat, dtype=torch.int32)


def _index_problem(g: DecodingGraph, index: object) -> str | None:
    """What is wrong with a search index (a loaded one: anything) for graph ``g``, else None: the packed
    arc rows must be ``g``'s emitting arcs, the dense rows a (state row, token) index of them."""
    if not isinstance(index, dict) or not isinstance(index.get("dense_min_degree"), int) \
            or not isinstance(index.get("dense_memory_mb"), float):
        return "not a mapping with dense_min_degree (int) and dense_memory_mb (float)"
    A = g.e_src.shape[0]
    rows = index.get("arc_rows")
    if rows is not None:
        if not isinstance(rows, torch.Tensor) or rows.dtype != torch.int32 or rows.shape != (A, 4):
            return f"arc_rows must be an int32 tensor [{A}, 4]"
        if not torch.equal(rows, _pack_arc_rows(g)):
            return "arc_rows differ from the graph's emitting arcs"
    dense = index.get("dense")
    if dense is None:
        return None
    if not (isinstance(dense, tuple) and len(dense) == 4 and all(isinstance(t, torch.Tensor) for t in dense[:3])
            and isinstance(dense[3], float)):
        return "dense must be (row, ptr, arcs, e_max)"
    return _dense_problem(g, *dense)


def _pack_arc_rows(g: DecodingGraph) -> torch.Tensor:
    """``[A, 4]`` int32 rows ``(2 * token + starts, dst, word, score bits)`` of the emitting arcs."""
    return torch.stack([(g.e_ilabel * 2 + g.e_start.long()).int(), g.e_dst.int(), g.e_olabel.int(),
                        g.e_score.float().view(torch.int32)], 1).contiguous()


def _dense_problem(g: DecodingGraph, row: torch.Tensor, ptr: torch.Tensor, arcs: torch.Tensor,
                   e_max: float) -> str | None:
    """What is wrong with the dense (state row, token) index of the emitting arcs, else None."""
    A, S, V = g.e_src.shape[0], g.num_states, g.vocab_size
    if row.shape != (S,) or row.dtype != torch.int64 or arcs.dim() != 1 or arcs.dtype != torch.int64 \
            or ptr.dim() != 1 or ptr.is_floating_point() or ptr.dtype == torch.bool:
        return "dense rows do not fit the graph"
    if row.numel() and int(row.min()) < -1:
        return "dense rows do not fit the graph (row below -1)"
    n_rows = int(row.max()) + 1 if row.numel() else 0
    if ptr.shape != (n_rows * V + 1,) or int(ptr[0]) != 0 or int(ptr[-1]) != arcs.shape[0] \
            or (ptr.numel() > 1 and not bool((ptr[1:] >= ptr[:-1]).all())) \
            or (arcs.numel() and not 0 <= int(arcs.min()) <= int(arcs.max()) < A):
        return "dense rows do not fit the graph"
    if arcs.numel():
        key = torch.repeat_interleave(torch.arange(n_rows * V, device=ptr.device), (ptr[1:] - ptr[:-1]).long())
        if not torch.equal(row[g.e_src[arcs]] * V + g.e_ilabel[arcs], key):
            return "dense rows do not index the graph's arcs"
    if A and not (math.isfinite(e_max) and e_max >= float(g.e_score.max())):
        return "dense e_max is not the best emitting arc score"
    return None


def _check_graph(g: DecodingGraph) -> None:
    """The checks of :meth:`DecodingGraph.validate` on the graph's own arrays."""
    c = Checker("graph")
    S = int(c.tensor("final_score", g.final_score, ndim=1, kind="float").shape[0])
    if S < 1 or S >= 2**31:
        c.fail(f"needs 1 to 2**31 - 1 states, got {S}")
    c.no_nan("final_score", g.final_score)
    c.integer("start", g.start, 0, S)
    V = c.integer("vocab_size", g.vocab_size, 1, 2**30)
    c.integer("blank_id", g.blank_id, 0, V)
    if not isinstance(g.words, list) or not all(isinstance(w, str) for w in g.words):
        c.fail("words must be a list of str")
    W = len(g.words)
    for pre in ("e", "p"):
        ptr = c.tensor(f"{pre}_ptr", getattr(g, f"{pre}_ptr"), ndim=1, length=S + 1, kind="int")
        A = int(c.tensor(f"{pre}_src", getattr(g, f"{pre}_src"), ndim=1, kind="int").shape[0])
        for name, kind in (("dst", "int"), ("olabel", "int"), ("score", "float")):
            c.tensor(f"{pre}_{name}", getattr(g, f"{pre}_{name}"), ndim=1, length=A, kind=kind)
        c.offsets(f"{pre}_ptr", ptr, A)
        src = torch.repeat_interleave(torch.arange(S, device=ptr.device), (ptr[1:] - ptr[:-1]).long())
        if not torch.equal(getattr(g, f"{pre}_src").long(), src):
            c.fail(f"{pre}_src must list each arc's source state as {pre}_ptr orders them")
        c.in_range(f"{pre}_dst", getattr(g, f"{pre}_dst"), 0, S)
        c.in_range(f"{pre}_olabel", getattr(g, f"{pre}_olabel"), 0, max(W, 1))
        c.no_nan(f"{pre}_score", getattr(g, f"{pre}_score"), finite=True)
    A = g.e_src.shape[0]
    c.in_range("e_ilabel", c.tensor("e_ilabel", g.e_ilabel, ndim=1, length=A, kind="int"), 0, V)
    c.tensor("e_start", g.e_start, ndim=1, length=A, kind="bool")
    depth = c.integer("eps_depth", g.eps_depth, 0)
    true_depth = _eps_depth(S, g.p_src.cpu().numpy().astype(np.int64), g.p_dst.cpu().numpy().astype(np.int64))
    if depth != true_depth:
        c.fail(f"eps_depth must be the longest chain of epsilon arcs, {true_depth}; got {depth}")
    if g.word_lengths is not None and (not isinstance(g.word_lengths, list) or len(g.word_lengths) != W
                                       or not all(isinstance(n, int) and n >= 0 for n in g.word_lengths)):
        c.fail(f"word_lengths must be None or {W} ints >= 0")


def _words_from_bytes(data: torch.Tensor, n: int) -> list[str]:
    """The word table of a format-2 file: ``n`` newline-separated UTF-8 words."""
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1 or not isinstance(n, int):
        raise ValueError("words must be a uint8 tensor and n_words an int")
    words = data.numpy().tobytes().decode("utf-8").split("\n") if n else []
    if len(words) != n:
        raise ValueError(f"the word table has {len(words)} words, n_words says {n}")
    return words


@functools.cache
def validation_fingerprint() -> str:
    """The fingerprint of :meth:`DecodingGraph.validate`'s rules: a SHA-256 of the source of this module and
    of ``_validation`` (any change to either makes a cache's ``validated_by`` stale: validated again once);
    ``""`` where the source cannot be read, and then every load validates."""
    from ... import _validation

    h = hashlib.sha256()
    try:
        for source in (__file__, _validation.__file__):
            h.update(Path(source).read_bytes())
    except (OSError, TypeError):  # no source file to read (a frozen or zipped install): nothing is trusted
        return ""
    return h.hexdigest()[:20]


def load_graph(path: str | os.PathLike, device: torch.device | str = "cpu") -> DecodingGraph:
    """Load a graph saved by :meth:`DecodingGraph.save`."""
    return DecodingGraph.load(path, device)
