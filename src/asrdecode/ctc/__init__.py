"""CTC decoding: batched greedy, blank collapse, batched prefix beam search with fusion, and its reference."""

from .beam import CTCBeamState, beam_search
from .collapse import blank_collapse
from .greedy import greedy
from .reference import reference_beam_search

__all__ = ["greedy", "blank_collapse", "beam_search", "reference_beam_search", "CTCBeamState"]
