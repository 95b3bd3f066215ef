"""What an object store without rename needs: an upload killed half-way always leaves a whole
checkpoint as the one that loads, and one run at a time holds a run directory."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest
import yaml

from bertfit import storage
from bertfit.runs.checkpoint_files import read_checkpoint, save_checkpoint
from bertfit.runs.run_dir import open_run
from bertfit.training import remote_run
from bertfit.training.remote_run import RemoteRun
from bertfit.training.run_dir import RunBusy


def _save(folder, value: float, step: int) -> None:
    """A checkpoint of one array in `folder/checkpoints/latest`, replacing the one there."""
    save_checkpoint(folder / "checkpoints/latest", step, {"w": np.full(1000, value, np.float32)})


def _loaded(url: str) -> float:
    """The value in the checkpoint a reader of the run at `url` loads."""
    arrays, _ = read_checkpoint(open_run(url).checkpoint_path("latest"), ["w"])
    return float(arrays["w"][0])


def _killed(monkeypatch, run: RemoteRun, store_call: str) -> None:
    """`run.push()`, the process killed at its first `storage.<store_call>`."""

    def dies(*args):
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patched:
        patched.setattr(storage, store_call, dies)
        with pytest.raises(KeyboardInterrupt):
            run.push()


def test_an_upload_killed_half_way_leaves_a_whole_checkpoint_current(remote, monkeypatch):
    run = RemoteRun(storage.join(remote, "run"))
    latest = storage.join(run.url, "checkpoints/latest")
    _save(run.staging, 1.0, step=1)
    run.push()
    _save(run.staging, 2.0, step=2)  # replaces ckpt-1 in staging

    _killed(monkeypatch, run, "upload_file")  # while the new checkpoint uploads
    assert storage.list_files(latest) == ["ckpt-1.safetensors"]
    assert _loaded(run.url) == 1.0  # the previous one, whole

    _killed(monkeypatch, run, "remove")  # uploaded, before the one it replaces is deleted
    assert storage.list_files(latest) == ["ckpt-1.safetensors", "ckpt-2.safetensors"]
    assert _loaded(run.url) == 2.0  # the newest, whole

    # the next run removes the one left over
    with remote_run.claimed(run.url) as run_dir:
        run_dir.remove_checkpoint_leftovers()
    assert storage.list_files(latest) == ["ckpt-2.safetensors"]
    run.release()


def test_a_report_of_a_run_at_a_url_names_its_checkpoint_without_downloading_it(remote):
    url = storage.join(remote, "run")
    storage.write_text(storage.join(url, "config.yaml"), "seed: 0\n")
    storage.write_text(storage.join(url, "metrics.json"), '{"status": "running"}')
    run = RemoteRun(url)
    save_checkpoint(run.staging / "checkpoints/best", 5, {"w": np.zeros(3, np.float32)})
    run.push()
    run.release()

    reader = open_run(url, checkpoints=False)
    assert not list(reader.best_dir.glob("*"))  # the weights stay at the URL ...
    assert "best checkpoint so far (ckpt-5.safetensors, global step 5)" in (
        reader.unfinished_note()
    )  # ... and the warning still names them


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
