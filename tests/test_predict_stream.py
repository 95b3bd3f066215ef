"""`bertfit predict --data -`: standard input is predicted in chunks as it arrives, so an
endless stream is answered as it goes, in bounded memory; SIGTERM or Ctrl-C stops it with the
rows predicted so far kept, written whole."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertfit.cli import main
from bertfit.inference.predictions_file import write_prediction_chunks
from bertfit.inference.run import STREAM_ROWS, predict
from bertfit.training.interrupt import StopRequests
from tests.tiny import sentiment_rows, write_csv

ROOT = Path(__file__).resolve().parents[1]


def _jsonl(rows) -> bytes:
    return "".join(json.dumps({"text": text}) + "\n" for text, _ in rows).encode()


@pytest.mark.slow  # 600 rows predicted twice: ~2.5 s
def test_stdin_in_chunks_gives_the_rows_of_a_file_and_one_csv_header(
    trained_run, tmp_path, monkeypatch, capsys
):
    config, _ = trained_run
    rows = sentiment_rows(2 * STREAM_ROWS + 7, seed=9)
    data = write_csv(tmp_path / "data.csv", rows)
    want = predict(config.output_dir, str(data), quiet=True)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_jsonl(rows))))
    out = tmp_path / "out.csv"
    args = ["predict", "--run", config.output_dir, "--data", "-", "--format", "jsonl"]
    assert main([*args, "--output", str(out)]) == 0
    assert f"wrote {len(rows)} predictions" in capsys.readouterr().err
    got = list(csv.DictReader(out.open(newline="")))
    assert [r["label"] for r in got] == [r["label"] for r in want]
    for line, expected in zip(got, want, strict=True):  # batched differently: float noise
        assert json.loads(line["probabilities"]) == pytest.approx(expected["probabilities"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "out.csv"]  # no temp


@pytest.mark.slow  # a process of its own (TensorFlow's start)
def test_an_open_stdin_is_answered_chunk_by_chunk_before_it_ends(trained_run):
    config, _ = trained_run
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = ["predict", "--run", config.output_dir, "--data", "-", "--format", "jsonl"]
    process = subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", *args, "--quiet"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        process.stdin.write(_jsonl(sentiment_rows(STREAM_ROWS + 3, seed=2)))
        process.stdin.flush()  # stdin stays open: the first chunk must come back anyway
        first = [json.loads(process.stdout.readline()) for _ in range(STREAM_ROWS)]
        assert all(row["label"] in ("neg", "pos") for row in first)
        process.stdin.close()
        rest = process.stdout.read().decode().splitlines()
        assert len(rest) == 3 and process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()


def test_a_stop_while_the_next_chunk_is_awaited_keeps_the_rows_written_so_far(tmp_path):
    row = {"label": "pos", "probabilities": {"neg": 0.25, "pos": 0.75}}

    def stream():
        yield [row, row]
        os.kill(os.getpid(), signal.SIGTERM)  # while the next rows are awaited
        time.sleep(60)  # a read of standard input that nothing more arrives on
        yield [row]

    out = tmp_path / "out.jsonl"
    with StopRequests(note=None) as stop:
        count = write_prediction_chunks(stop.until_stopped(stream()), str(out))
    assert stop.signal == signal.SIGTERM and count == 2
    assert [json.loads(line) for line in out.read_text().splitlines()] == [row, row]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # renamed into place


def _temporary_rows(folder: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in folder.glob(".*.tmp"))


@pytest.mark.slow  # a process of its own (TensorFlow's start)
def test_sigterm_stops_an_endless_stream_keeping_what_was_predicted(trained_run, tmp_path):
    config, _ = trained_run
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # bertfit's own
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "out.jsonl"
    args = ["predict", "--run", config.output_dir, "--data", "-", "--format", "jsonl"]
    process = subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", *args, "--output", str(out)],
        env=env,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        process.stdin.write(_jsonl(sentiment_rows(STREAM_ROWS + 3, seed=2)))
        process.stdin.flush()  # and never closed: an endless stream
        deadline = time.monotonic() + 120
        while _temporary_rows(tmp_path) < STREAM_ROWS and time.monotonic() < deadline:
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
        said = process.stderr.read().decode().strip()
    finally:
        process.kill()
        process.wait()
    assert said == (
        f"bertfit predict: SIGTERM: stopped; wrote {STREAM_ROWS} predictions to {out} (the "
        "rows read after them were not predicted)"
    )
    assert len(out.read_text().splitlines()) == STREAM_ROWS
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
