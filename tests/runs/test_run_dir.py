"""Reading a run directory, as evaluate, predict, export, serve, report and tune do: what it
holds, the steps a kill cut off, which checkpoint loads; and the reading side writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.errors import BertfitError
from bertfit.runs.checkpoint_files import save_checkpoint
from bertfit.runs.run_dir import LOCK_FILE, RunDir


def _run(tmp_path, status: str | None = None) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.config_file.write_text("seed: 0\n")
    if status is not None:
        run.metrics_file.write_text(json.dumps({"status": status, "epochs": []}))
    return run


def test_status_tells_new_running_finished_and_foreign_directories(tmp_path):
    empty = RunDir(tmp_path / "empty")
    assert empty.status() == "new"  # absent
    empty.path.mkdir()
    (empty.path / LOCK_FILE).write_text("123\n")  # a lock and a killed write's leftover only
    (empty.path / f".metrics.json.{99999}.tmp").write_text("{")
    assert empty.status() == "new"

    run = _run(tmp_path, status="running")
    assert (run.status(), run.metrics_status()) == ("running", "running")
    run.metrics_file.write_text(json.dumps({"status": "finished"}))
    assert run.status() == "finished"
    run.metrics_file.write_text("[1, 2]")  # not a run's metrics: unfinished, not an error
    assert (run.status(), run.metrics_status()) == ("running", None)

    (run.path / "notes.txt").write_text("mine")
    assert run.status() == "foreign"
    run.config_file.unlink()
    (run.path / "notes.txt").unlink()
    assert run.status() == "foreign"  # a run's files without its config.yaml


def test_steps_are_read_up_to_a_line_a_kill_cut_off(tmp_path):
    run = _run(tmp_path)
    run.steps_file.write_text('{"global_step": 1}\n{"global_step": 2}\n{"global_st')
    assert run.read_steps() == [{"global_step": 1}, {"global_step": 2}]
    assert RunDir(tmp_path / "none").read_steps() == []


def test_the_best_checkpoint_loads_else_the_latest_else_an_error_naming_the_folder(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(BertfitError, match=r"no checkpoint found under .*checkpoints/best"):
        run.checkpoint_path()
    weights = {"v": np.ones(2, np.float32)}
    latest = save_checkpoint(run.latest_dir, 7, weights)
    assert run.checkpoint_path("latest") == latest == run.checkpoint_path("best")
    best = save_checkpoint(run.best_dir, 5, weights)
    assert run.checkpoint_path() == best
    assert "global step 5" in RunDir(run.path).unfinished_note()


def test_a_run_saved_a_checkpoint_once_its_best_or_latest_folder_holds_one(tmp_path):
    """What lets a failed run of other settings be replaced without --overwrite (none saved:
    nothing trained to lose) or not."""
    run = _run(tmp_path, status="failed")
    assert not run.saved_checkpoint()
    save_checkpoint(run.best_dir, 5, {"v": np.ones(2, np.float32)})
    assert run.saved_checkpoint()


def test_a_missing_file_names_the_run_and_what_to_pass(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(BertfitError, match=r"run is not a complete bertfit run.*labels.json"):
        run.load_task()


def test_the_reading_side_has_no_writers():
    """Writing a run (the lock, the start policy, metrics and checkpoints) is training's:
    `bertfit.training.run_dir.TrainingRunDir`."""
    from bertfit.training.run_dir import TrainingRunDir

    writers = {"lock", "plan_start", "create", "save_setup", "save_metrics", "append_steps"}
    assert writers.isdisjoint(dir(RunDir))
    assert writers <= set(dir(TrainingRunDir)) and issubclass(TrainingRunDir, RunDir)
