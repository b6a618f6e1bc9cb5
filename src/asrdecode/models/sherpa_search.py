"""sherpa-onnx's offline ``modified_beam_search`` (icefall transducers) over any RNN-T ``TransducerModel``.

One symbol per frame: on every frame each of the ``beam`` hypotheses is extended by blank or by one
label, the ``beam`` best of all (hypothesis, token) pairs survive, and pairs that spell the same
label sequence merge (log-add of their probabilities). ``<unk>`` (``unk_id``) extends like blank.
Scores add float32 log-softmax values as sherpa-onnx does. The final choice is the best
``score / (len(tokens) + context_size)`` (``length_norm=True``, sherpa-onnx's) or the best score.

This is not ALSD++ / AES++ (:func:`asrdecode.transducer.beam_search`): those let a hypothesis emit
several labels per frame and rank label-synchronously, so on flat (random) models their best
hypothesis differs from this one; use this search to reproduce sherpa-onnx's results exactly.

``engine``: ``"native"`` runs the whole search in C++ (:mod:`asrdecode.native.modified_beam`: the
prediction and joint networks from the model's weights, one call per batch) for the models the C++
greedy reads (:func:`~asrdecode.native.transducer_greedy_lstm.native_greedy_weights`: icefall /
NeMo-layout ONNX files, ``LSTMTransducer``); ``"torch"`` this module's loop (any model);
``"auto"`` native where it can, else torch.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, cast

import torch

from ..configs import MAX_SHERPA_BEAM, SherpaBeamSetting, SherpaModifiedBeamConfig, check_setting, takes_config
from ..errors import DecodingInputError, check_lengths
from ..results import Hypothesis
from ..selection import ordered_topk
from ..transducer import check_model
from ..transducer._checks import check_nbest_lists
from .sherpa_compat import length_normalised

__all__ = ["modified_beam_search", "MAX_SHERPA_BEAM", "MAX_LABEL_CELLS", "check_sherpa_beam", "check_label_cells"]

#: the most labels one utterance's hypotheses may hold (beam x frames x labels a frame): 64 Mi int32
#: cells, a few hundred MB of output arrays at most (a batch past it runs in several native calls)
MAX_LABEL_CELLS = 1 << 26


@torch.no_grad()
@takes_config(SherpaModifiedBeamConfig)
def modified_beam_search(model: Any, encoder_output: torch.Tensor, lengths: Optional[torch.Tensor | Sequence[int]] = None,
                         *, config: Optional[SherpaModifiedBeamConfig] = None, unk_id: Optional[int] = None,
                         context_size: int = 0, **settings: Any) -> list[list[Hypothesis]]:
    """Encoder output ``[B, T, D]`` (+ ``lengths [B]``) -> per utterance its final hypotheses, best first;
    ``config`` and / or its fields (:class:`~asrdecode.configs.SherpaModifiedBeamConfig`: ``beam``,
    ``length_norm``, ``engine``) as keywords.

    Raises:
        DecodingInputError: a TDT model, ``beam`` outside ``1..MAX_SHERPA_BEAM``, ``beam * T`` past
            ``MAX_LABEL_CELLS``, a bad shape or lengths (not integers, not 1-D, outside ``0..T``), an unknown
            ``engine`` or ``engine="native"`` where the C++ search cannot run (the message says why).
        NativeEngineUnavailable: ``engine="native"`` without a C++ compiler.
        NativeMemoryError: the C++ search ran out of memory (caught at its C ABI).
    """
    model = check_model(model)
    if model.durations is not None:
        raise DecodingInputError("modified_beam_search is sherpa-onnx's RNN-T search; TDT models are not supported")
    cfg = SherpaModifiedBeamConfig.build(config, settings, caller="modified_beam_search")
    beam, length_norm, engine = cfg.beam, cfg.length_norm, cfg.engine
    lens = checked_lengths(encoder_output, lengths)
    check_label_cells(int(lens.max()) if len(lens) else 0, beam, 1)
    weights = native_search_weights(model, encoder_output, engine, "modified beam search")
    if weights is not None:
        from ..native.modified_beam import native_modified_beam

        out = native_modified_beam(model, weights, encoder_output, lens, beam, unk_id)
    else:
        enc = model.project_encoder(encoder_output)
        out = [_one(model, enc[i, : int(lens[i])], beam, unk_id, context_size) for i in range(len(lens))]
    check_nbest_lists(out)  # NaN / +inf logits leave non-finite scores: the transducer searches' named error
    return length_normalised(out, context_size) if length_norm else [sorted(h, key=lambda x: -x.score) for h in out]


def checked_lengths(encoder_output: object, lengths: Optional[torch.Tensor | Sequence[int]]) -> torch.Tensor:
    """``lengths`` of an encoder output ``[B, T, D]`` as int64 ``[B]`` (``None``: all ``T``), by the
    library's shared check (:func:`~asrdecode.errors.check_lengths`: integers, 1-D, ``0..T``).

    Raises:
        DecodingInputError: not a 3-D tensor, or not ``B`` integer lengths in ``0..T``.
    """
    if not isinstance(encoder_output, torch.Tensor) or encoder_output.dim() != 3:
        raise DecodingInputError("encoder_output must be a tensor [B, T, D]")
    b, t_max = encoder_output.shape[:2]
    return check_lengths(lengths, b, t_max, device=torch.device("cpu"))


def check_sherpa_beam(beam: object) -> int:
    """``beam`` of the sherpa-onnx searches: an int in ``1..MAX_SHERPA_BEAM``, else a named error."""
    return cast(int, check_setting(SherpaBeamSetting, "beam", beam))


def check_label_cells(frames: int, beam: int, max_symbols: int) -> None:
    """Refuse a search whose hypotheses may hold more than :data:`MAX_LABEL_CELLS` labels for one
    utterance (``beam * frames * max_symbols``: the output arrays and the label records grow with it)."""
    cells = beam * frames * max_symbols
    if cells > MAX_LABEL_CELLS:
        raise DecodingInputError(
            f"beam * frames * max_symbols = {beam} * {frames} * {max_symbols} = {cells} labels exceeds "
            f"{MAX_LABEL_CELLS} for one utterance; lower beam or max_symbols, or decode shorter utterances")


def native_search_weights(model: Any, encoder_output: torch.Tensor, engine: str, search: str, *,
                          lstm_only: bool = False) -> Any:
    """The weights the C++ ``search`` runs ``model`` with (those of the C++ greedy) when ``engine`` picks
    it, else None; ``lstm_only``: that search runs LSTM prediction networks only.

    Raises:
        DecodingInputError: ``engine="native"`` where the C++ search cannot run (the message says why).
    """
    from ..native.choice import native_fit
    from ..native.transducer_greedy_lstm import LstmJointWeights, native_greedy_weights

    def fit() -> tuple[Any, str]:
        weights, why = native_greedy_weights(model)
        if lstm_only and weights is not None and not isinstance(weights, LstmJointWeights):
            weights, why = None, f"the C++ {search} runs LSTM prediction networks, not icefall's stateless one"
        if weights is not None and encoder_output.dtype != torch.float32:
            weights, why = None, f"the encoder output is {encoder_output.dtype}; the C++ search is float32"
        return weights, why

    return native_fit(engine, encoder_output.device, "encoder_output", fit, f"run this {search}")


def _one(model: Any, enc: torch.Tensor, beam: int, unk_id: Optional[int], context_size: int) -> list[Hypothesis]:
    blank, v = model.blank_id, model.vocab_size
    state = model.initial_state(1, device=enc.device)
    dec, state = model.predict(torch.tensor([blank], device=enc.device), state)
    dec = model.project_decoder(dec)
    ys: list[tuple[int, ...]] = [()]
    ts: list[tuple[int, ...]] = [()]
    logp = torch.zeros(1, dtype=torch.float64)
    for t in range(enc.shape[0]):
        h = len(ys)
        logits = model.joint(enc[t].expand(h, -1), dec)[:, :v].float()
        scores = (logits.log_softmax(-1) + logp.float().unsqueeze(1)).flatten()
        top_v, top_i = ordered_topk(scores, min(beam, scores.numel()))  # ties: lower hyp * V + token (native)
        merged: dict[tuple[int, ...], list] = {}
        for s, k in zip(top_v.tolist(), top_i.tolist()):
            parent, tok = divmod(k, v)
            emits = tok != blank and tok != unk_id
            key = ys[parent] + (tok,) if emits else ys[parent]
            if key in merged:
                prev = merged[key]
                prev[2] = float(torch.logaddexp(torch.tensor(prev[2], dtype=torch.float64),
                                                torch.tensor(s, dtype=torch.float64)))
            else:
                merged[key] = [parent, tok if emits else None, s, ts[parent] + ((t,) if emits else ())]
        entries = list(merged.items())
        parents = torch.tensor([e[1][0] for e in entries], device=enc.device)
        emit_rows = [j for j, e in enumerate(entries) if e[1][1] is not None]
        state_sel = model.select_state(state, parents)
        dec_sel = dec.index_select(0, parents)
        if emit_rows:
            rows = torch.tensor(emit_rows, device=enc.device)
            labels = torch.tensor([entries[j][1][1] for j in emit_rows], device=enc.device)
            new_dec, new_state = model.predict(labels, model.select_state(state_sel, rows))
            dec_sel = dec_sel.clone()
            dec_sel[rows] = model.project_decoder(new_dec).to(dec_sel.dtype)
            where = torch.zeros(len(entries), dtype=torch.long, device=enc.device)
            where[rows] = torch.arange(len(emit_rows), device=enc.device)
            mask = torch.zeros(len(entries), dtype=torch.bool, device=enc.device)
            mask[rows] = True
            state_sel = model.replace_state(state_sel, model.select_state(new_state, where), mask)
        ys = [e[0] for e in entries]
        ts = [e[1][3] for e in entries]
        logp = torch.tensor([e[1][2] for e in entries], dtype=torch.float64)
        dec, state = dec_sel, state_sel
    return [Hypothesis(list(y), list(s), float(p)) for y, s, p in zip(ys, ts, logp.tolist())]
