"""The main job: `train` a classifier from labelled text files, then `evaluate` and `predict`."""

from __future__ import annotations

import dataclasses
import glob
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertfit.check.translate import explain_errors
from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
from bertfit.checkpoints.registry import resolve
from bertfit.config import RunConfig
from bertfit.data.labels import LabelMap
from bertfit.data.pipeline import (
    Batch,
    BucketedInput,
    default_buckets,
    encode_texts,
    plan_batches,
)
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.errors import DataError
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from bertfit.progress import Progress
from bertfit.train.checkpointing import make_checkpoint, restore_model
from bertfit.train.loop import Trainer
from bertfit.train.metrics import classification_metrics, is_better
from bertfit.train.run_dir import RunDir
from bertfit.train.strategy import make_strategy, per_replica_batch

# Master weights stay float32 in every mode: "bf16" is the TPU habit's name for bfloat16 compute
# with float32 variables, the same policy as "mixed_bf16". LayerNorm, softmax and the loss run in
# float32 (see model/encoder.py and model/classifier.py); float16 adds dynamic loss scaling.
PRECISION_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "mixed_bf16": "mixed_bfloat16",
                      "mixed_fp16": "mixed_float16"}


@dataclasses.dataclass
class LabelledData:
    """Examples read from one file, tokenized, with label ids."""

    path: str
    examples: list[Example]
    labels: np.ndarray | None
    encoded: object  # EncodedTexts

    def __len__(self) -> int:
        return len(self.examples)


def source_spec(config: RunConfig) -> SourceSpec:
    d = config.data
    return SourceSpec(format=d.format, text_column=d.text_column,
                      text_pair_column=d.text_pair_column, label_column=d.label_column)


def read_training_examples(pattern: str, config: RunConfig) -> list[Example]:
    """The rows of one file, or of every file a glob matches (sorted by name, concatenated).

    Every worker reads all of them: the batch plan is global and each worker's input pipeline
    takes its replicas' rows of every global batch (see data/pipeline.py), which uses each
    example exactly once per epoch and keeps every worker at the same step count.
    """
    if not glob.has_magic(pattern):
        return read_examples(pattern, source_spec(config))
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise DataError(f"--train {pattern!r} matches no file; check the pattern (quote it so "
                        "the shell does not expand it) and the working directory.")
    return [e for path in paths for e in read_examples(path, source_spec(config))]


def read_labelled(path: str, config: RunConfig, tokenizer, label_map: LabelMap | None,
                  labels_required: bool = True) -> LabelledData:
    examples = read_examples(path, source_spec(config), labels_required=labels_required)
    return encode_labelled(path, examples, config, tokenizer, label_map)


def encode_labelled(path: str, examples: list[Example], config: RunConfig, tokenizer,
                    label_map: LabelMap | None) -> LabelledData:
    labels = None if label_map is None else label_map.encode_all(examples, path)
    pairs = None
    if config.data.text_pair_column:
        pairs = [e.text_pair for e in examples]
    encoded = encode_texts(tokenizer, [e.text for e in examples], pairs)
    return LabelledData(path, examples, labels, encoded)


def buckets_for(config: RunConfig) -> list[int]:
    buckets = [b for b in config.data.buckets if b > 0]
    if config.data.buckets and not buckets:  # [0] means "no buckets"
        return [config.model.max_seq_length]
    return sorted(set(buckets) | {config.model.max_seq_length}) if buckets else default_buckets(
        config.model.max_seq_length)


def plan_for(data: LabelledData, config: RunConfig, *, shuffle: bool, epoch: int = 0,
             training: bool = False) -> list[Batch]:
    """Training plans hold grad_accum micro-batches per step, in runs of steps_per_execution."""
    micro = config.train.grad_accum if training else 1
    return plan_batches(data.encoded.packed_lengths, buckets_for(config),
                        config.train.batch_size * micro, shuffle=shuffle, seed=config.train.seed,
                        epoch=epoch, run_length=config.train.steps_per_execution if training else 1)


