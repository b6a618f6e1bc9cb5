"""CTC decoding: batched greedy, blank collapse, batched prefix beam search with fusion, and its reference.

Example::

    from asrdecode import ctc
    from asrdecode.lm import NGramLM

    lm = NGramLM.from_arpa("token-4gram.arpa.gz", vocab_size=V, blank_id=blank)
    best = ctc.greedy(log_probs, lengths, blank)                      # [Hypothesis] * B
    nbest = ctc.beam_search(log_probs, lengths, blank, beam=16,       # [[Hypothesis] * nbest] * B
                            fusion=[(lm, 0.5)], beta=1.0, blank_collapse=0.999, nbest=4)

    # streaming: the same result as one call on the whole utterances
    dec = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16)         # (ctc.CTCGreedyDecoder(blank) alike)
    state = dec.init_state(B)
    for chunk, chunk_lengths in chunks:
        state = dec.advance(state, chunk, chunk_lengths)
        partial = dec.partial(state)                                  # n-best so far
    nbest = dec.finalize(state)
"""

from . import wfst
from .beam import CTCBeamDecoder, CTCBeamState, beam_search, initial_beam_state
from .collapse import blank_collapse
from .greedy import CTCGreedyDecoder, CTCGreedyState, greedy
from .reference import reference_beam_search

__all__ = ["greedy", "CTCGreedyDecoder", "CTCGreedyState", "CTCBeamDecoder", "blank_collapse", "beam_search", "initial_beam_state", "reference_beam_search", "CTCBeamState", "wfst"]
