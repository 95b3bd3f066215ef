"""Multi-host `--backend jax`: this process joins the run's other JAX processes
(`jax.distributed`, through `keras.distribution.initialize`) before anything computes on JAX,
so `jax.devices()` lists every host's devices and `JaxTrainer`'s data parallelism spans them.

A process joins when its environment says so, in JAX's own terms:

- `JAX_COORDINATOR_ADDRESS=host:port` (the variable `jax.distributed.initialize` reads), with
  `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (bertfit reads these two: JAX takes them only as
  arguments): a cluster of hosts named by hand, or processes on one machine;
- `BERTFIT_JAX_DISTRIBUTED=auto`: JAX finds the cluster itself (a Cloud TPU pod slice, SLURM,
  Open MPI, Kubernetes), as a bare `jax.distributed.initialize()` does.

Every process follows the same plan of global batches and makes only its share of each one's
rows, which its devices hold (`jax_devices.DeviceSplit`); process 0 alone writes the run
directory (`is_first_process`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from bertfit.errors import ConfigError

COORDINATOR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
AUTO = "BERTFIT_JAX_DISTRIBUTED"


def cluster_arguments(environ: Mapping[str, str]) -> dict | None:
    """`jax.distributed.initialize`'s arguments from the environment; None for a process of
    its own (no variable set), {} for JAX's cluster detection.

    Raises:
        ConfigError: a partial or malformed setting, naming the variable and the fix.
    """
    if environ.get(AUTO):
        if environ[AUTO] != "auto":
            raise ConfigError(f"{AUTO}={environ[AUTO]!r}: the only value is 'auto'")
        return {}
    given = {name: environ.get(name, "") for name in (COORDINATOR, NUM_PROCESSES, PROCESS_ID)}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise ConfigError(
            f"a multi-host --backend jax run needs {', '.join(missing)} too (set: "
            f"{', '.join(n for n, v in given.items() if v)}): e.g. {COORDINATOR}=host0:1234 "
            f"{NUM_PROCESSES}=2 {PROCESS_ID}=0 on the first host, or {AUTO}=auto on a TPU pod"
        )
    numbers = {}
    for name in (NUM_PROCESSES, PROCESS_ID):
        try:
            numbers[name] = int(given[name])
        except ValueError:
            raise ConfigError(f"{name}={given[name]!r}: expected a whole number") from None
    if not 0 <= numbers[PROCESS_ID] < numbers[NUM_PROCESSES]:
        raise ConfigError(
            f"{PROCESS_ID}={numbers[PROCESS_ID]} is not one of the {numbers[NUM_PROCESSES]} "
            f"processes ({NUM_PROCESSES}): give each process its own number from 0"
        )
    return {
        "job_addresses": given[COORDINATOR],
        "num_processes": numbers[NUM_PROCESSES],
        "process_id": numbers[PROCESS_ID],
    }


def join_jax_processes(environ: Mapping[str, str] = os.environ) -> int:
    """Joins the run's other JAX processes when the environment names a cluster (see the module
    docstring); the number of processes. It must run before any JAX computation: JAX refuses
    to join a cluster afterwards.

    Raises:
        ConfigError: a bad setting, or JAX could not join (its first line, and what to check).
    """
    import jax
    import keras

    arguments = cluster_arguments(environ)
    if arguments is None or jax.distributed.is_initialized():
        return jax.process_count()
    try:
        # Keras' initialize is jax.distributed's, then one random seed for every process.
        keras.distribution.initialize(**arguments)
    except (RuntimeError, ValueError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"--backend jax could not join the other JAX processes: {first_line.rstrip('.')}. "
            f"Check that every process has the same {COORDINATOR} and {NUM_PROCESSES}, its "
            f"own {PROCESS_ID}, that process 0 can be reached there, and (from Python) that "
            "nothing ran on JAX before `train`."
        ) from None
    return jax.process_count()


def is_first_process() -> bool:
    """Whether this process writes the run (JAX's process 0; always on one host)."""
    import jax

    return jax.process_index() == 0