def bucketed(data: LabelledData, trainer: Trainer, tokenizer, config: RunConfig, *,
             shuffle: bool, epoch: int = 0, training: bool = False) -> BucketedInput:
    plan = plan_for(data, config, shuffle=shuffle, epoch=epoch, training=training)
    return BucketedInput(data.encoded, data.labels, plan, trainer.strategy,
                         cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id,
                         micro_batches=config.train.grad_accum if training else 1)


def evaluate_data(trainer: Trainer, data: LabelledData, tokenizer, config: RunConfig,
                  title: str = "eval", quiet: bool = False) -> tuple[dict, np.ndarray]:
    """Metrics over every example of `data` (none dropped) and the probabilities."""
    batches = bucketed(data, trainer, tokenizer, config, shuffle=False)
    progress = Progress(title, len(batches), quiet=quiet)
    start = time.perf_counter()
    probabilities = trainer.predict(batches, len(data), progress)
    progress.close()
    seconds = time.perf_counter() - start
    metrics = classification_metrics(data.labels, probabilities) if data.labels is not None else {}
    metrics.update(num_examples=len(data), wall_seconds=seconds,
                   examples_per_second=len(data) / max(seconds, 1e-9))
    return metrics, probabilities


def train(config: RunConfig, *, quiet: bool = False, strategy: tf.distribute.Strategy | None = None
          ) -> dict:
    """Fine-tunes `config.model.name` on `config.data.train`; returns the final metrics.

    Writes the run directory described in `bertfit.train.run_dir`. Every epoch evaluates on
    `config.data.eval` (when given) and keeps the best checkpoint by `train.best_metric`.
    """
    config.validate()
    t = config.train
    strategy = strategy or make_strategy(t.strategy, t.cpu_replicas, t.tpu, t.workers,
                                         t.worker_index)
    per_replica_batch(config.train.batch_size, strategy)
    run_dir = RunDir(config.output_dir, write=_is_chief(strategy))
    quiet = quiet or not run_dir.write
    started = time.perf_counter()
    policy = PRECISION_POLICIES[config.model.precision]
    checkpoint = read_checkpoint(resolve(config.model.name))
    tokenizer = build_tokenizer(checkpoint, lower_case=config.model.lower_case)

    all_train = read_training_examples(config.data.train, config)
    train_examples = all_train[: config.data.max_train_examples]
    label_map = LabelMap.from_examples(train_examples, config.data.train)
    train_data = encode_labelled(config.data.train, train_examples, config, tokenizer, label_map)
    eval_data = (read_labelled(config.data.eval, config, tokenizer, label_map)
                 if config.data.eval else None)

    steps_per_epoch = len(plan_for(train_data, config, shuffle=False, training=True))
    total_steps = steps_per_epoch * config.train.epochs
    keras.utils.set_random_seed(config.train.seed)

    def build_model() -> BertClassifier:
        encoder = build_encoder(checkpoint, dtype=policy)
        return BertClassifier(encoder, len(label_map), config.model.pooling,
                              config.model.dropout, seed=config.train.seed)

    frozen = ("pooler",) if config.model.pooling == "mean" else ()
    trainer = Trainer(build_model, strategy, config.train, total_steps, frozen=frozen,
                      loss_scale=config.model.precision == "mixed_fp16")
    run_dir.save_setup(config, label_map, checkpoint.config, tokenizer, checkpoint.vocab_file)
    run_dir.log(f"model {config.model.name} ({checkpoint.format}); {trainer.model.encoder.load_report}")
    run_dir.log(f"train {config.data.train}: {len(train_data)} of {len(all_train)} rows; "
                f"{len(label_map)} labels {list(label_map.labels)}; buckets {buckets_for(config)}; "
                f"{steps_per_epoch} steps/epoch; strategy {type(strategy).__name__} with "
                f"{strategy.num_replicas_in_sync} replicas; precision {config.model.precision} "
                f"({policy}); grad_accum {t.grad_accum} (effective batch "
                f"{t.batch_size * t.grad_accum}); steps_per_execution {t.steps_per_execution}")

    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = make_checkpoint(trainer.model, trainer.optimizer, epoch=epoch_var, step_in_epoch=step_var)
    latest = tf.train.CheckpointManager(ckpt, str(_writable(run_dir.latest_dir, run_dir)), 1)
    best = tf.train.CheckpointManager(ckpt, str(_writable(run_dir.best_dir, run_dir)), 1)

    history, best_value = [], None
    for epoch in range(config.train.epochs):
        batches = bucketed(train_data, trainer, tokenizer, config, shuffle=True, epoch=epoch,
                           training=True)
        progress = Progress(f"epoch {epoch + 1}/{config.train.epochs}", len(batches), quiet=quiet)
        with explain_errors():  # known TF/XLA errors in plain words
            stats = trainer.train_epoch(batches, progress)
        progress.close()
        record = {"epoch": epoch + 1, "train_loss": stats.loss,
                  "train_examples": stats.num_examples,
                  "train_examples_per_second": stats.examples_per_second,
                  "train_seconds": stats.seconds}
        run_dir.save_step_losses(epoch + 1, stats.step_losses)
        epoch_var.assign(epoch + 1)
        step_var.assign(0)
        if eval_data is not None:
            metrics, _ = evaluate_data(trainer, eval_data, tokenizer, config, quiet=quiet)
            record["eval"] = metrics
            value = metrics[config.train.best_metric]
            if is_better(config.train.best_metric, value, best_value):
                best_value = value
                best.save(checkpoint_number=epoch + 1)
                record["best"] = True
        latest.save(checkpoint_number=epoch + 1)
        history.append(record)
        run_dir.log(f"epoch {epoch + 1}: {record}")
        run_dir.save_metrics({"epochs": history})

    final = {"epochs": history, "wall_seconds": time.perf_counter() - started,
             "train_num_examples": len(train_data), "run_dir": str(run_dir.path),
             "trace_counts": trainer.trace_counts()}
    if eval_data is not None:
        final["final"] = history[-1]["eval"]
        final["best"] = {config.train.best_metric: best_value}
    run_dir.save_metrics(final)
    return final


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def _writable(directory: Path, run_dir: RunDir) -> Path:
    """Non-chief workers must still save (collectives), but to a scratch directory."""
    if run_dir.write:
        return directory
    return Path(tempfile.mkdtemp(prefix="bertfit-worker-"))


