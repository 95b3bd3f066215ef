"""A run preempted without --output-dir: the same command, rerun, continues it (SIGTERM is how
TPU VMs and Kubernetes preempt; schedulers retry the command they ran)."""

from __future__ import annotations

import json

import pytest

from bertfit.cli import main as cli
from bertfit.config import RunConfig
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args, terminate_after_steps


@pytest.mark.slow
def test_the_same_command_resumes_a_run_preempted_without_output_dir(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    train = write_csv(tmp_path / "train.csv", sentiment_rows(48, seed=4))
    args = ["train", *resume_args(trainable_hf_dir, train, epochs=1, json=None, quiet=True)]
    with monkeypatch.context() as patched:
        terminate_after_steps(patched, 2)
        assert cli(args) == 143
    err = capsys.readouterr().err
    (run,) = (tmp_path / "runs").glob("2*")
    assert f"bertfit train --config {run.relative_to(tmp_path)}/config.yaml --resume" in err
    assert json.loads((run / "metrics.json").read_text())["status"] == "running"
    # the printed `--config RUN/config.yaml --resume` names this directory as its output
    assert RunConfig.load(run / "config.yaml").output_dir == str(run.relative_to(tmp_path))
    before = [json.loads(line)["global_step"] for line in (run / "steps.jsonl").open()]

    assert cli(args) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "is an unfinished run of this config: resuming it" in err
    assert [p.name for p in (tmp_path / "runs").glob("2*")] == [run.name]  # no second run
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"
    steps = [json.loads(line)["global_step"] for line in (run / "steps.jsonl").open()]
    assert before == [1, 2] and steps == list(range(1, len(steps) + 1)) and len(steps) > 4

    assert cli(args) == 0  # the run is finished: the same command now starts a new one
    assert len(list((tmp_path / "runs").glob("2*"))) == 2


def test_resume_without_output_dir_and_no_unfinished_run_says_so(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    train = write_csv(tmp_path / "train.csv", sentiment_rows(16, seed=4))
    args = ["train", *resume_args(trainable_hf_dir, train, json=None, quiet=True), "--resume"]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert "--resume without --output-dir: runs holds no unfinished run of this config" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_a_diverged_run_is_not_continued_by_the_same_command(tmp_path, monkeypatch):
    """Its message says to change a setting and start again: a rerun starts a new run."""
    from bertfit.config import DataConfig
    from bertfit.training.run_dir import unfinished_run_of

    monkeypatch.chdir(tmp_path)
    config = RunConfig(data=DataConfig(train="train.csv"))
    for name, status in (("20260101-000000", "diverged"), ("20260102-000000", "running")):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        config.save(run / "config.yaml")
        (run / "metrics.json").write_text(json.dumps({"status": status}))
    run_dir, lock = unfinished_run_of(config)
    lock.release()
    assert run_dir.path.name == "20260102-000000"
    (tmp_path / "runs" / "20260102-000000" / "metrics.json").write_text('{"status": "finished"}')
    assert unfinished_run_of(config) is None
