"""What a run decides and builds before its first step, written once for `train` and `check`:
`prepare(config, strategy, xla) -> RunSetup` reads the files as the run reads them (a `--train`
glob included), infers the task, loads the checkpoint and its tokenizer, tokenizes the data,
then `assemble` resolves the length buckets (the only place they are decided), and builds the
classifier at the run's precision and the `Trainer` whose `replica_step` the run compiles.

`bertfit check` reads and samples the data its own way (every problem is a finding, not an
error) and then calls the same `assemble`, so it compiles exactly what `bertfit train` will
(the accumulated step under `--grad-accum`, the encoder's dtype policy from `--precision`,
never a global Keras policy). `evaluate`/`predict` on a trained run are in `bertfit.inference`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertfit import storage
from bertfit.cache import cache_root
from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
from bertfit.checkpoints.registry import resolve
from bertfit.config import (
    BALANCED,
    NO_CLASS_WEIGHTS,
    PRECISION_POLICIES,
    TASK_METRICS,
    TRUNCATE,
    RunConfig,
    check_positions,
)
from bertfit.data.buckets import resolve_buckets
from bertfit.data.chunks import source_files
from bertfit.data.pipeline import Batch, BucketedInput, EncodedTexts, encode_texts, plan_batches
from bertfit.data.profile import LengthProfile
from bertfit.data.shard_writer import ShardSource, write_prepared
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.data.streaming import (
    StreamedInput,
    StreamLayout,
    StreamStep,
    TrainStream,
    input_pipelines,
)
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL, Task, infer_task
from bertfit.data.tfrecord import (
    Manifest,
    check_shards,
    is_prepared,
    prepared_directory,
    tokenizer_fingerprint,
)
from bertfit.data.windowed import (
    WindowedDocuments,
    WindowedInput,
    WindowProfile,
    chunk_buckets,
    chunk_suggestion,
    encode_documents,
    plan_documents,
)
from bertfit.errors import ConfigError, DataError
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier, prior_log_odds
from bertfit.runs.metrics import default_metric
from bertfit.text.base import InGraphTokenizer
from bertfit.text.windows import WindowSpec
from bertfit.training.loop import Trainer
from bertfit.training.strategy import XlaChoice

# A training file larger than this (MB; the setting $BERTFIT_STREAM_ABOVE_MB) is streamed
# without --streaming: see `auto_streaming`.
STREAM_ABOVE_MB = 64
STREAM_ABOVE_ENV = "BERTFIT_STREAM_ABOVE_MB"

# With --long-documents truncate, more than this share of training rows losing tokens prints
# one line suggesting --long-documents chunk (with the measured share).
CHUNK_SUGGESTION_SHARE = 0.1


@dataclasses.dataclass
class LabelledData:
    """Examples read from one file, tokenized, with their targets (`Task.targets`) and the
    weight of each in the loss. With `--long-documents chunk`, `documents` holds the same ids
    cut into windows (each example one document, fed as `[batch, K, seq]`)."""

    path: str
    examples: list[Example]
    labels: np.ndarray | None
    encoded: EncodedTexts
    weights: np.ndarray | None = None
    documents: WindowedDocuments | None = None

    def __len__(self) -> int:
        return len(self.examples)


# ---- reading ----


def source_spec(config: RunConfig) -> SourceSpec:
    """How a run reads its files: `--format` and the column flags."""
    d = config.data
    return SourceSpec(
        format=d.format,
        text_column=d.text_column,
        text_pair_column=d.text_pair_column,
        label_column=d.label_column,
        empty_labels=True,  # the task decides: the empty set in multi-label data, else an error
    )


def read_training_examples(pattern: str, config: RunConfig) -> list[Example]:
    """The rows of one file, or of every file a glob matches (sorted by name, concatenated).

    Every worker reads all of them: the batch plan is global and each worker's input pipeline
    takes its replicas' rows of every global batch (see data/pipeline.py), which uses each
    example exactly once per epoch and keeps every worker at the same step count.
    """
    spec = source_spec(config)
    return [e for path in source_files(pattern, "--train") for e in read_examples(path, spec)]


def infer_run_task(examples: list[Example], config: RunConfig) -> tuple[Task, list[str]]:
    """The task of the training rows (`--task`, or inferred) and notes for the user."""
    return infer_task(
        examples, config.data.train, kind=config.model.task, separator=config.data.label_separator
    )


def read_labelled(
    path: str, config: RunConfig, tokenizer, task: Task | None, labels_required: bool = True
) -> LabelledData:
    examples = read_examples(path, source_spec(config), labels_required=labels_required)
    return encode_labelled(path, examples, config, tokenizer, task)


def encode_labelled(
    path: str, examples: list[Example], config: RunConfig, tokenizer, task: Task | None
) -> LabelledData:
    """Tokenizes the examples (and their pairs); their targets when a task is given. With
    `--long-documents chunk` each text is tokenized once and cut into windows."""
    labels = None if task is None else task.targets(examples, path)
    spec = window_spec(config)
    if spec is not None:
        documents = encode_documents(tokenizer, [e.text for e in examples], spec)
        packed = documents.ids.row_lengths().numpy().astype(np.int64) + 2
        encoded = EncodedTexts(documents.ids, None, packed)
        return LabelledData(path, examples, labels, encoded, documents=documents)
    pairs = None
    if config.data.text_pair_column:
        pairs = [e.text_pair for e in examples]
    encoded = encode_texts(tokenizer, [e.text for e in examples], pairs)
    return LabelledData(path, examples, labels, encoded)


def window_spec(config: RunConfig) -> WindowSpec | None:
    """How `--long-documents chunk` cuts the texts; None with `truncate`. Refuses what chunking
    cannot do: text pairs (see `bertfit.text.windows`), and a streamed or prepared `--train`,
    whose shards hold each row's ids already cut at max_seq_length."""
    spec = WindowSpec.for_model(config.model)
    if spec is None:
        return None
    if config.data.text_pair_column:
        raise ConfigError(
            f"--long-documents chunk windows one text per document; --text-pair-column "
            f"{config.data.text_pair_column} gives pairs, which are not windowed (no choice of "
            "which text to cut suits every task). Put both texts in one column, or use "
            "--long-documents truncate."
        )
    if config.data.streaming or is_prepared(config.data.train):
        raise ConfigError(
            "--long-documents chunk needs whole documents, but a prepared or --streaming "
            "training set holds each row's ids already cut at --max-seq-length. Train on the "
            "data file without --streaming, or use --long-documents truncate."
        )
    if isinstance(config.data.buckets, list) and config.data.buckets != [
        config.model.max_seq_length
    ]:
        raise ConfigError(
            f"--buckets {','.join(map(str, config.data.buckets))}: with --long-documents chunk "
            f"every window is --max-seq-length {config.model.max_seq_length} long and the "
            "buckets are chunk counts (1, 2, 4, ... --max-chunks). Leave --buckets out."
        )
    return spec


