"""`--few-shot`: a contrastive first stage for training sets of a few examples per class, as
SetFit trains (issue 63).

On 8 examples per class the ordinary run learns little. SetFit first fine-tunes the encoder
so that rows of one label embed close together and rows of different labels apart, then fits
the head on those embeddings. Here:

- stage 1 (this module): pairs of training rows (`data.pairs`: each row with `--few-shot-pairs`
  rows like it and as many unlike it) train the encoder's embedding (the run's pooling of its
  tokens) with the cosine similarity loss (`model.losses.cosine_similarity_loss`), one pass
  over the pairs at the run's batch size (pairs a step), learning rate and AdamW (its own
  optimizer and warmup-then-decay schedule); the head is untouched;
- stage 2: the ordinary run (epochs, evaluation, best checkpoint, calibration) from the tuned
  encoder, so the run is an ordinary one that evaluate, predict, export and serve read.

Stage 1 runs before the run's first step and saves nothing of its own: the first checkpoint,
after it, holds its encoder. A run stopped during stage 1 starts it over when resumed (it is
seeded, so it computes the same); a run resumed from a checkpoint has it done already.
Each backend has its step (`PairStep`: a `tf.function`, or a `jax.jit` function of the
values), on one replica (`check_few_shot`). Measured so far
(docs/training.md#few-shot-training): stage 2 keeps what stage 1 gives (as SetFit's logistic
head on the same embeddings), and on MiniLM-L6 stage 1 gains a few points.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bertfit.config import REGRESSION, RunConfig, TrainConfig
from bertfit.data.host_input import HostInput
from bertfit.data.pairs import SentencePairs, sentence_pairs
from bertfit.data.training_data import LabelledData
from bertfit.errors import ConfigError
from bertfit.model.inputs import MASK, normalize_inputs
from bertfit.model.losses import cosine_similarity_loss
from bertfit.training.optimizer import make_optimizer

if TYPE_CHECKING:
    from bertfit.data.tasks import Task
    from bertfit.progress import Console
    from bertfit.training.backends import Backend
    from bertfit.training.interrupt import StopRequests
    from bertfit.training.setup import RunSetup

# `train` suggests --few-shot for a classification set of at most this many rows per class
# (the acceptance's 16; measured at 8 a class: docs/training.md#few-shot-training).
FEW_SHOT_ROWS_PER_CLASS = 16


@dataclasses.dataclass(frozen=True)
class FewShotPlan:
    """Stage 1 as a run plans it: its pairs, `batch_size` pairs a step for `steps` steps, every
    row packed to `seq_length` tokens."""

    pairs: SentencePairs
    pairs_per_row: int
    batch_size: int
    steps: int
    seq_length: int

    @classmethod
    def of(cls, config: RunConfig, train: LabelledData) -> FewShotPlan:
        pairs = sentence_pairs(train.labels, config.train.few_shot_pairs, config.train.seed)
        batch_size = min(config.train.batch_size, len(pairs))
        seq_length = int(min(config.model.max_seq_length, train.lengths().max()))
        steps = len(pairs) // batch_size
        return cls(pairs, config.train.few_shot_pairs, batch_size, steps, seq_length)

    def describe(self) -> str:
        return (
            f"few-shot: stage 1 fine-tunes the encoder on {len(self.pairs)} pairs of training "
            f"rows ({self.pairs_per_row} of its label and {self.pairs_per_row} of another "
            f"for each row; --few-shot-pairs) in {self.steps} steps of {self.batch_size} pairs, "
            "then stage 2 trains the classifier as below"
        )


def check_few_shot(config: RunConfig, task: Task, train, replicas: int) -> None:
    """Refuses `--few-shot` where stage 1 cannot run, before anything is written: a regression
    (no classes to pair), training rows not held in memory (a prepared set), or a batch split
    over several replicas."""
    if task.kind == REGRESSION:
        raise ConfigError(
            "--few-shot pairs rows by their labels; a regression has none: leave --few-shot out."
        )
    if not isinstance(train, LabelledData):
        raise ConfigError(
            f"--few-shot makes its pairs from training rows in memory; {config.data.train} is a "
            "prepared set (`bertfit prepare`), which is streamed: pass the text file instead."
        )
    if replicas > 1:
        raise ConfigError(
            f"--few-shot trains its first stage on one device; this run splits its batches "
            f"over {replicas}: leave --cpu-replicas out or pass --strategy one-device (with "
            "--backend jax, show it one device)."
        )


def few_shot_suggestion(task: Task, rows: int) -> str | None:
    """A note for a classification set small enough that --few-shot may help, else None."""
    classes = len(task.labels)
    if task.kind == REGRESSION or not classes or rows > FEW_SHOT_ROWS_PER_CLASS * classes:
        return None
    return (
        f"{rows} training rows for {classes} labels (at most {FEW_SHOT_ROWS_PER_CLASS} a "
        "label): --few-shot may score better on a set this small "
        "(docs/training.md#few-shot-training)"
    )


def embed(model, inputs, training: bool):
    """The classifier's pooled features of `inputs`, before dropout and the head."""
    inputs = normalize_inputs(inputs)
    outputs = model.encoder(inputs, training=training, pooled_only=model.pooling == "cls")
    return model.pool(outputs, inputs[MASK])


