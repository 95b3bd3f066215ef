"""The main job: `train` a classifier from labelled text files (`bertfit.inference.run`
evaluates and predicts with it)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import signal
import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertfit.config import (
    BALANCED,
    NO_CLASS_WEIGHTS,
    PRECISION_POLICIES,
    RunConfig,
    TrainConfig,
    per_replica_batch,
)
from bertfit.data.pipeline import buckets_for
from bertfit.data.profile import LengthProfile
from bertfit.data.sources import Example
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL, Task
from bertfit.errors import BertfitError, ConfigError, DataError, TrainingInterrupted
from bertfit.progress import Progress
from bertfit.report import describe_epoch, epoch_table, write_report
from bertfit.training.checkpointing import RunCheckpoints, TrainingState
from bertfit.training.interrupt import StopRequests
from bertfit.training.loop import Trainer, XlaChoice
from bertfit.training.metrics import (
    TASK_METRICS,
    best_threshold,
    collapse_warning,
    default_metric,
    is_better,
    task_metrics,
)
from bertfit.training.run_dir import FINISHED, RUNNING, RunBusy, RunDir, new_run_path
from bertfit.training.setup import (
    LabelledData,
    bucketed,
    encode_labelled,
    infer_run_task,
    load_checkpoint,
    make_trainer,
    plan_for,
    read_labelled,
    read_training_examples,
    run_tokenizer,
    with_chosen_buckets,
)
from bertfit.training.strategy import check_hardware, make_strategy
from bertfit.training.summaries import RunSummaries
from bertfit.translate import explain_errors

DIVERGED = "diverged"  # metrics.json's status when the loss stopped being a number


def evaluate_data(
    trainer: Trainer,
    data: LabelledData,
    tokenizer,
    config: RunConfig,
    task: Task,
    title: str = "eval",
    quiet: bool = False,
) -> tuple[dict, np.ndarray]:
    """The task's metrics over every example of `data` (none dropped) and the outputs."""
    batches = bucketed(data, trainer, tokenizer, config, shuffle=False)
    progress = Progress(title, len(batches), quiet=quiet)
    start = time.perf_counter()
    outputs = trainer.predict(batches, len(data), progress)
    progress.close()
    seconds = time.perf_counter() - start
    metrics = task_metrics(task, data.labels, outputs)
    metrics.update(
        num_examples=len(data),
        wall_seconds=seconds,
        examples_per_second=len(data) / max(seconds, 1e-9),
    )
    return metrics, outputs


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


def train(
    config: RunConfig,
    *,
    quiet: bool = False,
    strategy: tf.distribute.Strategy | None = None,
    resume: bool | None = None,
    overwrite: bool = False,
    report: bool = True,
) -> dict:
    """Fine-tunes `config.model.name` on `config.data.train`; returns the final metrics.

    Writes the run directory described in `bertfit.training.run_dir` (a new `runs/<date>-<time>`
    when `config.output_dir` is None). Every epoch evaluates on `config.data.eval` (when given)
    and keeps the best checkpoint by `train.best_metric`.

    Args:
        config: the run.
        quiet: no progress display.
        strategy: a `tf.distribute` strategy (default: what `config.train.strategy` picks).
        resume: True: continue the unfinished run in the output directory (or fail); False:
            never; None: continue it when its config is this one, refuse any other run there.
        overwrite: clear a previous run in the output directory first.
        report: write `report.html` (`bertfit report`) at the end.

    Raises:
        TrainingInterrupted: SIGTERM or Ctrl-C stopped training after saving a checkpoint.
    """
    config.validate()
    new_directory = config.output_dir is None
    if new_directory:
        config = dataclasses.replace(config, output_dir=str(new_run_path()))
    run_dir = RunDir(config.output_dir)
    run_dir.plan_start(config, resume=resume, overwrite=overwrite)  # refuse before any work
    t = config.train
    if strategy is None:
        check_hardware(t.strategy, config.model.precision, t.cpu_replicas, t.tpu)
    strategy = strategy or make_strategy(
        t.strategy, t.cpu_replicas, t.tpu, t.workers, t.worker_index
    )
    per_replica_batch(config.train.batch_size, strategy.num_replicas_in_sync)
    run_dir.write = _is_chief(strategy)
    lock = None
    while run_dir.write:
        try:
            lock = run_dir.lock()
            break
        except RunBusy:
            if not new_directory:
                raise
            # started in the same second as another run: take the next free name
            config = dataclasses.replace(config, output_dir=str(new_run_path()))
            run_dir = RunDir(config.output_dir)
    try:
        # decided again under the lock: another process may have written here meanwhile
        resuming = run_dir.plan_start(config, resume=resume, overwrite=overwrite)
        return _train(
            config,
            run_dir,
            strategy,
            resuming=resuming,
            new_directory=new_directory,
            quiet=quiet or not run_dir.write,
            overwrite=overwrite,
            report=report,
        )
    finally:
        if lock is not None:
            lock.release()