def truncation_note(config: RunConfig, train: LabelledData) -> list[str]:
    """With `truncate`, the one-line suggestion of `chunk` when more than
    `CHUNK_SUGGESTION_SHARE` of the training rows lose tokens (single texts only)."""
    if train.documents is not None or config.data.text_pair_column:
        return []
    note = chunk_suggestion(
        train.encoded.packed_lengths, config.model.max_seq_length, CHUNK_SUGGESTION_SHARE
    )
    return [] if note is None else [note]


# ---- the checkpoint ----


def load_checkpoint(config: RunConfig) -> Checkpoint:
    """The checkpoint `--model` names; its position table must hold `--max-seq-length`."""
    checkpoint = read_checkpoint(resolve(config.model.name))
    if checkpoint.config is not None:
        check_positions(
            config.model.max_seq_length,
            checkpoint.config.max_sequence_length,
            config.model.name,
        )
    return checkpoint


def run_tokenizer(checkpoint: Checkpoint, config: RunConfig) -> InGraphTokenizer:
    """The checkpoint's tokenizer, with `--lower-case` when given."""
    return build_tokenizer(checkpoint, lower_case=config.model.lower_case)


# ---- everything before the first step ----


@dataclasses.dataclass
class RunSetup:
    """What a run decides and builds before its first step; `train` and `check` make it with
    the same functions, so `check` compiles exactly what `train` will.

    Args:
        config: the run's config, its `data.buckets` the resolved list.
        checkpoint, tokenizer: the checkpoint read and its tokenizer.
        task: the task of the training rows; best_metric: `--best-metric` or its default.
        train, eval: the tokenized data (eval None without `--eval`); `train` is a
            `TrainStream` when `--train` is a prepared TFRecord set (`bertfit prepare`).
        buckets: the resolved length buckets (the last is max_seq_length).
        xla: what XLA compiles (decided with the strategy).
        trainer: the model, optimizer and compiled steps, built in the strategy's scope.
        notes: what the user should read before training (task inferred, buckets chosen).
        rows_read: training rows in the files, before `--max-train-examples`.
        seconds: time spent loading, tokenizing and building.
        stream_layout: how a streamed `train` is split among the input pipelines and steps.
        chunks: with `--long-documents chunk`, the chunk-count buckets K of the
            `[batch, K, max_seq_length]` batches (`buckets` is then `(max_seq_length,)`);
            empty with `truncate`.
    """

    config: RunConfig
    checkpoint: Checkpoint
    tokenizer: InGraphTokenizer
    task: Task
    best_metric: str
    train: LabelledData | TrainStream
    eval: LabelledData | None
    buckets: tuple[int, ...]
    xla: XlaChoice
    trainer: Trainer
    notes: list[str]
    rows_read: int
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    stream_layout: StreamLayout | None = None
    chunks: tuple[int, ...] = ()

    @property
    def streamed(self) -> bool:
        """Whether the training data is streamed from a prepared set."""
        return isinstance(self.train, TrainStream)

    @property
    def windowed(self) -> bool:
        """Whether documents are cut into windows (`--long-documents chunk`)."""
        return bool(self.chunks)

    def length_profile(self) -> LengthProfile:
        """The training lengths against the buckets (report, TensorBoard); for windowed
        documents, their kept windows against the chunk-count buckets (a bucket's "tokens"
        are then windows, its padding the padding windows)."""
        if self.streamed:
            return self.stream_layout.profile(self.train.manifest)
        plan = self.plan(self.train, shuffle=False, training=True)
        if self.windowed:
            return LengthProfile.of(self.train.documents.kept_windows, list(self.chunks), plan)
        return LengthProfile.of(self.train.encoded.packed_lengths, list(self.buckets), plan)

    def window_profile(self) -> WindowProfile | None:
        """The training documents' lengths against the window (`chunk` only)."""
        return WindowProfile.of(self.train.documents) if self.windowed else None

    def plan(
        self,
        data: LabelledData | TrainStream,
        *,
        shuffle: bool,
        epoch: int = 0,
        training: bool = False,
        batch_size: int | None = None,
    ) -> list[Batch] | list[StreamStep]:
        """The batch plan of `data`. Training plans hold grad_accum micro-batches per step,
        in runs of steps_per_execution. `batch_size` (default `--batch-size`, the global batch)
        is one replica's batch when `check` plans what a single replica is fed."""
        t = self.config.train
        if isinstance(data, TrainStream):
            return self.stream_layout.plan(
                shuffle=shuffle, seed=t.seed, epoch=epoch, run_length=t.steps_per_execution
            )
        sizes, buckets = data.encoded.packed_lengths, self.buckets
        if data.documents is not None:  # documents by their windows, in chunk-count buckets
            sizes, buckets = data.documents.kept_windows, self.chunks
        return plan_batches(
            sizes,
            buckets,
            (batch_size or t.batch_size) * (t.grad_accum if training else 1),
            shuffle=shuffle,
            seed=t.seed,
            epoch=epoch,
            run_length=t.steps_per_execution if training else 1,
        )

    def batches(
        self,
        data: LabelledData | TrainStream,
        *,
        shuffle: bool,
        epoch: int = 0,
        training: bool = False,
        start: int = 0,
        batch_size: int | None = None,
        static_shapes: bool = False,
    ) -> BucketedInput | StreamedInput:
        """The input of the plan's steps from `start` on (a resumed epoch skips the steps
        taken). Batches are padded to their longest row when the replica step is not
        XLA-compiled (and `static_shapes` does not ask for the bucket lengths), else to their
        bucket's length. A `TrainStream` is trained from its shards (`StreamedInput`, always
        shuffled: it serves training only)."""
        if isinstance(data, TrainStream):
            t = self.config.train
            layout = self.stream_layout
            if batch_size is not None:  # `check`: one replica's batches, one pipeline
                layout = StreamLayout.of(data.manifest, self.buckets, 1, batch_size * t.grad_accum)
            return StreamedInput(
                data,
                layout,
                self.trainer.strategy,
                special_ids=self.tokenizer.special_ids,
                seed=t.seed,
                epoch=epoch,
                start=start,
                run_length=t.steps_per_execution,
                micro_batches=t.grad_accum,
                pad_to_longest=not (self.xla.replica_step or static_shapes),
            )
        plan = self.plan(
            data, shuffle=shuffle, epoch=epoch, training=training, batch_size=batch_size
        )
        steps = (data.labels, plan[start:], self.trainer.strategy)
        options = dict(
            special_ids=self.tokenizer.special_ids,
            micro_batches=self.config.train.grad_accum if training else 1,
            weights=data.weights if training else None,
        )
        if data.documents is not None:  # static [batch, K, max_seq_length] with or without XLA
            return WindowedInput(data.documents, *steps, **options)
        return BucketedInput(
            data.encoded,
            *steps,
            **options,
            pad_to_longest=not (self.xla.replica_step or static_shapes),
        )


