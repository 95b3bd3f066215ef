"""The main job: `train` a classifier from labelled text files, then `evaluate` and `predict`."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertfit.check.translate import explain_errors
from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
from bertfit.checkpoints.registry import resolve
from bertfit.config import PRECISION_POLICIES, RunConfig, TrainConfig
from bertfit.data.labels import LabelMap
from bertfit.data.pipeline import (
    Batch,
    BucketedInput,
    buckets_for,
    encode_texts,
    plan_batches,
)
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.errors import DataError, TrainingInterrupted
from bertfit.model.classifier import BertClassifier
from bertfit.predictor import Classifier, load_classifier
from bertfit.progress import Progress
from bertfit.train.checkpointing import RunCheckpoints, TrainingState
from bertfit.train.interrupt import StopRequests
from bertfit.train.loop import Trainer
from bertfit.train.metrics import classification_metrics, is_better
from bertfit.train.run_dir import FINISHED, RUNNING, RunDir, new_run_path
from bertfit.train.strategy import make_strategy, per_replica_batch


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


def plan_for(data: LabelledData, config: RunConfig, *, shuffle: bool, epoch: int = 0,
             training: bool = False) -> list[Batch]:
    """Training plans hold grad_accum micro-batches per step, in runs of steps_per_execution."""
    micro = config.train.grad_accum if training else 1
    return plan_batches(data.encoded.packed_lengths, buckets_for(config),
                        config.train.batch_size * micro, shuffle=shuffle, seed=config.train.seed,
                        epoch=epoch, run_length=config.train.steps_per_execution if training else 1)


def bucketed(data: LabelledData, trainer: Trainer, tokenizer, config: RunConfig, *,
             shuffle: bool, epoch: int = 0, training: bool = False,
             start: int = 0) -> BucketedInput:
    """The input of the plan's steps from `start` on (a resumed epoch skips the steps taken)."""
    plan = plan_for(data, config, shuffle=shuffle, epoch=epoch, training=training)[start:]
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


def train(config: RunConfig, *, quiet: bool = False,
          strategy: tf.distribute.Strategy | None = None, resume: bool | None = None,
          overwrite: bool = False) -> dict:
    """Fine-tunes `config.model.name` on `config.data.train`; returns the final metrics.

    Writes the run directory described in `bertfit.train.run_dir` (a new `runs/<date>-<time>`
    when `config.output_dir` is None). Every epoch evaluates on `config.data.eval` (when given)
    and keeps the best checkpoint by `train.best_metric`.

    Args:
        config: the run.
        quiet: no progress display.
        strategy: a `tf.distribute` strategy (default: what `config.train.strategy` picks).
        resume: True: continue the unfinished run in the output directory (or fail); False:
            never; None: continue it when its config is this one, refuse any other run there.
        overwrite: clear a previous run in the output directory first.

    Raises:
        TrainingInterrupted: SIGTERM or Ctrl-C stopped training after saving a checkpoint.
    """
    config.validate()
    new_directory = config.output_dir is None
    if new_directory:
        config = dataclasses.replace(config, output_dir=str(new_run_path()))
    run_dir = RunDir(config.output_dir)
    resuming = run_dir.plan_start(config, resume=resume, overwrite=overwrite)
    t = config.train
    strategy = strategy or make_strategy(t.strategy, t.cpu_replicas, t.tpu, t.workers,
                                         t.worker_index)
    per_replica_batch(config.train.batch_size, strategy)
    run_dir.write = _is_chief(strategy)
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
    run_dir.create(overwrite=overwrite)
    if resuming:
        _check_same_labels(run_dir, label_map)
    else:
        run_dir.save_setup(config, label_map, checkpoint.config, tokenizer, checkpoint.vocab_file)
    if new_directory:
        run_dir.link_as_latest()
    checkpoints = RunCheckpoints(trainer.model, trainer.optimizer,
                                 _writable(run_dir.latest_dir, run_dir),
                                 _writable(run_dir.best_dir, run_dir))
    state = TrainingState(data_fingerprint=data_fingerprint(train_examples))
    if resuming:
        state = _resume(run_dir, checkpoints, state)
    run_dir.log(f"model {config.model.name} ({checkpoint.format}); "
                f"{trainer.model.encoder.load_report}")
    run_dir.log(f"train {config.data.train}: {len(train_data)} of {len(all_train)} rows; "
                f"{len(label_map)} labels {list(label_map.labels)}; buckets {buckets_for(config)}; "
                f"{steps_per_epoch} steps/epoch; strategy {type(strategy).__name__} with "
                f"{strategy.num_replicas_in_sync} replicas; precision {config.model.precision} "
                f"({policy}); grad_accum {t.grad_accum} (effective batch "
                f"{t.batch_size * t.grad_accum}); steps_per_execution {t.steps_per_execution}")
    run_dir.save_metrics({"status": RUNNING, "epochs": state.history})

    epoch_run = EpochRunner(trainer, tokenizer, config, run_dir, checkpoints, quiet)
    with StopRequests() as stop:
        while state.epoch < config.train.epochs:
            epoch_run.train(train_data, state, stop)
            epoch_run.finish(eval_data, state, stop)

    final = {"status": FINISHED, "epochs": state.history,
             "wall_seconds": time.perf_counter() - started,
             "train_num_examples": len(train_data), "run_dir": str(run_dir.path),
             "trace_counts": trainer.trace_counts()}
    if eval_data is not None:
        final["final"] = state.history[-1]["eval"]
        final["best"] = {config.train.best_metric: state.best_value}
    run_dir.save_metrics(final)
    run_dir.log("finished")
    return final


