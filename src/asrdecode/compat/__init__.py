"""Drop-in facades for code written against other CTC decoders: change the import, keep the script.

* :func:`build_ctcdecoder`: pyctcdecode's (``decode``, ``decode_beams``, ``decode_batch``, hotwords);
* :func:`ctc_decoder`: torchaudio's flashlight-text decoder (``List[List[CTCHypothesis]]``).

Both only translate arguments to :func:`asrdecode.ctc.beam_search` with asrdecode's fusion models.
"""

from .pyctcdecode import BeamSearchDecoderCTC, build_ctcdecoder
from .torchaudio import CTCDecoder, CTCHypothesis, ctc_decoder

__all__ = ["build_ctcdecoder", "BeamSearchDecoderCTC", "ctc_decoder", "CTCDecoder", "CTCHypothesis"]
