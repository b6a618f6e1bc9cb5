"""Transducer (RNN-T and TDT): the model protocol, reference and batched greedy decoders."""

from .greedy import GreedyState, greedy
from .model import LSTMTransducer, StatelessTransducer, TransducerModel, check_model
from .reference import reference_greedy

__all__ = [
    "TransducerModel",
    "LSTMTransducer",
    "StatelessTransducer",
    "check_model",
    "greedy",
    "GreedyState",
    "reference_greedy",
]
