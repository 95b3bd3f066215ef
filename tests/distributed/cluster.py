"""Run `bertfit train` in subprocesses (a failed collective poisons its process) and read back
the per-step losses, the final weights and the example indices each input pipeline fed."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from bertfit.data.pipeline import PAD_INDEX
from tests import tiny
from tests.tiny import sentiment_rows, write_csv

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240


def write_shards(directory: Path, rows: int = 96, shards: int = 3) -> str:
    """`rows` examples of the separable toy task over `shards` CSV files; returns the glob."""
    data = sentiment_rows(rows, seed=7)
    per = -(-rows // shards)
    for i in range(shards):
        write_csv(directory / f"train-{i}.csv", data[i * per : (i + 1) * per])
    return str(directory / "train-*.csv")


# `bertfit train` arguments of every run here: `train_args(model, train, output, *extra)`;
# `start` puts `train` in front.
train_args = functools.partial(
    tiny.train_args,
    command=None,
    buckets="none",
    learning_rate="1e-3",
    dropout=0,
    seed=0,
    json=True,
)


def _env(temporary_dir: Path | None = None) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    env.pop("TF_CONFIG", None)
    if temporary_dir is not None:
        env["TMPDIR"] = str(temporary_dir)
    return env


def python_module(module_args: list, temporary_dir: Path | None = None) -> subprocess.Popen:
    """`python -m MODULE ARGS...` from the repository, its output kept for `finish`."""
    return subprocess.Popen(
        [sys.executable, "-m", *module_args],
        cwd=ROOT,
        env=_env(temporary_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start(
    args: list, indices_dir: Path | None = None, temporary_dir: Path | None = None
) -> subprocess.Popen:
    """`bertfit train ARGS`; with `indices_dir`, it records there the example indices its input
    pipelines feed (`tests/distributed/record_indices.py`); `temporary_dir` is its TMPDIR."""
    module = ["bertfit.cli"]
    if indices_dir is not None:
        indices_dir.mkdir(parents=True, exist_ok=True)
        module = ["tests.distributed.record_indices", str(indices_dir)]
    return python_module([*module, "train", *args], temporary_dir)


def finish(process: subprocess.Popen, timeout: float = TIMEOUT) -> dict:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"bertfit train timed out after {timeout}s:\n{err[-3000:]}") from None
    assert process.returncode == 0, f"exit {process.returncode}:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def train(args: list, indices_dir: Path | None = None) -> dict:
    return finish(start(args, indices_dir))


def train_eagerly(runs: list[list]) -> None:
    """`bertfit train` with each list of `runs`, one after another in one subprocess, every
    `tf.function` run eagerly (`tests/distributed/eager_runs.py`)."""
    finish(python_module(["tests.distributed.eager_runs", json.dumps(runs)]), TIMEOUT * len(runs))


@contextlib.contextmanager
def reserved_ports(count: int):
    """`count` free ports on this machine, kept from other processes until the block ends.

    TF_CONFIG names every worker's port before any worker starts, so a worker cannot bind port
    0 and say which it got. A port picked here and closed could be taken by someone else (any
    connect() or bind to port 0) before its worker binds it. So each probe socket stays bound,
    with SO_REUSEADDR and never listening, while the workers run: the kernel gives a bound port
    to no connect() or bind to port 0 and refuses it to a plain bind, while TensorFlow's gRPC
    server, which sets SO_REUSEADDR too, may bind it and listen (Linux lets SO_REUSEADDR sockets
    share a port so long as only one listens).
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
        yield [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def step_losses(run: Path) -> np.ndarray:
    lines = (run / "steps.jsonl").read_text().splitlines()
    return np.array([json.loads(line)["loss"] for line in lines])


def final_weights(run: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    from bertfit.runs.checkpoint_files import latest_checkpoint

    saved = load_file(latest_checkpoint(run / "checkpoints" / "latest"))
    return {name: value for name, value in saved.items() if name.startswith("model/")}


def assert_same_weights(a: Path, b: Path, atol: float) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys() and len(wa) > 10
    worst = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
    assert worst <= atol, f"largest weight difference {worst:.3g} > {atol}"


def fed_indices(indices_dir: Path) -> np.ndarray:
    """Every real example index that the recorded input pipelines fed (padding rows dropped)."""
    files = sorted(indices_dir.glob("*.npy"))
    assert files, f"no recorded indices in {indices_dir}"
    ids = np.concatenate([np.load(f).ravel() for f in files])
    return ids[ids != PAD_INDEX]
