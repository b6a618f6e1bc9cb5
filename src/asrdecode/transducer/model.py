"""The Transducer model protocol and two plain torch models that implement it.

Decoders see only :class:`TransducerModel`. Shapes: ``B`` batch, ``T`` frames, ``D`` encoder
width, ``H`` joint width, ``V`` vocabulary size (blank included), ``K`` number of TDT durations.

A prediction-network *state* is any pytree of tensors (tuple, list, dict) that the model knows
how to gather (``select_state``) and merge (``replace_state``); decoders never look inside.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from .._validation import weights_versions
from ..errors import DecodingInputError

__all__ = ["TransducerModel", "LSTMTransducer", "StatelessTransducer", "check_model", "check_joint_width"]

State = Any


@runtime_checkable
class TransducerModel(Protocol):
    """What a Transducer (RNN-T or TDT) must offer a decoder.

    ``predict`` takes labels ``[B]``; the blank id as input means start-of-sequence.
    ``joint`` returns ``[..., V]`` logits for RNN-T and ``[..., V + K]`` for TDT, whose last
    ``K`` columns are duration logits for the values in ``durations``.
    """

    blank_id: int
    vocab_size: int
    durations: list[int] | None

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder output ``[..., D]`` -> joint space ``[..., H]``."""
        ...

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        """Prediction-network output ``[..., P]`` -> joint space ``[..., H]``."""
        ...

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> State:
        """Prediction-network state for ``batch`` empty hypotheses."""
        ...

    def predict(self, labels: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One prediction-network step: labels ``[B]`` -> (output ``[B, P]``, new state)."""
        ...

    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        """Joint after projection: ``[..., H]`` + ``[..., H]`` -> logits ``[..., V (+K)]``."""
        ...

    def select_state(self, state: State, index: torch.Tensor) -> State:
        """Gather the states of hypotheses ``index [N]`` -> a state of batch ``N``."""
        ...

    def replace_state(self, state: State, new: State, mask: torch.Tensor) -> State:
        """Per hypothesis, ``new`` where ``mask [B]`` is true, else ``state``."""
        ...


def check_model(model: object) -> TransducerModel:
    """Validate the protocol's attributes; raise :class:`DecodingInputError` naming what is wrong."""
    if not isinstance(model, TransducerModel):
        raise DecodingInputError("model does not implement the TransducerModel protocol")
    v = int(model.vocab_size)
    if v < 2:
        raise DecodingInputError(f"model.vocab_size must be >= 2 (blank + one label), got {v}")
    if not 0 <= int(model.blank_id) < v:
        raise DecodingInputError(f"model.blank_id {model.blank_id} outside 0..{v - 1}")
    if model.durations is not None:
        d = list(model.durations)
        if not d or any(int(x) < 0 for x in d) or len(set(d)) != len(d):
            raise DecodingInputError(f"model.durations must be distinct non-negative ints, got {d}")
        if max(d) == 0:
            raise DecodingInputError("model.durations must contain a value > 0")
    return model


def replace_state_inplace(model: TransducerModel, state: State, new: State, mask: torch.Tensor) -> None:
    """Update ``state`` in place to ``model.replace_state(state, new, mask)``: its tensors keep their
    addresses (a static loop's buffers). A model's own ``replace_state_(state, new, mask)`` when it has one
    (a masked write per tensor), else ``replace_state`` and a copy back per tensor."""
    own = getattr(model, "replace_state_", None)
    if own is not None:
        own(state, new, mask)
        return
    merged = model.replace_state(state, new, mask)
    for old, value in zip(tree_flatten(state)[0], tree_flatten(merged)[0]):
        if value is not old:
            old.copy_(value)


def joint_width(model: TransducerModel) -> int:
    """The joint's output width: ``vocab_size`` (+ ``len(durations)`` for TDT)."""
    return model.vocab_size + (len(model.durations) if model.durations is not None else 0)


def checked_joint(model: TransducerModel, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
    """``model.joint(enc_proj, dec_proj)`` (``[..., joint_width]``), refused by name when the joint returns
    another width (a joint that changes its output between calls; the native engine checks the same at
    every call). The check reads the output's shape only: no device sync, static under compile / CUDA graphs."""
    out = model.joint(enc_proj, dec_proj)
    if out.shape[-1] != joint_width(model):
        raise DecodingInputError(f"model.joint returned {out.shape[-1]} outputs, expected {joint_width(model)} "
                                 "(vocab_size + len(durations)); a joint must keep its output width")
    return out


def check_joint_width(model: TransducerModel, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> None:
    """One joint evaluation (``[1, H]`` rows) to catch a vocabulary / joint-width mismatch before decoding."""
    expected = joint_width(model)
    width = model.joint(enc_proj, dec_proj).shape[-1]
    if width != expected:
        raise DecodingInputError(f"model.joint returns {width} outputs but vocab_size + len(durations) is {expected}")


class _JointMixin(nn.Module):
    """Shared joint network: ``tanh(enc_proj + dec_proj) -> linear``, plus the protocol's state helpers."""

    def _init_joint(
        self, vocab_size: int, enc_dim: int, pred_dim: int, joint_dim: int, blank_id: int, durations: Sequence[int] | None
    ) -> None:
        if not 0 <= blank_id < vocab_size:
            raise DecodingInputError(f"blank_id {blank_id} outside 0..{vocab_size - 1}")
        self.vocab_size = int(vocab_size)
        self.blank_id = int(blank_id)
        self.durations = None if durations is None else [int(d) for d in durations]
        n_out = vocab_size + (0 if durations is None else len(durations))
        self.enc_proj = nn.Linear(enc_dim, joint_dim)
        self.dec_proj = nn.Linear(pred_dim, joint_dim)
        self.joint_out = nn.Linear(joint_dim, n_out)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return self.enc_proj(enc)

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return self.dec_proj(dec)

    def joint(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        return self.joint_out(torch.tanh(enc_proj + dec_proj))


class LSTMTransducer(_JointMixin):
    """RNN-T / TDT with an LSTM prediction network (embedding -> LSTM) and a tanh joint.

    Args:
        vocab_size: number of outputs including blank (``V``).
        enc_dim, pred_dim, joint_dim: encoder width ``D``, LSTM width ``P``, joint width ``H``.
        blank_id: the blank's index; as ``predict`` input it means start-of-sequence (zero embedding).
        durations: TDT duration values (e.g. ``[0, 1, 2, 4]``); ``None`` for RNN-T.
        pred_layers: number of LSTM layers.
    """

    def __init__(
        self,
        vocab_size: int,
        enc_dim: int,
        pred_dim: int,
        joint_dim: int,
        blank_id: int,
        durations: Sequence[int] | None = None,
        pred_layers: int = 1,
    ) -> None:
        super().__init__()
        self._init_joint(vocab_size, enc_dim, pred_dim, joint_dim, blank_id, durations)
        self.embedding = nn.Embedding(vocab_size, pred_dim, padding_idx=blank_id)
        self.lstm = nn.LSTM(pred_dim, pred_dim, num_layers=pred_layers, batch_first=True)
        self.pred_layers = pred_layers
        self.pred_dim = pred_dim

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> State:
        p = self.embedding.weight
        shape = (self.pred_layers, batch, self.pred_dim)
        z = torch.zeros(shape, device=device or p.device, dtype=dtype or p.dtype)
        return (z, z.clone())

    def predict(self, labels: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        if torch.is_grad_enabled() and self.lstm.weight_ih_l0.requires_grad:
            out, new = self.lstm(self.embedding(labels).unsqueeze(1), state)
            return out.squeeze(1), new
        # one step, one matrix product per layer: nn.LSTM's per-call weight preparation costs ~3x the
        # step itself on CPU. The first layer's input is an embedding row, so its input projection
        # (plus both biases) is a precomputed table row per label, and only ``h W_hh^T`` is multiplied:
        # half the weights read per step. The cached weights order the gates (i, f, o, g), so one
        # sigmoid and one tanh cover them (8 kernels a layer on a GPU). Same cell equations, equal to
        # float rounding.
        h_all, c_all = state
        table, w_hh0, upper = self._step_weights()
        P = self.pred_dim
        hs, cs = [], []
        gates = torch.addmm(table.index_select(0, labels), h_all[0], w_hh0)  # [B, 4P]: i, f, o, g
        x: torch.Tensor  # the layer below's output (layer 0 sets it before layer 1 reads it)
        for layer in range(self.pred_layers):
            if layer:  # x: the layer below's output
                w, b = upper[layer - 1]
                gates = torch.addmm(b, torch.cat([x, h_all[layer]], dim=1), w)  # noqa: F821 (x: set by layer 0)
            ifo_in, g_in = gates.split(3 * P, dim=1)  # (one split each: fewer view ops than slices)
            i_g, f_g, o_g = torch.sigmoid(ifo_in).split(P, dim=1)
            c = torch.addcmul(f_g * c_all[layer], i_g, torch.tanh(g_in))
            x = o_g * torch.tanh(c)
            hs.append(x)
            cs.append(c)
        if self.pred_layers == 1:  # views, no copy
            return x, (x.unsqueeze(0), c.unsqueeze(0))
        return x, (torch.stack(hs), torch.stack(cs))

    def _step_weights(self) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The step's weights, cached while the parameters are unchanged: the first layer's input table
        ``E W_ih^T + b_ih + b_hh`` ``[V, 4P]`` and ``W_hh^T`` ``[P, 4P]``; per upper layer
        ``([W_ih W_hh]^T [2P, 4P], b_ih + b_hh [4P])``; gate columns in the order (i, f, o, g) (nn.LSTM's
        rows are i, f, g, o)."""
        if torch.compiler.is_compiling():  # the key reads addresses, which a trace cannot: the cache the eager
            cached = self.__dict__.get("_step_cache")  # priming step of a loop made (its parameters unchanged since)
            if cached is not None:
                return cached[1]
        # read through the modules' parameter dicts: nn.Module attribute look-ups cost ~8 us a step
        names = self.__dict__.get("_step_names")
        if names is None:
            names = self.__dict__["_step_names"] = [f"{kind}_l{layer}" for layer in range(self.pred_layers)
                                                    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        # (torch types these dicts' values as Optional: the modules and parameters set in __init__ are not None)
        lstm_params: dict[str, torch.Tensor] = self._modules["lstm"]._parameters  # type: ignore[union-attr,assignment]
        params: list[torch.Tensor] = [self._modules["embedding"]._parameters["weight"],  # type: ignore[union-attr,list-item]
                                      *(lstm_params[n] for n in names)]
        key = tuple((p.data_ptr(), v, p.dtype, p.device) for p, v in zip(params, weights_versions(params)))
        cached = self.__dict__.get("_step_cache")
        if cached is None or cached[0] != key:
            emb, lstm = params[0], params[1:]
            P = self.pred_dim
            order = torch.cat([torch.arange(0, 2 * P), torch.arange(3 * P, 4 * P), torch.arange(2 * P, 3 * P)])
            with torch.no_grad():
                def ifog(w: torch.Tensor) -> torch.Tensor:  # [4P, ...] rows (i, f, g, o) -> (i, f, o, g)
                    return w.index_select(0, order.to(w.device))

                table = torch.addmm(ifog(lstm[2] + lstm[3]), emb, ifog(lstm[0]).t()).contiguous()
                upper = [(ifog(torch.cat([lstm[4 * j], lstm[4 * j + 1]], dim=1)).t().contiguous(),
                          ifog(lstm[4 * j + 2] + lstm[4 * j + 3]).contiguous()) for j in range(1, self.pred_layers)]
                cached = (key, (table, ifog(lstm[1]).t().contiguous(), upper))
            self.__dict__["_step_cache"] = cached
        return cached[1]

    def predict_sequence(self, labels: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Teacher-forced prediction over ``labels [B, U]`` -> outputs ``[B, U, P]`` (for training)."""
        return self.lstm(self.embedding(labels), state)

    def select_state(self, state: State, index: torch.Tensor) -> State:
        return (state[0].index_select(1, index), state[1].index_select(1, index))

    def replace_state(self, state: State, new: State, mask: torch.Tensor) -> State:
        m = mask.view(1, -1, 1)
        return (torch.where(m, new[0], state[0]), torch.where(m, new[1], state[1]))

    def replace_state_(self, state: State, new: State, mask: torch.Tensor) -> None:
        """:meth:`replace_state` in place: ``state``'s tensors take ``new`` where ``mask [B]`` (one masked
        write each, addresses kept)."""
        m = mask.view(1, -1, 1)
        torch.where(m, new[0], state[0], out=state[0])
        torch.where(m, new[1], state[1], out=state[1])


class StatelessTransducer(_JointMixin):
    """RNN-T / TDT whose prediction network embeds the last ``context`` labels (no recurrence).

    Its state is the last ``context`` labels ``[B, context]`` (blank = nothing yet); output is the
    concatenation of their embeddings, linearly mixed to width ``pred_dim``.
    """

    def __init__(
        self,
        vocab_size: int,
        enc_dim: int,
        pred_dim: int,
        joint_dim: int,
        blank_id: int,
        durations: Sequence[int] | None = None,
        context: int = 2,
    ) -> None:
        super().__init__()
        if context < 1:
            raise DecodingInputError(f"context must be >= 1, got {context}")
        self._init_joint(vocab_size, enc_dim, pred_dim, joint_dim, blank_id, durations)
        self.context = context
        self.embedding = nn.Embedding(vocab_size, pred_dim, padding_idx=blank_id)
        self.mix = nn.Linear(context * pred_dim, pred_dim)

    def initial_state(self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None) -> State:
        dev = device or self.embedding.weight.device
        return torch.full((batch, self.context), self.blank_id, dtype=torch.long, device=dev)

    def predict(self, labels: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        # The start symbol (blank) does not shift the history: it means "nothing emitted yet".
        shifted = torch.cat([state[:, 1:], labels.unsqueeze(1)], dim=1)
        new = torch.where((labels == self.blank_id).unsqueeze(1), state, shifted)
        emb = self.embedding(new).flatten(1)
        return torch.relu(self.mix(emb)), new

    def select_state(self, state: State, index: torch.Tensor) -> State:
        return state[index]

    def replace_state(self, state: State, new: State, mask: torch.Tensor) -> State:
        return torch.where(mask.unsqueeze(1), new, state)

    def replace_state_(self, state: State, new: State, mask: torch.Tensor) -> None:
        """:meth:`replace_state` in place (one masked write, address kept)."""
        torch.where(mask.unsqueeze(1), new, state, out=state)
