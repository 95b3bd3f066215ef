"""`Trainer`: a compiled replica step run by `strategy.run`, the same on TPU, GPU and CPU.

Why not `model.fit`: under MirroredStrategy `fit(jit_compile=True)` fails in TF 2.21, and fit
clips gradients per replica before they are summed. Here the replica step (forward, loss,
gradients) is XLA-compiled; the gradients are then all-reduced, clipped by their global norm,
and applied by an optimizer that was built inside the strategy's scope.

Scale-out levers, all inside compiled code:
- gradient accumulation (`grad_accum` K): the replica step loops over K micro-batches with a
  `tf.while_loop` and sums their gradients; each micro-batch loss is divided by the real
  examples of all K micro-batches, so the sum equals the gradient of the K-times-larger batch.
- steps per execution (N): `train_steps` runs up to N optimizer steps from one bucket's
  distributed iterator in one `tf.function` call and returns every step's loss.
- fp16 loss scaling: Keras' `LossScaleOptimizer` (dynamic scale; it skips non-finite steps and
  halves the scale); the gradients are unscaled before global-norm clipping.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Collection, Iterator

import keras
import numpy as np
import tensorflow as tf

from bertfit.config import TrainConfig
from bertfit.data.pipeline import GLOBAL_EXAMPLES, INDEX, BucketedInput, runs_of, scatter_outputs
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.errors import BertfitError
from bertfit.model.inputs import features
from bertfit.model.losses import batch_loss, outputs
from bertfit.training.fused_adamw import FusedAdamW, clip_and_apply
from bertfit.training.optimizer import make_optimizer, schedule_for
from bertfit.training.xla import XlaChoice


class Trainer:
    """Owns the strategy, the model, the optimizer and the compiled steps.

    Args:
        build_model: makes the Keras model; called inside `strategy.scope()`.
        strategy: any `tf.distribute.Strategy`.
        config: optimisation settings (`TrainConfig`).
        total_steps: optimizer steps in the whole run (for the learning-rate schedule); None
            for a trainer that only predicts, which then builds no optimizer state.
        frozen: names of variables left out of training (e.g. an unused pooler).
        loss_scale: dynamic loss scaling (needed for float16 compute).
        task_kind: single-label, multi-label or regression: the loss and the outputs.
        xla: which parts of the step XLA compiles (`XlaChoice.for_run`, decided with the
            strategy); default: as `config.jit_compile` picks for `strategy`.
    """

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        strategy: tf.distribute.Strategy,
        config: TrainConfig,
        total_steps: int | None,
        frozen: tuple[str, ...] = (),
        loss_scale: bool = False,
        task_kind: str = SINGLE_LABEL,
        xla: XlaChoice | None = None,
    ):
        self.strategy = strategy
        self.config = config
        self.task_kind = task_kind
        # (batch, logits) -> this replica's loss; `bertfit distill` puts its own here before
        # the first step compiles.
        self.batch_loss: Callable[[dict, tf.Tensor], tf.Tensor] = functools.partial(
            batch_loss, task_kind
        )
        self.micro_batches = max(1, config.grad_accum)
        self.frozen = frozen
        with strategy.scope():
            self.model = build_model()
            self.variables = [
                v for v in self.model.trainable_variables if not any(f in v.path for f in frozen)
            ]
            self.optimizer = (
                None if total_steps is None else self._build_optimizer(total_steps, loss_scale)
            )
        self.schedule = None if total_steps is None else schedule_for(config, total_steps)
        self.loss_scale = loss_scale
        fused = (
            self.optimizer is not None and not loss_scale and FusedAdamW.applies_to(self.variables)
        )
        self._fused_update = FusedAdamW(self.optimizer, self.variables) if fused else None
        self.xla = xla or XlaChoice.for_run(config.jit_compile, strategy)
        # No autograph: every loop here is an explicit tf.while_loop, and converting the step's
        # Python cost ~2 s of its first call on a 2-core CPU.
        compiled = functools.partial(tf.function, autograph=False)
        self._replica_gradients = compiled(self.replica_step, jit_compile=self.xla.replica_step)
        self._replica_probabilities = compiled(
            self._probabilities, jit_compile=self.xla.replica_step
        )
        self._clip_and_update = compiled(self._clip_and_update_step, jit_compile=self.xla.update)
        self.train_steps = compiled(self._train_steps)
        self.predict_step = compiled(self._predict_step)
        # wall time of the calls that traced (and compiled), per function
        self.trace_seconds = {"train_step": 0.0, "predict_step": 0.0}

    @property
    def replicas(self) -> int:
        """The replicas each global batch is split over."""
        return self.strategy.num_replicas_in_sync

    def parallelism(self) -> dict:
        """How the run splits its batches: the tf.distribute strategy and its replicas."""
        return {"name": type(self.strategy).__name__, "replicas": self.replicas}

    def _build_optimizer(self, total_steps: int, loss_scale: bool):
        optimizer = make_optimizer(self.config, total_steps)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(self.variables)  # built in scope, before the first step
        return optimizer

    # ---- replica side (compiled) ----

    @property
    def replica_step(self) -> Callable:
        """The replica step the run compiles: one replica's batch in, (gradients, loss) out;
        with `grad_accum` > 1 the loop over its micro-batches. `bertfit check` compiles it too."""
        return self._accumulated_gradients if self.micro_batches > 1 else self._gradients

    def _gradients(self, batch):
        with tf.GradientTape() as tape:
            logits = self.model(features(batch), training=True)
            # Normalised by the real examples of the *global* batch: summing the replicas'
            # losses (and gradients) gives the global mean, padding rows weigh nothing.
            loss = self.batch_loss(batch, logits)
        scaled = self.optimizer.scale_loss(loss) if self.loss_scale else loss
        gradients = tape.gradient(scaled, self.variables)
        missing = [v.path for v, g in zip(self.variables, gradients, strict=True) if g is None]
        if missing:
            raise BertfitError(
                f"{len(missing)} trainable variables get no gradient from the loss: "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}. "
                "Run `bertfit check` to see why (frozen layer, unused pooler, disconnected head)."
            )
        return gradients, loss

    def _accumulated_gradients(self, batch):
        """Sums the gradients of the K micro-batches of this replica's element in a loop.

        The element holds K micro-batches one after another ([K × per-replica rows, ...]);
        `global_examples` counts the real examples of all K, so the sum is the big batch's
        gradient.
        """
        k = self.micro_batches
        micro = {  # [k, rows / k, ...]; the sequence length may be known only at run time
            name: tf.reshape(value, tf.concat([[k, -1], tf.shape(value)[1:]], axis=0))
            for name, value in batch.items()
            if name != GLOBAL_EXAMPLES
        }

        def body(i, sums, loss):
            piece = {name: value[i] for name, value in micro.items()}
            piece[GLOBAL_EXAMPLES] = batch[GLOBAL_EXAMPLES]
            gradients, piece_loss = self._gradients(piece)
            sums = [
                total + tf.convert_to_tensor(g) for total, g in zip(sums, gradients, strict=True)
            ]
            return i + 1, sums, loss + piece_loss

        zeros = [tf.zeros(v.shape, v.dtype) for v in self.variables]
        _, gradients, loss = tf.while_loop(
            lambda i, *_: i < k, body, (tf.constant(0), zeros, tf.constant(0.0))
        )
        return gradients, loss

    def _probabilities(self, batch):
        return outputs(self.task_kind, self.model(features(batch), training=False))

    # ---- cross-replica side ----

    def _apply(self, batch):
        gradients, loss = self._replica_gradients(batch)
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        if replicas > 1:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        # Dense from here on: the embedding gradients arrive as IndexedSlices with one row per
        # token (duplicates), and their layout differs with the replica count.
        gradients = [tf.convert_to_tensor(g) for g in gradients]
        if self.loss_scale:  # clip the true gradient; LossScaleOptimizer unscales again
            scale = tf.cast(self.optimizer.dynamic_scale, tf.float32)
            gradients = [g / scale for g in gradients]
        if not self.loss_scale and replicas == 1:
            return loss, self._clip_and_update(gradients)
        gradients, norm = tf.clip_by_global_norm(gradients, self.config.clip_norm)
        # Keras sums gradients over replicas again inside apply(); hand it 1/replicas of the
        # already-summed gradient so that sum is the clipped global gradient.
        factor = scale / replicas if self.loss_scale else 1.0 / replicas
        gradients = [g * factor for g in gradients]
        self.optimizer.apply(gradients, self.variables)
        return loss, norm

    def _clip_and_update_step(self, gradients):
        """One device: global-norm clipping and the AdamW update, XLA-compiled where
        `XlaChoice` says so. Variables on one device take TensorFlow's fused Adam kernel
        (`FusedAdamW`); mirrored ones (one replica of a distribution strategy) Keras' apply.
        Returns the norm before clipping."""
        return clip_and_apply(
            gradients, self.config.clip_norm, self.optimizer, self.variables, self._fused_update
        )

    def _train_steps(self, iterator, steps):
        """`steps` optimizer steps drawn from one bucket's iterator; every step's global loss
        and global gradient norm (before clipping), as [steps, 2]."""

        def step(i, results):
            loss, norm = self.strategy.run(self._apply, args=(next(iterator),))
            loss = self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
            # Every replica computed the same norm of the all-reduced gradient.
            norm = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
            return i + 1, results.write(i, tf.stack([loss, tf.cast(norm, tf.float32)]))

        start = (tf.constant(0), tf.TensorArray(tf.float32, size=steps))
        _, results = tf.while_loop(lambda i, _: i < steps, step, start)
        return results.stack()

    def _predict_step(self, iterator):
        """The next batch of one bucket's iterator (an iterator, not a batch, so that buckets
        of one element spec share one trace): its probabilities and example indices."""
        batch = next(iterator)
        probabilities, index = self.strategy.run(
            lambda b: (self._replica_probabilities(b), b[INDEX]), args=(batch,)
        )
        return (self.strategy.gather(probabilities, axis=0), self.strategy.gather(index, axis=0))

    # ---- host loops ----

    def run_plan(
        self, data: BucketedInput, ends: Collection[int] = ()
    ) -> Iterator[list[tuple[float, float]]]:
        """Takes the steps of `data.plan` in order: consecutive steps of one bucket run
        together, up to `steps_per_execution` per host call. Yields each call's per-step
        (loss, gradient norm), so the caller can record, checkpoint or stop between calls;
        a call also ends after the steps counted in `ends` (e.g. where the run evaluates)."""
        iterators = data.iterators()
        limit = max(1, self.config.steps_per_execution)
        for seq_length, steps in runs_of(data.plan, limit, ends):
            with self._timing("train_step", self.train_steps):
                results = self.train_steps(iterators[seq_length], tf.constant(steps, tf.int32))
                results = results.numpy()
            yield [(float(loss), float(norm)) for loss, norm in results]

    @contextlib.contextmanager
    def _timing(self, name: str, function):
        """Adds the call's wall time to `trace_seconds[name]` when it traced (and compiled)."""
        traces, start = function.experimental_get_tracing_count(), time.perf_counter()
        yield
        if function.experimental_get_tracing_count() > traces:
            self.trace_seconds[name] += time.perf_counter() - start

    def predict(self, data: BucketedInput, num_examples: int, progress=None) -> np.ndarray:
        """Probabilities for every example, in the original order; padding rows are dropped."""
        iterators = data.iterators()

        def steps():
            for batch in data.plan:
                with self._timing("predict_step", self.predict_step):
                    probabilities, index = self.predict_step(iterators[batch.seq_length])
                    probabilities, index = probabilities.numpy(), index.numpy()
                yield probabilities, index

        return scatter_outputs(steps(), num_examples, progress)

    def compilations(self) -> int:
        """XLA compilations so far: the traces of every function this run XLA-compiles (a
        trace at a new input shape is one compilation). Under a TPU strategy that is the
        whole training function; elsewhere the replica step and the one-device update, as
        `XlaChoice` decided."""
        if isinstance(self.strategy, tf.distribute.TPUStrategy):
            return self.train_steps.experimental_get_tracing_count()
        compiled = (
            (self.xla.replica_step, self._replica_gradients),
            (self.xla.update, self._clip_and_update),
        )
        return sum(f.experimental_get_tracing_count() for on, f in compiled if on)

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced (once per bucket shape is the goal);
        "train_step" counts the training function, whatever the steps per execution."""
        return {
            "train_step": self.train_steps.experimental_get_tracing_count(),
            "predict_step": self.predict_step.experimental_get_tracing_count(),
        }
