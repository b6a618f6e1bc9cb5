// The page: microphone streaming to the server (partial and final transcripts) and file upload
// to POST /v1/audio/transcriptions (the whole file decoded offline, as `asrdecode transcribe` does),
// word times (click to play), the model and decoder in use, an error line for every failure.
// window.asrPage exposes the current run (events with their times, the audio sent) for the
// browser tests and the console.

import { ERROR_TEXT, describeError } from "./errors.js";
import { resample } from "./resample.js";
import { StreamClient } from "./stream.js";
import { parseWav, wavBytes } from "./wav.js";

const $ = (id) => document.getElementById(id);
const CHUNK_SECONDS = { mic: 0.16 };

const page = window.asrPage = {
  info: null, run: null, runs: [], lastPlayed: null, ERROR_TEXT, describeError, showError,
};
let micStop = null;
let player = null;

// ------------------------------------------------------------------------------- the page parts
function showError(line) {
  const el = $("error");
  el.textContent = line;
  el.hidden = false;
}

function clearOutput() {
  $("error").hidden = true;
  $("error").textContent = "";
  $("partial").textContent = "";
  $("partial").classList.remove("final");
  $("source").textContent = "";
  $("words").replaceChildren();
  $("hint").hidden = true;
}

function setStatus(text) {
  $("status").textContent = text;
}

function setBusy(busy) {
  page.busy = busy;
  $("mic-start").disabled = busy || !page.info || !navigator.mediaDevices;
  $("mic-stop").disabled = !busy || !micStop;
  $("file").disabled = busy || !page.info;
  $("drop").classList.toggle("disabled", busy);
}

function streamUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${page.info.stream_path}`;
}

async function loadInfo() {
  try {
    const reply = await fetch("/v1/info", { cache: "no-store" });
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    page.info = await reply.json();
  } catch (err) {
    showError(`Cannot read the server's settings from /v1/info (${err.message}).`);
    $("info").textContent = "server unavailable";
    return;
  }
  const i = page.info;
  const options = Object.entries(i.decoder_options || {}).map(([k, v]) => `${k}=${v}`).join(", ");
  $("info").textContent = `model ${i.model} · decoder ${i.decoder ?? "default"}${options ? ` (${options})` : ""} · `
    + `${i.sample_rate / 1000} kHz · ${Math.round(i.frame_seconds * 1000)} ms frames · `
    + `up to ${i.max_stream_seconds} s per stream`;
  $("info").dataset.model = i.model;
  $("info").dataset.decoder = i.decoder;
  setBusy(false);
  if (!navigator.mediaDevices) setStatus("idle (the microphone needs https or localhost)");
}

// ---------------------------------------------------------------------------------------- runs
class Run {
  constructor(source, name, encoding) {
    this.source = source;
    this.name = name;
    this.encoding = encoding;
    this.startedAt = performance.now();
    this.events = [];     // {type, seq, text, audio_seconds, t} per result, t = performance.now()
    this.sends = [];      // {t, samples}: samples sent so far, after each chunk
    this.samplesSent = 0;
    this.pcm = [];        // Int16Array chunks sent (microphone)
    this.audio = null;    // Float32Array at the server's rate, for word playback
    this.endSentAt = null;
    this.final = null;
    this.error = null;
    this.errorCode = null;
    this.done = false;
    this.inputRate = null;
  }

  record(msg) {
    const { type, seq, text, audio_seconds } = msg;
    this.events.push({ type, seq, text, audio_seconds, t: performance.now() });
  }

  sent(chunk) {
    this.samplesSent += chunk.length;
    this.sends.push({ t: performance.now(), samples: this.samplesSent });
  }

  get sentSeconds() {
    return this.samplesSent / page.info.sample_rate;
  }

  recordedPcm() {
    const all = new Int16Array(this.pcm.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of this.pcm) { all.set(c, at); at += c.length; }
    return all;
  }

  /** The microphone audio sent, as base64 of a 16-bit WAV file (tests, "save" link). */
  sentWavBase64() {
    const bytes = new Uint8Array(wavBytes(this.recordedPcm(), page.info.sample_rate));
    let s = "";
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return btoa(s);
  }
}

function beginRun(source, name, encoding) {
  clearOutput();
  const run = page.run = new Run(source, name, encoding);
  page.runs.push(run);
  $("source").textContent = `· ${source === "mic" ? "microphone" : name}`;
  setStatus(`${source === "mic" ? "microphone" : name}: connecting…`);
  const client = new StreamClient(streamUrl(), { sampleRate: page.info.sample_rate, encoding, name, on: {
    partial: (msg) => onPartial(run, msg),
    final: (msg) => onFinal(run, msg),
  } });
  client.open();
  client.done.catch((err) => {
    run.error = err.message;
    run.errorCode = err.code;
    showError(err.message);
    setStatus(`${run.source === "mic" ? "microphone" : run.name}: no transcript (the error is above)`);
    finishRun(run);
  });
  setBusy(true);
  return client;
}