def data_fingerprint(examples: list[Example]) -> str:
    """A digest of the training rows (texts, pairs, labels, order)."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.text, e.text_pair, e.label]).encode("utf-8"))
    return digest.hexdigest()


def _check_same_labels(run_dir: RunDir, label_map: LabelMap) -> None:
    saved = run_dir.load_labels()
    if saved != label_map:
        raise DataError(
            f"the training file's labels {list(label_map.labels)} are not those of the run being "
            f"resumed in {run_dir.path} ({list(saved.labels)}): the data changed. Restore it, "
            "or start a new run (--overwrite or another --output-dir).",
            path=str(run_dir.labels_file))


def _resume(run_dir: RunDir, checkpoints: RunCheckpoints,
            fresh: TrainingState) -> TrainingState:
    """Restores `latest` (when a checkpoint was saved before the run stopped) and drops the
    steps logged after it."""
    run_dir.remove_checkpoint_leftovers()
    state = checkpoints.restore_latest() or fresh
    if state.data_fingerprint != fresh.data_fingerprint:
        raise DataError(
            "the training rows differ from those the run started with (texts, labels or order "
            "changed); resuming would not continue the same run. Restore the data, or start a "
            "new run (--overwrite or another --output-dir).", path=str(run_dir.path))
    run_dir.keep_steps(state.global_step)
    where = f"epoch {state.epoch + 1}, step {state.step}"
    run_dir.log(f"resumed at {where} (global step {state.global_step})")
    if run_dir.write:  # even with --quiet: continuing a run is never silent
        print(f"resuming the unfinished run in {run_dir.path} at {where}", file=sys.stderr)
    return state


class EpochRunner:
    """One epoch's training (checkpointing, logging, stopping between host calls) and its
    evaluation, continuing from a `TrainingState`."""

    def __init__(self, trainer: Trainer, tokenizer, config: RunConfig, run_dir: RunDir,
                 checkpoints: RunCheckpoints, quiet: bool):
        self.trainer, self.tokenizer, self.config = trainer, tokenizer, config
        self.run_dir, self.checkpoints, self.quiet = run_dir, checkpoints, quiet

    def train(self, data: LabelledData, state: TrainingState, stop: StopRequests) -> None:
        """Takes the epoch's remaining steps; saves `latest` at the end (and every
        save_every_steps / save_every_minutes), or on a stop request before raising."""
        batches = bucketed(data, self.trainer, self.tokenizer, self.config, shuffle=True,
                           epoch=state.epoch, training=True, start=state.step)
        total = state.step + len(batches)
        if not len(batches):
            return  # the epoch's training was done; its evaluation remains
        t = self.config.train
        progress = Progress(f"epoch {state.epoch + 1}/{t.epochs}", total, quiet=self.quiet,
                            first_step=state.step)
        plan = iter(batches.plan)
        seen, last_time = 0, time.perf_counter()
        last_save = (state.global_step, last_time)
        with explain_errors():  # known TF/XLA errors in plain words
            for losses in self.trainer.run_plan(batches):
                rows = []
                for loss in losses:
                    examples = next(plan).num_examples
                    state.step += 1
                    state.global_step += 1
                    state.epoch_loss_sum += loss * examples
                    state.epoch_examples += examples
                    seen += examples
                    rows.append({"epoch": state.epoch + 1, "step": state.step,
                                 "global_step": state.global_step, "loss": loss})
                now = time.perf_counter()
                state.epoch_seconds += now - last_time
                last_time = now
                self.run_dir.append_steps(rows)
                progress.update(state.step, seen,
                                loss=state.epoch_loss_sum / max(state.epoch_examples, 1))
                if stop.signal is not None:
                    self._stop(state, stop.signal)
                if _save_due(t, state.global_step, last_save):
                    self.checkpoints.save_latest(state)
                    last_save = (state.global_step, time.perf_counter())
        progress.close()
        self.checkpoints.save_latest(state)  # a stop during evaluation resumes with it

    def finish(self, eval_data: LabelledData | None, state: TrainingState,
               stop: StopRequests) -> None:
        """Evaluates the epoch, keeps the best weights, records it and moves to the next."""
        record = {"epoch": state.epoch + 1,
                  "train_loss": state.epoch_loss_sum / max(state.epoch_examples, 1),
                  "train_examples": state.epoch_examples,
                  "train_examples_per_second": state.epoch_examples / max(state.epoch_seconds,
                                                                          1e-9),
                  "train_seconds": state.epoch_seconds}
        best_metric = self.config.train.best_metric
        if eval_data is not None:
            metrics, _ = evaluate_data(self.trainer, eval_data, self.tokenizer, self.config,
                                       quiet=self.quiet)
            record["eval"] = metrics
            if is_better(best_metric, metrics[best_metric], state.best_value):
                state.best_value = metrics[best_metric]
                record["best"] = True
        if eval_data is None or record.get("best"):
            self.checkpoints.save_best(state)  # without evaluation: the latest epoch
        state.history.append(record)
        state.epoch += 1
        state.step = 0
        state.epoch_loss_sum, state.epoch_examples, state.epoch_seconds = 0.0, 0, 0.0
        self.run_dir.log(f"epoch {record['epoch']}: {record}")
        self.run_dir.save_metrics({"status": RUNNING, "epochs": state.history})
        if stop.signal is not None:
            self._stop(state, stop.signal)

    def _stop(self, state: TrainingState, signum: int) -> None:
        path = self.checkpoints.save_latest(state)
        where = f"epoch {state.epoch + 1}, step {state.step}"
        self.run_dir.log(f"stopped by {signal.Signals(signum).name} at {where}; saved {path}")
        raise TrainingInterrupted(
            f"stopped by {signal.Signals(signum).name} at {where}; checkpoint saved to {path}. "
            f"Run the same command again to resume (or add --resume).", signum)


def _save_due(t: TrainConfig, global_step: int, last_save: tuple[int, float]) -> bool:
    step, when = last_save
    return bool((t.save_every_steps and global_step - step >= t.save_every_steps)
                or (t.save_every_minutes
                    and time.perf_counter() - when >= 60 * t.save_every_minutes))


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


# ---- evaluate / predict with a trained classifier ----

def evaluate(run_path: str | Path, data_path: str, *, quiet: bool = False) -> dict:
    """Accuracy, macro-F1, loss and num_examples of a trained run (or an export) on a labelled
    file; every row counts."""
    classifier = load_classifier(run_path)
    examples = read_examples(data_path, classifier_source_spec(classifier))
    labels = LabelMap(tuple(classifier.labels)).encode_all(examples, data_path)
    start = time.perf_counter()
    probabilities = _probabilities(classifier, examples, "evaluate", quiet)
    seconds = time.perf_counter() - start
    metrics = classification_metrics(labels, probabilities)
    metrics.update(num_examples=len(examples), wall_seconds=seconds,
                   examples_per_second=len(examples) / max(seconds, 1e-9))
    return metrics


def predict(run_path: str | Path, data_path: str, *, quiet: bool = False) -> list[dict]:
    """One prediction per input row, in input order: label and probability per label."""
    classifier = load_classifier(run_path)
    examples = read_examples(data_path, classifier_source_spec(classifier),
                             labels_required=False)
    probabilities = _probabilities(classifier, examples, "predict", quiet)
    return classifier.rows(probabilities)


def classifier_source_spec(classifier: Classifier) -> SourceSpec:
    """How to read files for a trained classifier: the columns its training files used."""
    columns = classifier.metadata.get("columns", {})
    return SourceSpec(text_column=columns.get("text", "text"),
                      text_pair_column=columns.get("text_pair"),
                      label_column=columns.get("label", "label"))


def _probabilities(classifier: Classifier, examples: list[Example], title: str,
                   quiet: bool) -> np.ndarray:
    pairs = [e.text_pair for e in examples] if classifier.pairs else None
    progress = Progress(title, -(-len(examples) // classifier.batch_size), quiet=quiet)
    probabilities = classifier.predict_proba([e.text for e in examples], pairs, progress)
    progress.close()
    return probabilities
