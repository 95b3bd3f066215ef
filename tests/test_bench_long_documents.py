"""bench.long_documents' bookkeeping: each arm's flags, the spread over seeds, the rows against
truncate at the same length, and results of two bench processes merged, not overwritten."""

from __future__ import annotations

import json

import pytest

from bench import long_documents
from bench.long_documents import arm_flags, benchmark_rows, save, summarize


def _run(seq: int, arm: str, seed: int, accuracy: float, seconds: float = 100.0) -> dict:
    return {
        "max_seq_length": seq,
        "arm": arm,
        "seed": seed,
        "test_accuracy": accuracy,
        "test_macro_f1": accuracy - 0.1,
        "train_process_seconds": seconds,
        "train_peak_rss_mib": 1000.0 + seed,
    }


def test_each_arm_is_truncate_or_chunk_with_its_pooling():
    assert arm_flags("truncate") == ["--long-documents", "truncate"]
    assert arm_flags("attention")[:4] == [
        "--long-documents",
        "chunk",
        "--chunk-pooling",
        "attention",
    ]


def test_the_summary_gives_mean_and_spread_over_seeds_per_length_and_arm():
    runs = [_run(128, "mean", 1, 0.6), _run(128, "mean", 2, 0.8), _run(128, "truncate", 1, 0.5)]
    truncate, mean = summarize(runs)
    assert (truncate["arm"], mean["arm"], mean["seeds"]) == ("truncate", "mean", [1, 2])
    assert mean["test_accuracy"]["mean"] == pytest.approx(0.7)
    assert (mean["test_accuracy"]["min"], mean["test_accuracy"]["max"]) == (0.6, 0.8)
    assert mean["test_accuracy"]["std"] == pytest.approx(0.1414, abs=1e-4)
    assert truncate["test_accuracy"]["std"] == 0.0
    assert mean["train_peak_rss_mib"] == 1002.0


def test_chunk_rows_compare_with_truncate_at_the_same_length_only():
    runs = [
        _run(128, "truncate", 1, 0.5, seconds=100),
        _run(128, "max", 1, 0.7, seconds=300),
        _run(512, "mean", 1, 0.9),  # no truncate run at 512: no row
    ]
    (row,) = benchmark_rows(summarize(runs))
    assert "seq 128, chunk, max pooling" in row
    assert "+0.200 macro-F1, 3.0x the time" in row


def test_a_save_keeps_the_runs_another_bench_process_wrote(tmp_path, monkeypatch):
    written = tmp_path / "long_documents.json"

    def write_result(name, result):
        written.write_text(json.dumps(result))

    monkeypatch.setattr(long_documents, "RESULTS", tmp_path)
    monkeypatch.setattr(long_documents, "write_result", write_result)
    save([_run(128, "mean", 1, 0.6)], profile={})
    runs = save([_run(128, "truncate", 2, 0.5)], profile={})  # another process's own list
    assert [(r["arm"], r["seed"]) for r in runs] == [("truncate", 2), ("mean", 1)]
    assert len(json.loads(written.read_text())["runs"]) == 2
