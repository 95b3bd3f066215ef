"""`JaxTrainer`: the training step on Keras' JAX backend (`--backend jax`), for the TPUs and GPUs
that run JAX. It has `Trainer`'s contract with the run (`run_plan`, `predict`, `trace_counts`,
`compilations`, `trace_seconds`, `model`, `optimizer`, `schedule`), so `EpochRunner`, the
checkpoints and the run directory are the same code on both backends.

The step is one `jax.jit`-ted pure function over the weights, Keras' stateless API inside:
`model.stateless_call` (forward, loss from `model/losses.py`), `jax.value_and_grad`, global-norm
clipping, `optimizer.stateless_apply` (the run's AdamW and schedule, `make_optimizer`). Gradient
accumulation is a `jax.lax.scan` over the micro-batches, summing their gradients (each loss is
divided by the real examples of all of them, as on TensorFlow). jit compiles once per bucket
shape; the Python body of the step runs only when it traces, and counts the traces.

Data parallelism: with several JAX devices (of this host, or of every host once
`jax_processes` joined them) the model and optimizer are built in a
`keras.distribution.DataParallel` scope (their variables replicated on every device) and each
global batch is put on the devices split along its rows; XLA's SPMD partitioner all-reduces the
gradients. The input pipeline is TensorFlow's, unchanged: tf.data under the default strategy
yields whole global batches at the bucket lengths, read here as numpy arrays.

Between host calls the weights, the optimizer's state and the dropout seeds are written back
into the Keras variables (a reference swap on JAX, no copy), so a checkpoint saved between
calls (`RunCheckpoints`, through its TensorFlow mirror) holds them, and a restored checkpoint is
what the next call starts from.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Collection, Iterator

import jax
import jax.numpy as jnp
import keras
import numpy as np
import tensorflow as tf

from bertfit.config import TrainConfig
from bertfit.data.pipeline import GLOBAL_EXAMPLES, INDEX, BucketedInput, runs_of
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.model.losses import batch_loss, outputs
from bertfit.training.loop import features, scatter_outputs
from bertfit.training.optimizer import make_optimizer, schedule_for


def clip_by_global_norm(gradients: list, clip_norm: float) -> tuple[list, jax.Array]:
    """`tf.clip_by_global_norm`'s rule: every gradient times clip / max(norm, clip); the norm
    before clipping."""
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in gradients))
    scale = clip_norm / jnp.maximum(norm, clip_norm)
    return [(g * scale).astype(g.dtype) for g in gradients], norm


class JaxTrainer:
    """Owns the model, the optimizer and the jitted steps on the JAX backend.

    Args:
        build_model: makes the Keras model (in the data-parallel scope with several devices).
        config: optimisation settings (`TrainConfig`).
        total_steps: optimizer steps in the whole run (the learning-rate schedule); None for
            a trainer that only predicts.
        frozen: names of variables left out of training (e.g. an unused pooler).
        task_kind: single-label, multi-label or regression: the loss and the outputs.
        devices: the JAX devices the batch is split over (default: every device, those of
            every host in a multi-host run).
    """

    def __init__(
        self,
        build_model: Callable[[], keras.Model],
        config: TrainConfig,
        total_steps: int | None,
        frozen: tuple[str, ...] = (),
        task_kind: str = SINGLE_LABEL,
        devices: list | None = None,
    ):
        # The input pipeline's: whole global batches, one "replica" (see the module docstring).
        self.strategy = tf.distribute.get_strategy()
        self.config = config
        self.task_kind = task_kind
        self.batch_loss = functools.partial(batch_loss, task_kind)
        self.micro_batches = max(1, config.grad_accum)
        self.devices = list(jax.devices() if devices is None else devices)
        self.distribution = (
            keras.distribution.DataParallel(devices=self.devices) if len(self.devices) > 1 else None
        )
        # a batch's arrays split along their rows over the devices; a scalar on every one
        mesh = jax.sharding.Mesh(np.asarray(self.devices), ("batch",))
        self._shardings = tuple(
            jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*axes))
            for axes in (("batch",), ())
        )
        with self._scope():
            self.model = build_model()
            # Every weight exists (the checkpoint's, the head built with it); stateless_call
            # wants that said, where TensorFlow's first call says it itself.
            self.model.built = True
            self.variables = [
                v for v in self.model.trainable_variables if not any(f in v.path for f in frozen)
            ]
            self.optimizer = None
            if total_steps is not None:
                self.optimizer = make_optimizer(config, total_steps)
                self.optimizer.build(self.variables)
        self.schedule = None if total_steps is None else schedule_for(config, total_steps)
        trained = {id(v) for v in self.variables}
        self._trained = [id(v) in trained for v in self.model.trainable_variables]
        self._traces = {"train_step": 0, "predict_step": 0}
        # wall time of the calls that traced (and compiled), per function
        self.trace_seconds = {"train_step": 0.0, "predict_step": 0.0}
        # The state is donated: XLA updates the weights and the optimizer's slots in place,
        # not beside a second copy (the Keras variables get the new arrays back after the call).
        self._train_step = jax.jit(self._step, donate_argnums=0)
        # gathered on every device: each process reads all rows back (several hosts)
        gathered = self._shardings[1] if self.distribution else None
        self._predict_step = jax.jit(self._probabilities, out_shardings=gathered)

    @property
    def replicas(self) -> int:
        """The devices each global batch is split over."""
        return len(self.devices)

    def _scope(self):
        return self.distribution.scope() if self.distribution else contextlib.nullcontext()

    # ---- the jitted functions (their Python runs when they trace) ----

    def _weights(self, trained: list, fixed: list) -> list:
        """The model's trainable variables' values in its order, from the trained and the
        frozen ones."""
        trained, fixed = iter(trained), iter(fixed)
        return [next(trained) if t else next(fixed) for t in self._trained]

    def _loss(self, trained, fixed, non_trainable, batch):
        logits, non_trainable = self.model.stateless_call(
            self._weights(trained, fixed), non_trainable, features(batch), training=True
        )
        return self.batch_loss(batch, logits), non_trainable

    def _gradients(self, trained, fixed, non_trainable, batch):
        """(gradients, loss, non-trainable state) of one batch, or with `grad_accum` K the sum
        over its K micro-batches (rows [K × micro-batch, ...], micro-batch after micro-batch)."""
        gradient_of = jax.value_and_grad(self._loss, has_aux=True)
        if self.micro_batches == 1:
            (loss, non_trainable), gradients = gradient_of(trained, fixed, non_trainable, batch)
            return gradients, loss, non_trainable
        k = self.micro_batches
        micro = {
            name: value.reshape(k, -1, *value.shape[1:])
            for name, value in batch.items()
            if name != GLOBAL_EXAMPLES
        }

        def accumulate(carry, piece):
            sums, loss, non_trainable = carry
            piece = {**piece, GLOBAL_EXAMPLES: batch[GLOBAL_EXAMPLES]}
            (piece_loss, non_trainable), gradients = gradient_of(
                trained, fixed, non_trainable, piece
            )
            sums = [total + g for total, g in zip(sums, gradients, strict=True)]
            return (sums, loss + piece_loss, non_trainable), None

        start = ([jnp.zeros_like(w) for w in trained], jnp.float32(0.0), non_trainable)
        (gradients, loss, non_trainable), _ = jax.lax.scan(accumulate, start, micro)
        return gradients, loss, non_trainable

    def _step(self, state, batch):
        """One optimizer step: state (trained, frozen, non-trainable, optimizer values) and a
        global batch in; the new state and [loss, gradient norm before clipping] out."""
        self._traces["train_step"] += 1
        trained, fixed, non_trainable, optimizer_variables = state
        gradients, loss, non_trainable = self._gradients(trained, fixed, non_trainable, batch)
        gradients, norm = clip_by_global_norm(gradients, self.config.clip_norm)
        trained, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, gradients, trained
        )
        result = jnp.stack([loss.astype(jnp.float32), norm])
        return (trained, fixed, non_trainable, optimizer_variables), result

    def _probabilities(self, trainable, non_trainable, inputs):
        self._traces["predict_step"] += 1
        logits, _ = self.model.stateless_call(trainable, non_trainable, inputs, training=False)
        return outputs(self.task_kind, logits)

    # ---- the state in the Keras variables ----

    def _read_state(self) -> tuple:
        trainable = [v.value for v in self.model.trainable_variables]
        return (
            [w for w, t in zip(trainable, self._trained, strict=True) if t],
            [w for w, t in zip(trainable, self._trained, strict=True) if not t],
            [v.value for v in self.model.non_trainable_variables],
            [v.value for v in self.optimizer.variables],
        )

    def _write_state(self, state: tuple) -> None:
        trained, _, non_trainable, optimizer_variables = state
        pairs = (
            (self.variables, trained),
            (self.model.non_trainable_variables, non_trainable),
            (self.optimizer.variables, optimizer_variables),
        )
        for variables, values in pairs:
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)

    def _on_devices(self, batch: dict) -> dict:
        """A pipeline batch as arrays on the devices: split along the rows over several (a
        scalar such as `global_examples` replicated)."""
        arrays = {name: np.asarray(value) for name, value in batch.items()}
        if self.distribution is None:
            return arrays
        rows, whole = self._shardings
        # Every process reads the same global batches; device_put gives each of its devices
        # their rows (in a multi-host run it takes a global value that is the same on every
        # process, and puts only this process's shards).
        return {
            name: jax.device_put(value, rows if value.ndim else whole)
            for name, value in arrays.items()
        }

    def gradients(self, batch: dict) -> list[np.ndarray]:
        """The gradients of one global batch's loss (a pipeline batch less the example index)
        for the trained variables, in `variables`' order, as the train step takes them
        before clipping; nothing is updated (`bertfit check`)."""
        trained, fixed, non_trainable, _ = self._read_state()
        gradients, _, _ = self._gradients(trained, fixed, non_trainable, self._on_devices(batch))
        return [np.asarray(g) for g in gradients]

    def compile_train_step(self, batch: dict):
        """The train step compiled ahead of time for one global batch's shapes, as the run's
        first step on that bucket compiles it, and nothing run (`bertfit check`): `batch` maps
        the pipeline's names (less the example index) to `jax.ShapeDtypeStruct`s. Returns
        `jax.stages.Compiled` (its `memory_analysis()` is XLA's plan for the step)."""
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
            self._read_state(),
        )
        if self.distribution is not None:  # the batch split along its rows, as `_on_devices`
            rows, whole = self._shardings
            batch = {
                name: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rows if s.shape else whole)
                for name, s in batch.items()
            }
        return self._train_step.lower(state, batch).compile()

    # ---- host loops ----

    def run_plan(
        self, data: BucketedInput, ends: Collection[int] = ()
    ) -> Iterator[list[tuple[float, float]]]:
        """Takes the steps of `data.plan` in order, as `Trainer.run_plan`: consecutive steps
        of one bucket, up to `steps_per_execution`, between two yields of their (loss,
        gradient norm); the Keras variables hold the state at every yield."""
        iterators = data.iterators()
        limit = max(1, self.config.steps_per_execution)
        for seq_length, steps in runs_of(data.plan, limit, ends):
            with self._timing("train_step"):
                results = self.train_steps(iterators[seq_length], steps)
            yield [(float(loss), float(norm)) for loss, norm in results]

    def train_steps(self, iterator, steps) -> np.ndarray:
        """`steps` optimizer steps drawn from one bucket's iterator (as `Trainer.train_steps`;
        `bertfit doctor` times it): every step's loss and gradient norm, as [steps, 2]. The
        Keras variables hold the state before and after."""
        state, results = self._read_state(), []
        for _ in range(int(steps)):
            batch = next(iterator)
            batch = self._on_devices({k: v for k, v in batch.items() if k != INDEX})
            state, result = self._train_step(state, batch)
            results.append(result)
        results = np.asarray(jax.device_get(results))
        self._write_state(state)
        return results

    @contextlib.contextmanager
    def _timing(self, name: str):
        """Adds the call's wall time to `trace_seconds[name]` when it traced (and compiled)."""
        traces, start = self._traces[name], time.perf_counter()
        yield
        if self._traces[name] > traces:
            self.trace_seconds[name] += time.perf_counter() - start

    def predict(self, data: BucketedInput, num_examples: int, progress=None) -> np.ndarray:
        """Probabilities for every example, in the original order; padding rows are dropped."""
        trainable = [v.value for v in self.model.trainable_variables]
        non_trainable = [v.value for v in self.model.non_trainable_variables]
        iterators = data.iterators()

        def steps():
            for batch in data.plan:
                element = next(iterators[batch.seq_length])
                with self._timing("predict_step"):
                    inputs = self._on_devices(features(element))
                    probabilities = self._predict_step(trainable, non_trainable, inputs)
                    probabilities = np.asarray(probabilities)
                yield probabilities, np.asarray(element[INDEX])

        return scatter_outputs(steps(), num_examples, progress)

    def compilations(self) -> int:
        """XLA compilations so far: every trace of a jitted step (one per bucket shape)."""
        return sum(self._traces.values())

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced (once per bucket shape is the goal)."""
        return dict(self._traces)