def prepare(
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    *,
    saved_buckets: tuple[int, ...] | None = None,
) -> RunSetup:
    """`train`'s setup: the checkpoint and its tokenizer, every training and eval row read and
    tokenized, the task, then `assemble`. `saved_buckets`: those a resumed run chose.
    A prepared `--train` (`bertfit prepare`) is streamed instead: `prepare_stream`."""
    window_spec(config)  # what chunking refuses, before any work
    if is_prepared(config.data.train) or config.data.streaming:
        return prepare_stream(config, strategy, xla, saved_buckets=saved_buckets)
    started = time.perf_counter()
    checkpoint = load_checkpoint(config)
    tokenizer = run_tokenizer(checkpoint, config)
    loaded = time.perf_counter()
    rows = read_training_examples(config.data.train, config)
    examples = rows[: config.data.max_train_examples]
    task, notes = infer_run_task(examples, config)
    resolve_best_metric(config, task)  # a wrong --best-metric fails before the tokenizing
    train = encode_labelled(config.data.train, examples, config, tokenizer, task)
    train.weights = class_weights(config, task, train.labels)
    notes += truncation_note(config, train)
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
        rows_read=len(rows),
        saved_buckets=saved_buckets,
    )
    return _timed(setup, started, loaded, tokenized)


def prepare_stream(
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    *,
    saved_buckets: tuple[int, ...] | None = None,
) -> RunSetup:
    """`prepare` for a prepared training set: its manifest gives the task, the lengths (the
    buckets) and the step counts; no training row is read before the first step. The eval file
    is read and tokenized as always (every eval row is evaluated once). With `--streaming` a
    data file is prepared first, once, into the cache (`cached_shards`)."""
    started = time.perf_counter()
    checkpoint = load_checkpoint(config)
    tokenizer = run_tokenizer(checkpoint, config)
    loaded = time.perf_counter()
    if is_prepared(config.data.train):
        directory = prepared_directory(config.data.train)
    else:
        directory = cached_shards(config, tokenizer)
    train = TrainStream(directory, Manifest.load(directory))
    check_stream(train.manifest, config, tokenizer, str(directory))
    task = train.manifest.task
    resolve_best_metric(config, task)
    evaluation = (
        read_labelled(config.data.eval, config, tokenizer, task) if config.data.eval else None
    )
    tokenized = time.perf_counter()
    note = f"streaming the prepared set {directory} ({len(train)} rows, {len(train.files)} files)"
    setup = assemble(
        config,
        strategy,
        xla,
        checkpoint,
        tokenizer,
        task,
        train,
        evaluation,
        notes=[note],
        saved_buckets=saved_buckets,
    )
    return _timed(setup, started, loaded, tokenized)


