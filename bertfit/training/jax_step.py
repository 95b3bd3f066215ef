"""`JaxStep`: the training and prediction steps of `--backend jax` as pure functions of the
weights, with nothing of TensorFlow: the module a TPU VM or a GPU machine without TensorFlow's
wheel runs (`bench/jax_step.py` times it there), and that `JaxTrainer` jits.

Keras' stateless API inside: `model.stateless_call` (forward, loss from `model/losses.py`),
`jax.value_and_grad`, global-norm clipping, `optimizer.stateless_apply` (the run's AdamW and
schedule, `training/optimizer.make_optimizer`). Gradient accumulation is a `jax.lax.scan` over
the micro-batches, summing their gradients (each loss is divided by the real examples of all of
them, as on TensorFlow). The Python body of a step runs only when it traces, and counts the
traces.

A train step takes the state, (trained weights, non-trainable variables, optimizer variables),
and returns its next value; `jax.jit` donates it (`donate_argnums=0`: XLA writes the new values
over the old buffers, which are deleted). The frozen weights (an unused pooler) are a separate
argument, read and never changed, so never donated: the Keras variables keep them as they are.
`_read_state` and `_read_fixed` read both from the Keras variables.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import keras

from bertfit.config import SINGLE_LABEL, TrainConfig
from bertfit.model.inputs import GLOBAL_EXAMPLES, features
from bertfit.model.losses import batch_loss, outputs


def xla_memory(compiled: jax.stages.Compiled) -> int | None:
    """Bytes XLA plans for one call of the compiled step on each device: its arguments,
    outputs and temporaries, less the outputs written over donated arguments; None where
    this JAX backend does not say (`memory_analysis()` is None there)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    return int(
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )


def clip_by_global_norm(gradients: list, clip_norm: float) -> tuple[list, jax.Array]:
    """`tf.clip_by_global_norm`'s rule: every gradient times clip / max(norm, clip); the norm
    before clipping."""
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in gradients))
    scale = clip_norm / jnp.maximum(norm, clip_norm)
    return [(g * scale).astype(g.dtype) for g in gradients], norm


class JaxStep:
    """The step functions over one built Keras model (`jax.jit` them: `JaxTrainer` does).

    Args:
        model: the Keras model, built (every weight exists).
        optimizer: its optimizer, built on `variables` (None for prediction only).
        variables: the trained variables (the model's trainable ones less the frozen).
        config: optimisation settings (`TrainConfig`: `grad_accum`, `clip_norm`).
        task_kind: single-label, multi-label or regression: the loss and the outputs.

    Used as `jax.jit(step._step, donate_argnums=0, compiler_options=compiler_options(devices))`
    (`bertfit.jax_devices`) called on `(step._read_state(), step._read_fixed(), batch)`, `batch`
    a pipeline batch (the model's inputs, `label`, `example_weight`, `global_examples`); see
    `bench/jax_step.py` for one built from a config alone.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer | None,
        variables: list,
        config: TrainConfig,
        task_kind: str = SINGLE_LABEL,
    ):
        self.model = model
        self.optimizer = optimizer
        self.variables = variables
        self.config = config
        self.task_kind = task_kind
        self.batch_loss = functools.partial(batch_loss, task_kind)
        self.micro_batches = max(1, config.grad_accum)
        trained = {id(v) for v in variables}
        self._trained = [id(v) in trained for v in model.trainable_variables]
        self._traces = {"train_step": 0, "predict_step": 0}

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

    def _step(self, state, fixed, batch):
        """One optimizer step: the state (trained, non-trainable and optimizer values), the
        frozen weights and a global batch in; the new state and [loss, gradient norm before
        clipping] out."""
        self._traces["train_step"] += 1
        trained, non_trainable, optimizer_variables = state
        gradients, loss, non_trainable = self._gradients(trained, fixed, non_trainable, batch)
        gradients, norm = clip_by_global_norm(gradients, self.config.clip_norm)
        trained, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, gradients, trained
        )
        result = jnp.stack([loss.astype(jnp.float32), norm])
        return (trained, non_trainable, optimizer_variables), result

    def _probabilities(self, trainable, non_trainable, inputs):
        self._traces["predict_step"] += 1
        logits, _ = self.model.stateless_call(trainable, non_trainable, inputs, training=False)
        return outputs(self.task_kind, logits)

    # ---- the state in the Keras variables ----

    def _read_state(self) -> tuple:
        """(trained weights, non-trainable variables, optimizer variables): what a train step
        takes, donated, and gives back."""
        return (
            self._trainable_values(trained=True),
            [v.value for v in self.model.non_trainable_variables],
            [v.value for v in self.optimizer.variables],
        )

    def _read_fixed(self) -> list:
        """The frozen weights (trainable variables left out of training): what a train step
        reads and never changes, so never donated."""
        return self._trainable_values(trained=False)

    def _trainable_values(self, trained: bool) -> list:
        """The trained (or the frozen) of the model's trainable variables' values, in its
        order."""
        variables = self.model.trainable_variables
        return [v.value for v, t in zip(variables, self._trained, strict=True) if t == trained]
