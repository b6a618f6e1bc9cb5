"""Streaming sessions: :class:`StreamDecoder` decodes many audio streams together, chunk by chunk.

Example::

    from asrdecode.models import load
    from asrdecode.streaming import StreamDecoder

    dec = StreamDecoder(load("demo-rnnt"), decoder="beam", beam=4, method="alsd")
    dec.open("a")
    dec.open("b")
    partial = dec.step({"a": chunk_a1, "b": chunk_b1})              # {id: StreamResult}
    done = dec.step({"a": chunk_a2}, final={"a"})                    # "a" ends (and is closed)
    assert done["a"].hypothesis.tokens == dec.offline(whole_a).tokens

See ``docs/serving.md``.
"""

from .decoder import MAX_ABS_SAMPLE, StreamDecoder, StreamInputError, StreamResult
from .frontend import BlockFrontEnd
from .latency import BlockContext, LatencyError, LatencyPolicy, latency_policy

__all__ = ["StreamDecoder", "StreamResult", "StreamInputError", "MAX_ABS_SAMPLE", "BlockFrontEnd",
           "BlockContext", "LatencyError", "LatencyPolicy", "latency_policy"]