def _timed(setup: RunSetup, started: float, loaded: float, tokenized: float) -> RunSetup:
    """`setup` with the seconds of its three phases (perf_counter marks; building ends now)."""
    setup.seconds = {
        "load": loaded - started,
        "tokenize": tokenized - loaded,
        "build": time.perf_counter() - tokenized,
    }
    return setup


def stream_above_bytes() -> int:
    """`$BERTFIT_STREAM_ABOVE_MB` (default `STREAM_ABOVE_MB`) in bytes: the size of a training
    file above which `train` streams it without --streaming (`auto_streaming`)."""
    text = os.environ.get(STREAM_ABOVE_ENV, str(STREAM_ABOVE_MB))
    try:
        megabytes = float(text)
    except ValueError:
        raise ConfigError(
            f"{STREAM_ABOVE_ENV}={text!r}: expected a size in MB, e.g. 64 (or inf never to "
            "stream without --streaming)"
        ) from None
    return int(min(megabytes * 1e6, 2**62))


def auto_streaming(config: RunConfig) -> tuple[RunConfig, str | None]:
    """The run's config with `--streaming` turned on for a training file larger than
    `stream_above_bytes()` (decided once, before the run directory is planned, so the run
    saves it and the same command resumes it alike), and the note that says so up front.

    Measured (issue 47): a 1M-row, 126 MB CSV took 57-99 s to its first step in memory at
    1.35x the RSS of a 10k-row run; the same rows prepared started in 12.6 s at 1.03x. Kept in
    memory, with the note, when an option needs every row there, or the file is a glob, a URL
    or a prepared set."""
    data = config.data
    path = data.train
    if data.streaming or path is None or is_prepared(path) or glob.has_magic(path):
        return config, None
    if storage.is_url(path) or not Path(path).is_file():
        return config, None
    size, limit = Path(path).stat().st_size, stream_above_bytes()
    if size <= limit:
        return config, None
    said = f"{path} is {size / 1e6:.0f} MB (over {STREAM_ABOVE_ENV}={limit / 1e6:g} MB)"
    in_memory_only = [
        flag
        for flag, given in {
            "--max-train-examples": data.max_train_examples is not None,
            "--class-weights": config.train.class_weights != NO_CLASS_WEIGHTS,
            "--long-documents chunk": config.model.long_documents != TRUNCATE,
        }.items()
        if given
    ]
    if in_memory_only:
        return config, (
            f"{said}: reading and tokenizing it in memory takes a while before the first step "
            f"(~1 min per 100 MB); streaming would start sooner but {', '.join(in_memory_only)} "
            "needs the rows in memory"
        )
    streamed = dataclasses.replace(config, data=dataclasses.replace(data, streaming=True))
    return streamed, (
        f"{said}: streaming it (--streaming: tokenized once into the cache, then read in "
        f"batches) instead of holding every row in memory; set {STREAM_ABOVE_ENV}=inf to keep "
        "files of any size in memory"
    )


