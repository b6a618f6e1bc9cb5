"""Log-mel filterbank features in few passes: the shared core of the log-mel and Kaldi fbank front ends.

A frame ``[L]`` goes through DC removal, pre-emphasis and a window, which together are one affine map
per frame, applied here as two multiplies and a rank-1 correction (:class:`FrameMap`); then one real
FFT of all frames, the power spectrum and the mel product as one product over ``[re, im]`` pairs
(:class:`MelProduct`, which skips the filters' zero weights by splitting the bank into blocks of
adjacent filters, each over only the FFT bins its filters cover); then the log. Float32 throughout.

:class:`KaldiFbank` is Kaldi's fbank (kaldi-native-fbank's ``OnlineFbank`` on a whole utterance,
what sherpa-onnx computes) on that core: same frames (``snip_edges`` both ways, reflection at the
edges), its window and mel matrix taken from kaldi-native-fbank for the given options.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ..errors import DecodingInputError

__all__ = ["FrameMap", "MelProduct", "KaldiFbank", "MEL_BLOCK", "FBANK_ENGINES", "knf_fbank", "kaldi_fbank_engine"]

#: mel filters per block of :class:`MelProduct` (fewer: fewer zero weights multiplied, more calls)
MEL_BLOCK = 16
#: who computes a Kaldi fbank: ``"fast"`` (:class:`KaldiFbank`, the default) or ``"knf"`` (kaldi-native-fbank's
#: own ``OnlineFbank``, :func:`knf_fbank`: sherpa-onnx's features to the last bit, ~10x slower)
FBANK_ENGINES = ("fast", "knf")


class FrameMap:
    """Frames ``[T, L]`` -> ``window * preemph(frame - DC)`` ``[T, L]``.

    Pre-emphasis is Kaldi's: ``y[i] = x[i] - c x[i-1]``, ``y[0] = (1 - c) x[0]``. The map is affine in
    the frame, so it is ``x * a + shift(x) * b - mean(x) (a + shift(b))``: three passes, no copies."""

    def __init__(self, window: torch.Tensor, preemph: float = 0.0, remove_dc: bool = True) -> None:
        w = window.detach().to(torch.float32).flatten().clone()
        if w.numel() < 2:
            raise DecodingInputError(f"window must have at least 2 samples, got {w.numel()}")
        self.length = int(w.numel())
        self.a = w.clone()
        self.a[0] *= 1.0 - preemph
        self.b = -preemph * w[1:] if preemph else None  # weights of x[i - 1] in y[i], i >= 1
        self.dc = remove_dc
        k = self.a.clone()
        if self.b is not None:
            k[1:] += self.b
        self.k = k  # response to a constant frame of ones

    def __call__(self, frames: torch.Tensor, width: int = 0) -> torch.Tensor:
        """``frames [T, L]`` (any strides) -> new ``[T, max(L, width)]`` float32, zeros after column ``L``
        (``width``: the FFT size, so that the FFT reads the frames without padding them itself)."""
        if width > self.length:
            out = torch.empty(frames.shape[0], width)
            out[:, self.length:].zero_()
            y = torch.mul(frames, self.a, out=out[:, : self.length])
        else:
            y = out = frames * self.a
        if self.b is not None:
            y[:, 1:].addcmul_(frames[:, :-1], self.b)
        if self.dc:
            y.addr_(frames.mean(1), self.k, alpha=-1.0)
        return out


class MelProduct:
    """Power spectrum x mel filters without the zero weights: ``rfft [T, K]`` complex -> ``[T, M]``.

    ``mel [K, M]`` (FFT bin x filter, non-negative). The spectrum is read as ``[T, 2K]`` real
    (``re, im`` interleaved), squared in place, and multiplied by the filters with each row doubled;
    filters go in blocks of :data:`MEL_BLOCK` adjacent ones, each block over only the bins it covers."""

    def __init__(self, mel: torch.Tensor) -> None:
        if mel.dim() != 2 or not bool((mel >= 0).all()):
            raise DecodingInputError(f"mel must be a non-negative matrix [K, M], got shape {tuple(mel.shape)}")
        m2 = mel.detach().to(torch.float32).repeat_interleave(2, 0)  # [2K, M]
        self.bins, self.num_mel = int(mel.shape[0]), int(mel.shape[1])
        self.blocks: list[tuple[int, int, int, int, torch.Tensor]] = []
        for m0 in range(0, self.num_mel, MEL_BLOCK):
            m1 = min(m0 + MEL_BLOCK, self.num_mel)
            rows = torch.nonzero(m2[:, m0:m1].sum(1) > 0).flatten()
            if rows.numel():
                r0, r1 = int(rows[0]), int(rows[-1]) + 1
                self.blocks.append((m0, m1, r0, r1, m2[r0:r1, m0:m1].contiguous()))
        self.gaps = sum(m1 - m0 for m0, m1, *_ in self.blocks) < self.num_mel  # a whole block of empty filters

    def __call__(self, spec: torch.Tensor) -> torch.Tensor:
        """``spec [T, K]`` complex64 (consumed: squared in place) -> mel energies ``[T, M]`` float32."""
        if spec.shape[-1] != self.bins:
            raise DecodingInputError(f"spec must have {self.bins} FFT bins, got {spec.shape[-1]}")
        p = torch.view_as_real(spec).reshape(spec.shape[0], 2 * self.bins).square_()
        out = torch.zeros(spec.shape[0], self.num_mel) if self.gaps else torch.empty(spec.shape[0], self.num_mel)
        for m0, m1, r0, r1, w in self.blocks:
            out[:, m0:m1] = p[:, r0:r1] @ w
        return out


def _reflect(index: torch.Tensor, n: int) -> torch.Tensor:
    """Sample indices (any integers) -> indices in ``0..n-1``, mirrored at the edges with the edge
    sample repeated (``-1 -> 0``, ``n -> n - 1``), as Kaldi extracts frames that cross the ends."""
    i = torch.remainder(index, 2 * n)
    return torch.where(i >= n, 2 * n - 1 - i, i)


class KaldiFbank:
    """Kaldi log-mel fbank ``[N]`` -> ``[T, num_bins]`` for kaldi-native-fbank ``FbankOptions`` ``opts``.

    Equal to ``kaldi_native_fbank.OnlineFbank(opts)`` fed the whole utterance within float32 rounding (both
    FFTs are float32, by different algorithms: 1.1e-3 at most in log energy on the 60 test clips, in bins
    near the noise floor; :func:`knf_fbank` for its exact bits). Supported: no dither, no energy term, power
    spectrum, log; any window, frame size and shift, pre-emphasis, DC removal, ``snip_edges``, mel options
    (kaldi or librosa filters: the matrix is kaldi-native-fbank's own).

    Raises:
        DecodingInputError: ``opts`` asks for dither, an energy term, a magnitude spectrum or no log.
    """

    def __init__(self, knf: Any, opts: Any) -> None:
        fo = opts.frame_opts
        bad = [name for name, on in (("dither", fo.dither != 0), ("use_energy", opts.use_energy),
                                     ("use_power=False", not opts.use_power),
                                     ("use_log_fbank=False", not opts.use_log_fbank)) if on]
        if bad:
            raise DecodingInputError(f"opts: KaldiFbank does not compute {bad}")
        self.shift = int(fo.samp_freq * 0.001 * fo.frame_shift_ms)
        self.length = int(fo.samp_freq * 0.001 * fo.frame_length_ms)
        self.nfft = 1 << (self.length - 1).bit_length() if fo.round_to_power_of_two else self.length
        self.snip_edges = bool(fo.snip_edges)
        window = torch.from_numpy(np.asarray(knf.FeatureWindowFunction(fo).window, dtype=np.float32))
        self.frame_map = FrameMap(window, float(fo.preemph_coeff), bool(fo.remove_dc_offset))
        mel = np.asarray(knf.MelBanks(opts.mel_opts, fo).get_matrix(), dtype=np.float32)  # [M, nfft // 2 + 1]
        self.mel = MelProduct(torch.from_numpy(mel).t())
        self.num_bins = self.mel.num_mel
        self.eps = float(opts.eps) if opts.use_log_floor else float(np.finfo(np.float32).tiny)

    def num_frames(self, n: int) -> int:
        """Frames Kaldi makes of ``n`` samples."""
        if self.snip_edges:
            return 0 if n < self.length else 1 + (n - self.length) // self.shift
        return (n + self.shift // 2) // self.shift

    def frames(self, audio: torch.Tensor) -> torch.Tensor:
        """``audio [N]`` float32 -> frames ``[T, L]`` (a strided view where no edge is crossed)."""
        n, t = int(audio.numel()), self.num_frames(int(audio.numel()))
        if self.snip_edges:
            return audio.unfold(0, self.length, self.shift)[:t]
        left = self.length // 2 - self.shift // 2  # frame 0 starts this many samples before sample 0
        right = max(0, (t - 1) * self.shift - left + self.length - n)
        if left <= n and right <= n:  # one reflection at each end
            x = torch.cat([audio[:left].flip(0), audio, audio[n - right:].flip(0)])
        else:
            pad = _reflect(torch.cat([torch.arange(-left, 0), torch.arange(n, n + right)]), n)
            x = torch.cat([audio[pad[:left]], audio, audio[pad[left:]]])
        return x.unfold(0, self.length, self.shift)[:t]

    def __call__(self, audio: torch.Tensor) -> torch.Tensor:
        """``audio [N]`` (16 kHz, [-1, 1]) -> log-mel ``[T, num_bins]`` float32 (``[0, num_bins]`` if no frame)."""
        if not isinstance(audio, torch.Tensor) or audio.dim() != 1:
            raise DecodingInputError("audio must be a 1-D float tensor [N] sampled at 16 kHz")
        x = audio.detach().to(torch.float32).cpu()
        if self.num_frames(int(x.numel())) == 0:
            return torch.zeros(0, self.num_bins)
        spec = torch.fft.rfft(self.frame_map(self.frames(x), self.nfft))
        return self.mel(spec).clamp_min_(self.eps).log_()


def knf_fbank(knf: Any, opts: Any, audio: torch.Tensor) -> torch.Tensor:
    """kaldi-native-fbank's ``OnlineFbank(opts)`` on the whole of ``audio [N]``, its frames read back one by
    one -> ``[T, num_bins]`` float32: sherpa-onnx's features bit for bit (its FFT's float32 rounding
    included, which decides near-ties of flat models; :class:`KaldiFbank` is within 1.1e-3 of it)."""
    if not isinstance(audio, torch.Tensor) or audio.dim() != 1:
        raise DecodingInputError("audio must be a 1-D float tensor [N] sampled at 16 kHz")
    f = knf.OnlineFbank(opts)
    if audio.numel():
        f.accept_waveform(int(opts.frame_opts.samp_freq), audio.detach().cpu().float().numpy())
    f.input_finished()
    rows = [np.asarray(f.get_frame(i), dtype=np.float32) for i in range(f.num_frames_ready)]
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, int(opts.mel_opts.num_bins))


def kaldi_fbank_engine(knf: Any, opts: Any, fbank: str = "fast") -> Callable[[torch.Tensor], torch.Tensor]:
    """``audio [N] -> [T, num_bins]`` for ``opts`` by the engine ``fbank`` (:data:`FBANK_ENGINES`).

    Raises:
        DecodingInputError: ``fbank`` is not one of :data:`FBANK_ENGINES`, or ``opts`` asks :class:`KaldiFbank`
            for what it does not compute.
    """
    if fbank not in FBANK_ENGINES:
        raise DecodingInputError(f"fbank must be one of {list(FBANK_ENGINES)}, got {fbank!r}")
    if fbank == "knf":
        return lambda audio: knf_fbank(knf, opts, audio)
    return KaldiFbank(knf, opts)
