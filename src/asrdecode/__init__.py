"""asrdecode: fast, exact, batched decoders for CTC, RNN-T and TDT speech recognition models."""

from .errors import AsrDecodeError, DecodingInputError, FileFormatError
from .fusion import FusionModel
from .results import Hypothesis, Tokenizer
from .tokenizers import CharTokenizer, SentencePieceTokenizer
from .transducer import LSTMTransducer, StatelessTransducer, TransducerModel

__version__ = "0.1.0"

__all__ = [
    "AsrDecodeError",
    "DecodingInputError",
    "FileFormatError",
    "FusionModel",
    "Hypothesis",
    "Tokenizer",
    "CharTokenizer",
    "SentencePieceTokenizer",
    "TransducerModel",
    "LSTMTransducer",
    "StatelessTransducer",
]