def shard_source(config: RunConfig) -> ShardSource:
    """What `bertfit prepare` and `--streaming` tokenize: `--train`, read as the run reads it."""
    return ShardSource(
        path=config.data.train,
        spec=source_spec(config),
        model=config.model.name,
        max_seq_length=config.model.max_seq_length,
        task=config.model.task,
        separator=config.data.label_separator,
    )


def cached_shards(config: RunConfig, tokenizer) -> Path:
    """`--streaming` on a data file: its shards in the cache (`$BERTFIT_CACHE/prepared/KEY`,
    KEY a digest of the file's bytes, the tokenizer and how the file is read), written once
    with `write_prepared` (into a temporary directory renamed into place: two processes
    preparing one file both end with one whole set).

    The bytes, not the path, size and modification time: a file whose labels changed with its
    mtime restored (a copy with `cp -p`, a checkout, `touch -r`) trained on the old labels.
    SHA-256 of a 126 MB CSV takes 0.2 s here, against ~13 s to start streaming it."""
    path = config.data.train
    if glob.has_magic(path) or not Path(path).is_file():
        raise ConfigError(
            f"--streaming reads one data file; {path!r} is not one. Prepare the data with "
            "`bertfit prepare DATA OUT` and pass --train OUT."
        )
    source = shard_source(config)
    with open(path, "rb") as f:
        content = hashlib.file_digest(f, "sha256").hexdigest()
    key = json.dumps(
        [
            content,
            tokenizer_fingerprint(tokenizer),
            dataclasses.asdict(source),
        ],
        sort_keys=True,
    )
    directory = cache_root() / "prepared" / hashlib.sha256(key.encode()).hexdigest()[:24]
    if is_prepared(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        write_prepared(source, scratch, tokenizer)
        os.rename(scratch, directory)
    except OSError:
        if not is_prepared(directory):  # another process did not finish it either
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def check_stream(manifest: Manifest, config: RunConfig, tokenizer, where: str) -> None:
    """A prepared set must suit the run: every shard there at its written size, the model's
    tokenizer, a max_seq_length it holds, the task asked for, and no option that needs every
    row in memory. `where`: the set's directory or manifest, as the user named it."""
    check_shards(manifest, prepared_directory(where))
    if manifest.tokenizer_fingerprint != tokenizer_fingerprint(tokenizer):
        raise DataError(
            f"was prepared with another tokenizer (for --model {manifest.model}) than that of "
            f"--model {config.model.name}{' with --lower-case' if config.model.lower_case else ''}"
            ": its ids would mean other words. Prepare the data again with this model "
            "(`bertfit prepare DATA OUT --model ...`)",
            path=where,
            code="data-tokenizer-mismatch",
        )
    if config.model.max_seq_length > manifest.max_seq_length:
        raise ConfigError(
            f"--max-seq-length {config.model.max_seq_length} is longer than the "
            f"{manifest.max_seq_length} {where} was prepared for (its ids are cut there); "
            "prepare it again with the longer length, or train with a shorter one."
        )
    if config.model.task is not None and config.model.task != manifest.task.kind:
        raise ConfigError(
            f"--task {config.model.task}: {where} was prepared as {manifest.task.kind}; "
            "prepare it again with --task, or leave --task out."
        )
    in_memory_only = {
        "--max-train-examples": config.data.max_train_examples is not None,
        "--class-weights": config.train.class_weights != NO_CLASS_WEIGHTS,
    }
    for flag, given in in_memory_only.items():
        if given:
            raise ConfigError(
                f"{flag} needs the training rows in memory; a prepared set ({where}) is "
                f"streamed. Leave {flag} out, or train on the data file."
            )


def assemble(
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    checkpoint: Checkpoint,
    tokenizer: InGraphTokenizer,
    task: Task,
    train: LabelledData,
    evaluation: LabelledData | None = None,
    *,
    notes: list[str] | None = None,
    rows_read: int | None = None,
    saved_buckets: tuple[int, ...] | None = None,
    total_steps: int | None = None,
) -> RunSetup:
    """The decisions and the trainer once the data is tokenized: the buckets (resolved here,
    once), the batch plan's length and the `Trainer`. `rows_read`: how many training rows
    `train` stands for when it is a sample (`check`); `total_steps`: the schedule's length
    (default: the run's)."""
    t = config.train
    if total_steps is None and t.max_steps is not None:
        total_steps = t.max_steps  # the schedule spans --max-steps (training/run_length.py)
    rows_read = len(train) if rows_read is None else rows_read
    streamed = isinstance(train, TrainStream)
    if not streamed and train.documents is not None:
        return _assemble_windowed(
            config, strategy, xla, checkpoint, tokenizer, task, train, evaluation,
            notes=notes, rows_read=rows_read, total_steps=total_steps,
        )  # fmt: skip
    lengths = train.bucket_lengths() if streamed else train.encoded.packed_lengths
    resolved = resolve_buckets(
        config.data.buckets,
        config.model.max_seq_length,
        lengths,
        batch_size=t.batch_size * t.grad_accum,
        epochs=t.epochs * rows_read / max(len(lengths), 1),
        traced_per_bucket=xla.replica_step,
        saved=saved_buckets,
    )
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, buckets=list(resolved.lengths))
    )
    notes = [*(notes or []), *([resolved.note] if resolved.note else [])]
    layout = None
    if streamed:
        pipelines = input_pipelines(strategy)
        rows_per_step = t.batch_size * t.grad_accum // pipelines
        layout = StreamLayout.of(train.manifest, resolved.lengths, pipelines, rows_per_step)
        notes += [layout.note] if layout.note else []
    if total_steps is None and layout is not None:
        total_steps = int(layout.steps().sum()) * t.epochs  # an epoch's plan length
    elif total_steps is None:
        steps_per_epoch = len(
            plan_batches(
                train.encoded.packed_lengths,
                resolved.lengths,
                t.batch_size * t.grad_accum,
                shuffle=False,
                run_length=t.steps_per_execution,
            )
        )
        total_steps = steps_per_epoch * t.epochs
    made = (config, strategy, xla, checkpoint, tokenizer, task, train, evaluation, total_steps)
    return _with_trainer(
        *made, buckets=resolved.lengths, notes=notes, rows_read=rows_read, stream_layout=layout
    )