def _train(
    config: RunConfig,
    run_dir: RunDir,
    strategy: tf.distribute.Strategy,
    *,
    resuming: bool,
    new_directory: bool,
    quiet: bool,
    overwrite: bool,
    report: bool,
) -> dict:
    """`train` once the run directory is decided and locked."""
    t = config.train
    started = time.perf_counter()
    checkpoint = load_checkpoint(config)
    tokenizer = run_tokenizer(checkpoint, config)
    loaded = time.perf_counter()

    all_train = read_training_examples(config.data.train, config)
    train_examples = all_train[: config.data.max_train_examples]
    task, notes = infer_run_task(train_examples, config)
    best_metric = resolve_best_metric(config, task)
    train_data = encode_labelled(config.data.train, train_examples, config, tokenizer, task)
    train_data.weights = class_weights(config, task, train_data.labels)
    eval_data = (
        read_labelled(config.data.eval, config, tokenizer, task) if config.data.eval else None
    )
    if config.data.buckets == []:  # not given: chosen from the data (a resumed run keeps its own)
        saved = run_dir.load_config().data.buckets if resuming else []
        if saved is None:  # the run was started with --buckets none
            config = dataclasses.replace(
                config, data=dataclasses.replace(config.data, buckets=None)
            )
        else:
            xla = XlaChoice.for_run(config.train.jit_compile, strategy)
            config, note = with_chosen_buckets(
                config, train_data, saved or None, traced_per_bucket=xla.replica_step
            )
            notes.append(note)
    for note in notes if run_dir.write else ():
        print(f"bertfit: {note}", file=sys.stderr)
    tokenized = time.perf_counter()

    first_plan = plan_for(train_data, config, shuffle=False, training=True)
    steps_per_epoch = len(first_plan)
    total_steps = steps_per_epoch * config.train.epochs
    keras.utils.set_random_seed(config.train.seed)
    trainer = make_trainer(checkpoint, task, config, strategy, total_steps)
    built = time.perf_counter()
    run_dir.create(overwrite=overwrite)
    if resuming:
        _check_same_task(run_dir, task)
    else:
        run_dir.save_setup(config, task, checkpoint.config, tokenizer)
    if new_directory:
        run_dir.link_as_latest()
    checkpoints = RunCheckpoints(
        trainer.model,
        trainer.optimizer,
        _writable(run_dir.latest_dir, run_dir),
        _writable(run_dir.best_dir, run_dir),
    )
    state = TrainingState(data_fingerprint=data_fingerprint(train_examples))
    if resuming:
        state = _resume(run_dir, checkpoints, state)
    lengths = LengthProfile.of(train_data.encoded.packed_lengths, buckets_for(config), first_plan)
    about = {
        "task": task.kind,
        "labels": list(task.labels),
        "model": {
            "name": config.model.name,
            "format": checkpoint.format,
            "load_report": str(trainer.model.encoder.load_report),
            "parameters": sum(int(np.prod(v.shape)) for v in trainer.model.weights),
        },
        "data": {
            "train": config.data.train,
            "train_rows": len(train_data),
            "train_rows_read": len(all_train),
            "eval": config.data.eval,
            "eval_rows": len(eval_data) if eval_data is not None else 0,
            "token_lengths": lengths.to_dict(),
        },
        "strategy": {"name": type(strategy).__name__, "replicas": strategy.num_replicas_in_sync},
    }
    summaries = RunSummaries(run_dir.path / "tensorboard" if run_dir.write else None)
    summaries.config(config.to_dict())
    summaries.lengths(lengths)
    run_dir.log(
        f"model {config.model.name} ({checkpoint.format}); {trainer.model.encoder.load_report}"
    )
    for note in notes:
        run_dir.log(note)
    run_dir.log(
        f"train {config.data.train}: {len(train_data)} of {len(all_train)} rows; "
        f"{task.kind}, labels {list(task.labels)}; buckets {buckets_for(config)}; "
        f"{steps_per_epoch} steps/epoch; strategy {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replicas; precision {config.model.precision} "
        f"({PRECISION_POLICIES[config.model.precision]}); grad_accum {t.grad_accum} "
        f"(effective batch {t.batch_size * t.grad_accum}); steps_per_execution "
        f"{t.steps_per_execution}; {trainer.xla.describe()}"
    )
    if run_dir.write and not quiet:
        print(f"bertfit: {trainer.xla.describe()}; --jit-compile chooses", file=sys.stderr)
    run_dir.save_metrics({"status": RUNNING, "epochs": state.history, **about})

    epoch_run = EpochRunner(
        trainer, tokenizer, config, task, best_metric, run_dir, checkpoints, quiet, summaries, about
    )
    with StopRequests() as stop:
        while state.epoch < config.train.epochs:
            epoch_run.train(train_data, state, stop)
            epoch_run.finish(eval_data, state, stop)
    summaries.close()

    final = {
        "status": FINISHED,
        "epochs": state.history,
        "wall_seconds": time.perf_counter() - started,
        "train_num_examples": len(train_data),
        "run_dir": str(run_dir.path),
        "trace_counts": trainer.trace_counts(),
        "time": time_split(
            state.history,
            trainer.trace_seconds,
            load=loaded - started,
            tokenize=tokenized - loaded,
            build=built - tokenized,
            save=checkpoints.seconds,
            wall=time.perf_counter() - started,
        ),
        **about,
    }
    if eval_data is not None:
        final["final"] = state.history[-1]["eval"]
        final["best"] = {best_metric: state.best_value}
        tuned = [
            r["eval"]["threshold"]
            for r in state.history
            if r.get("best") and "threshold" in r["eval"]
        ]
        if config.train.tune_threshold and tuned:
            run_dir.save_task(dataclasses.replace(task, threshold=tuned[-1]))
    run_dir.save_metrics(final)
    run_dir.log("finished")
    if run_dir.write and not quiet:
        print(epoch_table(final), file=sys.stderr)
    if report and run_dir.write:
        final["report"] = str(write_report(run_dir.path))
        if not quiet:
            print(f"report: {final['report']}", file=sys.stderr)
    return final


