"""What a run decides and builds before its first step, written once for `train` and `check`:
`prepare(config, strategy, xla) -> RunSetup` loads the checkpoint and its tokenizer, reads the
training data once as the kind it is (`read_training`: rows tokenized in memory, documents in
windows, or a prepared set streamed; see `bertfit.data.training_data`) with its task, then
`assemble` resolves the length buckets and the pooling (the only place they are decided) and
builds the classifier at the run's precision and the `Trainer` whose `replica_step` the run
compiles.
Everything after the pick calls through the `TrainingData` shape, whatever the kind.

`bertfit check` reads and samples the data its own way (every problem is a finding, not an
error) and then calls the same `assemble`, so it compiles exactly what `bertfit train` will
(the accumulated step under `--grad-accum`, the encoder's dtype policy from `--precision`,
never a global Keras policy). `evaluate`/`predict` on a trained run are in `bertfit.inference`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import keras
import numpy as np

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
from bertfit.checkpoints.pooling import DeclaredPooling, decide_pooling, declared_pooling
from bertfit.checkpoints.registry import resolve
from bertfit.config import (
    TASK_METRICS,
    RunConfig,
    check_positions,
    encoder_policy,
)
from bertfit.data.labelled import (
    class_weights,
    encode_labelled,
    infer_run_task,
    read_labelled,
    window_spec,
)
from bertfit.data.packed import PackedShape
from bertfit.data.pipeline import Batch
from bertfit.data.profile import LengthProfile
from bertfit.data.run_files import read_training_examples
from bertfit.data.tasks import MULTI_LABEL, Task
from bertfit.data.tfrecord import is_prepared
from bertfit.data.training_data import Batching, LabelledData, TrainingData
from bertfit.data.windowed import WindowProfile
from bertfit.errors import ConfigError
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier, prior_log_odds
from bertfit.model.encoder import check_packs
from bertfit.model.int8 import INT8, quantize_base
from bertfit.model.lora import adapted_layers, enable_lora
from bertfit.runs.metrics import default_metric
from bertfit.text.lengths import WindowSpec
from bertfit.training.backends import RunTrainer, backend_of
from bertfit.training.few_shot import (
    ENCODER_PATH,
    FewShotPlan,
    check_few_shot,
    few_shot_suggestion,
)
from bertfit.training.schedule import decide_schedule
from bertfit.training.xla import XlaChoice

if TYPE_CHECKING:
    import tensorflow as tf

    from bertfit.data.streaming import StreamStep
    from bertfit.text.base import InGraphTokenizer
    from bertfit.text.host import HostTokenizer

# ---- the checkpoint ----


def load_checkpoint(config: RunConfig) -> Checkpoint:
    """The checkpoint `--model` names; its position table must hold `--max-seq-length`, and
    with `--packing` its layers must keep packed examples apart."""
    checkpoint = read_checkpoint(resolve(config.model.name))
    if checkpoint.config is not None:
        check_positions(
            config.model.max_seq_length,
            checkpoint.config.max_sequence_length,
            config.model.name,
        )
        if config.data.packing:
            check_packs(checkpoint.config, config.model.name)
    return checkpoint


def run_tokenizer(checkpoint: Checkpoint, config: RunConfig):
    """The checkpoint's tokenizer, with `--lower-case` when given, as the run's backend
    tokenizes: in the graph (`InGraphTokenizer`), or on the host (`HostTokenizer`)."""
    return backend_of(config).tokenizer(checkpoint, config)


def shard_tokenizer(checkpoint: Checkpoint, config: RunConfig):
    """The tokenizer TFRecord shards are written and checked with (`bertfit prepare`,
    `--streaming`): the in-graph one, whatever the backend, since tf.data reads them."""
    return build_tokenizer(checkpoint, lower_case=config.model.lower_case)


# ---- everything before the first step ----


@dataclasses.dataclass
class RunSetup:
    """What a run decides and builds before its first step; `train` and `check` make it with
    the same functions, so `check` compiles exactly what `train` will.

    Args:
        config: the run's config, its `data.buckets` the resolved list, its `model.pooling`
            the pooling decided (`--pooling`, or what the checkpoint declares), its
            `train.batch_size` and `train.epochs` decided (given, or `training.schedule`'s).
        checkpoint, tokenizer: the checkpoint read and its tokenizer (the backend's:
            in-graph, or on the host).
        task: the task of the training rows; best_metric: `--best-metric` or its default.
        train, eval: the training data, of any kind (`TrainingData`), and the eval rows
            tokenized in memory (None without `--eval`).
        buckets: the resolved length buckets (the last is max_seq_length; with
            `--long-documents chunk` it is the only one, and documents are batched in
            chunk-count buckets).
        packing: with `--packing` the packed batches' one shape (training and evaluation
            then use it; the buckets serve prediction and exports), else None.
        xla: what XLA compiles (decided with the strategy).
        trainer: the model, optimizer and compiled steps, built by the run's backend
            (`training/backends.py`).
        notes: what the user should read before training (pooling declared by the
            checkpoint, a small set's schedule, task inferred, buckets chosen).
        rows_read: training rows in the files, before `--max-train-examples`.
        schedule: the note that says the batch size and epochs chosen for a small training
            set (`training.schedule`), None where the flags or the defaults set them.
        declared_pooling: the pooling the checkpoint declares (a sentence-transformers
            model's), None when it declares none.
        few_shot: with `--few-shot` its first stage's plan (`training.few_shot`), else None.
        training_labels: the training rows' targets as read (None when streamed), which the
            collapse warning counts: `train(adapt=...)` may change `train.labels` (`bertfit
            distill` trains on the teacher's soft labels), never these.
        seconds: time spent loading, tokenizing and building.
    """

    config: RunConfig
    checkpoint: Checkpoint
    tokenizer: InGraphTokenizer | HostTokenizer
    task: Task
    best_metric: str
    train: TrainingData
    eval: LabelledData | None
    buckets: tuple[int, ...]
    xla: XlaChoice
    trainer: RunTrainer
    notes: list[str]
    rows_read: int
    packing: PackedShape | None = None
    schedule: str | None = None
    declared_pooling: DeclaredPooling | None = None
    few_shot: FewShotPlan | None = None
    training_labels: np.ndarray | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def batching(
        self, *, training: bool, batch_size: int | None = None, static_shapes: bool = False
    ) -> Batching:
        """The run's batching for training or evaluation. Batches are padded to their longest
        row when the replica step is not XLA-compiled (and `static_shapes` does not ask for
        the bucket lengths), else to their bucket's length."""
        return Batching.of(
            self.config,
            self.buckets,
            training=training,
            pipelines=backend_of(self.config).input_pipelines(self.trainer.strategy),
            batch_size=batch_size,
            pad_to_longest=not (self.xla.replica_step or static_shapes),
            packing=self.packing,
        )

    def length_profile(self) -> LengthProfile:
        """The training lengths against the buckets (report, TensorBoard)."""
        return self.train.profile(self.batching(training=True))

    def window_profile(self) -> WindowProfile | None:
        """The training documents' lengths against the window (`chunk` only)."""
        return self.train.window_profile()

    def plan(
        self,
        data: TrainingData,
        *,
        shuffle: bool,
        epoch: int = 0,
        training: bool = False,
        batch_size: int | None = None,
    ) -> list[Batch] | list[StreamStep]:
        """The batch plan of `data`. Training plans hold grad_accum micro-batches per step,
        in runs of steps_per_execution. `batch_size` (default `--batch-size`, the global batch)
        is one replica's batch when `check` plans what a single replica is fed."""
        batching = self.batching(training=training, batch_size=batch_size)
        return data.plan(batching, shuffle=shuffle, epoch=epoch)

    def batches(
        self,
        data: TrainingData,
        *,
        shuffle: bool,
        epoch: int = 0,
        training: bool = False,
        start: int = 0,
        batch_size: int | None = None,
        static_shapes: bool = False,
    ):
        """The input of the plan's steps from `start` on (a resumed epoch skips the steps
        taken), under the trainer's strategy (tf.data), or with none (JAX) NumPy batches made
        on the host; see `batching` for the padding."""
        batching = self.batching(
            training=training, batch_size=batch_size, static_shapes=static_shapes
        )
        return data.input(
            batching,
            self.trainer.strategy,
            special_ids=self.tokenizer.special_ids,
            shuffle=shuffle,
            epoch=epoch,
            start=start,
        )


def prepare(
    config: RunConfig,
    strategy: tf.distribute.Strategy | None,
    xla: XlaChoice,
    *,
    saved_buckets: tuple[int, ...] | None = None,
) -> RunSetup:
    """`train`'s setup: the checkpoint and its tokenizer, the training data read as its kind
    (`read_training`) with its task, every eval row read and tokenized, then `assemble`.
    `saved_buckets`: those a resumed run chose."""
    window_spec(config)  # what chunking refuses, before any work
    started = time.perf_counter()
    checkpoint = load_checkpoint(config)
    tokenizer = run_tokenizer(checkpoint, config)
    loaded = time.perf_counter()
    train, task, notes, rows_read = read_training(config, checkpoint, tokenizer)
    evaluation = (
        read_labelled(config.data.eval, config, tokenizer, task) if config.data.eval else None
    )
    tokenized = time.perf_counter()
    setup = assemble(
        config,
        strategy,
        xla,
        checkpoint,
        tokenizer,
        task,
        train,
        evaluation,
        notes=notes,
        rows_read=rows_read,
        saved_buckets=saved_buckets,
    )
    setup.seconds = {
        "load": loaded - started,
        "tokenize": tokenized - loaded,
        "build": time.perf_counter() - tokenized,
    }
    return setup


def read_training(
    config: RunConfig, checkpoint: Checkpoint, tokenizer
) -> tuple[TrainingData, Task, list[str], int]:
    """The training data as the kind it is, picked here once: a prepared `--train` (`bertfit
    prepare`) or `--streaming` is streamed (`open_stream`: its manifest gives the task, the
    lengths and the step counts; no row is read before the first step; TFRecord shards read
    by tf.data, so with TensorFlow on any backend), else every row is read and tokenized in
    memory with the run's `tokenizer`. Also its task, notes for the user, and the rows read
    (before `--max-train-examples`). A wrong `--best-metric` fails before the tokenizing."""
    if is_prepared(config.data.train) or config.data.streaming:
        from bertfit.data.stream_source import open_stream

        stream = open_stream(config, shard_tokenizer(checkpoint, config))
        resolve_best_metric(config, stream.manifest.task)
        return stream, stream.manifest.task, [], len(stream)
    rows = read_training_examples(config.data.train, config)
    examples = rows[: config.data.max_train_examples]
    task, notes = infer_run_task(examples, config)
    resolve_best_metric(config, task)
    train = encode_labelled(config.data.train, examples, config, tokenizer, task)
    train.weights = class_weights(config, task, train.labels)
    return train, task, notes, len(rows)


def assemble(
    config: RunConfig,
    strategy: tf.distribute.Strategy | None,
    xla: XlaChoice,
    checkpoint: Checkpoint,
    tokenizer,
    task: Task,
    train: TrainingData,
    evaluation: LabelledData | None = None,
    *,
    notes: list[str] | None = None,
    rows_read: int | None = None,
    saved_buckets: tuple[int, ...] | None = None,
    total_steps: int | None = None,
    replicas: int | None = None,
) -> RunSetup:
    """The decisions and the trainer once the data is read: the pooling (`--pooling`, or what
    the checkpoint declares: `checkpoints.pooling`), the batch size and epochs (`--batch-size`,
    `--epochs`, or what fits the rows: `training.schedule`) and the buckets (resolved here,
    once, by the data's kind), with `--packing` the packed batches' shape, the batch plan's
    length and the `Trainer` built from the run's seed. `rows_read`: how many training rows
    `train` stands for when it is a sample (`check`); `total_steps`: the schedule's length
    (default: `--max-steps`, else the run's epochs); `replicas`: those a batch splits over
    (default: the backend's with `strategy`; `check`: its target's)."""
    rows_read = len(train) if rows_read is None else rows_read
    backend = backend_of(config)
    replicas = replicas or backend.replicas(strategy)
    declared = declared_pooling(checkpoint.path)
    pooling, pooling_note = decide_pooling(config.model.pooling, declared, config.model.name)
    config, schedule_note = decide_schedule(config, trained_rows(config, rows_read), replicas)
    resolved = train.resolve_buckets(
        config, rows_read=rows_read, trace_tokens=xla.trace_tokens, saved=saved_buckets
    )
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(
            config.model,
            pooling=pooling,
            normalize_features=decide_normalize_features(config),
        ),
        data=dataclasses.replace(config.data, buckets=list(resolved.lengths)),
    )
    t = config.train
    packing = None
    if config.data.packing:
        packing = train.packed_shape(config, replicas)
    batching = Batching.of(
        config,
        resolved.lengths,
        training=True,
        pipelines=backend.input_pipelines(strategy),
        packing=packing,
    )
    few_shot = None
    if t.few_shot:
        check_few_shot(config, task, train, replicas)
        few_shot = FewShotPlan.of(config, train, any_length=not xla.replica_step)
    suggestion = None if t.few_shot else few_shot_suggestion(task, trained_rows(config, rows_read))
    notes = [
        *filter(None, [pooling_note, schedule_note]),  # first: they change what is trained
        *([few_shot.describe()] if few_shot else []),
        *filter(None, [suggestion]),
        *(notes or []),
        *train.notes(config, batching),
        *filter(None, [resolved.note]),
    ]
    if total_steps is None:
        total_steps = t.max_steps  # the schedule spans --max-steps (training/run_length.py)
    if total_steps is None:
        total_steps = len(train.plan(batching, shuffle=False)) * t.epochs
    backend.seed(t.seed)
    trainer = make_trainer(
        checkpoint, task, config, strategy, total_steps, xla, head_bias(config, task, train)
    )
    return RunSetup(
        config=config,
        checkpoint=checkpoint,
        tokenizer=tokenizer,
        task=task,
        best_metric=resolve_best_metric(config, task),
        train=train,
        eval=evaluation,
        buckets=resolved.lengths,
        xla=xla,
        trainer=trainer,
        notes=notes,
        rows_read=rows_read,
        packing=packing,
        schedule=schedule_note,
        declared_pooling=declared,
        few_shot=few_shot,
        training_labels=getattr(train, "labels", None),
    )


def trained_rows(config: RunConfig, rows_read: int) -> int:
    """The rows an epoch trains on: the `rows_read`, or `--max-train-examples` of them."""
    return min(rows_read, config.data.max_train_examples or rows_read)


def resolve_best_metric(config: RunConfig, task: Task) -> str:
    """`--best-metric`, or the task's default; it must be one of the task's metrics."""
    metric = config.train.best_metric or default_metric(task.kind)
    if metric not in TASK_METRICS[task.kind]:
        raise ConfigError(
            f"--best-metric {metric} is not a {task.kind} metric; choose one of "
            f"{', '.join(TASK_METRICS[task.kind])}."
        )
    return metric


# ---- the model and its trainer ----


def head_bias(config: RunConfig, task: Task, train) -> list[float] | None:
    """The classification layer's initial bias: with `--head-bias prior` (the default) a
    multi-label head starts at each label's training log-odds; None (zeros) for other tasks,
    for `--head-bias zero`, and for a streamed training set, whose labels are not in memory."""
    labels = getattr(train, "labels", None)
    if task.kind != MULTI_LABEL or config.model.head_bias != "prior" or labels is None:
        return None
    return prior_log_odds(labels)


def decide_normalize_features(config: RunConfig) -> bool:
    """`--normalize-features` where given, else true with `--few-shot`: its head reads the
    direction its first stage trains (`training.few_shot`)."""
    given = config.model.normalize_features
    return config.train.few_shot if given is None else given


def build_classifier(
    encoder: keras.Layer, task: Task, config: RunConfig, head_bias: list[float] | None = None
) -> BertClassifier | ChunkedClassifier:
    """The classifier a run puts on `encoder`: one output per label (or the value), with the
    run's pooling, dropout and seed; with `--long-documents chunk` a `ChunkedClassifier` that
    pools each document's windows with `--chunk-pooling`."""
    classifier = BertClassifier(
        encoder,
        task.num_outputs,
        config.model.pooling,
        config.model.dropout,
        seed=config.train.seed,
        head_bias=head_bias,
        normalize_features=bool(config.model.normalize_features),
    )
    if WindowSpec.for_model(config.model) is None:
        return classifier
    return ChunkedClassifier(classifier, config.model.chunk_pooling)


def with_lora(model, config: RunConfig):
    """`model` with `--lora-rank` adapters on `--lora-targets` (its base frozen, in int8 with
    `--base-precision int8`), or as it is without `--lora-rank`."""
    if config.model.lora_rank:
        if config.model.base_precision == INT8:
            quantize_base(adapted_layers(model).values())
        enable_lora(
            model,
            config.model.lora_rank,
            config.model.lora_alpha,
            config.model.lora_targets,
            seed=config.train.seed,
        )
    return model


def make_trainer(
    checkpoint: Checkpoint,
    task: Task,
    config: RunConfig,
    strategy: tf.distribute.Strategy | None,
    total_steps: int,
    xla: XlaChoice,
    head_bias: list[float] | None = None,
) -> RunTrainer:
    """The run's `Trainer`: the classifier built in the strategy's scope with the encoder's dtype
    policy from `--precision` (no global Keras policy is set), the unused pooler left out of
    training with `--pooling mean`, dynamic loss scaling with `mixed_fp16`. The model takes over
    the checkpoint's weights: its arrays are released (a run would hold MiniLM's 87 MiB twice).
    The run's backend builds it (`backends.Backend.trainer`: with `--backend jax` a
    `JaxTrainer`, whose `strategy` and `xla` are the input pipeline's only). `--remat`
    recomputes the encoder's layers in the backward pass (`model/remat.py`); `--attention`
    says how its attention is computed (`model/attention.py`)."""

    def build_model() -> BertClassifier | ChunkedClassifier:
        encoder = build_encoder(checkpoint, dtype=encoder_policy(config.model))
        encoder.remat = config.train.remat
        encoder.use_attention(config.model.attention)
        return with_lora(build_classifier(encoder, task, config, head_bias), config)

    frozen = ("pooler",) if config.model.pooling == "mean" else ()
    if config.train.few_shot:  # stage 2 trains the head alone (training.few_shot)
        frozen += (ENCODER_PATH,)
    trainer = backend_of(config).trainer(
        build_model, config, strategy, total_steps, xla, frozen, task.kind
    )
    checkpoint.tensors.clear()
    return trainer
