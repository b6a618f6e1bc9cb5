"""The load test's one-line verdict: did the server keep up with real-time streams?"""

import math

from asrdecode.serving.loadtest import LoadTestReport, StreamReport


def _stream(response_ms, *, audio=2.0, seconds=None, error=None, lag=0.0, queue_ms=None):
    rep = StreamReport(client=0, clip="a.wav", audio_seconds=audio, chunks=len(response_ms),
                       final_text=None if error else "a b", error=error, max_send_lag_ms=lag)
    rep.response_ms = list(response_ms)
    rep.queue_ms = list(queue_ms or [1.0] * len(response_ms))
    rep.compute_ms = [2.0] * len(response_ms)
    rep.batch = [1] * len(response_ms)
    rep.final_ms = response_ms[-1] if response_ms else None
    rep.stream_seconds = seconds
    return rep


def test_kept_up_when_results_arrive_within_a_chunk():
    rep = LoadTestReport(2, 0.5, 3.0, [_stream([40, 60, 80], seconds=2.1), _stream([30, 50], seconds=2.05)])
    s = rep.summary()
    assert s["verdict"].startswith("KEPT UP")
    assert math.isclose(s["stream_rtf"]["max"], 2.1 / 2.0, rel_tol=1e-3)
    assert "verdict           KEPT UP" in rep.format_text()


def test_overloaded_when_results_lag_past_the_chunk():
    slow = [100 + 400 * k for k in range(10)]  # the queue grows: each result later than the last
    s = LoadTestReport(16, 0.5, 9.0, [_stream(slow, seconds=6.0, queue_ms=slow)]).summary()
    assert s["verdict"].startswith("OVERLOADED")
    assert "fewer streams" in s["verdict"] and "3.00" in s["verdict"]  # max real-time factor 6 s / 2 s


def test_failed_streams_are_named():
    bad = _stream([], error={"type": "error", "code": "over_capacity", "message": "full"})
    s = LoadTestReport(2, 0.5, 1.0, [_stream([10], seconds=2.0), bad]).summary()
    assert s["verdict"] == "FAILED: 1 of 2 streams did not finish (over_capacity x1)"


def test_a_starved_client_gives_no_verdict_on_the_server():
    s = LoadTestReport(64, 0.5, 5.0, [_stream([900], seconds=2.5, lag=700.0)]).summary()
    assert s["verdict"].startswith("INCONCLUSIVE")


def test_faster_than_real_time_runs_have_no_keep_up_verdict():
    s = LoadTestReport(1, 0.5, 1.0, [_stream([900], seconds=0.2)], realtime=False).summary()
    assert s["verdict"].startswith("NOT REAL TIME")
