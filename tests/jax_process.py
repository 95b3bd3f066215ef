"""A child process whose Keras runs on JAX, for tests in this process, whose Keras runs on
TensorFlow (Keras picks its backend once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

from tests.distributed import cluster

ROOT = Path(__file__).resolve().parents[1]
TWO_DEVICES = "--xla_force_host_platform_device_count=2"


def xla_flags_for_two_devices() -> str:
    """XLA_FLAGS that show a JAX process two CPU devices (data parallelism rehearsed)."""
    return f"{os.environ.get('XLA_FLAGS', '')} {TWO_DEVICES}".strip()


def _jax_env(devices: int = 1) -> dict:
    """The environment of a JAX process on `devices` CPU devices (one: XLA_FLAGS as given)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if devices > 1:
        env["XLA_FLAGS"] = xla_flags_for_two_devices()
    return env


def run_in_jax(module_args: list[str], *, devices: int = 1) -> str:
    """Runs `python -m MODULE ARGS...` with `KERAS_BACKEND=jax` on `devices` CPU devices and
    returns its stdout; a failed process fails the test with the end of its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", *map(str, module_args)],
        cwd=ROOT,
        env=_jax_env(devices),
        capture_output=True,
        text=True,
        timeout=cluster.TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def run_in_jax_processes(module_args: list[str], processes: int = 2) -> list[str]:
    """Runs `python -m MODULE ARGS...` as `processes` JAX processes of one CPU device each,
    joined on localhost (`training/jax_processes`: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
    JAX_PROCESS_ID), and returns each one's stdout, in process order."""
    with cluster.reserved_ports(1) as (port,):
        started = []
        for index in range(processes):
            env = _jax_env() | {
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                "JAX_NUM_PROCESSES": str(processes),
                "JAX_PROCESS_ID": str(index),
            }
            command = [sys.executable, "-m", *map(str, module_args)]
            started.append(
                subprocess.Popen(command, cwd=ROOT, env=env, stdout=PIPE, stderr=PIPE, text=True)
            )
        return [_output(process) for process in started]


def _output(process: subprocess.Popen) -> str:
    """A started process's stdout; one that fails or times out fails the test."""
    try:
        out, err = process.communicate(timeout=cluster.TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    assert process.returncode == 0, err[-3000:]
    return out
