"""What the sherpa-onnx ONNX layouts share (the icefall reader :mod:`.onnx_transducer` and the NeMo
reader :mod:`.nemo_onnx`): metadata read as range-checked numbers, the missing-onnxruntime error, the
onnxruntime session and ``<unk>`` folded into blank as sherpa-onnx decodes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError, check_lengths

__all__ = ["META_RANGES", "OnnxMissingError", "fold_unk", "meta_int", "meta_float", "ort_session",
           "nemo_encoder_inputs", "static_dim", "check_dim", "length_groups", "encode_in_groups", "PAD_WASTE",
           "PAD_SLACK"]

#: the accepted range of each numeric metadata value (a crafted header is refused before it sizes anything)
META_RANGES: dict[str, tuple[float, float]] = {
    "vocab_size": (1, 1_000_000), "context_size": (1, 64), "feature_dim": (1, 4096), "feat_dim": (1, 4096),
    "subsampling_factor": (1, 64), "frame_shift_ms": (1.0, 1000.0), "blank_id": (0, 1_000_000),
    "pred_rnn_layers": (1, 64), "pred_hidden": (1, 65536), "durations": (0, 1000),
}


#: a batch is encoded in groups of similar length (:func:`encode_in_groups`) where padding every utterance
#: to the longest would add more than this fraction of frames ...
PAD_WASTE = 0.25
#: ... plus this many frames (an onnxruntime call costs about as much as this many padded frames of a
#: small encoder); a group starts only at an utterance at least this long, so a short one is never
#: encoded padded to fewer frames than this (an encoder's convolutions need some) unless its whole batch is
PAD_SLACK = 200


class OnnxMissingError(DecodingInputError):
    """``onnxruntime`` is not installed."""


def fold_unk(logits: torch.Tensor, blank_id: int, unk_id: Optional[int], mode: Optional[str],
             vocab_size: int) -> torch.Tensor:
    """Logits ``[..., V (+K)]`` with ``<unk>`` counted as blank, as sherpa-onnx decodes.

    ``"max"``: blank's logit becomes ``max(blank, unk)`` and unk's ``-inf``: argmax picks blank exactly
    where sherpa-onnx's greedy picks blank or unk (ties go to the lower id, as ``std::max_element``).
    ``"sum"``: blank's logit becomes ``logaddexp(blank, unk)`` and unk's ``-inf``: the log-softmax gives
    blank ``p(blank) + p(unk)``, what sherpa-onnx's beam search gets by merging the two expansions.
    ``None`` or no unk: ``logits`` unchanged. Duration columns (TDT) are never touched.
    """
    if mode is None or unk_id is None or unk_id == blank_id or not 0 <= unk_id < vocab_size:
        return logits
    out = logits.clone()
    b, u = logits[..., blank_id], logits[..., unk_id]
    if mode == "max":
        # std::max_element keeps the first maximum: unk wins a tie only when its id is lower
        out[..., blank_id] = torch.maximum(b, u)
    else:
        out[..., blank_id] = torch.logaddexp(b, u)
    out[..., unk_id] = -math.inf
    return out


def static_dim(item: Any, axis: int) -> Optional[int]:
    """The fixed size of axis ``axis`` of an onnxruntime input / output (``item.shape``); None when that
    axis is symbolic or missing."""
    shape = list(getattr(item, "shape", None) or [])
    if not -len(shape) <= axis < len(shape):
        return None
    d = shape[axis]
    return d if isinstance(d, int) and d > 0 else None


def check_dim(path: Path, item: Any, axis: int, want: int, what: str) -> None:
    """Raise :class:`FileFormatError` naming ``path`` when ``item``'s axis ``axis`` has a fixed size other than
    ``want`` (``what``: where ``want`` comes from, e.g. ``"metadata 'context_size'"``); symbolic axes pass."""
    got = static_dim(item, axis)
    if got is not None and got != want:
        raise FileFormatError(path, None, f"{item.name!r} has size {got} on axis {axis} (shape {list(item.shape)}) "
                                          f"but {what} is {want}")


def meta_int(path: Path, meta: dict[str, str], key: str, default: Optional[int] = None) -> int:
    """Metadata ``key`` as an int inside :data:`META_RANGES` (``default`` when absent; None: required)."""
    raw = meta.get(key)
    if raw is None:
        if default is None:
            raise FileFormatError(path, None, f"metadata {key!r} is missing (see asrdecode.models.onnx_transducer)")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise FileFormatError(path, None, f"metadata {key!r} must be an integer, got {raw!r}") from None
    check_range(path, key, value)
    return value


def meta_float(path: Path, meta: dict[str, str], key: str, default: float) -> float:
    """Metadata ``key`` as a finite float inside :data:`META_RANGES` (``default`` when absent)."""
    raw = meta.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise FileFormatError(path, None, f"metadata {key!r} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise FileFormatError(path, None, f"metadata {key!r} must be finite, got {raw!r}")
    check_range(path, key, value)
    return value


def check_range(path: Path, key: str, value: float) -> None:
    lo, hi = META_RANGES.get(key, (-math.inf, math.inf))
    if not lo <= value <= hi:
        raise FileFormatError(path, None, f"metadata {key!r} must be in {lo:g}..{hi:g}, got {value:g}")


def ort_session(path: Path, model: Optional[bytes] = None) -> Any:
    """An onnxruntime CPU session of ``path`` (or of ``model``, a serialised graph read from ``path``)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise OnnxMissingError("ONNX models need `pip install -e '.[onnx]'` in the asrdecode checkout (onnxruntime)") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, torch.get_num_threads())
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path) if model is None else model, sess_options=opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types for unreadable graphs
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise FileFormatError(path, None, f"not a loadable ONNX model: {first}") from None


