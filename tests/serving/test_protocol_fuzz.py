"""Fuzzing the wire-protocol parser (``asrdecode.serving.protocol``) with hypothesis.

Random text and bytes, and mutations of valid messages (a byte flipped, inserted, deleted or the
message cut; a JSON value replaced by a hostile one), go through ``parse_config``,
``parse_control`` and ``decode_chunk``. Every input must give either a valid result or a
:class:`ProtocolError` whose code has a WebSocket close code: never another exception, never a
hang (each call is timed), never a result outside the protocol's promises.

The CI tests take a few seconds; ``test_fuzz_10k_inputs`` (``-m slow``) runs 10,000+ inputs per
parser entry point and checks the time and memory bounds recorded in docs/serving.md.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrdecode.serving.protocol import (CLOSE_CODES, ENCODINGS, MAX_LATENCY_SECONDS, MIN_LATENCY_SECONDS,
                                        SAMPLE_RATE, Limits, ProtocolError, StreamConfig,
                                        decode_chunk, parse_config, parse_control)

LIMITS = Limits(max_chunk_seconds=0.25, max_text_bytes=4096, max_boosts=8, max_phrase_chars=20)
SLOW_CALL_S = 0.5  # one parse of an input of at most a few KB: far longer means a hang

VALID_CONFIGS = [
    {"sample_rate": 16000},
    {"sample_rate": 16000, "encoding": "f32le", "name": "clip-7"},
    {"sample_rate": 16000, "encoding": "s16le", "boosts": {"sense and sensibility": 2.0, "clubs": -1}},
    {"sample_rate": 16000, "latency": 1.2},
]
HOSTILE_VALUES = [None, True, False, 0, -1, 16000.0, 10 ** 30, -(10 ** 30), 1e308, float("nan"), float("inf"),
                  "", "x" * 300, "16000", [], [16000], {}, {"a": 1}, {"": 1.0}, {"a": float("nan")},
                  {"a": 1e9}, {str(i): 1 for i in range(20)}, {"\u0000": 1}, "f32le\u0000"]
KEYS = ["sample_rate", "encoding", "boosts", "name", "latency", "type", "Sample_rate", ""]


@contextlib.contextmanager
def _hang_guard():
    """The block takes under :data:`SLOW_CALL_S` of this thread's CPU time. The parsers only compute (no I/O, no
    waiting), so a hang or a blow-up counts in full. A stall of the shared machine does not, and neither does a
    collection of the whole test process's heap, which the garbage collector may start inside any call (with
    wall time, a deeply nested JSON config took 0.58 s in the full suite, twice, and 0.01 s alone)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        t0 = time.thread_time()
        yield
        seconds = time.thread_time() - t0
    finally:
        if collecting:
            gc.enable()
    assert seconds < SLOW_CALL_S


def _check_config(text: str) -> None:
    with _hang_guard():
        try:
            cfg = parse_config(text, LIMITS)
        except ProtocolError as err:
            assert err.code in CLOSE_CODES and err.message
        else:
            assert isinstance(cfg, StreamConfig)
            assert cfg.sample_rate == SAMPLE_RATE and cfg.encoding in ENCODINGS
            assert cfg.name is None or (isinstance(cfg.name, str) and len(cfg.name) <= 200)
            for phrase, w in (cfg.boosts or {}).items():
                assert 0 < len(phrase) <= LIMITS.max_phrase_chars and math.isfinite(w)
                assert abs(w) <= LIMITS.max_boost_weight
            assert len(cfg.boosts or {}) <= LIMITS.max_boosts
            assert cfg.latency is None or MIN_LATENCY_SECONDS <= cfg.latency <= MAX_LATENCY_SECONDS
            json.loads(cfg.to_json())


def _check_control(text: str) -> None:
    with _hang_guard():
        try:
            assert parse_control(text, LIMITS) == "end"
        except ProtocolError as err:
            assert err.code in CLOSE_CODES


def _check_chunk(data: bytes, encoding: str) -> None:
    with _hang_guard():
        try:
            x = decode_chunk(data, encoding, LIMITS)
        except ProtocolError as err:
            assert err.code in CLOSE_CODES
        else:
            assert x.dtype == np.float32 and x.ndim == 1 and len(data) == x.size * ENCODINGS[encoding].itemsize
            assert np.isfinite(x).all() and (x.size == 0 or float(np.abs(x).max()) <= LIMITS.max_abs_sample)
            assert len(data) <= LIMITS.max_chunk_bytes(encoding)


# -- strategies -------------------------------------------------------------------------------------


