"""Which JAX processes a `--backend jax` run joins, read from the environment
(`training/jax_processes.py`), and how two of them share each global batch's rows;
tests/training/test_jax_backend.py trains with two of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from bertfit.errors import ConfigError
from bertfit.jax_devices import process_share
from bertfit.training.jax_processes import cluster_arguments
from tests.jax_process import run_in_jax_processes
from tests.tiny import sentiment_rows, write_vocab

ROOT = Path(__file__).resolve().parents[2]


def test_no_cluster_variables_is_a_process_of_its_own():
    assert cluster_arguments({}) is None


def test_the_three_jax_variables_name_the_cluster():
    environ = {
        "JAX_COORDINATOR_ADDRESS": "host0:1234",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
    }
    assert cluster_arguments(environ) == {
        "job_addresses": "host0:1234",
        "num_processes": 4,
        "process_id": 3,
    }


def test_auto_leaves_the_cluster_to_jax_detection():
    assert cluster_arguments({"BERTFIT_JAX_DISTRIBUTED": "auto"}) == {}
    with pytest.raises(ConfigError, match="BERTFIT_JAX_DISTRIBUTED='yes'.*'auto'"):
        cluster_arguments({"BERTFIT_JAX_DISTRIBUTED": "yes"})


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"JAX_COORDINATOR_ADDRESS": "h:1"}, "needs JAX_NUM_PROCESSES, JAX_PROCESS_ID too"),
        ({"JAX_PROCESS_ID": "0", "JAX_NUM_PROCESSES": "2"}, "needs JAX_COORDINATOR_ADDRESS"),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"},
            "JAX_NUM_PROCESSES='two': expected a whole number",
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"},
            "JAX_PROCESS_ID=2 is not one of the 2 processes",
        ),
    ],
)
def test_a_partial_or_malformed_cluster_is_refused_naming_the_variable(environ, message):
    with pytest.raises(ConfigError, match=message):
        cluster_arguments(environ)


# JAX computes first, then the process is asked to join a cluster
JOIN_TOO_LATE = """
import jax.numpy as jnp
from bertfit.errors import ConfigError
from bertfit.jax_devices import process_share
from bertfit.training.jax_processes import join_jax_processes
jnp.zeros(1).block_until_ready()
address = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1"}
try:
    join_jax_processes({**address, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"})
except ConfigError as e:
    print(e)
"""


@pytest.mark.slow
def test_joining_after_jax_computed_is_refused_with_jax_reason():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    done = subprocess.run(
        [sys.executable, "-c", JOIN_TOO_LATE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    message = done.stdout.strip().splitlines()[-1]
    assert message.startswith("--backend jax could not join the other JAX processes: ")
    assert "must be called before any JAX" in message
    assert "nothing ran on JAX before `train`" in message


@pytest.mark.slow  # two JAX processes, no model: 35-40 s on 2 cores at load 7 (mostly imports)
def test_each_of_two_jax_processes_makes_its_half_and_they_assemble_the_global_batch(tmp_path):
    """Two processes of one CPU device each (`jax.distributed` on localhost): each makes only
    its half of every global batch's rows, the first half process 0's, and
    `jax.make_array_from_process_local_data` joins the halves into the one-process batch."""
    write_vocab(tmp_path)
    rows = sentiment_rows(37, seed=3)  # every bucket's last batch has padding rows
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    outputs = run_in_jax_processes(["tests.training.jax_hosts", tmp_path])
    reports = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    assert [r["share"] for r in reports] == [[0, 2], [1, 2]]
    assert all(r["steps"] > 1 and r["own_rows"] and r["assembled"] for r in reports), reports


def _devices(*processes: int) -> list:
    return [types.SimpleNamespace(process_index=p) for p in processes]


def test_a_process_shares_each_batch_equally_with_processes_of_as_many_devices():
    assert process_share(_devices(0, 0, 1, 1)) == (0, 2)  # this process is JAX's process 0
    assert process_share(_devices(0)) == (0, 1)
    with pytest.raises(
        ConfigError, match=r"different numbers of devices \(process 0: 2, process 1: 1\)"
    ):
        process_share(_devices(0, 0, 1))
