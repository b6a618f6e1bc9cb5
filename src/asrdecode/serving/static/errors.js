// What each error of the server means to the person in front of the page.
// The keys are the server's error codes (asrdecode/serving/protocol.py, CLOSE_CODES, and the
// transcription endpoint's codes); the test suite checks that every code the server can send has
// its line here.

export const ERROR_TEXT = {
  bad_config: "The server did not accept the stream's configuration.",
  bad_sample_rate: "The server takes 16 kHz audio only.",
  bad_encoding: "The server does not take this sample encoding.",
  bad_boosts: "The server refused the boosted phrases.",
  bad_latency: "The server refused the stream's latency (a number of seconds in its range).",
  bad_message: "The server got a message it does not understand.",
  unexpected_binary: "Audio was sent before the stream was configured.",
  bad_chunk: "The server refused the audio: not valid PCM (NaN, infinite or out-of-range samples).",
  bad_audio: "The recogniser refused this audio.",
  chunk_too_large: "An audio chunk was larger than the server allows.",
  message_too_large: "A message was larger than the server allows.",
  stream_too_long: "The audio is longer than the server allows for one stream.",
  idle_timeout: "No audio arrived for too long; the server closed the stream.",
  too_slow: "Audio arrived much slower than real time; the server closed the stream.",
  server_busy: "The server is at capacity (too many open streams, or files waiting to be transcribed). Try again later.",
  shutting_down: "The server is shutting down.",
  internal: "The server failed while decoding this stream.",
  // POST /v1/audio/transcriptions (file upload): OpenAI-shaped errors (serving/transcriptions.py)
  file_too_large: "The file is larger than the server accepts.",
  audio_too_long: "The audio is longer than the server accepts for one file.",
  invalid_file: "The server could not read the file as audio.",
  model_not_found: "The server does not serve the model the page asked for.",
  unsupported_value: "The server does not support a setting of the request.",
  unsupported_language: "The server does not transcribe this language.",
};

// WebSocket close codes that come without an error message from the server.
const CLOSE_TEXT = {
  1001: "The server went away.",
  1006: "The connection to the server failed or was cut (is the server running, and is this page served by it?).",
  1009: "A message was too large for the server; it closed the connection.",
  1011: "The server hit an internal error.",
  1013: "The server is overloaded. Try again later.",
};

/** One line for an error message of the server: what it means, then the server's own words. */
export function describeError(code, message) {
  const meaning = ERROR_TEXT[code] || "The server refused the stream.";
  return `${meaning} [${code}${message ? ": " + message : ""}]`;
}

/** One line for a connection that closed before a final result and without an error message. */
export function describeClose(code, reason) {
  const meaning = CLOSE_TEXT[code] || "The connection to the server closed before the final result.";
  return `${meaning} [close ${code}${reason ? ": " + reason : ""}]`;
}
