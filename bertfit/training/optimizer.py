"""AdamW with linear warmup then linear decay, as BERT fine-tuning uses it.

Backend-neutral (Keras and `keras.ops` only), so the JAX step imports it where TensorFlow
cannot be imported; TensorFlow's fused Adam kernel is `training/fused_adamw.py`'s.
"""

from __future__ import annotations

import keras
from keras import ops

from bertfit.config import TrainConfig

NO_DECAY = ["bias", "gamma", "beta"]  # biases and LayerNorm parameters


@keras.saving.register_keras_serializable("bertfit")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """0 → `peak` linearly over `warmup_steps`, then linearly to 0 at `total_steps`."""

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        # keras.ops: the optimizer evaluates it inside the compiled step of either backend
        step = ops.cast(step, "float32")
        warmup = self.peak * step / max(1, self.warmup_steps)
        remaining = ops.maximum(0.0, self.total_steps - step)
        decay = self.peak * remaining / max(1, self.total_steps - self.warmup_steps)
        return ops.where(step < self.warmup_steps, warmup, decay)

    def at(self, step: int) -> float:
        """The rate at optimizer iteration `step` (0-based), in Python."""
        if step < self.warmup_steps:
            return self.peak * step / max(1, self.warmup_steps)
        remaining = max(0, self.total_steps - step)
        return self.peak * remaining / max(1, self.total_steps - self.warmup_steps)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


def schedule_for(config: TrainConfig, total_steps: int) -> WarmupLinearDecay:
    return WarmupLinearDecay(
        config.learning_rate, int(round(config.warmup_ratio * total_steps)), total_steps
    )


def make_optimizer(config: TrainConfig, total_steps: int) -> keras.optimizers.AdamW:
    """AdamW without weight decay on LayerNorm and biases; clipping is done by the train step
    on the all-reduced gradient, so it is global over replicas."""
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule_for(config, total_steps),
        weight_decay=config.weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
    )
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    return optimizer
