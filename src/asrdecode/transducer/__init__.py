"""Transducer (RNN-T and TDT): the model protocol, reference and batched greedy and beam decoders."""

from .beam import BeamSearchDecoder, BeamState, beam_search, initial_beam_state
from .greedy import GreedyDecoder, GreedyState, greedy
from .model import LSTMTransducer, StatelessTransducer, TransducerModel, check_model
from .reference import reference_greedy
from .reference_beam import reference_beam_search
from .reference_wind_beam import reference_wind_beam_search

__all__ = [
    "TransducerModel",
    "LSTMTransducer",
    "StatelessTransducer",
    "check_model",
    "greedy",
    "GreedyState",
    "GreedyDecoder",
    "reference_greedy",
    "beam_search",
    "BeamSearchDecoder",
    "initial_beam_state",
    "reference_beam_search",
    "reference_wind_beam_search",
    "BeamState",
]
