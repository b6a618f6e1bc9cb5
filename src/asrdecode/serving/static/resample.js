// Streaming sample-rate conversion by windowed-sinc interpolation (any ratio).
//
// Output sample k sits at input position k * inRate / outRate (computed from k, so positions do
// not drift). It is the sum of the input samples within `zeroCrossings` zero crossings of the
// low-pass kernel, weighted by a Blackman-windowed sinc whose cut-off is `cutoff` times the
// lower Nyquist frequency of the two rates. The kernel is tabulated on a fine grid and read
// with linear interpolation, so a sample costs one multiply-add per tap and no trigonometry.
// Used by the capture worklet (microphone -> server rate) and for uploaded files.

const PHASES = 512;  // table points per input sample

function kernelTable(half, scale) {
  const n = half * PHASES + 2;
  const table = new Float32Array(n);
  for (let m = 0; m < n; m++) {
    const d = m / PHASES;  // distance in input samples
    if (d >= half) continue;
    const x = scale * d;
    const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
    const w = 0.42 + 0.5 * Math.cos(Math.PI * d / half) + 0.08 * Math.cos(2 * Math.PI * d / half);
    table[m] = scale * sinc * w;
  }
  return table;
}

export class Resampler {
  constructor(inRate, outRate, { zeroCrossings = 12, cutoff = 0.95 } = {}) {
    if (!(inRate > 0 && outRate > 0 && Number.isFinite(inRate) && Number.isFinite(outRate))) {
      throw new RangeError(`sample rates must be positive, got ${inRate} -> ${outRate}`);
    }
    this.inRate = inRate;
    this.outRate = outRate;
    this.identity = inRate === outRate;
    const scale = Math.min(1, outRate / inRate) * cutoff;
    this.half = Math.ceil(zeroCrossings / scale);  // kernel half-width, input samples
    this.table = kernelTable(this.half, scale);
    this.base = -this.half;                  // input index of buf[0]: the history before the
    this.buf = new Float32Array(this.half);  // start is silence; buf holds the input still needed
    this.received = 0;               // input samples so far
    this.emitted = 0;                // output samples so far
  }

  _append(x) {
    const merged = new Float32Array(this.buf.length + x.length);
    merged.set(this.buf, 0);
    merged.set(x, this.buf.length);
    this.buf = merged;
    this.received += x.length;
  }

  // outputs whose kernels lie within the buffer, at most `limit` of them
  _run(limit) {
    const { buf, table, half, inRate, outRate } = this;
    const out = [];
    while (out.length < limit) {
      const t = (this.emitted * inRate) / outRate - this.base;  // position in buf
      const i0 = Math.floor(t);
      if (i0 + half >= buf.length) break;
      let acc = 0;
      let norm = 0;
      for (let j = i0 - half + 1; j <= i0 + half; j++) {
        const pos = Math.abs(t - j) * PHASES;
        const m = Math.floor(pos);
        const f = pos - m;
        const h = table[m] + f * (table[m + 1] - table[m]);
        acc += h * (j >= 0 ? buf[j] : 0);
        norm += h;
      }
      out.push(norm !== 0 ? acc / norm : 0);
      this.emitted++;
    }
    // drop the input no later output needs
    const next = (this.emitted * inRate) / outRate - this.base;
    const keepFrom = Math.max(0, Math.floor(next) - half);
    if (keepFrom > 0) {
      this.buf = buf.slice(keepFrom);
      this.base += keepFrom;
    }
    return Float32Array.from(out);
  }

  /** Converts the next block of input (Float32Array); returns the output it completes. */
  process(input) {
    if (this.identity) {
      this.received += input.length;
      this.emitted += input.length;
      return Float32Array.from(input);
    }
    this._append(input);
    return this._run(Infinity);
  }

  /** The rest of the output after the last input: ceil(received * outRate / inRate) samples in all. */
  flush() {
    if (this.identity) return new Float32Array(0);
    const total = Math.ceil((this.received * this.outRate) / this.inRate - 1e-9);
    const left = total - this.emitted;
    if (left <= 0) return new Float32Array(0);
    const received = this.received;
    this._append(new Float32Array(this.half + 2 + Math.ceil(this.inRate / this.outRate)));
    this.received = received;
    return this._run(left);
  }
}

/** Whole-signal conversion of a Float32Array. */
export function resample(input, inRate, outRate) {
  const r = new Resampler(inRate, outRate);
  const a = r.process(input);
  const b = r.flush();
  const out = new Float32Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
