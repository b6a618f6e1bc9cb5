"""CTC topologies (the T of TLG) as OpenFst text.

Label conventions used by every graph of this package (0 is epsilon on both sides):

* input label ``t + 1`` is model token ``t`` (the blank included, ``0 <= t < vocab_size``) on an
  arc that continues the current token (a repeat, a blank), ``V + t + 1`` on an arc where T
  outputs token ``t`` (a token starts): the decoder reads both as token ``t`` and uses the
  flag to recover the output token sequence and its timestamps;
* output label ``t + 1`` is the non-blank token ``t`` (T's output side, L's input side).

Two topologies:

* ``"normal"``: one state per "last frame token"; a token repeated on consecutive frames
  is one output token, a repeated output token needs a blank between (the usual CTC collapse
  rule, exactly). ``V`` states and ``V * V`` arcs.
* ``"compact"``: a blank state (start, with a blank self-loop) and one state per non-blank
  token (with its self-loop); a token leaves the blank state into its own state emitting
  it, and each token state has an epsilon arc back to the blank state. ``~3 V`` arcs.
  Difference from ``"normal"``: consecutive identical frames ``a a`` may be read as one
  token ``a`` *or* as two tokens ``a a`` (via the epsilon arc), so the compact topology
  accepts a superset of the normal one's (frame sequence -> token sequence) pairs.
"""

from __future__ import annotations

from ...errors import DecodingInputError

__all__ = ["ctc_topology_text", "TOPOLOGIES"]

TOPOLOGIES = ("normal", "compact")


def ctc_topology_text(vocab_size: int, blank_id: int, topology: str = "compact") -> str:
    """OpenFst text (``src dst ilabel olabel weight`` lines, then final states) of T.

    Args:
        vocab_size: number of model tokens ``V`` (the blank included).
        blank_id: the blank's token id.
        topology: ``"normal"`` or ``"compact"`` (see the module docs).
    """
    if topology not in TOPOLOGIES:
        raise DecodingInputError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
    if vocab_size < 2:
        raise DecodingInputError(f"vocab_size must be >= 2, got {vocab_size}")
    if not 0 <= blank_id < vocab_size:
        raise DecodingInputError(f"blank_id must be in [0, {vocab_size}), got {blank_id}")
    lines: list[str] = []
    tokens = [t for t in range(vocab_size) if t != blank_id]
    if topology == "normal":
        # state 0: last frame was blank (start); state i (1..V-1): last frame was tokens[i-1]
        state_of = {blank_id: 0}
        for i, t in enumerate(tokens, start=1):
            state_of[t] = i
        for prev, s in state_of.items():
            for t in range(vocab_size):
                d = state_of[t]
                if t == prev:
                    lines.append(f"{s} {d} {t + 1} 0 0")  # repeat (or blank self-loop): no output
                elif t == blank_id:
                    lines.append(f"{s} {d} {t + 1} 0 0")
                else:
                    lines.append(f"{s} {d} {vocab_size + t + 1} {t + 1} 0")
        finals = range(vocab_size)
    else:
        lines.append(f"0 0 {blank_id + 1} 0 0")
        for i, t in enumerate(tokens, start=1):
            lines.append(f"0 {i} {vocab_size + t + 1} {t + 1} 0")
            lines.append(f"{i} {i} {t + 1} 0 0")
            lines.append(f"{i} 0 0 0 0")
        finals = range(len(tokens) + 1)
    lines.extend(f"{s} 0" for s in finals)
    return "\n".join(lines) + "\n"