def _assemble_windowed(
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    checkpoint: Checkpoint,
    tokenizer: InGraphTokenizer,
    task: Task,
    train: LabelledData,
    evaluation: LabelledData | None,
    *,
    notes: list[str] | None,
    rows_read: int,
    total_steps: int | None,
) -> RunSetup:
    """`assemble` for `--long-documents chunk`: every window is max_seq_length long (the one
    length bucket, saved with the run), and documents go into chunk-count buckets
    (`chunk_buckets`: 1, 2, 4, ... max_chunks windows)."""
    t = config.train
    length = config.model.max_seq_length
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, buckets=[length]))
    chunks = chunk_buckets(config.model.max_chunks)
    profile = WindowProfile.of(train.documents)
    notes = [*(notes or []), f"long documents in windows: {profile.line()}"]
    if total_steps is None:
        plan = plan_documents(
            train.documents,
            t.batch_size * t.grad_accum,
            shuffle=False,
            buckets=chunks,
            run_length=t.steps_per_execution,
        )
        total_steps = len(plan) * t.epochs
    made = (config, strategy, xla, checkpoint, tokenizer, task, train, evaluation, total_steps)
    return _with_trainer(*made, buckets=(length,), notes=notes, rows_read=rows_read, chunks=chunks)


def _with_trainer(
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    checkpoint: Checkpoint,
    tokenizer: InGraphTokenizer,
    task: Task,
    train: LabelledData | TrainStream,
    evaluation: LabelledData | None,
    total_steps: int,
    **decided,
) -> RunSetup:
    """The `RunSetup` of what `assemble` decided (`decided`: buckets, notes, ...), with its
    `Trainer` built from the run's seed."""
    keras.utils.set_random_seed(config.train.seed)
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
        xla=xla,
        trainer=trainer,
        **decided,
    )


