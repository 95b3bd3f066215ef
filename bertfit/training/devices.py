"""The devices a run's steps run on, as `bertfit doctor` reports them: their names, the peak
FLOP/s they can reach (vendors' data sheets, or measured on a CPU) and their peak memory. One
view per backend (`backends.Backend.devices`): a `tf.distribute` strategy's devices, or the JAX
devices a `--backend jax` run splits its batches over."""

from __future__ import annotations

import os
import resource
import time

import numpy as np
import tensorflow as tf

# Dense peak TFLOP/s per device as TensorFlow lists them (a GPU; a TPU core, or a chip from
# v4 on), for (16-bit, 32-bit) compute: vendors' data sheets. TensorFlow runs float32 products
# as TF32 on Ampere and later GPUs (its default), so their 32-bit figure is TF32's.
PEAK_TFLOPS = {
    "H200": (989.0, 494.0),
    "H100": (989.0, 494.0),
    "A100": (312.0, 156.0),
    "L40S": (362.0, 183.0),
    "L4": (121.0, 60.0),
    "A10": (125.0, 62.5),
    "V100": (125.0, 15.7),
    "T4": (65.0, 8.1),
    "TPU v2": (22.5, 22.5),  # per core; 2 cores a chip
    "TPU v3": (61.5, 61.5),  # per core
    "TPU v4": (275.0, 275.0),
    "TPU v5 lite": (197.0, 197.0),  # v5e
    "TPU v5": (459.0, 459.0),  # v5p
}


class StrategyDevices:
    """The devices of a tf.distribute strategy: names, peak FLOP/s and memory."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync

    def names(self) -> list[str]:
        return [d.name for d in tf.config.list_logical_devices()]

    def strategy_name(self) -> str:
        return _strategy_name(self.strategy)

    def reset_memory(self) -> None:
        _reset_device_memory(self.strategy)

    def peak(self, precision: str, given: float | None) -> tuple[float | None, str]:
        return _peak(self.strategy, precision, given)

    def peak_memory(self) -> tuple[int | None, str]:
        return _peak_memory(self.strategy)


class JaxDevices:
    """The JAX devices a `--backend jax` run splits its batches over, as `StrategyDevices`."""

    def __init__(self, split):
        self.split = split
        self.devices = split.devices
        self.replicas = split.replicas
        self.on_cpu = self.devices[0].platform == "cpu"

    def names(self) -> list[str]:
        return [f"{d.platform}:{d.id} ({d.device_kind})" for d in self.devices]

    def strategy_name(self) -> str:
        return f"{self.split.parallelism()['name']} (keras.distribution)"

    def reset_memory(self) -> None:
        """Nothing: JAX's peak counters cannot be reset (`peak_memory` says so)."""

    def peak(self, precision: str, given: float | None) -> tuple[float | None, str]:
        if given:
            return given * self.replicas, "--peak-tflops per replica"
        if self.on_cpu:
            return cpu_matmul_tflops(), "float32 products measured on this CPU"
        return data_sheet_peak(self.devices[0].device_kind, self.replicas, precision)

    def peak_memory(self) -> tuple[int | None, str]:
        if self.on_cpu:
            return _peak_rss()
        stats = [d.memory_stats() for d in self.devices]
        if any(not s or "peak_bytes_in_use" not in s for s in stats):
            return None, f"{self.devices[0].device_kind} keeps no memory statistics"
        peak = max(s["peak_bytes_in_use"] for s in stats)
        return peak, f"device peak since start (warm-up included), the largest of {len(stats)}"


def _strategy_name(strategy) -> str:
    name = type(strategy).__name__
    return "default (one device)" if name.startswith("_Default") else name


def _accelerators(strategy) -> list[str]:
    """The strategy's GPU or TPU devices (none on a CPU); the default strategy runs on the
    first GPU, if any."""
    try:
        devices = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy
        devices = [d.name for d in tf.config.list_logical_devices("GPU")[:1]]
    return [d for d in devices if tf.DeviceSpec.from_string(d).device_type != "CPU"]


def _peak(strategy, precision: str, given: float | None) -> tuple[float | None, str]:
    """The peak dense TFLOP/s of all replicas together, and where the figure comes from."""
    if given:
        return given * strategy.num_replicas_in_sync, "--peak-tflops per replica"
    accelerators = _accelerators(strategy)
    if not accelerators:
        return cpu_matmul_tflops(), "float32 products measured on this CPU"
    return data_sheet_peak(_device_name(accelerators[0]), len(accelerators), precision)


def data_sheet_peak(name: str, count: int, precision: str) -> tuple[float | None, str]:
    """`count` devices called `name`: their peak dense TFLOP/s from `PEAK_TFLOPS`."""
    sixteen = precision != "fp32"
    for kind, (half, single) in PEAK_TFLOPS.items():
        if kind in name:
            peak = half if sixteen else single
            return peak * count, f"{kind} data sheet, {count} device(s)"
    return None, f"no peak known for {name!r}"


def _device_name(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device)
    if spec.device_type == "GPU":
        gpu = tf.config.list_physical_devices("GPU")[spec.device_index or 0]
        return tf.config.experimental.get_device_details(gpu).get("device_name", "GPU")
    # TPU VMs name their accelerator (v4-8, v5litepod-8, ...) in the environment
    kind = os.environ.get("TPU_ACCELERATOR_TYPE", "").lower()
    for prefix, name in (("v5litepod", "TPU v5 lite"), ("v5p", "TPU v5"), ("v4", "TPU v4")):
        if kind.startswith(prefix):
            return name
    return "TPU v3" if kind.startswith("v3") else "TPU v2" if kind.startswith("v2") else "TPU"


def cpu_matmul_tflops(seconds: float = 1.0) -> float:
    """This CPU's float32 matrix-product speed through TensorFlow's kernels, at the shape of a
    BERT-base feed-forward layer's product over 2048 tokens: the best of the products that fit
    in `seconds`."""
    a = tf.random.uniform((2048, 768))
    b = tf.random.uniform((768, 3072))
    product = tf.function(lambda: tf.matmul(a, b))
    product().numpy()
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        product().numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * 2048 * 768 * 3072 / best / 1e12


def _reset_device_memory(strategy) -> None:
    for device in _accelerators(strategy):
        try:
            tf.config.experimental.reset_memory_stats(_short_name(device))
        except (ValueError, tf.errors.OpError):  # a device without memory statistics
            pass


def _peak_memory(strategy) -> tuple[int | None, str]:
    """The largest peak over the accelerators since the warm-up ended, or the process's peak
    resident memory on a CPU (which includes TensorFlow itself and the data)."""
    accelerators = _accelerators(strategy)
    if not accelerators:
        return _peak_rss()
    peaks = []
    for device in accelerators:
        try:
            peaks.append(tf.config.experimental.get_memory_info(_short_name(device))["peak"])
        except (ValueError, tf.errors.OpError):
            return None, f"{device} keeps no memory statistics"
    return int(np.max(peaks)), f"device peak after warm-up, the largest of {len(peaks)}"


def _peak_rss() -> tuple[int, str]:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss, "peak RSS of this process: the host's memory"


def _short_name(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.device_type}:{spec.device_index or 0}"
