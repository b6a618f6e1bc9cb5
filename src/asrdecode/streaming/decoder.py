""":class:`StreamDecoder`: many audio streams decoded together, chunk by chunk, with one state per stream.

A step takes the new audio of any subset of the open streams. Each stream's audio goes through the
block front end (:mod:`~asrdecode.streaming.frontend`); the streams that got new encoder frames (or
end now) have their decoder states gathered into one batch state, the decoder family's own
streaming call runs once for the batch, and the states are scattered back
(:mod:`~asrdecode.streaming.state_batching`). Streams join (:meth:`StreamDecoder.open`) and leave
(``final``, :meth:`StreamDecoder.close`) at any step.

The final result of a stream equals :meth:`StreamDecoder.offline` on the same audio, whatever the
chunking and whatever other streams were decoded alongside: the front end encodes the same blocks
either way, and every decoder family's streaming call equals its whole-utterance call.

**Isolation.** A step is all or nothing: when it raises, no stream has changed, so the caller can
drop the offending stream and step the others again (:func:`asrdecode.serving.batcher.isolate_failures`
does exactly that; the server uses it). Errors that belong to particular streams are a
:class:`StreamInputError` naming them (``errors``: stream id -> its own error): audio that is not a
1-D float waveform, NaN / inf samples, samples beyond :data:`MAX_ABS_SAMPLE` (the log-mel front end
overflows to NaN near 1e18), and, as a backstop, a stream whose encoded frames are not finite.
They are all checked before the batched decoder call. An error of the batched call itself (which
stream caused it is unknown) leaves the states as they were too: every family's ``advance``
gathers the streams' states into a new batch state and scatters the result back only after the
call succeeded, and the front end works on copies of the stream buffers until then.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Collection, Hashable, Mapping, Optional

import torch

from ..audio import MAX_ABS_SAMPLE
from ..errors import DecodingInputError
from ..results import Hypothesis
from .families import make_family
from .frontend import AudioBuffer, BlockFrontEnd, check_audio
from .latency import OLD_FRONT, BlockContext, LatencyError, check_latency, latency_policy

__all__ = ["StreamDecoder", "StreamResult", "StreamInputError", "MAX_ABS_SAMPLE"]

class StreamInputError(DecodingInputError):
    """The input of one or more streams of a step was refused; no stream was changed.

    Attributes:
        errors: ``{stream_id: DecodingInputError}``, each naming that stream and what was wrong.
    """

    def __init__(self, errors: Mapping[Hashable, Exception]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(str(e) for e in self.errors.values()))

    @property
    def stream_ids(self) -> list[Hashable]:
        """The offending streams' ids."""
        return list(self.errors)


@dataclass
class StreamResult:
    """The result of one stream after a step.

    Attributes:
        stream_id: the stream's id.
        hypothesis: everything decoded so far (timestamps in 80 ms encoder frames from the stream's
            start); the final one equals :meth:`StreamDecoder.offline`.
        text: the transcript so far (``hypothesis.text``).
        final: True for the stream's last result (it is closed now).
        frames: encoder frames decoded so far.
    """

    stream_id: Hashable
    hypothesis: Hypothesis
    text: str
    final: bool
    frames: int


@dataclass
class _Stream:
    audio: AudioBuffer
    state: Any
    front: BlockFrontEnd
    latency: Optional[float] = None
    frames: int = 0


class StreamDecoder:
    """Decode many audio streams of a bundled model together, chunk by chunk.

    Args:
        bundle: a demo model from :func:`asrdecode.models.load` (``"demo-rnnt"``, ``"demo-tdt"``,
            ``"demo-ctc"``).
        decoder: ``"greedy"`` or ``"beam"`` (transducers, CTC), ``"wfst"`` (CTC; needs ``graph=``).
        latency: the default latency of the streams, in seconds (``None``: the model's default): the
            longest algorithmic wait of a frame, ``(block_frames + right_context)`` frames, mapped
            to the block and contexts by the model's :class:`~asrdecode.streaming.latency.LatencyPolicy`;
            a stream may name its own in :meth:`open`.
        block_frames, left_context, right_context: instead of ``latency``, the default streams'
            block of ``N`` encoder frames and its left context and lookahead in frames (see
            :mod:`asrdecode.streaming.frontend`); one not given is the old fixed front end's
            (16, 16, 4). A block is decoded once its audio and lookahead have arrived, so a frame
            waits at most ``block_frames + right_context`` frames.
        boost_weight: ``"beam"`` decoders: the fusion weight of per-stream phrase boosting; with it
            set, :meth:`open` accepts ``boosts={phrase: bonus per token}`` (a
            :class:`~asrdecode.lm.BoostingTree` per stream); without it boosts are refused.
        **options: the family's decoding options: ``transducer.greedy`` (``loop``, ``window``,
            ``max_symbols``, ...), ``transducer.beam_search`` (``beam``, ``method``, ``window``,
            ``fusion``, ``beta``, ...), ``ctc.beam_search`` (``beam``, ``fusion``, ``beta``,
            ``blank_collapse``, ...), ``WFSTDecoder`` (``graph``, ``beam``, ``max_active``,
            ``acoustic_scale``). Options the stream decoder sets itself (``tokenizer``, ``state``,
            ``final``, ``nbest``, ...) are refused.

    Raises:
        ValueError: an unknown decoder name for the bundle, or a bad option; LatencyError (a
        ValueError): a latency out of range, or given together with explicit frames.
    """

    def __init__(self, bundle: Any, decoder: str = "greedy", *, latency: Optional[float] = None,
                 block_frames: Optional[int] = None, left_context: Optional[int] = None,
                 right_context: Optional[int] = None, **options: Any) -> None:
        self.policy = latency_policy(bundle)
        frames = {"block_frames": block_frames, "left_context": left_context, "right_context": right_context}
        given = {k: v for k, v in frames.items() if v is not None}
        if latency is not None and given:
            raise LatencyError(f"give latency or {sorted(given)}, not both")
        self.latency = self.policy.default_latency if latency is None else check_latency("latency", latency)
        self.family = make_family(bundle, decoder, options)
        self.bundle = bundle
        self.decoder = decoder
        self._head = bundle.model.log_probs_from_encoder if bundle.kind == "ctc" else None
        self._fronts: dict[BlockContext, BlockFrontEnd] = {}
        ctx = dataclasses.replace(OLD_FRONT, **given) if given else self.policy.context(self.latency)
        if given:
            self.latency = ctx.latency_frames() * self.policy.frame_seconds
        #: the front end of streams that name no latency
        self.front = self._front(ctx)
        self._streams: dict[Hashable, _Stream] = {}

    def _front(self, ctx: BlockContext) -> BlockFrontEnd:
        """The (shared) front end of one block geometry."""
        front = self._fronts.get(ctx)
        if front is None:
            front = BlockFrontEnd(self.bundle, self._head, ctx.block_frames, ctx.left_context, ctx.right_context)
            self._fronts[ctx] = front
        return front

    def _front_for(self, latency: Optional[float]) -> BlockFrontEnd:
        """The front end of a stream of ``latency`` seconds (``None``: the decoder's default)."""
        if latency is None:
            return self.front
        return self._front(self.policy.context(check_latency("latency", latency)))

    def latency_info(self, latency: Optional[float] = None) -> dict[str, Any]:
        """The latency in force for streams of ``latency`` seconds (``None``: the default streams'):
        ``{"latency", "block", "left", "right"}`` in seconds, ``frames`` and ``frame_seconds``, and
        ``default_latency`` (the model's policy default)."""
        front = self._front_for(latency)
        ctx = BlockContext(front.block_frames, front.left_context, front.right_context)
        return {"requested": self.latency if latency is None else float(latency),
                **ctx.seconds(self.policy.frame_seconds),
                "frames": {"block": ctx.block_frames, "left": ctx.left_context, "right": ctx.right_context},
                "frame_seconds": self.policy.frame_seconds, "default_latency": self.policy.default_latency}

    def stream_latency(self, stream_id: Hashable) -> dict[str, Any]:
        """:meth:`latency_info` of an open stream (KeyError if it is not open)."""
        if stream_id not in self._streams:
            raise KeyError(f"stream {stream_id!r} is not open")
        return self.latency_info(self._streams[stream_id].latency)

    # -- streams ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._streams

    @property
    def streams(self) -> list[Hashable]:
        """The open streams' ids, in the order they were opened."""
        return list(self._streams)

    @classmethod
    def for_bundle(cls, bundle: Any, decoder: Optional[str] = None, **options: Any) -> "StreamDecoder":
        """A decoder of ``bundle``'s own decoding, resolved as ``transcribe`` and ``asrdecode serve`` resolve it:
        the bundle's ``decode_defaults`` where they apply (phone-ctc: WFST over its cached graph with its tuned
        options; ``decoder=None``: the bundle's default decoder), then ``options`` over them (registry options
        such as ``beam``, ``lm``, ``lm_weight``, or this class's own such as ``latency``)."""
        from .defaults import bundle_decoding

        name, kw = bundle_decoding(bundle, decoder, options)
        return cls(bundle, name, **kw)

    @torch.inference_mode()
    def open(self, stream_id: Hashable, boosts: Mapping[str, float] | None = None,
             latency: Optional[float] = None) -> None:
        """Start a stream.

        ``boosts``: ``"wfst"``: ``{word: boost}`` added each time the word is output; ``"beam"``
        with ``boost_weight``: ``{phrase: bonus per token}``. ``latency``: this stream's latency in
        seconds (``None``: the decoder's default; see :meth:`latency_info`).

        Raises:
            ValueError: the id is already open, or the decoder does not take these boosts;
            LatencyError (a ValueError): a latency out of range.
        """
        try:
            hash(stream_id)
        except TypeError:
            raise DecodingInputError(f"stream_id must be hashable, got {type(stream_id).__name__}") from None
        if stream_id in self._streams:
            raise DecodingInputError(f"stream {stream_id!r} is already open")
        front = self._front_for(latency)
        self.family.check_boosts(boosts)
        self._streams[stream_id] = _Stream(AudioBuffer.empty(), self.family.open(boosts), front,
                                           None if latency is None else float(latency))

    def close(self, stream_id: Hashable) -> None:
        """Abandon a stream (no final result). Raises KeyError for an id that is not open."""
        if stream_id not in self._streams:
            raise KeyError(f"stream {stream_id!r} is not open")
        self.family.close(self._streams.pop(stream_id).state)

    # -- decoding --------------------------------------------------------------------------------

    def _check_step(self, chunks: object, final: object) -> tuple[dict[Hashable, torch.Tensor], set]:
        if not isinstance(chunks, Mapping):
            raise DecodingInputError(f"chunks must be a mapping {{stream_id: audio}}, got {type(chunks).__name__}")
        if isinstance(final, (str, bytes)) or not isinstance(final, Collection):
            raise DecodingInputError(f"final must be a collection of stream ids, got {type(final).__name__}")
        for sid in chunks:
            if sid not in self._streams:
                raise KeyError(f"stream {sid!r} is not open (open it first)")
        ends = set(final)
        extra = ends - set(chunks)
        if extra:
            raise DecodingInputError(f"final names streams without a chunk in this step: {sorted(map(repr, extra))} "
                                     "(pass an empty chunk for a stream that ends without new audio)")
        audio: dict[Hashable, torch.Tensor] = {}
        errors: dict[Hashable, Exception] = {}
        for sid, a in chunks.items():
            name = f"audio of stream {sid!r}"
            try:
                audio[sid] = check_audio(name, a)
            except DecodingInputError as err:
                errors[sid] = err
        if errors:
            raise StreamInputError(errors)
        return audio, ends

    @torch.inference_mode()
    def step(self, chunks: Mapping[Hashable, Any], final: Collection[Hashable] = ()) -> dict[Hashable, StreamResult]:
        """Feed one chunk of audio to each stream in ``chunks`` and decode them together.

        Args:
            chunks: ``{stream_id: audio}``, audio a 1-D float32 waveform (numpy or torch, 16 kHz,
                any length, may be empty).
            final: the ids whose chunk is their last; they get their final result and are closed.

        Returns:
            ``{stream_id: StreamResult}`` for every stream in ``chunks``: everything decoded so far.
            Streams not in ``chunks`` are untouched.

        Raises:
            KeyError: a stream id that is not open. StreamInputError (a ValueError) naming the
            offending streams: bad audio (not 1-D, not float, NaN or inf, samples beyond
            ``MAX_ABS_SAMPLE``) or audio the front end turns into non-finite frames. ValueError: a
            ``final`` id without a chunk. Whatever is raised, no stream has changed (see the module
            docstring): step the other streams again without the offending ones.
        """
        audio, ends = self._check_step(chunks, final)
        ids = list(audio)
        buffers, frames = self._front_end(ids, audio, ends)
        states = [self._streams[sid].state for sid in ids]
        self.family.advance(states, frames, [sid in ends for sid in ids])
        out = {}
        for sid, buf, f in zip(ids, buffers, frames):
            stream = self._streams[sid]
            stream.audio = buf  # commit: the batched call succeeded
            stream.frames += f.shape[0]
            out[sid] = self._result(sid, stream, sid in ends)
            if sid in ends:
                self.close(sid)
        return out

    def _front_end(self, ids: list[Hashable], audio: Mapping[Hashable, torch.Tensor], ends: set
                   ) -> tuple[list[AudioBuffer], list[torch.Tensor]]:
        """Encode each stream's ready blocks on a copy of its buffer (the front end only rebinds a
        buffer's fields, never writes its tensors in place); non-finite frames are that stream's error."""
        buffers, frames = [], []
        errors: dict[Hashable, Exception] = {}
        for sid in ids:
            front = self._streams[sid].front
            buf = dataclasses.replace(self._streams[sid].audio)
            front.push(buf, audio[sid])
            f = front.frames(buf, sid in ends)
            if f.numel() and not bool(torch.isfinite(f).all()):
                errors[sid] = DecodingInputError(f"audio of stream {sid!r}: the front end turned it into NaN or inf "
                                                 "frames (samples out of range?)")
            buffers.append(buf)
            frames.append(f)
        if errors:
            raise StreamInputError(errors)
        return buffers, frames

    def _result(self, sid: Hashable, stream: _Stream, final: bool) -> StreamResult:
        hyp = self._with_text(self.family.result(stream.state, final))
        return StreamResult(sid, hyp, hyp.text or "", final, stream.frames)

    def _with_text(self, hyp: Hypothesis) -> Hypothesis:
        if hyp.words is not None:  # WFST: the words of the graph's output
            hyp.text = " ".join(w for w, _, _ in hyp.words)
        else:
            hyp.text = self.bundle.tokenizer.decode(hyp.tokens)
        return hyp

    @torch.inference_mode()
    def offline(self, audio: Any, boosts: Mapping[str, float] | None = None,
                latency: Optional[float] = None) -> Hypothesis:
        """Whole-utterance decoding of ``audio`` through the same block front end: the final result
        a stream of this ``latency`` (``None``: the default) fed this audio returns, in any chunking."""
        wave = check_audio("audio", audio)
        front = self._front_for(latency)
        self.family.check_boosts(boosts)
        frames = front.encode_utterance(wave)
        return self._with_text(self.family.offline(frames, boosts))

    def __repr__(self) -> str:
        f = self.front
        return (f"StreamDecoder({self.bundle.name!r}, decoder={self.decoder!r}, block_frames={f.block_frames}, "
                f"left_context={f.left_context}, right_context={f.right_context}, streams={len(self)})")
