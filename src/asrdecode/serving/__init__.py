"""Streaming recognition over WebSockets with dynamic batching (``asrdecode serve`` / ``loadtest``).

- :mod:`.protocol`: the wire protocol (messages, limits, checks); numpy only.
- :mod:`.batcher`: :class:`DynamicBatcher`, generic over a ``step(chunks, final)`` callable.
- :mod:`.server`: the Starlette/uvicorn server (needs the ``asrdecode[serve]`` extra).
- :mod:`.loadtest`: the load generator (needs the ``asrdecode[serve]`` extra).

``server`` and ``loadtest`` are imported on demand so that this package (and ``asrdecode
--help``) works without the extra.
"""

from .batcher import BatcherClosed, BatchRecord, ChunkOutcome, DynamicBatcher
from .protocol import CLOSE_CODES, Limits, ProtocolError, StreamConfig, decode_chunk, encode_chunk

__all__ = ["DynamicBatcher", "ChunkOutcome", "BatchRecord", "BatcherClosed", "Limits", "StreamConfig",
           "ProtocolError", "CLOSE_CODES", "decode_chunk", "encode_chunk", "missing_serve_deps"]


def missing_serve_deps() -> list[str]:
    """The server packages (``starlette``, ``uvicorn``, ``websockets``, ``python-multipart``) that are not
    installed (their pip names)."""
    import importlib.util

    modules = {"starlette": "starlette", "uvicorn": "uvicorn", "websockets": "websockets",
               "python_multipart": "python-multipart"}
    return [name for m, name in modules.items() if importlib.util.find_spec(m) is None]
