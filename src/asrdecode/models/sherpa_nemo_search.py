"""sherpa-onnx's offline ``modified_beam_search`` for NeMo transducers (RNN-T and TDT) over any ``TransducerModel``.

sherpa-onnx runs another algorithm on NeMo-layout files than on icefall ones
(:func:`asrdecode.models.sherpa_search.modified_beam_search`): a frame-asynchronous search, one
utterance at a time. Each hypothesis carries its tokens, frames, TDT durations, float32 log-prob,
its own frame ``t`` and the labels it emitted on that frame (``n``). Each step:

- ``t_min`` = the smallest ``t``; the search ends when ``t_min >= T``;
- a hypothesis with ``t > t_min`` is a candidate as it is; one at ``t_min`` with ``n >= max_symbols``
  (sherpa-onnx: 10) becomes a candidate one frame later (``n = 0``);
- every other one at ``t_min`` goes through the joint on frame ``t_min``: the log-softmax of the
  vocabulary logits (float32, :func:`sherpa_log_softmax`), its ``beam`` best tokens (equal values:
  ordered as ``std::partial_sort`` leaves them, :func:`top_k`); TDT: the log-softmax of the duration
  logits, the best duration ``d*`` (first on ties) whose log-prob is added to every token's. Blank or ``<unk>``
  (``unk_id``): ``t += max(1, d*)`` (RNN-T: 1), ``n = 0``, the prediction network unchanged; a label:
  appended with frame ``t`` (and duration ``d*``), ``t += d*`` (RNN-T: 0), ``n = 0 if d* > 0 else n + 1``,
  the prediction network fed that label;
- the ``beam`` best candidates by log-prob survive (no merging; candidates listed in hypothesis order
  then top-k order, equal log-probs ordered as libstdc++'s ``std::partial_sort`` leaves them:
  :func:`partial_sort`).

The final list is best first by raw log-prob (sherpa-onnx returns the first). ``d*`` is a value of
``model.durations`` (NeMo files: ``0..K-1``, which sherpa-onnx uses as the skip itself). A hypothesis's
prediction-network output only changes when it emits, so it is computed once per emission (batched
over the hypotheses that need it) where sherpa-onnx reruns the decoder at every expansion: same results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from ..configs import SherpaNemoBeamConfig, default_of, takes_config
from ..errors import DecodingInputError
from ..results import Hypothesis
from ..transducer import check_model
from ..transducer._checks import check_nbest_lists
from .sherpa_search import check_label_cells, checked_lengths, native_search_weights

__all__ = ["nemo_beam_search", "SHERPA_NEMO_MAX_SYMBOLS", "sherpa_log_softmax", "top_k", "partial_sort"]

#: sherpa-onnx's cap on the labels a NeMo beam hypothesis emits on one frame
SHERPA_NEMO_MAX_SYMBOLS: int = default_of(SherpaNemoBeamConfig, "max_symbols")


@dataclass
class _Hyp:
    """One hypothesis: tokens / frames / durations, float32 log-prob, frame ``t``, labels on it ``n``,
    and ``pending``: the label not yet fed to the prediction network (None: its output is cached)."""

    ys: list[int] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    ds: list[int] = field(default_factory=list)
    logp: np.float32 = np.float32(0.0)
    t: int = 0
    n: int = 0
    pending: Optional[int] = None


@dataclass
class _Net:
    """The prediction network of the current hypotheses: ``state`` (batch N: the state after the
    hypothesis's last fed label, or before its pending one) and ``dec [N, H]`` (projected output)."""

    state: Any
    dec: torch.Tensor


@torch.no_grad()
@takes_config(SherpaNemoBeamConfig)
def nemo_beam_search(model: Any, encoder_output: torch.Tensor, lengths: Optional[torch.Tensor | Sequence[int]] = None,
                     *, config: Optional[SherpaNemoBeamConfig] = None, unk_id: Optional[int] = None,
                     **settings: Any) -> list[list[Hypothesis]]:
    """Encoder output ``[B, T, D]`` (+ ``lengths [B]``) -> per utterance its final hypotheses (at most
    ``beam``), best first by raw score; TDT hypotheses carry ``durations``. ``config`` and / or its fields
    (:class:`~asrdecode.configs.SherpaNemoBeamConfig`: ``beam``, ``max_symbols``, ``engine``) as keywords.

    ``engine``: ``"native"`` runs the whole search in C++ (:mod:`asrdecode.native.nemo_beam`) for the
    LSTM prediction networks the C++ greedy reads (NeMo-layout ONNX files, ``LSTMTransducer``);
    ``"torch"`` this module's loop (any model); ``"auto"`` native where it can, else torch.

    Raises:
        DecodingInputError: ``beam`` outside ``1..MAX_SHERPA_BEAM``, ``max_symbols`` outside ``1..1000``,
            ``beam * T * max_symbols`` past ``MAX_LABEL_CELLS``, ``unk_id`` outside the vocabulary, a bad
            shape or lengths (not integers, not 1-D, outside ``0..T``), an unknown ``engine`` or
            ``engine="native"`` where the C++ search cannot run (the message says why).
        NativeEngineUnavailable: ``engine="native"`` without a C++ compiler.
        NativeMemoryError: the C++ search ran out of memory (caught at its C ABI).
    """
    model = check_model(model)
    v = int(model.vocab_size)
    cfg = SherpaNemoBeamConfig.build(config, settings, caller="nemo_beam_search")
    beam, max_symbols, engine = cfg.beam, cfg.max_symbols, cfg.engine
    if unk_id is not None and (not isinstance(unk_id, int) or not 0 <= unk_id < v):
        raise DecodingInputError(f"unk_id must be None or in 0..{v - 1}, got {unk_id!r}")
    lens = checked_lengths(encoder_output, lengths)
    check_label_cells(int(lens.max()) if len(lens) else 0, beam, max_symbols)
    weights = native_search_weights(model, encoder_output, engine, "NeMo beam search", lstm_only=True)
    if weights is not None:
        from ..native.nemo_beam import nemo_beam_lstm

        out = nemo_beam_lstm(weights, encoder_output, lens, beam=beam, unk_id=unk_id, max_symbols=max_symbols)
    else:
        enc = model.project_encoder(encoder_output)
        out = [_one(model, enc[i, : int(lens[i])], beam, unk_id, max_symbols) for i in range(len(lens))]
    check_nbest_lists(out)  # NaN / +inf logits leave non-finite scores: the transducer searches' named error
    return out


def sherpa_log_softmax(x: torch.Tensor) -> torch.Tensor:
    """``[N, V]`` -> float32 ``x - offset`` per row with sherpa-onnx's ``LogSoftmax`` arithmetic (its
    template over ``float``, whose unqualified ``exp`` / ``log`` are C's double functions): ``m`` the
    row's max, ``sum`` accumulated left to right in float32 from ``exp(double(x - m))``, ``offset =
    float(m + log(double(sum)))``. Equal values to the bit matter: they decide ties between hypotheses."""
    xf = x.detach().cpu().float().numpy()
    m = xf.max(axis=-1, keepdims=True)
    e = np.exp((xf - m).astype(np.float64))
    acc = np.zeros(xf.shape[0], dtype=np.float32)
    for v in range(xf.shape[1]):  # sequential: float32 sum of double addends, rounded each step
        acc = (acc.astype(np.float64) + e[:, v]).astype(np.float32)
    offset = (m[:, 0].astype(np.float64) + np.log(acc.astype(np.float64))).astype(np.float32)
    return torch.from_numpy(xf - offset[:, None])


def _one(model: Any, enc: torch.Tensor, beam: int, unk_id: Optional[int], cap: int) -> list[Hypothesis]:
    """One utterance: projected encoder output ``[T, H]`` -> its final hypotheses, best first."""
    blank, v, n_frames = int(model.blank_id), int(model.vocab_size), enc.shape[0]
    durations = list(model.durations) if model.durations is not None else None
    dec, state = model.predict(torch.tensor([blank], device=enc.device), model.initial_state(1, device=enc.device))
    net = _Net(state, model.project_decoder(dec))
    hyps = [_Hyp()]
    while True:
        t_min = min(h.t for h in hyps)
        if t_min >= n_frames:
            break
        rows = [i for i, h in enumerate(hyps) if h.t == t_min and h.n < cap]
        _feed_pending(model, net, hyps, rows)
        lp, dur = _expand(model, enc[t_min], net.dec, rows, v, durations)
        cands = _candidates(hyps, rows, lp, dur, t_min, (beam, blank, unk_id, cap), durations is not None)
        kept = partial_sort(cands, beam, _better)
        hyps = [c[0] for c in kept]
        parents = torch.tensor([c[1] for c in kept], device=enc.device)
        net = _Net(model.select_state(net.state, parents), net.dec.index_select(0, parents))
    return [Hypothesis(list(h.ys), list(h.ts), float(h.logp), list(h.ds) if durations is not None else None)
            for h in sorted(hyps, key=lambda h: -float(h.logp))]  # stable: sherpa-onnx's max_element takes the first


def top_k(row: torch.Tensor, k: int) -> list[int]:
    """sherpa-onnx's ``TopkIndex``: the ids of the ``k`` largest of ``row [V]``, largest first, equal
    values in the order ``std::partial_sort`` (libstdc++) leaves them. Without ties that matter this is
    the sorted order (fast path); with them, :func:`partial_sort` over all ids."""
    k = min(k, row.numel())
    vals, ids = torch.sort(row, descending=True, stable=True)
    head = vals[: k + 1].tolist()
    if len(set(head)) == len(head):
        return ids[:k].tolist()
    x = row.tolist()
    return partial_sort(list(range(len(x))), k, lambda a, b: x[a] > x[b])


def partial_sort(items: list, k: int, better: Callable[[Any, Any], bool]) -> list:
    """The first ``min(k, len(items))`` of ``items`` after libstdc++'s ``std::partial_sort(first, first + k,
    last, better)`` (heap select, then heap sort): which of equal items come first depends on this algorithm."""
    a = list(items)
    k = min(k, len(a))
    _make_heap(a, k, better)
    for i in range(k, len(a)):
        if better(a[i], a[0]):
            value, a[i] = a[i], a[0]
            _adjust_heap(a, 0, k, value, better)
    for end in range(k - 1, 0, -1):  # sort_heap
        value, a[end] = a[end], a[0]
        _adjust_heap(a, 0, end, value, better)
    return a[:k]


def _make_heap(a: list, n: int, better: Callable[[Any, Any], bool]) -> None:
    """libstdc++'s ``__make_heap`` over ``a[:n]``."""
    if n < 2:
        return
    for parent in range((n - 2) // 2, -1, -1):
        _adjust_heap(a, parent, n, a[parent], better)


def _adjust_heap(a: list, hole: int, n: int, value: Any, better: Callable[[Any, Any], bool]) -> None:
    """libstdc++'s ``__adjust_heap``: sift the hole at ``hole`` down to a leaf, then ``value`` up (``__push_heap``)."""
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if better(a[child], a[child - 1]):
            child -= 1
        a[hole] = a[child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and better(a[parent], value):
        a[hole] = a[parent]
        hole = parent
        parent = (hole - 1) // 2
    a[hole] = value


def _better(a: tuple[_Hyp, int], b: tuple[_Hyp, int]) -> bool:
    return bool(a[0].logp > b[0].logp)


def _feed_pending(model: Any, net: _Net, hyps: list[_Hyp], rows: list[int]) -> None:
    """Run the prediction network on the pending labels of ``hyps[rows]`` (in place: ``net``, ``pending``)."""
    need = [i for i in rows if hyps[i].pending is not None]
    if not need:
        return
    dev = net.dec.device
    idx = torch.tensor(need, device=dev)
    labels = torch.tensor([hyps[i].pending for i in need], device=dev)
    out, new = model.predict(labels, model.select_state(net.state, idx))
    n = len(hyps)
    where = torch.zeros(n, dtype=torch.long, device=dev)
    where[idx] = torch.arange(len(need), device=dev)
    mask = torch.zeros(n, dtype=torch.bool, device=dev)
    mask[idx] = True
    net.state = model.replace_state(net.state, model.select_state(new, where), mask)
    net.dec = net.dec.clone()
    net.dec[idx] = model.project_decoder(out).to(net.dec.dtype)
    for i in need:
        hyps[i].pending = None


def _expand(model: Any, frame: torch.Tensor, dec: torch.Tensor, rows: list[int], v: int,
            durations: Optional[list[int]]) -> tuple[torch.Tensor, list[tuple[int, np.float32]]]:
    """The joint of ``frame [H]`` with ``dec[rows]``: token log-probs ``[R, V]`` float32 and per row
    (best duration value, its float32 log-prob) (RNN-T: ``(0, 0.0)``)."""
    if not rows:
        return torch.zeros(0, v), []
    idx = torch.tensor(rows, device=dec.device)
    logits = model.joint(frame.expand(len(rows), -1), dec.index_select(0, idx)).float().cpu()
    lp = sherpa_log_softmax(logits[:, :v])
    if durations is None:
        return lp, [(0, np.float32(0.0))] * len(rows)
    dlp = sherpa_log_softmax(logits[:, v:])
    best = dlp.argmax(-1).tolist()  # torch returns the first of equal maxima, as std::max_element
    return lp, [(durations[k], np.float32(dlp[r, k].item())) for r, k in enumerate(best)]


def _candidates(hyps: list[_Hyp], rows: list[int], lp: torch.Tensor, dur: list[tuple[int, np.float32]], t_min: int,
                rules: tuple[int, int, Optional[int], int], tdt: bool) -> list[tuple[_Hyp, int]]:
    """Every candidate of this step as (hypothesis, index of its parent in ``hyps``), in sherpa-onnx's order;
    ``rows``: the hypotheses expanded (``lp [R, V]``, ``dur``: :func:`_expand`'s); ``rules``: (beam, blank,
    unk_id, max_symbols)."""
    beam, blank, unk_id, cap = rules
    out: list[tuple[_Hyp, int]] = []
    where = {r: j for j, r in enumerate(rows)}
    for i, h in enumerate(hyps):
        if h.t > t_min:
            out.append((h, i))
        elif h.n >= cap:
            out.append((_Hyp(h.ys, h.ts, h.ds, h.logp, h.t + 1, 0, h.pending), i))
        else:
            j = where[i]
            out.extend((c, i) for c in _children(h, lp[j], dur[j], beam, blank, unk_id, tdt))
    return out


def _children(h: _Hyp, lp: torch.Tensor, dur: tuple[int, np.float32], beam: int, blank: int,
              unk_id: Optional[int], tdt: bool) -> list[_Hyp]:
    """The ``beam`` best one-token extensions of ``h`` from its token log-probs ``lp [V]`` and (d*, log-prob)."""
    d, dlp = dur
    out = []
    for tok in top_k(lp, beam):
        score = np.float32(np.float32(lp[tok].item()) + dlp) + h.logp
        if tok == blank or tok == unk_id:
            out.append(_Hyp(h.ys, h.ts, h.ds, score, h.t + max(1, d), 0, h.pending))
        else:
            n = 0 if d > 0 else h.n + 1
            out.append(_Hyp(h.ys + [tok], h.ts + [h.t], h.ds + [d] if tdt else h.ds, score, h.t + d, n, tok))
    return out