function finishRun(run) {
  if (run.done) return;
  run.done = true;
  run.finishedAt = performance.now();
  if (micStop) micStop(false);
  micStop = null;
  setBusy(false);
}

function onPartial(run, msg) {
  run.record(msg);
  $("partial").textContent = msg.text;
  setStatus(`partial ${msg.seq}: ${msg.audio_seconds.toFixed(2)} s of audio · queue ${msg.queue_ms.toFixed(1)} ms · `
    + `compute ${msg.compute_ms.toFixed(1)} ms · batch ${msg.batch}`);
}

function onFinal(run, msg) {
  run.record(msg);
  run.final = msg;
  if (run.source === "mic") {
    const pcm = run.recordedPcm();
    run.audio = Float32Array.from(pcm, (v) => v / 32768);
  }
  $("partial").textContent = msg.text;
  $("partial").classList.add("final");
  showWords(run, msg.words || (msg.text ? [{ word: msg.text, start: 0, end: msg.audio_seconds }] : []));
  const seconds = (performance.now() - run.startedAt) / 1000;
  const speed = run.source === "file" && seconds > 0 ? `, ${(msg.audio_seconds / seconds).toFixed(1)}× real time` : "";
  setStatus(`final: ${msg.audio_seconds.toFixed(2)} s of audio in ${seconds.toFixed(2)} s${speed}`
    + `${msg.reason === "shutdown" ? " (ended by the server's shutdown)" : ""}`);
  finishRun(run);
}

// ------------------------------------------------------------------------------- word playback
function showWords(run, words) {
  const box = $("words");
  box.replaceChildren();
  for (const w of words) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "word";
    b.dataset.start = w.start;
    b.dataset.end = w.end;
    const text = document.createElement("span");
    text.className = "w";
    text.textContent = w.word;
    const time = document.createElement("span");
    time.className = "t";
    time.textContent = `${w.start.toFixed(2)}–${w.end.toFixed(2)}`;
    b.append(text, time);
    b.title = `${w.word}: ${w.start.toFixed(2)} s to ${w.end.toFixed(2)} s`;
    b.disabled = !run.audio;
    b.addEventListener("click", () => playSpan(run, w, b));
    box.append(b);
  }
  $("hint").hidden = !run.audio || words.length === 0;
}

function playSpan(run, word, el) {
  const rate = page.info.sample_rate;
  const audio = run.audio;
  const from = Math.max(0, Math.floor(word.start * rate));
  const to = Math.min(audio.length, Math.ceil(word.end * rate));
  if (to <= from) return;
  player = player || new AudioContext();
  const buffer = player.createBuffer(1, to - from, rate);
  buffer.copyToChannel(audio.subarray(from, to), 0);
  const source = player.createBufferSource();
  source.buffer = buffer;
  source.connect(player.destination);
  for (const other of document.querySelectorAll(".word.playing")) other.classList.remove("playing");
  el.classList.add("playing");
  source.onended = () => el.classList.remove("playing");
  page.lastPlayed = { word: word.word, start: word.start, end: word.end, samples: to - from };
  setStatus(`playing “${word.word}”, ${word.start.toFixed(2)}–${word.end.toFixed(2)} s`);
  player.resume().then(() => source.start());
}

// ---------------------------------------------------------------------------------- microphone
function toInt16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const v = Math.round(samples[i] * 32768);
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
}

async function startMic() {
  if (page.busy) return;
  const rate = page.info.sample_rate;
  setBusy(true);
  clearOutput();
  setStatus("microphone: waiting for the device…");
  let media;
  let ctx;
  // the stream opens once the microphone is granted (a permission prompt can take longer than the
  // server waits for audio); the worklet is loaded first, so capture starts as soon as the device opens
  try {
    ctx = new AudioContext();
    await ctx.audioWorklet.addModule("/static/capture-worklet.js");
    media = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
  } catch (err) {
    if (media) media.getTracks().forEach((t) => t.stop());
    if (ctx) ctx.close();
    showError(`Microphone unavailable: ${err.message || err}`);
    setStatus("idle");
    setBusy(false);
    return;
  }
  const client = beginRun("mic", "microphone", "s16le");
  const run = page.run;
  run.inputRate = ctx.sampleRate;
  const source = ctx.createMediaStreamSource(media);
  const node = new AudioWorkletNode(ctx, "asr-capture", {
    processorOptions: { targetRate: rate, chunkSamples: Math.round(CHUNK_SECONDS.mic * rate) },
  });
  const mute = ctx.createGain();
  mute.gain.value = 0;  // the worklet must be pulled by the graph; nothing is heard
  source.connect(node).connect(mute).connect(ctx.destination);
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    media.getTracks().forEach((t) => t.stop());
    source.disconnect();
    ctx.close();
  };
  node.port.onmessage = (event) => {
    if (event.data.samples && !run.done) {
      const pcm = toInt16(event.data.samples);
      run.pcm.push(pcm);
      client.send(pcm);
      run.sent(pcm);
      if (!run.final) setStatus(`microphone: ${run.sentSeconds.toFixed(1)} s sent`);
    }
    if (event.data.done) {
      client.end();
      run.endSentAt = performance.now();
      release();
      setStatus("microphone: stopped, waiting for the final transcript…");
    }
  };
  micStop = (graceful = true) => {  // graceful: flush and end the stream; else just drop the device
    micStop = null;
    $("mic-stop").disabled = true;
    if (graceful) node.port.postMessage("stop");
    else release();
  };
  setBusy(true);
  setStatus("microphone: listening…");
}