def train_on_pairs(
    setup: RunSetup, plan: FewShotPlan, backend: Backend, console: Console, stop: StopRequests
):
    """Stage 1: `plan.steps` steps of the cosine similarity loss over the encoder's trained
    variables (LoRA's adapters with `--lora-rank`), by the run's `backend` (its `pair_step`).
    Stops early when `stop` has a signal. Returns the stage's record for metrics.json (its losses:
    the mean of the first and of the last tenth of its steps)."""
    trainer, model = setup.trainer, setup.trainer.model
    encoder = {id(v) for v in model.encoder.trainable_variables}
    variables = [v for v in trainer.variables if id(v) in encoder]
    step = backend.pair_step(trainer, variables, setup.config.train, plan.steps)
    rows = HostInput(setup.train.encoded, None, [], special_ids=setup.tokenizer.special_ids)
    pairs, size = plan.pairs, plan.batch_size
    progress = console.progress("few-shot stage 1", plan.steps)
    started, losses = time.perf_counter(), []
    for n in range(plan.steps):
        batch = slice(n * size, (n + 1) * size)
        left = rows.inputs(pairs.left[batch], plan.seq_length)
        right = rows.inputs(pairs.right[batch], plan.seq_length)
        losses.append(step(left, right, pairs.targets[batch]))
        progress.update(n + 1, (n + 1) * size, loss=float(np.mean(losses)))
        if stop.signal is not None:
            break
    step.finish()
    progress.close()
    tenth = max(1, len(losses) // 10)
    return {
        "pairs": len(pairs),
        "pairs_per_row": plan.pairs_per_row,
        "batch_size": size,
        "steps": len(losses),
        "seq_length": plan.seq_length,
        "first_loss": float(np.mean(losses[:tenth])) if losses else None,
        "last_loss": float(np.mean(losses[-tenth:])) if losses else None,
        "seconds": time.perf_counter() - started,
    }


class PairStep(Protocol):
    """One backend's step of stage 1 over `variables` of the trainer's model, with its own
    AdamW (the run's settings, its schedule over the stage's `steps`): a batch of pairs in,
    their loss out; `finish` leaves the trained values in the model's variables."""

    def __call__(self, left: dict, right: dict, targets: np.ndarray) -> float: ...

    def finish(self) -> None: ...


class TensorFlowPairStep:
    """Stage 1's step on TensorFlow: a `tf.function` run by the trainer's strategy (one
    replica), updating the variables in place."""

    def __init__(self, trainer, variables: list, config: TrainConfig, steps: int):
        import tensorflow as tf

        model, clip_norm = trainer.model, config.clip_norm
        with trainer.strategy.scope():
            optimizer = make_optimizer(config, steps)
            optimizer.build(variables)

        def replica_step(left, right, targets):
            with tf.GradientTape() as tape:
                loss = cosine_similarity_loss(
                    embed(model, left, True), embed(model, right, True), targets
                )
            gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
            gradients, _ = tf.clip_by_global_norm(gradients, clip_norm)
            optimizer.apply(gradients, variables)
            return loss

        self._step = tf.function(lambda *args: trainer.strategy.run(replica_step, args=args))

    def __call__(self, left, right, targets) -> float:
        return float(self._step(left, right, targets))

    def finish(self) -> None:
        pass


class JaxPairStep:
    """Stage 1's step on JAX: one `jax.jit` function of the values (Keras' `StatelessScope`
    maps the model's variables to them, as `stateless_call` does), on one device; `finish`
    writes the values back into the variables, where the run's `JaxTrainer` reads them."""

    def __init__(self, trainer, variables: list, config: TrainConfig, steps: int):
        import jax
        import keras

        from bertfit.training.jax_step import clip_by_global_norm

        model, clip_norm = trainer.model, config.clip_norm
        optimizer = make_optimizer(config, steps)
        optimizer.build(variables)
        trained = {id(v) for v in variables}
        others = [v for v in model.variables if id(v) not in trained]  # the head, seeds, ...

        def loss_of(values, other_values, left, right, targets):
            mapping = [
                *zip(variables, values, strict=True),
                *zip(others, other_values, strict=True),
            ]
            with keras.StatelessScope(state_mapping=mapping) as scope:
                loss = cosine_similarity_loss(
                    embed(model, left, True), embed(model, right, True), targets
                )
            changed = [scope.get_current_value(v) for v in others]  # dropout's seeds
            other_values = [
                old if new is None else new for old, new in zip(other_values, changed, strict=True)
            ]
            return loss, other_values

        def step(state, left, right, targets):
            values, other_values, slots = state
            (loss, other_values), gradients = jax.value_and_grad(loss_of, has_aux=True)(
                values, other_values, left, right, targets
            )
            gradients, _ = clip_by_global_norm(gradients, clip_norm)
            values, slots = optimizer.stateless_apply(slots, gradients, values)
            return (values, other_values, slots), loss

        self._variables, self._others = variables, others
        self._step = jax.jit(step, donate_argnums=0)
        self._state = (
            [v.value for v in variables],
            [v.value for v in others],
            [v.value for v in optimizer.variables],
        )

    def __call__(self, left, right, targets) -> float:
        self._state, loss = self._step(self._state, left, right, targets)
        return float(loss)

    def finish(self) -> None:
        values, other_values, _ = self._state
        for variable, value in zip(
            [*self._variables, *self._others], [*values, *other_values], strict=True
        ):
            variable.assign(value)
