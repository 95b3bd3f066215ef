"""A full disk while training or exporting: one line, no temporary files left, the run's last
whole checkpoint kept, and the same command resumes once there is space."""

from __future__ import annotations

import errno
import json

import pytest

from bertfit.cli import main as cli
from bertfit.runs import checkpoint_files
from bertfit.training.run_dir import TrainingRunDir
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args


def _run_args(model, tmp_path) -> tuple:
    """The run directory and the `bertfit train` arguments of a one-epoch tiny run (48 rows,
    a checkpoint every 2)."""
    train = write_csv(tmp_path / "train.csv", sentiment_rows(48, seed=4))
    run = tmp_path / "run"
    args = resume_args(model, train, epochs=1, json=None, quiet=True)
    return run, ["train", *args, "--output-dir", str(run)]


def _disk_full_on_call(monkeypatch, n: int) -> None:
    """The n-th checkpoint write fails as a full disk does, half-way through its temporary
    file (which is there to clean up)."""
    original, calls = checkpoint_files._write, []

    def write(file, arrays, metadata):
        calls.append(1)
        if len(calls) == n:
            file.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        original(file, arrays, metadata)

    monkeypatch.setattr(checkpoint_files, "_write", write)


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_keeps_the_last_one_and_the_run_resumes(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    run, args = _run_args(trainable_hf_dir, tmp_path)
    with monkeypatch.context() as patched:
        _disk_full_on_call(patched, 2)  # the first save (global step 2) succeeds
        assert cli(args) == 2
    err = capsys.readouterr().err
    assert "cannot save the checkpoint of global step 4" in err, err
    assert "No space left on device" in err and "ckpt-2.safetensors is kept" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    latest = run / "checkpoints" / "latest"
    assert [p.name for p in latest.iterdir()] == ["ckpt-2.safetensors"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "No space left" in metrics["error"]

    assert cli(args) == 0, capsys.readouterr().err  # space again: the same command resumes
    assert "resum" in capsys.readouterr().err
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"
    steps = [json.loads(line)["global_step"] for line in (run / "steps.jsonl").open()]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 4
    assert "(global step 2)" in (run / "train.log").read_text()  # resumed from ckpt-2


@pytest.mark.slow
def test_a_full_disk_while_logging_steps_is_one_line_and_marks_the_run_failed(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    run, args = _run_args(trainable_hf_dir, tmp_path)
    original, calls = TrainingRunDir.append_steps, []

    def append_steps(self, rows):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.steps_file))
        original(self, rows)

    monkeypatch.setattr(TrainingRunDir, "append_steps", append_steps)
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert f"{run / 'steps.jsonl'}: No space left on device" in err and "Traceback" not in err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "No space left" in metrics["error"]