// ---------------------------------------------------------------------------------------- files
/** {encoding, samples (what is sent), audio (Float32Array at the server's rate)} of a file. */
async function prepareFile(file) {
  const rate = page.info.sample_rate;
  const bytes = await file.arrayBuffer();
  let wav = null;
  try {
    wav = parseWav(bytes, { rates: page.info.file_sample_rates });
  } catch (err) {
    if (!/not a WAV file/.test(err.message)) throw err;  // a WAV file, but a broken one
  }
  if (wav) {
    if (wav.sampleRate === rate && wav.channels === 1 && wav.int16) {
      return { encoding: "s16le", samples: wav.int16, audio: wav.mono };  // the file's own samples
    }
    if (wav.sampleRate === rate && wav.channels === 1 && wav.float && wav.bits === 32) {
      return { encoding: "f32le", samples: wav.mono, audio: wav.mono };
    }
    const audio = wav.sampleRate === rate ? wav.mono : resample(wav.mono, wav.sampleRate, rate);
    return { encoding: "f32le", samples: audio, audio };
  }
  let decoded;
  try {  // other formats: the browser's decoder, resampled to the server's rate
    decoded = await new OfflineAudioContext(1, 1, rate).decodeAudioData(bytes.slice(0));
  } catch {
    throw new Error("not a WAV file, and this browser cannot decode it as audio");
  }
  const audio = new Float32Array(decoded.length);
  for (let c = 0; c < decoded.numberOfChannels; c++) {
    const ch = decoded.getChannelData(c);
    for (let i = 0; i < ch.length; i++) audio[i] += ch[i] / decoded.numberOfChannels;
  }
  return { encoding: "f32le", samples: audio, audio };
}

/** One line for an error answer of POST /v1/audio/transcriptions (OpenAI's error JSON). */
function describeHttpError(status, error) {
  const code = (error && error.code) || `http_${status}`;
  const meaning = ERROR_TEXT[code] || (status >= 500 ? "The server failed to transcribe the file."
    : "The server refused the file.");
  return `${meaning} [${code}${error && error.message ? ": " + error.message : ""}]`;
}

/** Upload ``file`` to the transcription endpoint; the page keeps its audio for word playback. */
async function transcribeFile(file) {
  if (page.busy || !page.info) return;
  let prepared;
  try {
    prepared = await prepareFile(file);
  } catch (err) {
    clearOutput();
    showError(`${file.name}: ${err.message}`);
    return;
  }
  clearOutput();
  const run = page.run = new Run("file", file.name, null);
  page.runs.push(run);
  run.audio = prepared.audio;
  $("source").textContent = `· ${file.name}`;
  setStatus(`${file.name}: transcribing…`);
  setBusy(true);
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("model", page.info.model);
  form.append("response_format", "verbose_json");
  form.append("timestamp_granularities[]", "word");
  form.append("timestamp_granularities[]", "segment");
  run.endSentAt = performance.now();
  try {
    const reply = await fetch(page.info.transcriptions_path, { method: "POST", body: form });
    const body = await reply.json().catch(() => null);
    if (!reply.ok || !body) {
      const error = body && body.error;
      const err = new Error(describeHttpError(reply.status, error));
      err.code = (error && error.code) || `http_${reply.status}`;
      throw err;
    }
    onFinal(run, { type: "final", seq: 0, text: body.text, words: body.words || [], audio_seconds: body.duration });
  } catch (err) {
    run.error = err.message;
    run.errorCode = err.code || null;
    showError(err.code ? err.message : `The upload failed: ${err.message}`);
    setStatus(`${file.name}: no transcript (the error is above)`);
    finishRun(run);
  }
}

// ---------------------------------------------------------------------------------------- wiring
function wire() {
  $("mic-start").addEventListener("click", startMic);
  $("mic-stop").addEventListener("click", () => micStop && micStop(true));
  $("file").addEventListener("change", (event) => {
    const file = event.target.files[0];
    event.target.value = "";
    if (file) transcribeFile(file);
  });
  const drop = $("drop");
  for (const name of ["dragenter", "dragover"]) {
    drop.addEventListener(name, (event) => { event.preventDefault(); drop.classList.add("over"); });
  }
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const file = event.dataTransfer && event.dataTransfer.files[0];
    if (file) transcribeFile(file);
  });
  // a file dropped elsewhere on the page must not navigate away from it
  window.addEventListener("dragover", (event) => event.preventDefault());
  window.addEventListener("drop", (event) => event.preventDefault());
}

wire();
setBusy(true);
loadInfo();
