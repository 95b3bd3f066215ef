"""`bertfit doctor`: the self-test to run first on a new machine, a TPU VM or a GPU box.

It builds the run exactly as `bertfit train` would (`training.setup.prepare`: the strategy, the
data and its buckets, the model, the compiled step) and then, instead of training:
1. lists the TensorFlow build and the devices it sees;
2. compiles every length bucket of the data: one step of each (the warm-up);
3. runs `steps` more steps as the run's plan orders them and measures examples and tokens a
   second, the step time, the model FLOPs utilisation (MFU: the encoder's matrix products
   against the device's peak), the peak memory, and the XLA compilations after the warm-up.

The goal for the last is 0: a compilation after warm-up means a shape the buckets did not fix,
and on a TPU every one stalls the run for seconds to minutes. On a CPU the same test is the
rehearsal (TensorFlow's kernels, no XLA unless `--jit-compile true`), and MFU is taken against
the matrix-product speed measured on this CPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import time

import numpy as np
import tensorflow as tf

from bertfit.config import JAX_BACKEND, RunConfig, per_replica_batch
from bertfit.errors import ConfigError
from bertfit.model.config import forward_flops_per_token
from bertfit.tf_build import Installed
from bertfit.training.setup import RunSetup, prepare
from bertfit.training.strategy import (
    XlaChoice,
    check_backend,
    check_hardware,
    host_xla,
    jax_input_strategy,
    make_strategy,
)

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


@dataclasses.dataclass
class DoctorReport:
    """What `bertfit doctor` measured; `render()` for people, `to_dict()` for JSON."""

    tensorflow: str
    build: str
    devices: list[str]
    strategy: str
    replicas: int
    xla: str
    buckets: list[int]
    warmup_seconds: dict[int, float]
    steps: int
    step_seconds: float
    examples_per_second: float
    tokens_per_second: float
    tflops_per_second: float
    peak_tflops: float | None
    peak_source: str
    peak_memory_bytes: int | None
    memory_source: str
    compilations_at_warmup: int
    compilations_after_warmup: int
    traces_at_warmup: int
    traces_after_warmup: int

    @property
    def mfu(self) -> float | None:
        return self.tflops_per_second / self.peak_tflops if self.peak_tflops else None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "mfu": self.mfu}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def render(self) -> str:
        mfu = f"{self.mfu:.1%}" if self.mfu is not None else "unknown (give --peak-tflops)"
        peak = f"{self.peak_tflops:.3g} TFLOP/s, {self.peak_source}" if self.peak_tflops else ""
        memory = (
            f"{self.peak_memory_bytes / 2**20:,.0f} MiB ({self.memory_source})"
            if self.peak_memory_bytes is not None
            else f"unknown ({self.memory_source})"
        )
        warmup = ", ".join(f"{b}: {s:.1f}s" for b, s in self.warmup_seconds.items())
        after = self.compilations_after_warmup + self.traces_after_warmup
        verdict = (
            "none after warm-up (the goal)"
            if after == 0
            else f"{self.compilations_after_warmup} XLA compilation(s) and "
            f"{self.traces_after_warmup} trace(s) AFTER warm-up: a shape the buckets did not "
            "fix; each one stalls a TPU run"
        )
        return "\n".join(
            [
                f"tensorflow   {self.tensorflow} ({self.build})",
                f"devices      {', '.join(self.devices)}",
                f"strategy     {self.strategy}, {self.replicas} replica(s); {self.xla}",
                f"warm-up      one step per bucket (compiles each): {warmup}",
                f"steps        {self.steps} measured after warm-up",
                f"step time    {self.step_seconds * 1000:.1f} ms",
                f"throughput   {self.examples_per_second:,.1f} examples/s, "
                f"{self.tokens_per_second:,.0f} tokens/s (padded)",
                f"model FLOPs  {self.tflops_per_second:.3g} TFLOP/s; MFU {mfu}"
                + (f" of {peak}" if peak else ""),
                f"peak memory  {memory}",
                f"compilations {self.compilations_at_warmup} XLA, {self.traces_at_warmup} "
                f"trace(s) of the training function at warm-up; {verdict}",
            ]
        )


def doctor(config: RunConfig, steps: int = 20, peak_tflops: float | None = None) -> DoctorReport:
    """Builds `config`'s run as `train` would, compiles every bucket and times `steps` steps.

    Raises:
        ConfigError, InstallError, DataError: what `bertfit train` would refuse.
    """
    if steps < 1:
        raise ConfigError(f"--steps must be 1 or more, got {steps}")
    config.validate()
    t = config.train
    if t.backend == JAX_BACKEND:
        check_backend(config)
        strategy, xla = jax_input_strategy(config)
    else:
        check_hardware(t.strategy, config.model.precision, t.cpu_replicas, t.tpu, t.jit_compile)
        strategy = make_strategy(t.strategy, t.cpu_replicas, t.tpu, t.workers, t.worker_index)
        per_replica_batch(t.batch_size, strategy.num_replicas_in_sync)
        xla = XlaChoice.for_run(t.jit_compile, strategy)
    setup = prepare(config, strategy, xla)
    trainer = setup.trainer
    devices = _JaxDevices(trainer) if t.backend == JAX_BACKEND else _StrategyDevices(strategy)
    timing = _Timing(setup)
    warmup = timing.warm_up()
    at_warmup, traced = trainer.compilations(), trainer.trace_counts()["train_step"]
    devices.reset_memory()
    seconds, tokens, examples, flops = timing.measure(steps)
    peak, source = devices.peak(config.model.precision, peak_tflops)
    memory, memory_source = devices.peak_memory()
    return DoctorReport(
        tensorflow=tf.__version__,
        build=_build(),
        devices=devices.names(),
        strategy=devices.strategy_name(),
        replicas=devices.replicas,
        xla=xla.describe(),
        buckets=sorted(warmup),
        warmup_seconds=warmup,
        steps=steps,
        step_seconds=seconds / steps,
        examples_per_second=examples / seconds,
        tokens_per_second=tokens / seconds,
        tflops_per_second=flops / seconds / 1e12,
        peak_tflops=peak,
        peak_source=source,
        peak_memory_bytes=memory,
        memory_source=memory_source,
        compilations_at_warmup=at_warmup,
        compilations_after_warmup=trainer.compilations() - at_warmup,
        traces_at_warmup=traced,
        traces_after_warmup=trainer.trace_counts()["train_step"] - traced,
    )


class _Timing:
    """Steps of the run's own plan, epoch after epoch, through the run's compiled function;
    it follows which plan steps each call takes, for the tokens they hold."""

    def __init__(self, setup: RunSetup):
        self.setup = setup
        self.epoch = 0
        self._remaining: list = []  # the epoch's plan steps not taken yet
        self._iterators: dict = {}
        self._shared = self._to_longest = False

    def _next_epoch(self) -> None:
        setup = self.setup
        data = setup.batches(setup.train, shuffle=True, epoch=self.epoch, training=True)
        self._iterators = data.iterators()
        # one pipeline in plan order for every bucket (no XLA), or one per bucket
        self._shared = len({id(it) for it in self._iterators.values()}) < len(self._iterators)
        self._to_longest = getattr(data, "pad_to_longest", False)
        self._remaining = list(data.plan)
        self.epoch += 1

    def _call(self, length: int, steps: int) -> float:
        start = time.perf_counter()
        iterator = self._iterators[length]
        np.asarray(self.setup.trainer.train_steps(iterator, tf.constant(steps, tf.int32)))
        return time.perf_counter() - start

    def _take(self, length: int):
        """The plan step a call of bucket `length` takes."""
        if self._shared:
            return self._remaining.pop(0)
        at = next(i for i, step in enumerate(self._remaining) if step.seq_length == length)
        return self._remaining.pop(at)

    def _padded_length(self, step) -> int:
        """The length a step's batch is padded to: its bucket's, or without XLA its longest
        row's (the longest of the global batch: each replica's is at most that)."""
        indices = getattr(step, "indices", None)  # a streamed step has none: its bucket
        if not self._to_longest or indices is None:
            return step.seq_length
        real = indices[indices >= 0]
        lengths = self.setup.train.encoded.packed_lengths
        return min(step.seq_length, int(lengths[real].max())) if len(real) else 1

    def warm_up(self) -> dict[int, float]:
        """One step of each bucket the plan uses, timed (the call that compiles it)."""
        self._next_epoch()
        seconds = {}
        for length in sorted(self._iterators):
            seconds[length] = self._call(length, 1)
            self._take(length)
        return seconds

    def measure(self, steps: int) -> tuple[float, int, int, float]:
        """Seconds, padded tokens, rows (padding rows included) and model FLOPs of `steps`
        steps, taken as `Trainer.run_plan` takes them: runs of one bucket, up to
        steps_per_execution."""
        t, train = self.setup.config.train, self.setup.train
        rows = t.batch_size * t.grad_accum
        seconds, tokens, flops, left = 0.0, 0, 0.0, steps
        while left:
            if not self._remaining:
                self._next_epoch()
            length = self._remaining[0].seq_length
            run = next(
                (i for i, step in enumerate(self._remaining) if step.seq_length != length),
                len(self._remaining),
            )
            take = min(run, left, max(1, t.steps_per_execution))
            seconds += self._call(length, take)
            for _ in range(take):
                # [length], or a windowed document's [K, max_seq_length]
                shape = train.row_shape(self._padded_length(self._take(length)))
                step_tokens = rows * math.prod(shape)
                attended = shape[-1]  # the attention's sequence
                flops += step_tokens * train_flops_per_token(self.setup.checkpoint.config, attended)
                tokens += step_tokens
            left -= take
        return seconds, tokens, steps * rows, flops


def train_flops_per_token(config, seq_length: int) -> float:
    """The encoder's matrix-product FLOPs of one training step per token: three times the
    forward's (the backward pass computes two products per forward product)."""
    return 3 * forward_flops_per_token(
        config.hidden_size, config.intermediate_size, config.num_hidden_layers, seq_length
    )