# ---- evaluate / predict from a run directory ----

@dataclasses.dataclass
class LoadedRun:
    config: RunConfig
    labels: LabelMap
    tokenizer: object
    trainer: Trainer


def load_run(path: str | Path, which: str = "best") -> LoadedRun:
    """Rebuilds the trained classifier of a run directory on the default strategy."""
    run_dir = RunDir(path, write=False)
    config = run_dir.load_config()
    labels = run_dir.load_labels()
    bert = run_dir.load_bert_config()
    tokenizer = run_dir.load_tokenizer()
    strategy = tf.distribute.get_strategy()

    def build_model():
        encoder = BertEncoder(bert, dtype=PRECISION_POLICIES[config.model.precision])
        return BertClassifier(encoder, len(labels), config.model.pooling, 0.0)

    trainer = Trainer(build_model, strategy, config.train, total_steps=None)
    restore_model(trainer.model, run_dir.checkpoint_path(which))
    return LoadedRun(config, labels, tokenizer, trainer)


def evaluate(run_path: str | Path, data_path: str, *, quiet: bool = False) -> dict:
    """Accuracy, macro-F1, loss and num_examples of a trained run on a labelled file."""
    run = load_run(run_path)
    data = read_labelled(data_path, run.config, run.tokenizer, run.labels)
    metrics, _ = evaluate_data(run.trainer, data, run.tokenizer, run.config, quiet=quiet)
    return metrics


def predict(run_path: str | Path, data_path: str, *, quiet: bool = False) -> list[dict]:
    """One prediction per input row, in input order: label and probability per label."""
    run = load_run(run_path)
    data = read_labelled(data_path, run.config, run.tokenizer, None, labels_required=False)
    _, probabilities = evaluate_data(run.trainer, data, run.tokenizer, run.config,
                                     title="predict", quiet=quiet)
    names = run.labels.labels
    return [{"label": names[int(p.argmax())],
             "probabilities": {name: float(v) for name, v in zip(names, p, strict=True)}}
            for p in probabilities]