def _mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 flip, 1 insert, 2 delete, 3 truncate."""
    b = bytearray(data)
    for kind, pos, byte in ops:
        if not b and kind != 1:
            continue
        i = pos % (len(b) + (kind == 1))
        if kind == 0:
            b[i] ^= byte or 1
        elif kind == 1:
            b.insert(i, byte)
        elif kind == 2:
            del b[i]
        else:
            del b[i:]
    return bytes(b)


edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=6)


@st.composite
def mutated_configs(draw) -> str:
    """A valid configuration with keys and values replaced, then its bytes mutated (decoded leniently)."""
    msg = dict(draw(st.sampled_from(VALID_CONFIGS)))
    for _ in range(draw(st.integers(0, 3))):
        msg[draw(st.sampled_from(KEYS))] = draw(st.sampled_from(HOSTILE_VALUES))
    text = json.dumps(msg, allow_nan=True)
    if draw(st.booleans()):
        text = _mutate(text.encode(), draw(edits)).decode("utf-8", errors=draw(st.sampled_from(["replace", "ignore"])))
    return text


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                           max_leaves=20)
texts = st.one_of(st.text(max_size=300), mutated_configs(), json_values.map(json.dumps),
                  st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5).map(json.dumps),
                  st.sampled_from(['{"type": "end"}', '{"type":"end"}', '{"type": "end", "x": 1}', "[" * 3000,
                                   '{"sample_rate": 1' + "0" * 5000 + "}", '{"a": ' * 2000, "\ufeff{}", "\x00",
                                   '{"sample_rate": 16000, "sample_rate": 8000}', "x" * 5000]))


@st.composite
def chunks(draw) -> tuple[bytes, str]:
    encoding = draw(st.sampled_from(sorted(ENCODINGS)))
    kind = draw(st.integers(0, 2))
    if kind == 0:
        data = draw(st.binary(max_size=2 * LIMITS.max_chunk_bytes(encoding)))
    else:
        n = draw(st.integers(0, 4000))
        if encoding == "f32le":
            vals = draw(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=8))
            base = np.resize(np.array(vals or [0.0], np.float32), n) if kind == 1 else np.zeros(n, np.float32)
            data = base.astype("<f4").tobytes()
        else:
            data = np.resize(np.array(draw(st.lists(st.integers(-32768, 32767), min_size=1, max_size=8)),
                                      np.int16), n).astype("<i2").tobytes()
        data = _mutate(data, draw(edits))
    return data, encoding


# -- CI part (a few seconds) ------------------------------------------------------------------------

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(text=texts)
def test_fuzz_text_messages(text):
    _check_config(text)
    _check_control(text)


@FAST
@given(chunk=chunks())
def test_fuzz_binary_chunks(chunk):
    _check_chunk(*chunk)


def test_known_hostile_texts_get_named_errors():
    """Inputs the fuzzer found (or that a reader of json.loads would worry about)."""
    cases = {
        '{"sample_rate": 1' + "0" * 5000 + "}": "bad_config",   # int too long for str -> int (a ValueError)
        "[" * 100000: "message_too_large",
        '{"sample_rate": 16000, "encoding": []}': "bad_encoding",  # found by the fuzzer: unhashable
        "[" * 3000: "bad_config",                              # RecursionError in json
        '{"sample_rate": 16000, "boosts": {"a": NaN}}': "bad_boosts",
        '{"sample_rate": 16000, "boosts": {"a": Infinity}}': "bad_boosts",
        '{"sample_rate": 16000, "name": "\ud800"}': None,     # a lone surrogate inside the JSON string
        "\ud800": "bad_config",                                # a lone surrogate in the text itself
        '{"sample_rate": 16000.0}': "bad_sample_rate",
        '{"sample_rate": true}': "bad_sample_rate",
        '{"sample_rate": 16000, "encoding": ["s16le"]}': "bad_encoding",
    }
    for text, code in cases.items():
        if code is None:
            _check_config(text)
            continue
        with pytest.raises(ProtocolError) as info:
            parse_config(text, Limits())  # 64 KB text messages: room for a 5000-digit integer
        assert info.value.code == code, (text[:40], info.value.code)
    with pytest.raises(ProtocolError) as info:
        parse_control("\ud800", LIMITS)
    assert info.value.code == "bad_message"


# -- the long run (make bench / -m slow) ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fuzz_10k_inputs():
    """10,000+ inputs for each entry point; records count, time and peak traced memory."""
    n = 10_000
    big = settings(max_examples=n, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    counts = {"text": 0, "chunk": 0}

    @big
    @given(text=texts)
    def fuzz_text(text):
        counts["text"] += 1
        _check_config(text)
        _check_control(text)

    @big
    @given(chunk=chunks())
    def fuzz_chunk(chunk):
        counts["chunk"] += 1
        _check_chunk(*chunk)

    tracemalloc.start()
    t0 = time.perf_counter()
    fuzz_text()
    fuzz_chunk()
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"protocol fuzz: {counts['text']} text messages (parse_config + parse_control), {counts['chunk']} "
          f"binary chunks in {seconds:.1f} s, peak traced memory {peak / 2 ** 20:.1f} MiB")
    assert counts["text"] >= n and counts["chunk"] >= n
    assert peak < 256 * 2 ** 20  # inputs are a few KB: memory must stay bounded