class _StrategyDevices:
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


class _JaxDevices:
    """The JAX devices a `--backend jax` run splits its batches over, as `_StrategyDevices`."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.devices = trainer.devices
        self.replicas = len(self.devices)
        self.on_cpu = self.devices[0].platform == "cpu"

    def names(self) -> list[str]:
        return [f"{d.platform}:{d.id} ({d.device_kind})" for d in self.devices]

    def strategy_name(self) -> str:
        kind = "DataParallel" if self.trainer.distribution is not None else "OneDevice"
        return f"jax {kind} (keras.distribution)"

    def reset_memory(self) -> None:
        """Nothing: JAX's peak counters cannot be reset (`peak_memory` says so)."""

    def peak(self, precision: str, given: float | None) -> tuple[float | None, str]:
        if given:
            return given * self.replicas, "--peak-tflops per replica"
        if self.on_cpu:
            return cpu_matmul_tflops(), "float32 products measured on this CPU"
        return _data_sheet_peak(self.devices[0].device_kind, self.replicas, precision)

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


def _build() -> str:
    info = tf.sysconfig.get_build_info()
    parts = [Installed.here().describe()]
    if info.get("is_cuda_build"):
        parts.append(f"CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}")
    parts.append("XLA for this CPU" if host_xla() else "no XLA for this CPU")
    return "; ".join(parts)


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
    return _data_sheet_peak(_device_name(accelerators[0]), len(accelerators), precision)


def _data_sheet_peak(name: str, count: int, precision: str) -> tuple[float | None, str]:
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
