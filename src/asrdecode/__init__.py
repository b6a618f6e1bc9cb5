"""asrdecode: fast, exact, batched decoders for CTC, RNN-T and TDT speech recognition models.

Decoders live in their family's namespace: :mod:`asrdecode.transducer` (``greedy``,
``reference_greedy``), :mod:`asrdecode.ctc` (``greedy``, ``blank_collapse``, ``beam_search``).
Language models and phrase boosting (fusion models) are in :mod:`asrdecode.lm`; the bundled demo
models and adapters in :mod:`asrdecode.models`; many-stream sessions in :mod:`asrdecode.streaming`.
Files to transcripts as the CLI makes them: :func:`transcribe` and :class:`Recognizer` (:mod:`asrdecode.offline`).
"""

from . import ctc, lm, streaming, transducer
from .errors import AsrDecodeError, DecodingInputError, FileFormatError, NonFiniteJointError
from .fusion import FusionModel, FusionScoreError, FusionScorer
from .lm import BoostingTree, NGramLM, TokenMap, estimate_arpa, read_arpa, write_arpa
from .offline import Recognizer, transcribe
from .results import Hypothesis, Tokenizer
from .tokenizers import CharTokenizer, SentencePieceTokenizer
from .transducer import LSTMTransducer, StatelessTransducer, TransducerModel

__version__ = "0.1.0"

__all__ = [
    "ctc",
    "lm",
    "streaming",
    "transducer",
    "transcribe",
    "Recognizer",
    "AsrDecodeError",
    "DecodingInputError",
    "FileFormatError",
    "NonFiniteJointError",
    "FusionScoreError",
    "FusionModel",
    "FusionScorer",
    "NGramLM",
    "BoostingTree",
    "TokenMap",
    "read_arpa",
    "write_arpa",
    "estimate_arpa",
    "Hypothesis",
    "Tokenizer",
    "CharTokenizer",
    "SentencePieceTokenizer",
    "TransducerModel",
    "LSTMTransducer",
    "StatelessTransducer",
]
