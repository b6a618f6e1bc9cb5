// The microphone's audio thread: mixes the input to mono, converts it to the server's rate and
// posts it to the page in chunks of `chunkSamples` (Float32Array, transferred). On "stop" it posts
// what is left, then {done: true}, and ends.

import { Resampler } from "./resample.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate, chunkSamples } = options.processorOptions;
    this.resampler = new Resampler(sampleRate, targetRate);
    this.chunkSamples = chunkSamples;
    this.pending = new Float32Array(chunkSamples);
    this.filled = 0;
    this.stopped = false;
    this.port.onmessage = (event) => {
      if (event.data === "stop" && !this.stopped) {
        this.stopped = true;
        this.push(this.resampler.flush());
        if (this.filled > 0) this.post(this.pending.slice(0, this.filled));
        this.filled = 0;
        this.port.postMessage({ done: true, inputRate: sampleRate });
      }
    };
  }

  post(samples) {
    this.port.postMessage({ samples }, [samples.buffer]);
  }

  push(samples) {
    for (let i = 0; i < samples.length;) {
      const n = Math.min(samples.length - i, this.chunkSamples - this.filled);
      this.pending.set(samples.subarray(i, i + n), this.filled);
      this.filled += n;
      i += n;
      if (this.filled === this.chunkSamples) {
        this.post(this.pending);
        this.pending = new Float32Array(this.chunkSamples);
        this.filled = 0;
      }
    }
  }

  process(inputs) {
    if (this.stopped) return false;
    const channels = inputs[0];
    if (channels && channels.length > 0) {
      const n = channels[0].length;
      const mono = new Float32Array(n);
      for (const ch of channels) for (let i = 0; i < n; i++) mono[i] += ch[i] / channels.length;
      this.push(this.resampler.process(mono));
    }
    return true;
  }
}

registerProcessor("asr-capture", CaptureProcessor);