def time_split(
    history: list[dict],
    trace_seconds: dict[str, float],
    *,
    load: float,
    tokenize: float,
    build: float,
    save: float,
    wall: float,
) -> dict:
    """Where the run's time went, in seconds: loading the checkpoint, reading and tokenizing,
    building the model and optimizer, the calls that traced and compiled, training and
    evaluation (without those calls), writing checkpoints, and the rest of `wall` (run
    directory, logs, summaries)."""
    train = sum(r["train_seconds"] for r in history)
    evaluation = sum(r["eval"]["wall_seconds"] for r in history if "eval" in r)
    split = {
        "load": load,
        "tokenize": tokenize,
        "build": build,
        "trace": sum(trace_seconds.values()),
        "train": max(0.0, train - trace_seconds["train_step"]),
        "eval": max(0.0, evaluation - trace_seconds["predict_step"]),
        "save": save,
    }
    return {**split, "other": max(0.0, wall - sum(split.values())), "wall": wall}


def data_fingerprint(examples: list[Example]) -> str:
    """A digest of the training rows (texts, pairs, labels, order)."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.text, e.text_pair, e.label]).encode("utf-8"))
    return digest.hexdigest()


def resolve_best_metric(config: RunConfig, task: Task) -> str:
    """`--best-metric`, or the task's default; it must be one of the task's metrics."""
    metric = config.train.best_metric or default_metric(task.kind)
    if metric not in TASK_METRICS[task.kind]:
        raise ConfigError(
            f"--best-metric {metric} is not a {task.kind} metric; choose one of "
            f"{', '.join(TASK_METRICS[task.kind])}."
        )
    return metric


def _check_same_task(run_dir: RunDir, task: Task) -> None:
    saved = run_dir.load_task()
    if (saved.kind, saved.labels) != (task.kind, task.labels):
        raise DataError(
            f"the training file's labels ({task.kind}, {list(task.labels)}) are not those of the "
            f"run being resumed in {run_dir.path} ({saved.kind}, {list(saved.labels)}): the "
            "data changed. Restore it, or start a new run (--overwrite or another --output-dir).",
            path=str(run_dir.labels_file),
            code="data-changed",
        )


def _resume(run_dir: RunDir, checkpoints: RunCheckpoints, fresh: TrainingState) -> TrainingState:
    """Restores `latest` (when a checkpoint was saved before the run stopped) and drops the
    steps logged after it."""
    run_dir.remove_checkpoint_leftovers()
    state = checkpoints.restore_latest() or fresh
    if state.data_fingerprint != fresh.data_fingerprint:
        raise DataError(
            "the training rows differ from those the run started with (texts, labels or order "
            "changed); resuming would not continue the same run. Restore the data, or start a "
            "new run (--overwrite or another --output-dir).",
            path=str(run_dir.path),
            code="data-changed",
        )
    run_dir.keep_steps(state.global_step)
    where = f"epoch {state.epoch + 1}, step {state.step}"
    run_dir.log(f"resumed at {where} (global step {state.global_step})")
    if run_dir.write:  # even with --quiet: continuing a run is never silent
        print(f"resuming the unfinished run in {run_dir.path} at {where}", file=sys.stderr)
    return state


class EpochRunner:
    """One epoch's training (checkpointing, logging, stopping between host calls) and its
    evaluation, continuing from a `TrainingState`."""

    def __init__(
        self,
        trainer: Trainer,
        tokenizer,
        config: RunConfig,
        task: Task,
        best_metric: str,
        run_dir: RunDir,
        checkpoints: RunCheckpoints,
        quiet: bool,
        summaries: RunSummaries,
        about: dict,
    ):
        self.trainer, self.tokenizer, self.config = trainer, tokenizer, config
        self.task, self.best_metric = task, best_metric
        self.run_dir, self.checkpoints, self.quiet = run_dir, checkpoints, quiet
        self.summaries, self.about = summaries, about

    def train(self, data: LabelledData, state: TrainingState, stop: StopRequests) -> None:
        """Takes the epoch's remaining steps; saves `latest` at the end (and every
        save_every_steps / save_every_minutes), or on a stop request before raising."""
        batches = bucketed(
            data,
            self.trainer,
            self.tokenizer,
            self.config,
            shuffle=True,
            epoch=state.epoch,
            training=True,
            start=state.step,
        )
        total = state.step + len(batches)
        if not len(batches):
            return  # the epoch's training was done; its evaluation remains
        t = self.config.train
        progress = Progress(
            f"epoch {state.epoch + 1}/{t.epochs}", total, quiet=self.quiet, first_step=state.step
        )
        plan = iter(batches.plan)
        seen, last_time = 0, time.perf_counter()
        last_save = (state.global_step, last_time)
        with explain_errors():  # known TF/XLA errors in plain words
            for results in self.trainer.run_plan(batches):
                now, wall_time = time.perf_counter(), time.time()
                rows = []
                diverged = None
                for loss, norm in results:
                    examples = next(plan).num_examples
                    state.step += 1
                    state.global_step += 1
                    if diverged is None and not math.isfinite(loss):
                        diverged = (loss, state.step, state.global_step)
                    state.epoch_loss_sum += loss * examples
                    state.epoch_examples += examples
                    seen += examples
                    rows.append(
                        {
                            "epoch": state.epoch + 1,
                            "step": state.step,
                            "global_step": state.global_step,
                            "loss": loss,
                            "learning_rate": self.trainer.schedule.at(state.global_step - 1),
                            "grad_norm": norm,
                            "examples": examples,
                            "wall_time": wall_time,
                        }
                    )
                call_rate = sum(r["examples"] for r in rows) / max(now - last_time, 1e-9)
                for row in rows:
                    row["examples_per_second"] = call_rate
                state.epoch_seconds += now - last_time
                last_time = now
                self.run_dir.append_steps(rows)
                self.summaries.steps(rows)
                if diverged is not None:
                    progress.close()
                    self._diverged(state, *diverged)
                progress.update(
                    state.step, seen, loss=state.epoch_loss_sum / max(state.epoch_examples, 1)
                )
                if stop.signal is not None:
                    self._stop(state, stop.signal)
                if _save_due(t, state.global_step, last_save):
                    self.checkpoints.save_latest(state)
                    last_time = time.perf_counter()  # the save counts as saving, not training
                    last_save = (state.global_step, last_time)
        progress.close()
        self.checkpoints.save_latest(state)  # a stop during evaluation resumes with it

    def finish(
        self, eval_data: LabelledData | None, state: TrainingState, stop: StopRequests
    ) -> None:
        """Evaluates the epoch, keeps the best weights, records it and moves to the next."""
        record = {
            "epoch": state.epoch + 1,
            "train_loss": state.epoch_loss_sum / max(state.epoch_examples, 1),
            "train_examples": state.epoch_examples,
            "train_examples_per_second": state.epoch_examples / max(state.epoch_seconds, 1e-9),
            "train_seconds": state.epoch_seconds,
        }
        best_metric = self.best_metric
        if eval_data is not None:
            metrics = self._evaluate(eval_data)
            record["eval"] = metrics
            self.summaries.evaluation(metrics, state.global_step)
            if is_better(best_metric, metrics[best_metric], state.best_value):
                state.best_value = metrics[best_metric]
                record["best"] = True
        if eval_data is None or record.get("best"):
            self.checkpoints.save_best(state)  # without evaluation: the latest epoch
        state.history.append(record)
        state.epoch += 1
        state.step = 0
        state.epoch_loss_sum, state.epoch_examples, state.epoch_seconds = 0.0, 0, 0.0
        self.run_dir.log(describe_epoch(record))
        self.run_dir.save_metrics({"status": RUNNING, "epochs": state.history, **self.about})
        if stop.signal is not None:
            self._stop(state, stop.signal)

    def _evaluate(self, data: LabelledData) -> dict:
        """The epoch's evaluation; with --tune-threshold the multi-label threshold that suits
        these outputs best; a warning when single-label predictions collapsed."""
        metrics, outputs = evaluate_data(
            self.trainer, data, self.tokenizer, self.config, self.task, quiet=self.quiet
        )
        self.run_dir.save_eval_outputs(data.labels, outputs)
        if self.config.train.tune_threshold and self.task.kind == MULTI_LABEL:
            tuned = dataclasses.replace(self.task, threshold=best_threshold(data.labels, outputs))
            metrics.update(task_metrics(tuned, data.labels, outputs))
        warning = collapse_warning(self.task, data.labels, outputs)
        if warning:
            metrics["warnings"] = [warning]
            self.run_dir.log(f"warning: {warning}")
            if self.run_dir.write:
                print(f"bertfit: warning: {warning}", file=sys.stderr)
        return metrics

    def _diverged(self, state: TrainingState, loss: float, step: int, global_step: int) -> None:
        """Ends a run whose loss stopped being a number: nothing after it can be trusted."""
        t = self.config.train
        rate = self.trainer.schedule.at(global_step - 1)
        fp16 = self.config.model.precision == "mixed_fp16"
        message = (
            f"the training loss became {loss} at epoch {state.epoch + 1}, step {step} (global "
            f"step {global_step}, learning rate {rate:.3g}): training diverged and was stopped. "
            f"The usual cause is a learning rate too high for this model (--learning-rate "
            f"{t.learning_rate:g}; fine-tuning uses 1e-5 to 1e-4)"
            + (", or float16 overflowing (try --precision mixed_bf16)" if fp16 else "")
            + "; lower it and rerun with --overwrite. Its steps are in "
            f"{self.run_dir.steps_file}."
        )
        self.run_dir.log(f"error: {message}")
        self.run_dir.save_metrics(
            {"status": DIVERGED, "error": message, "epochs": state.history, **self.about}
        )
        raise TrainingDiverged(message)

    def _stop(self, state: TrainingState, signum: int) -> None:
        path = self.checkpoints.save_latest(state)
        where = f"epoch {state.epoch + 1}, step {state.step}"
        self.run_dir.log(f"stopped by {signal.Signals(signum).name} at {where}; saved {path}")
        raise TrainingInterrupted(
            f"stopped by {signal.Signals(signum).name} at {where}; checkpoint saved to {path}. "
            f"Run the same command again to resume (or add --resume).",
            signum,
        )


class TrainingDiverged(BertfitError):
    """The training loss became NaN or infinite; the message says where and what to change."""


def _save_due(t: TrainConfig, global_step: int, last_save: tuple[int, float]) -> bool:
    step, when = last_save
    return bool(
        (t.save_every_steps and global_step - step >= t.save_every_steps)
        or (t.save_every_minutes and time.perf_counter() - when >= 60 * t.save_every_minutes)
    )


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )


def _writable(directory: Path, run_dir: RunDir) -> Path:
    """Non-chief workers must still save (collectives), but to a scratch directory."""
    if run_dir.write:
        return directory
    return Path(tempfile.mkdtemp(prefix="bertfit-worker-"))
