"""`--few-shot`: a contrastive first stage for training sets of a few examples per class, as
SetFit trains (issue 63).

On 8 examples per class the ordinary run learns little. SetFit first fine-tunes the encoder
so that rows of one label embed close together and rows of different labels apart, then fits
the head on those embeddings. Here:

- stage 1 (this module): `--few-shot-epochs` passes over the training rows in batches of the
  run's batch size (`data.pairs`), each batch encoded once and every pair of its rows trained
  on: the cosine of the encoder's embeddings (the run's pooling of its tokens) learns how alike
  the two rows are (`model.losses.batch_cosine_loss`), at the run's learning rate with AdamW
  (its own optimizer and warmup-then-decay schedule). Then the head is fitted to the tuned
  embeddings of the training rows, each divided by its length (the classifier's
  `normalize_features`, which such a run sets: the cosine sees only their directions), by
  SetFit's logistic regression (`training.head_fit`);
- stage 2: the ordinary run (epochs, evaluation, best checkpoint, calibration) from the
  fitted head, training the head alone: the encoder stays as stage 1 left it, as SetFit's
  body does while its head is fitted. The run is an ordinary one that evaluate, predict,
  export and serve read.

Stage 1 runs before the run's first step and saves nothing of its own: the first checkpoint,
after it, holds its encoder. A run stopped during stage 1 starts it over when resumed (it is
seeded, so it computes the same); a run resumed from a checkpoint has it done already.
Each backend has its step (`PairStep`: a `tf.function`, or a `jax.jit` function of the
values), on one replica (`check_few_shot`). Measured (docs/training.md#few-shot-training): on
MiniLM-L6 the head fitted to unit embeddings and trained alone scores 2 points above a new head
trained with the encoder at 8 and 16 rows a class (the same at 32 and 64), and fitted to the
embeddings as they are, 1 point at 8 and nothing at 16.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bertfit.config import REGRESSION, RunConfig, TrainConfig
from bertfit.data.host_input import HostInput
from bertfit.data.pairs import pair_weights, row_batches, similarity
from bertfit.data.training_data import LabelledData
from bertfit.errors import ConfigError
from bertfit.model.losses import batch_cosine_loss
from bertfit.training.head_fit import fit_linear_head
from bertfit.training.optimizer import make_optimizer

if TYPE_CHECKING:
    from bertfit.data.tasks import Task
    from bertfit.progress import Console
    from bertfit.training.backends import Backend
    from bertfit.training.interrupt import StopRequests
    from bertfit.training.setup import RunSetup

# `train` suggests --few-shot for a classification set of at most this many rows per class
# (the acceptance's 16; measured at 8-64 a class: docs/training.md#few-shot-training).
FEW_SHOT_ROWS_PER_CLASS = 16
_HEAD_FIT_ROWS = 64  # the rows a forward pass embeds for the head's fit
# Where a step's batches may be of any length, it encodes a batch's rows sorted by length in
# parts of about this many rows, each padded to its own longest row (`FewShotPlan.parts`):
# at 16 rows a batch of Rotten Tomatoes, 3 parts beat 2 and 4 (each part's smaller products
# and the encoder's trace cost more than the slots saved past 3).
ROWS_A_PART = 6
# Stage 2 leaves out of training the variables under this path: the encoder's (Keras names
# the layer after its class, "bert_encoder_1" for a second one in the process).
ENCODER_PATH = "bert_encoder"


@dataclasses.dataclass(frozen=True)
class FewShotPlan:
    """Stage 1 as a run plans it: `batches` [steps, batch_size] of row indices into the
    training rows (`epochs` passes over them), whose `labels` say which rows are alike, every
    row packed to `seq_length` tokens; or, where the rows' packed `lengths` are given, each
    batch encoded in parts of rows of like length (`parts`)."""

    batches: np.ndarray
    labels: np.ndarray
    epochs: int
    seq_length: int
    lengths: np.ndarray | None = None

    @classmethod
    def of(cls, config: RunConfig, train: LabelledData, *, any_length: bool) -> FewShotPlan:
        """`any_length`: the step takes batches of any length, as the run's own step does
        where XLA does not compile it (XLA would compile it again for every length); a batch
        too small to part keeps one shape (a step traced for any length took 0.8 s longer
        at 8 rows a batch)."""
        t = config.train
        rows = len(train.labels)
        batches = row_batches(rows, min(t.batch_size, rows), t.few_shot_epochs, t.seed)
        lengths = train.lengths()
        seq_length = int(min(config.model.max_seq_length, lengths.max()))
        parted = any_length and _part_count(batches.shape[1]) > 1
        lengths = np.minimum(lengths, seq_length) if parted else None
        return cls(batches, train.labels, t.few_shot_epochs, seq_length, lengths)

    @property
    def steps(self) -> int:
        return len(self.batches)

    @property
    def batch_size(self) -> int:
        return self.batches.shape[1]

    @property
    def any_length(self) -> bool:
        """Whether its batches come in parts of several lengths (`parts`)."""
        return self.lengths is not None

    @property
    def pairs_a_batch(self) -> int:
        return self.batch_size * (self.batch_size - 1) // 2

    def batch(self, step: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Step `step`'s rows in the parts it encodes them in (`parts`), how alike each two
        of them are and their pairs' weights (both in the parts' order)."""
        parts = self.parts(self.batches[step])
        rows = np.concatenate(parts)
        alike = similarity(self.labels[rows])
        return parts, alike, pair_weights(rows, alike)

    def parts(self, rows: np.ndarray) -> list[np.ndarray]:
        """`rows` as they are encoded: all at once at `seq_length`, or, with `lengths`,
        sorted by length in parts of about `ROWS_A_PART` rows, each packed to its longest
        row (`length_of`). Every row is encoded alone, so a batch's embeddings are the same
        either way, in another order: 39-47% fewer token slots on Rotten Tomatoes' rows and
        on the debates' (docs/training.md#few-shot-training)."""
        if self.lengths is None:
            return [rows]
        ordered = rows[np.argsort(self.lengths[rows], kind="stable")]
        return np.array_split(ordered, _part_count(len(rows)))

    def length_of(self, rows: np.ndarray) -> int:
        """The length `rows` are packed to together."""
        return self.seq_length if self.lengths is None else int(self.lengths[rows].max())

    def describe(self) -> str:
        return (
            f"few-shot: stage 1 fine-tunes the encoder on every pair of rows within batches of "
            f"{self.batch_size} training rows ({self.pairs_a_batch} pairs a batch), "
            f"{self.epochs} passes over the rows (--few-shot-epochs): {self.steps} steps, "
            f"{self.steps * self.pairs_a_batch} pairs; the head fitted to the rows' unit "
            "embeddings; then stage 2 trains the head alone as below"
        )


