"""What an object store without rename needs: an upload killed half-way never leaves a
checkpoint that loads as complete, and one run at a time holds a run directory."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from bertfit import storage
from bertfit.runs.run_dir import open_run
from bertfit.training import remote_run
from bertfit.training.remote_run import RemoteRun
from bertfit.training.run_dir import RunBusy


def _save(folder, value: float, step: int) -> None:
    """A TensorFlow checkpoint of one variable in `folder/checkpoints/latest` (one kept)."""
    checkpoint = tf.train.Checkpoint(w=tf.Variable(np.full(1000, value, np.float32)))
    manager = tf.train.CheckpointManager(checkpoint, str(folder / "checkpoints/latest"), 1)
    manager.save(checkpoint_number=step)


def _loaded(path: str) -> float:
    w = tf.Variable(np.zeros(1000, np.float32))
    tf.train.Checkpoint(w=w).read(path).assert_existing_objects_matched()
    return float(w.numpy()[0])


def test_an_upload_killed_half_way_leaves_the_previous_checkpoint_whole(remote, monkeypatch):
    run = RemoteRun(storage.join(remote, "run"))
    _save(run.staging, 1.0, step=1)
    run.push()
    _save(run.staging, 2.0, step=2)  # replaces ckpt-1 in staging

    uploads = []

    def dies_after_one(local, url):  # the process dies after one file of the new checkpoint
        if uploads:
            raise KeyboardInterrupt("killed")
        uploads.append(url)
        original(local, url)

    original = storage.upload_file
    monkeypatch.setattr(storage, "upload_file", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        run.push()
    monkeypatch.undo()
    assert "ckpt-2" in uploads[0]  # a part of the new checkpoint is there ...

    reader = open_run(run.url)  # ... but the index still names the old one, whole
    path = reader.checkpoint_path("latest")
    assert path.endswith("ckpt-1")
    assert _loaded(path) == 1.0

    # the next run removes the half-uploaded one and pushes its own
    with remote_run.claimed(run.url) as run_dir:
        run_dir.remove_checkpoint_leftovers()
    left = storage.list_files(storage.join(run.url, "checkpoints/latest"))
    assert sorted({name.split(".")[0] for name in left}) == ["checkpoint", "ckpt-1"]
    run.release()


def test_a_second_run_on_a_locked_run_directory_is_refused(remote):
    url = storage.join(remote, "run")
    first, second = RemoteRun(url), RemoteRun(url)
    assert first.acquire() is None
    with pytest.raises(RunBusy, match="in use by another bertfit train"):
        second.acquire()
    first.release()
    assert second.acquire() is None  # free again
    second.release()


def test_a_lock_left_by_a_dead_process_is_taken_over_and_said(remote):
    url = storage.join(remote, "run")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)
    storage.write_text(storage.join(url, ".lock"), f"{socket.gethostname()} {pid} 0\n")
    run = RemoteRun(url)
    note = run.acquire()
    assert note is not None and f"pid {pid}" in note
    run.release()
    assert not storage.exists(storage.join(url, ".lock"))


def test_a_lock_held_from_another_host_is_refused_with_what_to_delete(remote):
    url = storage.join(remote, "run")
    storage.write_text(storage.join(url, ".lock"), "another-host 12 0\n")
    with pytest.raises(RunBusy, match="pid 12 on another-host") as caught:
        RemoteRun(url).acquire()
    assert f"delete {url}/.lock" in str(caught.value)


def test_the_config_of_a_run_in_a_bucket_loads_from_its_url(remote):
    from bertfit.config import ModelConfig, RunConfig
    from bertfit.errors import ConfigError

    url = storage.join(remote, "run", "config.yaml")
    config = RunConfig(output_dir=storage.join(remote, "run"), model=ModelConfig(name="m"))
    storage.write_text(url, yaml.safe_dump(config.to_dict(), sort_keys=False))  # as save writes
    assert RunConfig.load(url) == config
    with pytest.raises(ConfigError, match="cannot read the run config"):
        RunConfig.load(storage.join(remote, "none.yaml"))


def test_a_prefix_holding_other_objects_is_refused_before_anything_is_downloaded(remote):
    from bertfit.errors import ConfigError

    url = storage.join(remote, "shared")
    storage.write_text(storage.join(url, "datasets/big.csv"), "text,label\n")
    storage.write_text(storage.join(url, "metrics.json"), "{}")
    with pytest.raises(ConfigError, match=r"not a bertfit run \(datasets\)"):
        with remote_run.claimed(url):
            pass
    assert not storage.exists(storage.join(url, ".lock"))  # released
    assert storage.list_files(url) == ["datasets/big.csv", "metrics.json"]  # untouched