def resolve_best_metric(config: RunConfig, task: Task) -> str:
    """`--best-metric`, or the task's default; it must be one of the task's metrics."""
    metric = config.train.best_metric or default_metric(task.kind)
    if metric not in TASK_METRICS[task.kind]:
        raise ConfigError(
            f"--best-metric {metric} is not a {task.kind} metric; choose one of "
            f"{', '.join(TASK_METRICS[task.kind])}."
        )
    return metric


def class_weights(config: RunConfig, task: Task, targets: np.ndarray) -> np.ndarray | None:
    """The loss weight of each training example from `--class-weights`: "balanced" gives class
    c the weight n / (classes × n_c), a JSON file {label: weight} its own; None for "none"."""
    choice = config.train.class_weights
    if choice == NO_CLASS_WEIGHTS:
        return None
    if task.kind != SINGLE_LABEL:
        raise ConfigError(
            f"--class-weights applies to single-label tasks; this run is {task.kind}. Leave it out."
        )
    if choice == BALANCED:
        counts = np.bincount(targets, minlength=len(task.labels)).astype(np.float64)
        per_class = len(targets) / (len(task.labels) * np.maximum(counts, 1))
    else:
        per_class = _weights_file(choice, task)
    return per_class[targets].astype(np.float32)


def _weights_file(path: str, task: Task) -> np.ndarray:
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"--class-weights {path}: expected {BALANCED!r}, {NO_CLASS_WEIGHTS!r} or a JSON file "
            f'{{"label": weight, ...}} ({e}).'
        ) from None
    if (
        not isinstance(values, dict)
        or set(values) != set(task.labels)
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            for v in values.values()
        )
    ):
        raise ConfigError(
            f"--class-weights {path}: give one positive number for each label "
            f'{list(task.labels)}, as {{"label": weight, ...}}.'
        )
    return np.asarray([values[label] for label in task.labels], np.float64)


