"""Transducer (RNN-T and TDT) models protocol and decoders."""

from .model import LSTMTransducer, StatelessTransducer, TransducerModel, check_model

__all__ = ["TransducerModel", "LSTMTransducer", "StatelessTransducer", "check_model"]
from .greedy import GreedyState, greedy
from .reference import reference_greedy

__all__ += ["greedy", "GreedyState", "reference_greedy"]