def _part_count(rows: int) -> int:
    """The parts a batch of `rows` rows is encoded in where it may be (`FewShotPlan.parts`)."""
    return round(rows / ROWS_A_PART)


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


def stage_1_variables(model) -> list:
    """The encoder's trained variables (LoRA's adapters with `--lora-rank`) that reach its
    embeddings: its pooler's only where the run pools [CLS]."""
    pooler = model.encoder.pooler
    unused = set()
    if model.pooling != "cls" and pooler is not None:
        unused = {id(v) for v in pooler.trainable_variables}
    return [v for v in model.encoder.trainable_variables if id(v) not in unused]


def train_on_pairs(
    setup: RunSetup, plan: FewShotPlan, backend: Backend, console: Console, stop: StopRequests
):
    """Stage 1: `plan.steps` steps of the cosine similarity loss over the encoder's trained
    variables (LoRA's adapters with `--lora-rank`), by the run's `backend` (its `pair_step`).
    Stops early when `stop` has a signal. Returns the stage's record for metrics.json (its losses:
    the mean of the first and of the last tenth of its steps)."""
    trainer, model = setup.trainer, setup.trainer.model
    variables = stage_1_variables(model)
    step = backend.pair_step(trainer, variables, setup.config.train, plan)
    encoded = HostInput(setup.train.encoded, None, [], special_ids=setup.tokenizer.special_ids)
    progress = console.progress("few-shot stage 1", plan.steps)
    started, losses = time.perf_counter(), []
    for n in range(plan.steps):
        parts, alike, weights = plan.batch(n)
        inputs = [encoded.inputs(rows, plan.length_of(rows)) for rows in parts]
        losses.append(step(inputs, alike, weights))
        progress.update(n + 1, (n + 1) * plan.batch_size, loss=float(np.mean(losses)))
        if stop.signal is not None:
            break
    step.finish()
    progress.close()
    head = None if stop.signal is not None else fit_head(setup, encoded, plan)
    tenth = max(1, len(losses) // 10)
    return {
        "pairs": len(losses) * plan.pairs_a_batch,
        "epochs": plan.epochs,
        "batch_size": plan.batch_size,
        "steps": len(losses),
        "seq_length": plan.seq_length,
        "first_loss": float(np.mean(losses[:tenth])) if losses else None,
        "last_loss": float(np.mean(losses[-tenth:])) if losses else None,
        "head": head,
        "seconds": time.perf_counter() - started,
    }


def fit_head(setup: RunSetup, encoded: HostInput, plan: FewShotPlan) -> dict:
    """The classifier's head fitted to the tuned encoder's features of every training row
    (`training.head_fit`, SetFit's logistic regression on its embeddings, the run's class
    weights applied), so that stage 2 starts from it; its record for metrics.json."""
    import keras

    started = time.perf_counter()
    model = setup.trainer.model
    rows = np.arange(len(plan.labels))
    features = np.concatenate(
        [
            keras.ops.convert_to_numpy(
                model.features(encoded.inputs(chunk, plan.seq_length), training=False)
            )
            for chunk in np.array_split(rows, -(-len(rows) // _HEAD_FIT_ROWS))
        ]
    )
    fit = fit_linear_head(features, plan.labels, model.num_classes, setup.train.weights)
    model.head.kernel.assign(fit.kernel)
    model.head.bias.assign(fit.bias)
    return {
        "solver_steps": fit.steps,
        "converged": fit.converged,
        "seconds": time.perf_counter() - started,
    }


def pair_loss(encode, parts: list[dict], alike, weights):
    """Stage 1's loss on a batch encoded in parts (the inputs of `FewShotPlan.batch`'s parts,
    in its order) by `encode` (inputs to the model's features, in training)."""
    import keras

    embeddings = keras.ops.concatenate([encode(p) for p in parts], axis=0)
    return batch_cosine_loss(embeddings, alike, weights)


class PairStep(Protocol):
    """One backend's step of stage 1 over `variables` of the trainer's model, with its own
    AdamW (the run's settings, its schedule over the plan's steps): a batch of rows' inputs
    (one dict for each of its parts), how alike each two rows are and their pairs' weights in
    (`FewShotPlan.batch`), the loss out; `finish` leaves the trained values in the model's
    variables."""

    def __call__(self, parts: list[dict], alike: np.ndarray, weights: np.ndarray) -> float: ...

    def finish(self) -> None: ...


class TensorFlowPairStep:
    """Stage 1's step on TensorFlow: a `tf.function` run by the trainer's strategy (one
    replica), updating the variables in place, by TensorFlow's fused Adam kernel where they are
    on one device (`FusedAdamW`, as the run's own step: Keras' update traces for seconds).
    Where XLA does not compile the run's step, it is traced once for batches of every length
    and its encoder once for all of a batch's parts (each part a trace of the encoder costs
    about a second on 2 cores)."""

    def __init__(self, trainer, variables: list, config: TrainConfig, plan: FewShotPlan):
        from bertfit.training.fused_adamw import FusedAdamW

        with trainer.strategy.scope():
            optimizer = make_optimizer(config, plan.steps)
            optimizer.build(variables)
        fused = FusedAdamW(optimizer, variables) if FusedAdamW.applies_to(variables) else None
        self._trainer, self._variables, self._clip_norm = trainer, variables, config.clip_norm
        self._optimizer, self._fused = optimizer, fused
        self._any_length = plan.any_length
        self._traced = None

    def __call__(self, parts, alike, weights) -> float:
        if self._traced is None:
            self._traced = self._trace(parts, alike, weights)
        return float(self._traced(parts, alike, weights))

    def _trace(self, parts, alike, weights):
        """The step as a `tf.function`, for arguments shaped as these (the first batch's)."""
        import tensorflow as tf

        from bertfit.training.fused_adamw import clip_and_apply

        model, variables = self._trainer.model, self._variables

        def encode(inputs):
            return model.features(inputs, True)

        shapes = None
        if self._any_length:
            shapes = _any_shape([parts, alike, weights])
            encode = tf.function(encode, input_signature=[shapes[0][0]], autograph=False)

        def replica_step(parts, alike, weights):
            with tf.GradientTape() as tape:
                loss = pair_loss(encode, parts, alike, weights)
            gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
            clip_and_apply(gradients, self._clip_norm, self._optimizer, variables, self._fused)
            return loss

        def step(parts, alike, weights):
            return self._trainer.strategy.run(replica_step, args=(parts, alike, weights))

        return tf.function(step, input_signature=shapes, autograph=False)

    def finish(self) -> None:
        pass


def _any_shape(arrays):
    """An `input_signature` for arrays' structure, every dimension of any size."""
    import tensorflow as tf

    def spec(array):
        return tf.TensorSpec([None] * len(array.shape), tf.as_dtype(array.dtype))

    return tf.nest.map_structure(spec, arrays)


class JaxPairStep:
    """Stage 1's step on JAX: one `jax.jit` function of the values (Keras' `StatelessScope`
    maps the model's variables to them, as `stateless_call` does), on one device, for a plan
    of one shape (XLA compiles the run's step); `finish` writes the values back into the
    variables, where the run's `JaxTrainer` reads them."""

    def __init__(self, trainer, variables: list, config: TrainConfig, plan: FewShotPlan):
        import jax
        import keras

        from bertfit.training.jax_step import clip_by_global_norm

        model, clip_norm = trainer.model, config.clip_norm
        optimizer = make_optimizer(config, plan.steps)
        optimizer.build(variables)
        trained = {id(v) for v in variables}
        others = [v for v in model.variables if id(v) not in trained]  # the head, seeds, ...

        def encode(inputs):
            return model.features(inputs, True)

        def loss_of(values, other_values, parts, alike, weights):
            mapping = [
                *zip(variables, values, strict=True),
                *zip(others, other_values, strict=True),
            ]
            with keras.StatelessScope(state_mapping=mapping) as scope:
                loss = pair_loss(encode, parts, alike, weights)
            changed = [scope.get_current_value(v) for v in others]  # dropout's seeds
            other_values = [
                old if new is None else new for old, new in zip(other_values, changed, strict=True)
            ]
            return loss, other_values

        def step(state, parts, alike, weights):
            values, other_values, slots = state
            (loss, other_values), gradients = jax.value_and_grad(loss_of, has_aux=True)(
                values, other_values, parts, alike, weights
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

    def __call__(self, parts, alike, weights) -> float:
        self._state, loss = self._step(self._state, parts, alike, weights)
        return float(loss)

    def finish(self) -> None:
        values, other_values, _ = self._state
        for variable, value in zip(
            [*self._variables, *self._others], [*values, *other_values], strict=True
        ):
            variable.assign(value)
