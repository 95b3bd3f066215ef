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
import time

import numpy as np
import tensorflow as tf

from bertfit.config import RunConfig
from bertfit.errors import ConfigError
from bertfit.model.config import forward_flops_per_token
from bertfit.tf_build import Installed
from bertfit.training.backends import backend_of
from bertfit.training.setup import RunSetup, prepare
from bertfit.training.strategy import host_xla


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
    backend = backend_of(config)
    backend.check(config)
    strategy, xla = backend.placement(config)
    setup = prepare(config, strategy, xla)
    trainer = setup.trainer
    devices = backend.devices(trainer)
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


def _build() -> str:
    info = tf.sysconfig.get_build_info()
    parts = [Installed.here().describe()]
    if info.get("is_cuda_build"):
        parts.append(f"CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}")
    parts.append("XLA for this CPU" if host_xla() else "no XLA for this CPU")
    return "; ".join(parts)
