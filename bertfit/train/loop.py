"""`Trainer`: a compiled replica step run by `strategy.run`, the same on TPU, GPU and CPU.

Why not `model.fit`: under MirroredStrategy `fit(jit_compile=True)` fails in TF 2.21, and fit
clips gradients per replica before they are summed. Here the replica step (forward, loss,
gradients) is XLA-compiled; the gradients are then all-reduced, clipped by their global norm,
and applied by an optimizer that was built inside the strategy's scope.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from bertfit.config import TrainConfig
from bertfit.data.pipeline import INDEX, LABEL, WEIGHT, BucketedInput
from bertfit.errors import BertfitError
from bertfit.model.inputs import INPUT_NAMES
from bertfit.train.optimizer import make_optimizer


def _scale(gradient, factor: float):
    if isinstance(gradient, tf.IndexedSlices):  # embedding gradients stay sparse
        return tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return gradient * factor


def features(batch: dict) -> dict:
    return {name: batch[name] for name in INPUT_NAMES}


@dataclasses.dataclass
class EpochStats:
    loss: float
    num_examples: int
    steps: int
    seconds: float
    step_losses: list[float] = dataclasses.field(default_factory=list)

    @property
    def examples_per_second(self) -> float:
        return self.num_examples / max(self.seconds, 1e-9)


class Trainer:
    """Owns the strategy, the model, the optimizer and the compiled steps.

    Args:
        build_model: makes the Keras model; called inside `strategy.scope()`.
        strategy: any `tf.distribute.Strategy`.
        config: optimisation settings (`TrainConfig`).
        total_steps: optimizer steps in the whole run (for the learning-rate schedule).
        frozen: names of variables left out of training (e.g. an unused pooler).
    """

    def __init__(self, build_model: Callable[[], keras.Model], strategy: tf.distribute.Strategy,
                 config: TrainConfig, total_steps: int, frozen: tuple[str, ...] = ()):
        self.strategy = strategy
        self.config = config
        with strategy.scope():
            self.model = build_model()
            self.variables = [v for v in self.model.trainable_variables
                              if not any(f in v.path for f in frozen)]
            self.optimizer = make_optimizer(config, total_steps)
            self.optimizer.build(self.variables)  # built in scope, before the first step
        self._replica_gradients = tf.function(self._gradients, jit_compile=config.jit_compile)
        self._replica_probabilities = tf.function(self._probabilities,
                                                  jit_compile=config.jit_compile)
        self.train_step = tf.function(self._train_step)
        self.predict_step = tf.function(self._predict_step)

    # ---- replica side (compiled) ----

    def _gradients(self, batch):
        with tf.GradientTape() as tape:
            logits = self.model(features(batch), training=True)
            losses = keras.losses.sparse_categorical_crossentropy(
                batch[LABEL], logits, from_logits=True)
            # Normalised by the real examples of the *global* batch: summing the replicas'
            # losses (and gradients) gives the global mean, padding rows weigh nothing.
            loss = tf.reduce_sum(losses * batch[WEIGHT]) / batch["global_examples"]
        gradients = tape.gradient(loss, self.variables)
        missing = [v.path for v, g in zip(self.variables, gradients, strict=True) if g is None]
        if missing:
            raise BertfitError(
                f"{len(missing)} trainable variables get no gradient from the loss: "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. "
                "Run `bertfit check` to see why (frozen layer, unused pooler, disconnected head).")
        return gradients, loss

    def _probabilities(self, batch):
        return tf.nn.softmax(self.model(features(batch), training=False), axis=-1)

    # ---- cross-replica side ----

    def _apply(self, batch):
        gradients, loss = self._replica_gradients(batch)
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        if replicas > 1:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        gradients, norm = tf.clip_by_global_norm(gradients, self.config.clip_norm)
        # Keras sums gradients over replicas again inside apply(); hand it 1/replicas of the
        # already-summed gradient so that sum is the clipped global gradient.
        if replicas > 1:
            gradients = [_scale(g, 1.0 / replicas) for g in gradients]
        self.optimizer.apply(gradients, self.variables)
        return loss, norm

    def _train_step(self, batch):
        loss, norm = self.strategy.run(self._apply, args=(batch,))
        return (self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                self.strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None))

    def _predict_step(self, batch):
        probabilities, index = self.strategy.run(
            lambda b: (self._replica_probabilities(b), b[INDEX]), args=(batch,))
        return (self.strategy.gather(probabilities, axis=0),
                self.strategy.gather(index, axis=0))

    # ---- host loops ----

    def train_epoch(self, data: BucketedInput, progress=None) -> EpochStats:
        start, total_loss, seen, losses = time.perf_counter(), 0.0, 0, []
        for step, (batch_plan, (_, batch)) in enumerate(zip(data.plan, data, strict=True)):
            loss, _ = self.train_step(batch)
            losses.append(float(loss))
            total_loss += losses[-1] * batch_plan.num_examples
            seen += batch_plan.num_examples
            if progress is not None:
                progress.update(step + 1, seen, loss=total_loss / seen)
        seconds = time.perf_counter() - start
        return EpochStats(total_loss / max(seen, 1), seen, len(data), seconds, losses)

    def predict(self, data: BucketedInput, num_examples: int, progress=None) -> np.ndarray:
        """Probabilities for every example, in the original order; padding rows are dropped."""
        out = None
        seen = 0
        for step, (_, batch) in enumerate(data):
            probabilities, index = self.predict_step(batch)
            probabilities, index = probabilities.numpy(), index.numpy()
            if out is None:
                out = np.full((num_examples, probabilities.shape[1]), np.nan, np.float32)
            real = index >= 0
            out[index[real]] = probabilities[real]
            seen += int(real.sum())
            if progress is not None:
                progress.update(step + 1, seen)
        if out is None or np.isnan(out).any():
            raise BertfitError("internal error: some examples got no prediction")
        return out

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced (once per bucket shape is the goal)."""
        return {"train_step": self.train_step.experimental_get_tracing_count(),
                "predict_step": self.predict_step.experimental_get_tracing_count()}
