"""Run `bertfit train` in subprocesses (a failed collective poisons its process) and read back
the per-step losses, the final weights and the example indices each input pipeline fed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from bertfit.data.pipeline import PAD_INDEX
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


def train_args(model: Path, train: str, output: Path, *extra: str, batch_size: int = 8) -> list:
    return [
        "--model",
        str(model),
        "--train",
        train,
        "--output-dir",
        str(output),
        "--max-seq-length",
        "16",
        "--buckets",
        "none",
        "--batch-size",
        str(batch_size),
        "--epochs",
        "1",
        "--learning-rate",
        "1e-3",
        "--dropout",
        "0",
        "--seed",
        "0",
        "--quiet",
        "--json",
        *extra,
    ]


def _env() -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    env.pop("TF_CONFIG", None)
    return env


def start(args: list, indices_dir: Path | None = None) -> subprocess.Popen:
    """`bertfit train ARGS`; with `indices_dir`, it records there the example indices its input
    pipelines feed (`tests/distributed/record_indices.py`)."""
    command = [sys.executable, "-m", "bertfit.cli"]
    if indices_dir is not None:
        indices_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tests.distributed.record_indices", str(indices_dir)]
    return subprocess.Popen(
        [*command, "train", *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> dict:
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"bertfit train timed out after {TIMEOUT}s:\n{err[-3000:]}") from None
    assert process.returncode == 0, f"exit {process.returncode}:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def train(args: list, indices_dir: Path | None = None) -> dict:
    return finish(start(args, indices_dir))


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def step_losses(run: Path) -> np.ndarray:
    lines = (run / "steps.jsonl").read_text().splitlines()
    return np.array([json.loads(line)["loss"] for line in lines])


def final_weights(run: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(run / "checkpoints" / "latest"))
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if name.startswith("model.")
    }


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