# ---- the model and its trainer ----


def head_bias(config: RunConfig, task: Task, train) -> list[float] | None:
    """The classification layer's initial bias: with `--head-bias prior` (the default) a
    multi-label head starts at each label's training log-odds; None (zeros) for other tasks,
    for `--head-bias zero`, and for a streamed training set, whose labels are not in memory."""
    labels = getattr(train, "labels", None)
    if task.kind != MULTI_LABEL or config.model.head_bias != "prior" or labels is None:
        return None
    return prior_log_odds(labels)


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
    )
    if WindowSpec.for_model(config.model) is None:
        return classifier
    return ChunkedClassifier(classifier, config.model.chunk_pooling)


def make_trainer(
    checkpoint: Checkpoint,
    task: Task,
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    total_steps: int,
    xla: XlaChoice,
    head_bias: list[float] | None = None,
) -> Trainer:
    """The run's `Trainer`: the classifier built in the strategy's scope with the encoder's dtype
    policy from `--precision` (no global Keras policy is set), the unused pooler left out of
    training with `--pooling mean`, dynamic loss scaling with `mixed_fp16`. The model takes over
    the checkpoint's weights: its arrays are released (a run would hold MiniLM's 87 MiB twice)."""

    def build_model() -> BertClassifier | ChunkedClassifier:
        encoder = build_encoder(checkpoint, dtype=PRECISION_POLICIES[config.model.precision])
        return build_classifier(encoder, task, config, head_bias)

    trainer = Trainer(
        build_model,
        strategy,
        config.train,
        total_steps,
        frozen=("pooler",) if config.model.pooling == "mean" else (),
        loss_scale=config.model.precision == "mixed_fp16",
        task_kind=task.kind,
        xla=xla,
    )
    checkpoint.tensors.clear()
    return trainer
