"""What XLA compiles of a training step (`XlaChoice`), decided once with the run's placement
(`training/backends.py`); the JAX backend's is always the whole step (`JAX_XLA`). Nothing of
TensorFlow is imported until a TensorFlow run asks which devices it has.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bertfit.data.buckets import JAX_TRACE_TOKENS, TRACE_TOKENS, UNTRACED

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class XlaChoice:
    """Which parts of a training step XLA compiles, and why (printed by `bertfit train`)."""

    replica_step: bool  # forward, loss and gradients (and the predict step)
    update: bool  # global-norm clipping + the AdamW update (one device only)
    reason: str
    jax: bool = False  # jax.jit compiles the step, not TensorFlow

    @property
    def trace_tokens(self) -> int:
        """What one more length bucket costs this compiler, in token slots of step time: the
        weight `data/buckets.py` gives a bucket's trace and compile when it chooses them."""
        if not self.replica_step:
            return UNTRACED  # one trace serves every bucket
        return JAX_TRACE_TOKENS if self.jax else TRACE_TOKENS

    @classmethod
    def for_run(cls, jit_compile: bool | None, strategy: tf.distribute.Strategy) -> XlaChoice:
        """`jit_compile` True/False: as asked. None (auto): everything on a GPU or TPU; on a
        CPU nothing: XLA's forward/backward is no faster than TensorFlow's oneDNN kernels
        there and costs about twice the trace time for every length bucket, and the one-device
        update is TensorFlow's fused Adam kernel (`FusedAdamW`), as fast as XLA's compiled
        update without its compilation (on 2 cores: first step 7.8 s instead of 15.3 s with
        Keras' update under XLA, peak memory 300 MiB lower, the same step time)."""
        import tensorflow as tf

        # Keras' apply() merges across replicas, which cannot be inside XLA.
        one_device = strategy.num_replicas_in_sync == 1
        if jit_compile is not None:
            return cls(jit_compile, jit_compile and one_device, f"--jit-compile {jit_compile}")
        try:
            devices = strategy.extended.worker_devices
        except RuntimeError:  # the default strategy: TensorFlow places ops on its best device
            devices = [d.name for d in tf.config.list_logical_devices()]
        kinds = {tf.DeviceSpec.from_string(d).device_type for d in devices}
        if kinds - {"CPU"}:
            return cls(True, one_device, f"auto: {'/'.join(sorted(kinds))}")
        return cls(False, False, "auto: CPU")

    @classmethod
    def for_target(
        cls, target: str, jit_compile: bool | None, strategy: tf.distribute.Strategy
    ) -> XlaChoice:
        """What `bertfit check --target` judges: a TPU or GPU run compiles its replica step
        with XLA (one trace per bucket shape); a CPU target as `for_run` decides here."""
        if target == "cpu":
            return cls.for_run(jit_compile, strategy)
        return cls(True, False, f"--target {target}")

    def describe(self) -> str:
        parts = [
            name
            for name, on in (("forward/backward", self.replica_step), ("update", self.update))
            if on
        ]
        return f"XLA for {' and '.join(parts) if parts else 'nothing'} ({self.reason})"


# `--backend jax`: jax.jit compiles the whole step, on every target
JAX_XLA = XlaChoice(True, True, "--backend jax: jax.jit compiles the whole step", jax=True)
