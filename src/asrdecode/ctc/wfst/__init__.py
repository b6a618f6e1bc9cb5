"""WFST (TLG) decoding for CTC: graph building with OpenFst (kaldifst) and a batched,
vectorised token-passing decoder (1-best with word times, n-best lists and lattices).

Example::

    from asrdecode.ctc.wfst import build_tlg, WFSTDecoder, lexicon_from_tokenizer

    lexicon = lexicon_from_tokenizer(words, tokenizer)             # {word: [token ids]} (or [[ids], [ids]])
    graph = build_tlg(vocab_size, lexicon, "words.arpa", topology="compact", blank_id=blank)
    graph.save("TLG.pt")
    dec = WFSTDecoder(graph, beam=17.0, max_active=10000, acoustic_scale=1.0)
    hyps = dec(log_probs, lengths, boosts=[{"paris": 3.0}, None])   # [Hypothesis] * B
    nbest, lattices = dec(log_probs, lengths, nbest=10, return_lattice=True)  # [[Hypothesis]] * B, kaldifst.Lattice * B

    state = dec.init_state(batch, device)                          # streaming, same result
    for chunk, chunk_lengths in chunks:
        dec.advance(state, chunk, chunk_lengths)
        partial = dec.hypotheses(state)
"""

from .decoder import WFSTDecoder, WFSTStreamState, attach_search_index
from .graph import DecodingGraph, build_tlg, load_graph
from .lexicon import lexicon_from_tokenizer, read_lexicon
from .topology import ctc_topology_text

__all__ = [
    "WFSTDecoder",
    "WFSTStreamState",
    "attach_search_index",
    "DecodingGraph",
    "build_tlg",
    "load_graph",
    "read_lexicon",
    "lexicon_from_tokenizer",
    "ctc_topology_text",
]
