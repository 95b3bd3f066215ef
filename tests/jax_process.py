"""A child process whose Keras runs on JAX, for tests in this process, whose Keras runs on
TensorFlow (Keras picks its backend once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.distributed import cluster

ROOT = Path(__file__).resolve().parents[1]
TWO_DEVICES = "--xla_force_host_platform_device_count=2"


def xla_flags_for_two_devices() -> str:
    """XLA_FLAGS that show a JAX process two CPU devices (data parallelism rehearsed)."""
    return f"{os.environ.get('XLA_FLAGS', '')} {TWO_DEVICES}".strip()


def run_in_jax(module_args: list[str], *, devices: int = 1) -> str:
    """Runs `python -m MODULE ARGS...` with `KERAS_BACKEND=jax` on `devices` CPU devices and
    returns its stdout; a failed process fails the test with the end of its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if devices > 1:
        env["XLA_FLAGS"] = xla_flags_for_two_devices()
    done = subprocess.run(
        [sys.executable, "-m", *map(str, module_args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=cluster.TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
