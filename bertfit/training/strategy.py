"""Pick and configure a `tf.distribute` strategy."""

from __future__ import annotations

import functools
import json
import os

import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.tf_build import Installed, InstallError, install_commands, tpu_attached


def configure_cpu_replicas(count: int | None) -> None:
    """Splits the CPU into `count` logical devices; must run before TensorFlow touches a device."""
    if not count or count <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing and len(existing) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError as e:
        raise ConfigError(
            f"--cpu-replicas {count} must be set before TensorFlow initialises its devices; "
            "pass it on the command line, or call bertfit.training.strategy.configure_cpu_replicas "
            "first thing in your program."
        ) from e


def check_hardware(
    strategy: str,
    precision: str,
    cpu_replicas: int | None,
    tpu: str | None = None,
    jit_compile: bool | None = None,
) -> None:
    """Refuses, before anything is loaded or written, what this machine or this TensorFlow
    build cannot run: a local TPU without TensorFlow's TPU build, float16 without a GPU (its
    loss scaling and kernels are GPU-only), mirroring with one device, XLA on a CPU with a
    build that has no XLA backend for it (the TPU build).

    Raises:
        InstallError: the installed TensorFlow cannot reach the accelerator; what to install.
        ConfigError: the setting, why, and what to use instead.
    """
    gpus = tf.config.list_physical_devices("GPU")
    local_tpu = strategy == "tpu" and (tpu or "local") == "local"
    installed = Installed.here()
    if local_tpu and not installed.tpu_build:
        raise InstallError(
            f"--strategy tpu needs TensorFlow's TPU build, and this one is "
            f"{installed.describe()}. On a TPU VM, in a new venv: {install_commands('tpu')} "
            "(README, Install)."
        )
    on_tpu = strategy == "tpu" or bool(tpu) or (strategy == "auto" and tpu_attached())
    if precision == "mixed_fp16" and (on_tpu or not gpus):
        where = "a TPU" if on_tpu else f"this machine, which has no GPU{_no_gpu_why()}"
        raise ConfigError(
            f"--precision mixed_fp16 needs a GPU (float16 with loss scaling); it cannot train "
            f"on {where}. Use --precision mixed_bf16 or fp32."
        )
    if strategy == "mirrored" and not gpus and (cpu_replicas or 1) < 2:
        raise ConfigError(
            f"--strategy mirrored copies the model onto several devices, and this machine has "
            f"one CPU and no GPU{_no_gpu_why()}. Leave --strategy out (auto), or add "
            "--cpu-replicas 2 (or more) to rehearse data parallelism on the CPU."
        )
    if jit_compile and not gpus and not on_tpu and not host_xla():
        raise ConfigError(
            f"--jit-compile true on this CPU: this TensorFlow ({installed.describe()}) "
            "has no XLA backend for the CPU. Leave --jit-compile out (CPU training uses no "
            f"XLA), or rehearse XLA in a separate venv with {install_commands('cpu')}."
        )


def _no_gpu_why() -> str:
    """Why no GPU shows, where the build says: a TensorFlow built without CUDA."""
    if tf.test.is_built_with_cuda():
        return (
            " that this TensorFlow can see (check nvidia-smi; CUDA's libraries come with "
            f"{install_commands('gpu')})"
        )
    return f" (and this TensorFlow has no CUDA; for a GPU: {install_commands('gpu')})"


# What TensorFlow's TPU build says when asked to compile for the CPU: it has no XLA backend
# for it (its XLA is the TPU's).
NO_HOST_XLA = "could not find registered transfer manager for platform Host"


@functools.cache
def host_xla() -> bool:
    """Whether XLA can compile for this machine's CPU (not with the TPU build of TensorFlow).
    Compiles a one-op function; the first compilation of a process pays XLA's start-up."""
    function = tf.function(lambda x: x + 1, jit_compile=True)
    try:
        function.experimental_get_compiler_ir(tf.TensorSpec([1], tf.float32))(stage="hlo")
    except ValueError as e:
        if NO_HOST_XLA in str(e):
            return False
        raise
    return True


def _tpu_resolver(tpu: str | None):
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        resolver.cluster_spec()
        return resolver
    except Exception:  # resolvers raise URLError, ValueError, RuntimeError, ...
        return None


def tf_config(workers: list[str], index: int) -> dict:
    """The TF_CONFIG of worker `index` in a cluster of `workers` (worker 0 is the chief)."""
    return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}


def _cluster_in_env() -> bool:
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from e
    return bool(config.get("cluster"))


def make_strategy(
    name: str = "auto",
    cpu_replicas: int | None = None,
    tpu: str | None = None,
    workers: list[str] | None = None,
    worker_index: int | None = None,
) -> tf.distribute.Strategy:
    """The strategy `name` asks for; "auto" prefers a TPU, then a multi-worker cluster (from
    `workers` or TF_CONFIG), then several GPUs, then the default.

    With `cpu_replicas` > 1 and no GPUs, "auto" and "mirrored" mirror over logical CPU devices.
    `workers` and `worker_index` write TF_CONFIG for MultiWorkerMirroredStrategy.
    """
    if workers:
        os.environ["TF_CONFIG"] = json.dumps(tf_config(workers, worker_index or 0))
        if name == "auto":
            name = "multi-worker"
    if name == "auto" and not tpu and _cluster_in_env():
        name = "multi-worker"
    if name == "multi-worker":  # before anything lists devices: collectives configure at start
        if not _cluster_in_env():
            raise ConfigError(
                "--strategy multi-worker needs TF_CONFIG (or --workers and --worker-index): "
                'e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}\''
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    configure_cpu_replicas(cpu_replicas)
    gpus = tf.config.list_logical_devices("GPU")
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if name == "tpu" or (name == "auto" and tpu):
        return _connect_tpu(tpu)
    if name == "auto":
        if tpu_attached():
            return _connect_tpu(tpu)
        if len(gpus) > 1 or (not gpus and len(cpus) > 1):
            name = "mirrored"
        else:
            name = "default"
    if name == "mirrored":
        devices = [d.name for d in gpus] or cpus
        return tf.distribute.MirroredStrategy(devices)
    if name == "one-device":
        device = gpus[0] if gpus else tf.config.list_logical_devices("CPU")[0]
        return tf.distribute.OneDeviceStrategy(device.name)
    if name == "default":
        return tf.distribute.get_strategy()
    raise ConfigError(f"unknown strategy {name!r}")


def _connect_tpu(tpu: str | None) -> tf.distribute.TPUStrategy:
    resolver = _tpu_resolver(tpu)
    if resolver is None:
        raise ConfigError(
            f"No TPU found (--tpu {tpu or 'local'}). On a TPU VM use --tpu local; otherwise pass "
            "the TPU name, and check that this machine can reach it."
        )
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except tf.errors.OpError as e:  # e.g. NotFoundError: no TPU kernels on this machine
        first_line = (e.message or str(e)).strip().splitlines()[0].split(". ")[0]
        raise ConfigError(
            f"No TPU could be initialised (--tpu {tpu or 'local'}): {first_line}. Run on a TPU "
            "VM (with --tpu local) or pass a reachable TPU's name; on a machine without one use "
            "--strategy auto."
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run: always, except on a MultiWorkerMirroredStrategy
    worker that is not the chief (task "chief", or worker 0 in a cluster without one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )
