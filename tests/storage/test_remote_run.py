"""`bertfit train --output-dir gs://...` (and s3://, ram://): the run directory, its
checkpoints and what reads it, against the local servers (`conftest.py`)."""

from __future__ import annotations

import json

import pytest

from bertfit import storage
from bertfit.cli import main
from tests.tiny import sentiment_rows, train_args, write_csv


@pytest.fixture(scope="module")
def train_csv(tmp_path_factory):
    return write_csv(tmp_path_factory.mktemp("data") / "train.csv", sentiment_rows(24))


def _upload(local, url: str) -> str:
    storage.upload_file(local, url)
    return url


def test_a_run_trains_into_a_bucket_from_a_bucket(remote, trainable_hf_dir, train_csv, capsys):
    train = _upload(train_csv, storage.join(remote, "data", "train.csv"))
    run = storage.join(remote, "runs", "a")

    code = main(train_args(trainable_hf_dir, train, run, "--eval", train, json=True, epochs=2))
    out = capsys.readouterr()

    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["run_dir"] == run
    files = storage.list_files(run)
    for name in (
        "config.yaml",
        "labels.json",
        "metrics.json",
        "steps.jsonl",
        "train.log",
        "report.html",
        "eval_outputs.npz",
        "encoder/config.json",
        "checkpoints/latest/checkpoint",
        "checkpoints/best/checkpoint",
    ):
        assert name in files, files
    assert ".lock" not in files  # released
    assert any(name.startswith("tensorboard/") for name in files)
    metrics = json.loads(storage.read_bytes(storage.join(run, "metrics.json")))
    assert metrics["status"] == "finished"
    assert len(metrics["epochs"]) == 2
    steps = storage.read_bytes(storage.join(run, "steps.jsonl")).decode().splitlines()
    assert len(steps) == 6  # 24 rows / batch 8, two epochs
    # one checkpoint per folder: the replaced one was deleted after the index moved on
    latest = [n for n in files if n.startswith("checkpoints/latest/ckpt-")]
    assert {n.split(".")[0] for n in latest} == {"checkpoints/latest/ckpt-6"}

    # what reads a run reads it from the URL
    assert main(["evaluate", "--run", run, "--data", train, "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["num_examples"] == 24
    # the best checkpoint's: one of the epochs' evaluations
    assert evaluated["accuracy"] in [e["eval"]["accuracy"] for e in metrics["epochs"]]
    assert main(["predict", "--run", run, "--data", train]) == 0
    predictions = capsys.readouterr().out.splitlines()
    assert len(predictions) == 24
