"""One run per directory, also when two start at once: the run directory's lock, the temporary
files a killed write leaves, and the warning for a run that did not finish."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.errors import ConfigError
from bertfit.runs.run_dir import LOCK_FILE, RunDir
from bertfit.training import run as run_module
from bertfit.training.run import train
from bertfit.training.run_dir import RunBusy, RunLock
from tests.tiny import sentiment_rows, write_csv


@pytest.fixture
def config(tmp_path, trainable_hf_dir) -> RunConfig:
    return RunConfig(
        output_dir=str(tmp_path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(tmp_path / "train.csv", sentiment_rows(24))), buckets=[16]
        ),
        train=TrainConfig(batch_size=8, epochs=1, seed=0, strategy="default", jit_compile=False),
    )


def test_a_second_lock_is_refused_and_a_dead_processs_lock_is_taken_over(tmp_path):
    first = RunLock(tmp_path / "run")
    assert first.acquire() is None
    with pytest.raises(RunBusy, match="in use by another bertfit train"):
        RunLock(tmp_path / "run").acquire()
    first.release()
    assert not (tmp_path / "run").exists()  # nothing was written: the folder goes too

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).write_text("999999999\n")  # a pid that cannot be running
    second = RunLock(tmp_path / "run")
    assert "left by pid 999999999 (no longer running)" in second.acquire()
    second.release()


def test_a_run_into_a_directory_another_run_holds_is_refused_before_any_work(config):
    held = RunLock(Path(config.output_dir))
    held.acquire()
    try:
        with pytest.raises(RunBusy, match=r"pid \d+"):
            train(config, quiet=True)
        assert [p.name for p in Path(config.output_dir).iterdir()] == [LOCK_FILE]
    finally:
        held.release()


def test_two_runs_started_in_the_same_second_get_two_directories(config, tmp_path, monkeypatch):
    taken = tmp_path / "runs" / "20250101-000000"
    names = iter([taken, taken, tmp_path / "runs" / "20250101-000000-2"])
    monkeypatch.setattr(run_module, "new_run_path", lambda: next(names))
    held = RunLock(taken)
    held.acquire()  # the other run, which took the name first
    try:
        result = train(dataclasses.replace(config, output_dir=None), quiet=True)
    finally:
        held.release()
    assert result.run_dir.endswith("20250101-000000-2")
    assert RunDir(result.run_dir).status() == "finished"
    assert not (Path(result.run_dir) / LOCK_FILE).exists()


def test_a_killed_atomic_write_leaves_a_run_that_reruns_and_is_cleaned(config, capsys):
    train(config, quiet=True)
    run = Path(config.output_dir)
    leftover = run / ".metrics.json.4242.tmp"
    leftover.write_text('{"status": "runn')
    assert RunDir(run).status() == "finished"
    train(config, quiet=True, overwrite=True)
    assert not leftover.exists()

    (run / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"notes\.txt is not a run's file"):
        train(config, quiet=True, overwrite=True)


def test_a_killed_distillations_half_written_set_is_removed_by_the_next_lock(tmp_path):
    from bertfit.training.run_dir import TrainingRunDir

    building = tmp_path / "student" / ".distill.4242.tmp"  # a folder, not a file
    (building / "student").mkdir(parents=True)
    (building / "train.jsonl").write_text('{"text": "go')
    assert RunDir(building.parent).status() == "new"
    TrainingRunDir(building.parent).lock().release()
    assert not building.exists()


def test_an_unfinished_run_is_used_with_a_warning_naming_its_checkpoint(config):
    train(config, quiet=True)
    run = RunDir(config.output_dir)
    metrics = json.loads(run.metrics_file.read_text())
    run.metrics_file.write_text(json.dumps({**metrics, "status": "running", "epochs": []}))
    note = run.unfinished_note()
    assert "unfinished run" in note and "0 of 1 epochs finished" in note
    assert "global step 3" in note
    run.metrics_file.write_text(json.dumps(metrics))
    assert run.unfinished_note() is None


def test_evaluate_on_an_unfinished_run_warns(config, capsys):
    from bertfit.cli import main as cli

    train(config, quiet=True)
    run = RunDir(config.output_dir)
    metrics = json.loads(run.metrics_file.read_text())
    run.metrics_file.write_text(json.dumps({**metrics, "status": "running"}))
    capsys.readouterr()
    assert (
        cli(["evaluate", "--run", config.output_dir, "--data", config.data.train, "--quiet"]) == 0
    )
    assert "warning: " in capsys.readouterr().err