def check_feats(feats: object, feature_dim: int) -> None:
    """Raise :class:`DecodingInputError` unless ``feats`` is a tensor ``[B, Tf, feature_dim]``."""
    if not isinstance(feats, torch.Tensor) or feats.dim() != 3 or feats.shape[2] != feature_dim:
        raise DecodingInputError(f"feats must be a float tensor [B, Tf, {feature_dim}]")


def nemo_encoder_inputs(feats: object, lengths: torch.Tensor, feature_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Features ``[B, Tf, F]`` + lengths ``[B]`` -> a NeMo ONNX encoder's inputs: float32 ``[B, F, Tf]``
    and int64 ``[B]`` (``audio_signal`` / ``length``).

    Raises:
        DecodingInputError: ``feats`` is not a tensor ``[B, Tf, feature_dim]``.
    """
    check_feats(feats, feature_dim)
    assert isinstance(feats, torch.Tensor)
    x = feats.detach().cpu().float().transpose(1, 2).contiguous().numpy()
    return x, lengths.detach().cpu().long().numpy()


def length_groups(lengths: Sequence[int], waste: float = PAD_WASTE, slack: int = PAD_SLACK) -> list[list[int]]:
    """Batch indices split into groups of similar length, longest first: a group takes the next
    utterance while padding the group to its longest adds at most ``waste`` of its frames plus ``slack``,
    and every utterance shorter than ``slack``."""
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    groups: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for i in order:
        n = int(lengths[i])
        if cur and n >= slack and int(lengths[cur[0]]) * (len(cur) + 1) - (total + n) > waste * (total + n) + slack:
            groups.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += n
    if cur:
        groups.append(cur)
    return groups


Encoder = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def encode_in_groups(run: Encoder, feats: torch.Tensor, lengths: torch.Tensor, feature_dim: Optional[int] = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``run`` (features ``[b, t, F]`` + lengths ``[b]`` -> output ``[b, t', C]`` + lengths ``[b]``) over a batch
    ``feats [B, T, F]`` in :func:`length_groups`, each group cut to its longest utterance: the encoder
    computes fewer padded frames. Output ``[B, T', C]`` (``T'`` of the longest group; frames past an
    utterance's group's output are 0) + lengths ``[B]``. One group: ``run(feats, lengths)`` itself.

    Raises:
        DecodingInputError: ``feats`` is not a tensor ``[B, T, feature_dim]`` (when given), or ``lengths`` is
            not ``[B]`` integers in ``0..T``.
    """
    if feature_dim is not None:
        check_feats(feats, feature_dim)
    n = check_lengths(lengths, feats.shape[0], feats.shape[1], device=torch.device("cpu"))
    groups = length_groups(n.tolist())
    if len(groups) <= 1:
        return run(feats, n)
    parts = []
    for g in groups:
        idx = torch.tensor(g)
        longest = max(1, int(n[idx].max()))
        parts.append((idx, *run(feats[idx, :longest], n[idx])))
    t_out = max(int(p[1].shape[1]) for p in parts)
    out = parts[0][1].new_zeros(feats.shape[0], t_out, parts[0][1].shape[2])
    out_len = torch.zeros(feats.shape[0], dtype=torch.long)
    for idx, o, ol in parts:
        out[idx, : o.shape[1]] = o
        out_len[idx] = ol.long()
    return out, out_len
