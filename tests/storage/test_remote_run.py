"""`bertfit train --output-dir gs://...` (and s3://, ram://): the run directory, its
checkpoints and what reads it, against the local servers (`conftest.py`)."""

from __future__ import annotations

import io
import json
import sys
import uuid
from pathlib import Path

import pytest
import tensorflow as tf

from bertfit import storage
from bertfit.cli import main
from bertfit.export.serving import save_module
from tests.storage.servers import BUCKET
from tests.tiny import sentiment_rows, train_args, write_csv


@pytest.fixture(scope="module")
def train_csv(tmp_path_factory):
    return write_csv(tmp_path_factory.mktemp("data") / "train.csv", sentiment_rows(24))


def _upload(local, url: str) -> str:
    storage.upload_file(local, url)
    return url


# gs:// shares s3://'s code (fsspec) but for the seams tests/storage/test_remote_commit.py pins
# on each store; a run trains into gs:// end to end in test_remote_resume.py
@pytest.mark.slow  # trains end to end, as tests/conftest.py's SLOW_TESTS do
@pytest.mark.parametrize("remote", ["s3", "ram"], indirect=True)
def test_a_run_trains_into_a_bucket_from_a_bucket(remote, trainable_hf_dir, train_csv, capsys):
    train = _upload(train_csv, storage.join(remote, "data", "train.csv"))
    run = storage.join(remote, "runs", "a")

    flags = dict(json=True, epochs=2, no_report=None)  # report.html, written to the bucket
    code = main(train_args(trainable_hf_dir, train, run, "--eval", train, **flags))
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
    ):
        assert name in files, files
    assert ".lock" not in files  # released
    assert any(name.startswith("tensorboard/") for name in files)
    metrics = json.loads(storage.read_bytes(storage.join(run, "metrics.json")))
    assert metrics["status"] == "finished"
    assert len(metrics["epochs"]) == 2
    steps = storage.read_bytes(storage.join(run, "steps.jsonl")).decode().splitlines()
    assert len(steps) == 6  # 24 rows / batch 8, two epochs
    # one checkpoint per folder: the replaced one was deleted after the new one was uploaded
    assert [n for n in files if n.startswith("checkpoints/latest/")] == [
        "checkpoints/latest/ckpt-6.safetensors"
    ]
    assert len([n for n in files if n.startswith("checkpoints/best/")]) == 1

    # what reads a run reads it from the URL
    assert main(["evaluate", "--run", run, "--data", train, "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["num_examples"] == 24
    # the best checkpoint's: one of the epochs' evaluations
    assert evaluated["accuracy"] in [e["eval"]["accuracy"] for e in metrics["epochs"]]
    assert main(["predict", "--run", run, "--data", train]) == 0
    predictions = capsys.readouterr().out.splitlines()
    assert len(predictions) == 24


@pytest.fixture(scope="module")
def predicted(trained_run, train_csv) -> str:
    """What `bertfit predict` prints for `train_csv` from the local run `trained_run`."""
    run = trained_run[1].run_dir
    with pytest.MonkeyPatch.context() as monkeypatch:
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        assert main(["predict", "--run", str(run), "--data", str(train_csv)]) == 0
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gs", "s3"])
def test_an_export_goes_to_a_bucket_and_predicts_from_there(
    store, object_stores, trained_run, train_csv, predicted, capsys
):
    run = trained_run[1].run_dir
    remote = f"{store}://{BUCKET}/{uuid.uuid4().hex[:12]}"
    exported = storage.join(remote, "exports", "sst")

    assert main(["export", "--run", str(run), exported]) == 0
    assert capsys.readouterr().out.split() == [storage.join(exported, "1")]
    files = storage.list_files(exported)
    assert "1/saved_model.pb" in files and any(f.startswith("1/variables/") for f in files)

    assert main(["predict", "--run", exported, "--data", str(train_csv)]) == 0
    assert capsys.readouterr().out == predicted


def test_exports_into_a_bucket_take_the_next_free_version(remote):
    """What `bertfit export` does at a URL (above, the first version of a run's export), on
    a SavedModel that takes no seconds to write: each export is the next free version."""
    module = tf.Module()
    module.serve = tf.function(
        lambda x: {"y": x + 1.0}, input_signature=[tf.TensorSpec([None], tf.float32)]
    )
    signatures = {"serving_default": module.serve.get_concrete_function()}
    root = storage.join(remote, "exports")

    versions = [save_module(module, root, {}, signatures=signatures) for _ in range(2)]
    assert versions == [storage.join(root, "1"), storage.join(root, "2")]
    files = storage.list_files(root)
    assert "1/saved_model.pb" in files and "2/saved_model.pb" in files


def test_an_export_into_the_run_directory_at_a_url_is_refused(remote, capsys):
    run = storage.join(remote, "run")
    assert main(["export", "--run", run, storage.join(run, "exported")]) == 2
    assert "inside the run directory" in capsys.readouterr().err


def test_a_missing_bucket_or_no_permission_is_one_line_before_any_work(
    object_stores, trainable_hf_dir, train_csv, monkeypatch, capsys
):
    run = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/runs/a"
    assert main(train_args(trainable_hf_dir, train_csv, run)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bertfit train: error: {run}: cannot be written (FileNotFoundError")
    assert "check that the bucket exists" in err and "Traceback" not in err

    def denied(self, url, data):  # what s3fs raises on a 403 (moto does not check policies)
        raise PermissionError("Access Denied")

    monkeypatch.setattr(storage._Fsspec, "create_exclusive", denied)
    run = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/run"
    assert main(train_args(trainable_hf_dir, train_csv, run)) == 2
    err = capsys.readouterr().err
    assert f"{run}: cannot be written (PermissionError: Access Denied)" in err
    assert storage.list_files(run) == []  # nothing written


@pytest.mark.slow
def test_a_run_at_a_url_is_served_from_its_url(s3, trained_run):
    """`serve --run s3://...` made a `Path` of the URL ("s3:/bucket/..."), a local path that
    is not there."""
    from bertfit.serve.app import served_versions

    run = storage.join(s3, "runs", "served")
    config, _ = trained_run
    local = Path(config.output_dir)
    for file in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.upload_file(file, storage.join(run, file.relative_to(local).as_posix()))
    (version,) = served_versions(run)
    assert version.version == 1
    assert version.classifier.predict(["a fine film"])[0]["label"] in ("neg", "pos")
