"""Running `bertfit train` in a process of its own and killing it at a chosen moment: the
harness of the kill-and-resume tests (SIGKILL ends it as a crash or an OOM kill would;
tests/training/killed_train.py picks the moment). The runs a test does not kill may train
in the test's process (`train_here`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed import cluster
from tests.tiny import train_args

ROOT = Path(__file__).resolve().parents[2]


def resume_args(model, train, **flags) -> list[str]:
    """`bertfit train` arguments (no subcommand, no --output-dir: each test names its own) of a
    two-epoch run on the tiny model with dropout on (a resumed run must continue its RNG too)
    and a checkpoint every 2 steps; `flags` as in `tests.tiny.train_args`."""
    defaults = dict(
        buckets="8,16",
        epochs=2,
        learning_rate="2e-3",
        dropout="0.2",
        seed=3,
        jit_compile="false",
        save_every_steps=2,
        json=True,
    )
    return train_args(model, train, None, command=None, **{**defaults, **flags})


def start_train(args: list[str], killed_at: tuple[str, int] | None = None) -> subprocess.Popen:
    module = (
        ["tests.training.killed_train", *map(str, killed_at)]
        if killed_at
        else ["bertfit.cli", "train"]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", *module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_train(args: list[str], killed_at: tuple[str, int] | None = None) -> tuple[int, str]:
    process = start_train(args, killed_at)
    _, err = process.communicate(timeout=cluster.TIMEOUT)
    return process.returncode, err


def train_here(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """`bertfit train ARGS` in this process (no TensorFlow to start again: ~10 s less than
    `run_train` on a loaded 2-core CPU), for the runs a test does not kill: the uninterrupted
    reference, and the resumed run. Its exit code and what it wrote to stderr."""
    from bertfit.cli import main

    capsys.readouterr()
    code = main(["train", *args])
    return code, capsys.readouterr().err


def terminate_after_steps(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Sends this process SIGTERM after the n-th host call's step lines are written (as a
    TPU VM or Kubernetes preempts a run): the run in this process saves and stops."""
    from bertfit.training.run_dir import TrainingRunDir

    original, calls = TrainingRunDir.append_steps, []

    def append_steps(self, *args, **kwargs):
        original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(TrainingRunDir, "append_steps", append_steps)


def run_killed(args: list[str], at: tuple[str, int]) -> None:
    code, err = run_train(args, at)
    assert code == -signal.SIGKILL, f"killed at {at}: exit {code}\n{err}"


def steps_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
