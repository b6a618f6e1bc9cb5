// Reading WAV files in the page: PCM (8, 16, 24, 32-bit) and IEEE float (32, 64-bit), any number
// of channels, plain or WAVE_FORMAT_EXTENSIBLE headers. Throws an Error naming what is wrong.

const PCM = 1;
const FLOAT = 3;
const EXTENSIBLE = 0xfffe;

function tag(view, at) {
  return String.fromCharCode(view.getUint8(at), view.getUint8(at + 1), view.getUint8(at + 2), view.getUint8(at + 3));
}

/**
 * Parses a WAV file (ArrayBuffer). Returns {sampleRate, channels, bits, float, frames,
 * int16 (Int16Array of the samples when the file is 16-bit PCM, interleaved), mono (Float32Array,
 * the channels averaged, in [-1, 1] for PCM)}. `rates` ({min, max}, Hz: the server's
 * file_sample_rates from /v1/info): a header rate outside them is refused before any sample is
 * read (a header saying 4,294,967,295 Hz would have the resampler allocate gigabytes; 1 Hz throws
 * deep inside it).
 */
export function parseWav(buffer, { rates = null } = {}) {
  const view = new DataView(buffer);
  if (view.byteLength < 12 || tag(view, 0) !== "RIFF" || tag(view, 8) !== "WAVE") {
    throw new Error("not a WAV file (no RIFF/WAVE header)");
  }
  let fmt = null;
  let data = null;
  for (let at = 12; at + 8 <= view.byteLength;) {
    const id = tag(view, at);
    const size = view.getUint32(at + 4, true);
    const body = at + 8;
    if (id === "fmt " && size >= 16 && body + 16 <= view.byteLength) {
      let format = view.getUint16(body, true);
      if (format === EXTENSIBLE && size >= 26) format = view.getUint16(body + 24, true);
      fmt = { format, channels: view.getUint16(body + 2, true), sampleRate: view.getUint32(body + 4, true),
              bits: view.getUint16(body + 14, true) };
    } else if (id === "data") {
      data = { offset: body, size: Math.min(size, view.byteLength - body) };
      if (fmt) break;
    }
    at = body + size + (size & 1);
  }
  if (!fmt) throw new Error("WAV file without a fmt chunk");
  if (!data) throw new Error("WAV file without a data chunk");
  const { format, channels, sampleRate, bits } = fmt;
  const isFloat = format === FLOAT;
  if (!(format === PCM || isFloat)) throw new Error(`WAV format ${format} is not PCM or IEEE float`);
  if (isFloat ? !(bits === 32 || bits === 64) : ![8, 16, 24, 32].includes(bits)) {
    throw new Error(`WAV files with ${bits}-bit ${isFloat ? "float" : "PCM"} samples are not supported`);
  }
  if (channels < 1 || sampleRate < 1) throw new Error(`WAV header names ${channels} channels at ${sampleRate} Hz`);
  if (rates && !(sampleRate >= rates.min && sampleRate <= rates.max)) {
    throw new Error(`WAV sample rate ${sampleRate} Hz is outside ${rates.min}..${rates.max} Hz`);
  }
  const width = bits / 8;
  const frames = Math.floor(data.size / (width * channels));
  const read = {
    8: (at) => (view.getUint8(at) - 128) / 128,
    16: (at) => view.getInt16(at, true) / 32768,
    24: (at) => ((view.getUint8(at) | (view.getUint8(at + 1) << 8) | (view.getInt8(at + 2) << 16))) / 8388608,
    32: isFloat ? (at) => view.getFloat32(at, true) : (at) => view.getInt32(at, true) / 2147483648,
    64: (at) => view.getFloat64(at, true),
  }[bits];
  const mono = new Float32Array(frames);
  let int16 = null;
  if (!isFloat && bits === 16) int16 = new Int16Array(frames * channels);
  for (let i = 0, at = data.offset; i < frames; i++) {
    let sum = 0;
    for (let c = 0; c < channels; c++, at += width) {
      if (int16) int16[i * channels + c] = view.getInt16(at, true);
      sum += read(at);
    }
    mono[i] = channels === 1 ? sum : sum / channels;
  }
  return { sampleRate, channels, bits, float: isFloat, frames, int16, mono };
}

/** A 16-bit mono PCM WAV file (ArrayBuffer) of Int16Array samples. */
export function wavBytes(int16, sampleRate) {
  const buffer = new ArrayBuffer(44 + int16.length * 2);
  const view = new DataView(buffer);
  const put = (at, s) => { for (let i = 0; i < 4; i++) view.setUint8(at + i, s.charCodeAt(i)); };
  put(0, "RIFF"); view.setUint32(4, 36 + int16.length * 2, true); put(8, "WAVE");
  put(12, "fmt "); view.setUint32(16, 16, true); view.setUint16(20, PCM, true); view.setUint16(22, 1, true);
  view.setUint32(24, sampleRate, true); view.setUint32(28, sampleRate * 2, true);
  view.setUint16(32, 2, true); view.setUint16(34, 16, true);
  put(36, "data"); view.setUint32(40, int16.length * 2, true);
  new Int16Array(buffer, 44).set(int16);
  return buffer;
}
