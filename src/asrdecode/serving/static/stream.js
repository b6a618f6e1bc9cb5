// One recognition stream over the server's WebSocket protocol (docs/serving.md, "Wire protocol"):
// a JSON configuration, binary PCM chunks, {"type": "end"}; the server answers "ready", one
// "partial" per chunk, a "final", or an "error" with a code.

import { describeClose, describeError } from "./errors.js";

export const ENCODINGS = { s16le: 2, f32le: 4 };  // bytes per sample

export class StreamError extends Error {
  constructor(line, code) {
    super(line);
    this.code = code;  // the server's error code, or "close_<n>", or "connect"
  }
}

export class StreamClient {
  /**
   * url: ws(s)://host/v1/stream; sampleRate: the server's; encoding: "s16le" | "f32le";
   * name: echoed by the server (the protocol takes up to 200 characters); on: {partial(msg),
   * final(msg)} callbacks.
   */
  constructor(url, { sampleRate = 16000, encoding = "s16le", name = null, on = {} } = {}) {
    if (!(encoding in ENCODINGS)) throw new RangeError(`unknown encoding ${encoding}`);
    this.url = url;
    this.sampleRate = sampleRate;
    this.encoding = encoding;
    this.name = name ? String(name).slice(0, 200) : null;
    this.on = on;
    this.sent = 0;           // chunks sent
    this.answered = 0;       // partial (and final) results received
    this.maxChunkSamples = null;
    this.final = null;
    this.error = null;
    this._pending = [];      // chunks given before "ready"
    this._ended = false;
    this._waiters = [];
    this.ready = new Promise((resolve, reject) => { this._ready = { resolve, reject }; });
    this.done = new Promise((resolve, reject) => { this._done = { resolve, reject }; });
    this.ready.catch(() => {});
    this.done.catch(() => {});
  }

  /** Connects and sends the configuration; `ready` resolves with the server's "ready" message. */
  open() {
    const ws = this.ws = new WebSocket(this.url);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      const config = { sample_rate: this.sampleRate, encoding: this.encoding };
      if (this.name) config.name = this.name;
      ws.send(JSON.stringify(config));
    };
    ws.onmessage = (event) => this._message(event.data);
    ws.onclose = (event) => this._closed(event.code, event.reason);
    return this.ready;
  }

  _message(data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      const line = `The server sent something that is not JSON: ${String(data).slice(0, 80)}`;
      this._fail(new StreamError(line, "bad_reply"));
      return;
    }
    if (msg.type === "ready") {
      const width = ENCODINGS[this.encoding];
      this.maxChunkSamples = Math.floor(msg.max_chunk_bytes / width);
      this._ready.resolve(msg);
      for (const chunk of this._pending.splice(0)) this._send(chunk);
      if (this._ended) this.ws.send(JSON.stringify({ type: "end" }));
    } else if (msg.type === "partial" || msg.type === "final") {
      this.answered++;
      if (msg.type === "final") this.final = msg;
      (this.on[msg.type] || (() => {}))(msg);
      if (msg.type === "final") this._done.resolve(msg);
      this._wake();
    } else if (msg.type === "error") {
      this._fail(new StreamError(describeError(msg.code, msg.message), msg.code));
    }
  }

  _closed(code, reason) {
    if (this.final || this.error) return;
    // 1006 before "ready": no WebSocket at all (server down, or a handshake refused, e.g. another origin)
    const kind = code === 1006 && !this.maxChunkSamples ? "connect" : `close_${code}`;
    const err = new StreamError(describeClose(code, reason), kind);
    this._fail(err);
  }

  _fail(err) {
    if (this.error || this.final) return;
    this.error = err;
    this._ready.reject(err);
    this._done.reject(err);
    this._wake();
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close();
  }

  _wake() {
    for (const w of this._waiters.splice(0)) w();
  }

  _send(chunk) {
    // a chunk longer than the server's max_chunk_bytes goes as several messages
    const step = this.maxChunkSamples;
    for (let i = 0; i < chunk.length; i += step) {
      const part = chunk.subarray(i, Math.min(chunk.length, i + step));
      this.ws.send(part.slice().buffer);
      this.sent++;
    }
  }

  /** Queues a chunk: Int16Array for s16le, Float32Array for f32le. */
  send(chunk) {
    if (this.error || this._ended) return;
    if (this.maxChunkSamples) this._send(chunk);
    else this._pending.push(chunk);
  }

  /** No more audio; `done` resolves with the final message. */
  end() {
    if (this._ended) return;
    this._ended = true;
    if (this.maxChunkSamples && !this.error) this.ws.send(JSON.stringify({ type: "end" }));
  }

  /** Resolves once at most `window` sent chunks wait for their result (or the stream failed). */
  async credit(window) {
    while (!this.error && this.sent - this.answered >= window) {
      await new Promise((resolve) => this._waiters.push(resolve));
    }
    if (this.error) throw this.error;
  }

  close() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close();
  }
}
