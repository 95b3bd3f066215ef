"""bench.predict_engines' bookkeeping: medians over rounds, each engine against each peer (the
peer's seconds over the engine's), the engine named in every row, and a whole process timed
by the kernel's accounting."""

from __future__ import annotations

import sys

import pytest

from bench.predict_engines import rows, serve_medians, summarize, time_process


def _run(wall: float, load: float = 1.0) -> dict:
    return {
        "wall_seconds": wall,
        "cpu_seconds": wall / 2,
        "peak_rss_mib": 300.0,
        "load_average_1min_before": load,
    }


def test_each_engine_is_compared_with_each_peer_on_median_wall_time():
    records = {
        "bertfit predict --engine tensorflow": [_run(8.0), _run(6.0), _run(7.0)],
        "bertfit predict --engine onnx": [_run(4.0), _run(5.0, 3.0), _run(6.0)],
        "ort-peer-fp32": [_run(10.0), _run(10.0), _run(10.0)],
        "torch-peer": [_run(14.0), _run(14.0), _run(14.0)],
    }
    summary = summarize(records)
    assert summary["bertfit predict --engine onnx"]["speed_vs_ort-peer-fp32"] == 2.0
    assert summary["bertfit predict --engine tensorflow"]["speed_vs_torch-peer"] == 2.0
    assert "speed_vs_torch-peer" not in summary["ort-peer-fp32"]
    lines = rows({"settings": {"texts": 1283}, "summary": summary})
    assert lines[1] == (
        "| bertfit predict --engine onnx | 1283 | 5.00 s (4.00, 5.00, 6.00) | 2.50 s | 300 MiB "
        "| 2.00x ort-peer-fp32, 2.80x torch-peer | 1.0-3.0 |"
    )


def test_serve_reports_its_median_round_with_every_rounds_rate():
    def served(rate: float, p50: float) -> dict:
        return {
            "settings": {"clients": 16, "seconds": 20.0},
            "requests_per_second": rate,
            "latency_ms": {"p50": p50, "p99": 2 * p50},
            "errors": 0,
            "load_average_1min_before": 1.5,
        }

    serve = serve_medians({"onnx": [served(200.0, 70), served(180.0, 90), served(220.0, 60)]})
    assert serve["onnx"]["latency_ms"]["p50"] == 70  # the median round's own latencies
    lines = rows({"settings": {"texts": 1283}, "summary": {}, "serve": serve})
    assert lines == [
        "| bertfit serve --engine onnx, 16 clients x 20 s, 1 text/request | 200 req/s "
        "(200, 180, 220), p50 70 ms, p99 140 ms, 0 errors | load 1.5 |"
    ]


def test_a_process_is_timed_whole_and_a_failure_says_why():
    record = time_process([sys.executable, "-c", "sum(range(10**6))"])
    assert record["wall_seconds"] > 0 and record["cpu_seconds"] > 0
    assert record["peak_rss_mib"] > 1
    with pytest.raises(RuntimeError, match="boom"):
        time_process([sys.executable, "-c", "raise SystemExit('boom')"])
