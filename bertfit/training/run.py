"""`train`: fine-tunes a classifier on labelled text files and writes its run directory.

It reads top to bottom as: plan (which directory, resume or not, locked) → prepare
(`training.setup.prepare`: checkpoint, tokenizer, data, task, buckets, trainer) → write the
setup → epochs (`EpochRunner`) → the `RunSummary` (metrics.json).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertfit import storage
from bertfit.checkpoints.pooling import untrained_pooler
from bertfit.config import PRECISION_POLICIES, RunConfig, TrainConfig
from bertfit.data.profile import LengthProfile
from bertfit.data.stream_source import auto_streaming
from bertfit.data.tasks import MULTI_LABEL
from bertfit.data.training_data import LabelledData
from bertfit.errors import BertfitError, ConfigError, DataError, TrainingInterrupted
from bertfit.progress import Console
from bertfit.runs.calibration import Calibration, fit_calibration, label_thresholds
from bertfit.runs.metrics import HEADLINE_METRICS, is_better, task_metrics
from bertfit.runs.records import (
    DIVERGED,
    FAILED,
    FINISHED,
    RUNNING,
    EarlyStop,
    EpochRecord,
    RunSummary,
    StepEvaluation,
)
from bertfit.runs.run_dir import BEFORE_RUN_ENTRIES
from bertfit.training import remote_run
from bertfit.training.backends import backend_of
from bertfit.training.checkpointing import (
    RunCheckpoints,
    TrainingState,
    write_adapter_config,
)
from bertfit.training.collapse import collapse_warning
from bertfit.training.few_shot import train_on_pairs
from bertfit.training.interrupt import StopRequests
from bertfit.training.run_dir import (
    RUNS_ROOT,
    RunBusy,
    TrainingRunDir,
    new_run_path,
    unfinished_run_of,
    with_saved_decisions,
)
from bertfit.training.run_length import RunLength
from bertfit.training.setup import RunSetup, prepare
from bertfit.training.summaries import RunSummaries
from bertfit.training.xla import XlaChoice
from bertfit.translate import error_summary, explain_errors

if TYPE_CHECKING:
    import tensorflow as tf


def train(
    config: RunConfig,
    *,
    quiet: bool = False,
    strategy: tf.distribute.Strategy | None = None,
    resume: bool | None = None,
    overwrite: bool = False,
    adapt: Callable[[RunSetup], None] | None = None,
) -> RunSummary:
    """Fine-tunes `config.model.name` on `config.data.train`; returns the run's summary.

    Writes the run directory described in `bertfit.training.run_dir` (a new `runs/<date>-<time>`
    when `config.output_dir` is None, or the newest unfinished run of this config there, which
    it resumes). A training file over `$BERTFIT_STREAM_ABOVE_MB` is streamed (`auto_streaming`).
    Every epoch evaluates on `config.data.eval` (when given)
    and keeps the best checkpoint by `train.best_metric`, also every `train.eval_every_steps`
    optimizer steps; `train.early_stopping_patience` ends the run after that many evaluations
    without an improvement. `bertfit.write_report(run_dir)` (which `bertfit train` runs) turns
    it into report.html.

    Args:
        config: the run.
        quiet: no progress display.
        strategy: a `tf.distribute` strategy (default: what `config.train.strategy` picks);
            with `--backend jax` none (its `JaxTrainer` splits batches over the JAX devices).
        resume: True: continue the unfinished run in the output directory (or fail); False:
            never; None: continue it when its config is this one, refuse any other run there.
        overwrite: clear a previous run in the output directory first.
        adapt: changes the setup before the first step (`bertfit distill`: the teacher's
            targets and the distillation loss); the data's rows and the buckets stay.

    Raises:
        TrainingInterrupted: SIGTERM or Ctrl-C stopped training after saving a checkpoint.
        TrainingDiverged: the loss stopped being a number.
    """
    config.validate()
    config, streaming_note = auto_streaming(config)  # a large file: said before the long wait
    if streaming_note:
        Console(quiet=quiet).say(f"bertfit: {streaming_note}")
    backend = backend_of(config)
    # JAX's process 0 alone plans, claims and writes the run (every host may see the directory)
    writes_run = backend.join()
    if writes_run and config.output_dir is not None and not storage.is_url(config.output_dir):
        TrainingRunDir(config.output_dir).plan_start(config, resume=resume, overwrite=overwrite)
        _refuse_a_student_without_its_teacher(config.output_dir, adapt, overwrite)
    backend.check(config, distilling=adapt is not None)
    strategy, xla = backend.placement(config, strategy)
    if not (writes_run and backend.chief(strategy)):
        return _train_as_worker(config, strategy, xla)
    with _claimed(config, resume=resume, overwrite=overwrite) as (config, run_dir, resuming, new):
        console = Console(quiet=quiet)
        return _train(config, run_dir, strategy, xla, resuming, console, overwrite, new, adapt)


def _refuse_a_student_without_its_teacher(output_dir: str, adapt, overwrite: bool) -> None:
    """A `bertfit distill` student trained by `bertfit train` would silently lose its
    teacher's soft labels (the loss is the plain task loss there)."""
    if adapt is None and not overwrite and (Path(output_dir) / "distill").is_dir():
        raise ConfigError(
            f"{output_dir} is a `bertfit distill` student (it holds distill/, the teacher's "
            "labels): continue it with the same `bertfit distill` command, or pass "
            "--overwrite to train a plain run there."
        )


def _train_as_worker(config: RunConfig, strategy, xla: XlaChoice) -> RunSummary:
    """A non-chief worker (with --backend jax, a process other than JAX's process 0) takes
    part in every step and collective, checkpoint saves included, but writes into a scratch
    directory, removed at the end, and prints nothing: the chief writes the run and speaks
    for it."""
    scratch = tempfile.mkdtemp(prefix="bertfit-worker-")
    try:
        config = dataclasses.replace(config, output_dir=scratch)
        silent = Console(silent=True)
        summary = _train(
            config, TrainingRunDir(scratch), strategy, xla, False, silent, False, False
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dataclasses.replace(summary, run_dir=None)


@contextlib.contextmanager
def _claimed(
    config: RunConfig, *, resume: bool | None, overwrite: bool
) -> Iterator[tuple[RunConfig, TrainingRunDir, bool, bool]]:
    """The run directory, locked for this run: `--output-dir`, or a new runs/<date>-<time>
    (the next free name when another run took this second's). Yields the config with its
    directory, the `TrainingRunDir`, whether the run resumes (decided under the lock) and whether
    the directory is a new runs/<date>-<time>."""
    if storage.is_url(config.output_dir):  # locked, staged and uploaded: remote_run
        with remote_run.claimed(config.output_dir) as run_dir:
            resuming = run_dir.plan_start(config, resume=resume, overwrite=overwrite)
            yield config, run_dir, resuming, False
        return
    new_directory = config.output_dir is None
    if new_directory and not overwrite:
        found = unfinished_run_of(config)
        if found is None and resume:
            raise ConfigError(
                f"--resume without --output-dir: {RUNS_ROOT} holds no unfinished run of this "
                "config to resume. Pass --output-dir RUN --resume, or leave --resume out."
            )
        if found is not None:
            run_dir, lock = found
            print(
                f"bertfit: {run_dir.shown} is an unfinished run of this config: resuming it "
                "(pass --output-dir for a new run elsewhere)",
                file=sys.stderr,
            )
            try:
                yield (
                    dataclasses.replace(config, output_dir=str(run_dir.path)),
                    run_dir,
                    True,
                    False,
                )
            finally:
                lock.release()
            return
    while True:
        if new_directory:
            config = dataclasses.replace(config, output_dir=str(new_run_path()))
        run_dir = TrainingRunDir(config.output_dir)
        try:
            lock = run_dir.lock()
            break
        except RunBusy:
            if not new_directory:
                raise
    try:
        # decided again under the lock: another process may have written here meanwhile
        resuming = run_dir.plan_start(config, resume=resume, overwrite=overwrite)
        yield config, run_dir, resuming, new_directory
    finally:
        lock.release()


def _train(
    config: RunConfig,
    run_dir: TrainingRunDir,
    strategy: tf.distribute.Strategy,
    xla: XlaChoice,
    resuming: bool,
    console: Console,
    overwrite: bool,
    new_directory: bool,
    adapt: Callable[[RunSetup], None] | None = None,
) -> RunSummary:
    """`train` once the run directory is decided and locked."""
    started = time.perf_counter()
    saved_buckets = run_dir.saved_buckets() if resuming else None
    if resuming:
        config = with_saved_decisions(run_dir.load_config(), config)
    setup = prepare(config, strategy, xla, saved_buckets=saved_buckets)
    if adapt is not None:
        adapt(setup)
    for note in setup.notes:
        console.say(f"bertfit: {note}")
    # after everything that can refuse the run's input; a distillation keeps its labels
    run_dir.create(overwrite=overwrite, keep=BEFORE_RUN_ENTRIES if adapt else ())
    if new_directory:
        run_dir.link_as_latest()
    if resuming:
        _check_same_task(run_dir, setup)
    else:
        run_dir.save_setup(setup.config, setup.task, setup.checkpoint.config, setup.tokenizer)
    trainer = setup.trainer
    lora = setup.config.model.lora_rank > 0  # the adapters apart, beside `best`
    adapter_dir = run_dir.adapter_dir if lora else None
    if lora:
        write_adapter_config(
            adapter_dir, trainer.model, setup.config.model.name, setup.config.model.lora_alpha
        )
    checkpoints = RunCheckpoints(
        trainer.model,
        trainer.optimizer,
        run_dir.latest_dir,
        run_dir.best_dir,
        run_dir.sync,
        adapter_dir,
    )
    state = TrainingState(
        data_fingerprint=setup.train.fingerprint(),
        packed_rows=None if setup.packing is None else setup.packing.rows,
    )
    if resuming:
        state = _resume(run_dir, checkpoints, state, console)
    lengths = setup.length_profile()
    summary = _describe(setup, lengths)
    if resuming:  # its schedule was decided when it started
        summary = dataclasses.replace(summary, schedule=run_dir.chosen_schedule())
    summaries = RunSummaries(run_dir.path / "tensorboard")
    summaries.config(setup.config.to_dict())
    windows = setup.window_profile()  # --long-documents chunk: its windows, not its lengths
    if windows is not None:
        summaries.windows(windows)
    else:
        summaries.lengths(lengths)
    length = RunLength.of(
        setup.config.train, len(setup.plan(setup.train, shuffle=False, training=True))
    )
    _log_setup(run_dir, setup, length)
    console.info(f"bertfit: {setup.xla.describe()}; --jit-compile chooses")
    run_dir.save_metrics(so_far(summary, state))

    with StopRequests() as stop, _failure_recorded(run_dir, summary, state):
        summary = _few_shot_stage(setup, run_dir, summary, state, console, stop)
        epochs = EpochRunner(setup, run_dir, checkpoints, console, summaries, summary, length)
        while state.epochs_remain(length.epochs):
            epochs.train(state, stop)
            epochs.finish(state, stop)
    summaries.close()

    summary = _finished(summary, setup, state, run_dir, checkpoints, started, length, console)
    run_dir.save_metrics(summary)
    run_dir.log("finished")
    console.info(summary.epoch_table())
    return summary


def _few_shot_stage(
    setup: RunSetup,
    run_dir: TrainingRunDir,
    summary: RunSummary,
    state: TrainingState,
    console: Console,
    stop: StopRequests,
) -> RunSummary:
    """`--few-shot`'s first stage (`training.few_shot`) before the run's first step, recorded
    as metrics.json's "few_shot"; a run resumed from a checkpoint has it in its weights. A
    stop request during it ends the run with nothing saved: the same command starts it over."""
    if setup.few_shot is None:
        return summary
    if state.global_step > 0:
        return dataclasses.replace(summary, few_shot=run_dir.few_shot_record())
    record = train_on_pairs(setup, setup.few_shot, backend_of(setup.config), console, stop)
    if stop.signal is not None:
        name = signal.Signals(stop.signal).name
        run_dir.log(f"stopped by {name} in the few-shot stage, before any checkpoint")
        raise TrainingInterrupted(
            f"stopped by {name} in the few-shot stage (step {record['steps']} of "
            f"{setup.few_shot.steps}), before the run saved a checkpoint: run the same command "
            "again to start the run over.",
            stop.signal,
            run_dir=run_dir.shown,
        )
    message = (
        f"few-shot stage 1: {record['steps']} steps on {record['pairs']} pairs in "
        f"{record['seconds']:.1f} s, cosine loss {record['first_loss']:.4f} -> "
        f"{record['last_loss']:.4f}, then the head fitted to its features (logistic "
        f"regression, {record['head']['solver_steps']} solver steps); stage 2: the head alone"
    )
    run_dir.log(message)
    console.info(f"bertfit: {message}")
    summary = dataclasses.replace(summary, few_shot=record)
    setup.seconds["few_shot"] = record["seconds"]  # this process's time (`time_split`)
    run_dir.save_metrics(so_far(summary, state))
    return summary


@contextlib.contextmanager
def _failure_recorded(
    run_dir: TrainingRunDir, summary: RunSummary, state: TrainingState
) -> Iterator:
    """An error that stops training (a checkpoint or a log line that could not be written, a
    step that raised) stops the run as "failed" in metrics.json, with the error, when that
    small write still succeeds; either way the run resumes from its last whole checkpoint, and
    one that saved none is replaced by the next command with other settings
    (`TrainingRunDir.plan_start`). A stop (SIGTERM, Ctrl-C) and a divergence say their own."""
    try:
        yield
    except (TrainingInterrupted, TrainingDiverged):
        raise
    except Exception as e:
        error = str(e) if isinstance(e, (BertfitError, OSError)) else error_summary(e)
        try:
            run_dir.log(f"error: {error}")
            failed = dataclasses.replace(so_far(summary, state), status=FAILED, error=error)
            run_dir.save_metrics(failed)
        except (OSError, BertfitError):
            pass  # the disk is full: metrics.json keeps "running", as unfinished as "failed"
        raise


def _describe(setup: RunSetup, lengths: LengthProfile) -> RunSummary:
    """The summary of a run that starts: what is trained, on what, how."""
    config, train, model = setup.config, setup.train, setup.trainer.model
    windows = setup.window_profile()  # --long-documents chunk: the report redraws it
    return RunSummary(
        status=RUNNING,
        task=setup.task.kind,
        labels=list(setup.task.labels),
        model={
            "name": config.model.name,
            "format": setup.checkpoint.format,
            "load_report": str(model.encoder.load_report),
            "parameters": sum(int(np.prod(v.shape)) for v in model.weights),
            "trainable_parameters": sum(int(np.prod(v.shape)) for v in setup.trainer.variables),
        },
        data={
            "train": config.data.train,
            "train_rows": len(train),
            "train_rows_read": setup.rows_read,
            "eval": config.data.eval,
            "eval_rows": len(setup.eval) if setup.eval is not None else 0,
            "token_lengths": lengths.to_dict(),
            **({"windows": windows.to_dict()} if windows is not None else {}),
        },
        strategy=setup.trainer.parallelism(),
        run_dir=storage.path_text(config.output_dir),
        schedule=setup.schedule,
    )


def _log_setup(run_dir: TrainingRunDir, setup: RunSetup, length: RunLength) -> None:
    config, t, trainer = setup.config, setup.config.train, setup.trainer
    parallel = setup.trainer.parallelism()
    run_dir.log(
        f"model {config.model.name} ({setup.checkpoint.format}); "
        f"{trainer.model.encoder.load_report}"
    )
    for note in setup.notes:
        run_dir.log(note)
    run_dir.log(
        f"train {config.data.train}: {len(setup.train)} of {setup.rows_read} rows; "
        f"{setup.task.kind}, labels {list(setup.task.labels)}; buckets {list(setup.buckets)}; "
        f"{length.describe()}; backend {t.backend}, strategy {parallel['name']} with "
        f"{parallel['replicas']} replicas; precision {config.model.precision} "
        f"({PRECISION_POLICIES[config.model.precision]}); grad_accum {t.grad_accum} "
        f"(effective batch {t.batch_size * t.grad_accum}); steps_per_execution "
        f"{t.steps_per_execution}; {setup.xla.describe()}"
    )


def _finished(
    summary: RunSummary,
    setup: RunSetup,
    state: TrainingState,
    run_dir: TrainingRunDir,
    checkpoints: RunCheckpoints,
    started: float,
    length: RunLength,
    console: Console,
) -> RunSummary:
    """The summary of a finished run, calibrated (`_calibrate`) when it has --eval."""
    trainer, wall = setup.trainer, time.perf_counter() - started
    at_max_steps = state.stopped_early is None and state.global_step == length.max_steps
    finished = dataclasses.replace(
        so_far(summary, state),
        status=FINISHED,
        stopped_at_max_steps=length.max_steps if at_max_steps else None,
        wall_seconds=wall,
        train_num_examples=len(setup.train),
        trace_counts=trainer.trace_counts(),
        time=time_split(
            state.history,
            trainer.trace_seconds,
            save=checkpoints.seconds,
            wall=wall,
            step_evaluations=_step_evaluation_seconds(state),
            **setup.seconds,
        ),
    )
    if setup.eval is None:
        return finished
    calibration = _calibrate(setup, run_dir, console)
    return dataclasses.replace(
        finished,
        final=state.history[-1].eval,
        best={setup.best_metric: state.best_value},
        calibration=calibration.summary() if calibration is not None else None,
    )


def _calibrate(setup: RunSetup, run_dir: TrainingRunDir, console: Console) -> Calibration | None:
    """Fits the calibration (temperatures; per-label thresholds for multi-label) on the best
    checkpoint's eval outputs, writes calibration.json and the calibrated task to labels.json,
    which every export and server then applies (`bertfit.runs.calibration`), and says what the
    eval rows could not measure (a temperature not kept, a threshold left at 0.5)."""
    saved = run_dir.load_best_eval_outputs()
    if saved is None:
        return None
    t = setup.config.train
    calibration = fit_calibration(
        setup.task,
        *saved,
        temperature=t.calibrate != "off",
        tune_thresholds=t.tune_threshold,
    )
    if calibration is None:
        return None
    run_dir.save_calibration(calibration)
    run_dir.save_task(calibration.calibrated_task(setup.task))
    run_dir.log(calibration.describe())
    for note in calibration.notes:
        console.say(f"bertfit: calibration: {note}")
    return calibration


def time_split(
    history: list[EpochRecord],
    trace_seconds: dict[str, float],
    *,
    load: float,
    tokenize: float,
    build: float,
    save: float,
    wall: float,
    step_evaluations: float = 0.0,
    few_shot: float | None = None,
) -> dict:
    """Where the run's time went, in seconds: loading the checkpoint, reading and tokenizing,
    building the model and optimizer, the calls that traced and compiled, training and
    evaluation (the epochs' and `step_evaluations`, the seconds of those inside epochs;
    without the calls that traced), writing checkpoints, `--few-shot`'s stage 1 when this
    process trained it, and the rest of `wall` (run directory, logs, summaries)."""
    train = sum(r.train_seconds for r in history)
    evaluation = step_evaluations + sum(
        r.eval["wall_seconds"] for r in history if r.eval is not None
    )
    split = {
        "load": load,
        "tokenize": tokenize,
        "build": build,
        "trace": sum(trace_seconds.values()),
        "train": max(0.0, train - trace_seconds["train_step"]),
        "eval": max(0.0, evaluation - trace_seconds["predict_step"]),
        "save": save,
    }
    if few_shot is not None:
        split["few_shot"] = few_shot
    return {**split, "other": max(0.0, wall - sum(split.values())), "wall": wall}


def so_far(summary: RunSummary, state: TrainingState) -> RunSummary:
    """`summary` with what the run recorded up to `state` (metrics.json while it runs)."""
    return dataclasses.replace(
        summary,
        epochs=state.history,
        evaluations=state.evaluations or None,
        stopped_early=state.stopped_early,
    )


def _step_evaluation_seconds(state: TrainingState) -> float:
    """The time of the evaluations inside epochs, less the one that ended an epoch cut short
    by early stopping: that epoch's record holds it (and counts it) too."""
    cut = state.history and state.history[-1].stopped_after_steps is not None
    ended = state.stopped_early.global_step if cut and state.stopped_early else None
    return sum(e.metrics["wall_seconds"] for e in state.evaluations if e.global_step != ended)


def _check_same_task(run_dir: TrainingRunDir, setup: RunSetup) -> None:
    saved, task = run_dir.load_task(), setup.task
    if (saved.kind, saved.labels) != (task.kind, task.labels):
        raise DataError(
            f"the training file's labels ({task.kind}, {list(task.labels)}) are not those of the "
            f"run being resumed in {run_dir.shown} ({saved.kind}, {list(saved.labels)}): the "
            "data changed. Restore it, or start a new run (--overwrite or another --output-dir).",
            path=str(run_dir.labels_file),
            code="data-changed",
        )


def _resume(
    run_dir: TrainingRunDir, checkpoints: RunCheckpoints, fresh: TrainingState, console: Console
) -> TrainingState:
    """Restores `latest` (when a checkpoint was saved before the run stopped) and drops the
    steps logged after it."""
    run_dir.remove_checkpoint_leftovers()
    state = checkpoints.restore_latest() or fresh
    if state.data_fingerprint != fresh.data_fingerprint:
        raise DataError(
            "the training rows differ from those the run started with (texts, labels or order "
            "changed); resuming would not continue the same run. Restore the data, or start a "
            "new run (--overwrite or another --output-dir).",
            path=run_dir.shown,
            code="data-changed",
        )
    if state.packed_rows != fresh.packed_rows:
        raise ConfigError(
            f"--packing: the run took {state.packed_rows} packed rows a step, here it would "
            f"take {fresh.packed_rows} (a multiple of this machine's replicas), which plans "
            "other batches; resume it on as many replicas (devices) as it started on."
        )
    run_dir.keep_steps(state.global_step)
    where = f"epoch {state.epoch + 1}, step {state.step}"
    run_dir.log(f"resumed at {where} (global step {state.global_step})")
    console.say(f"resuming the unfinished run in {run_dir.shown} at {where}")  # even with --quiet
    return state


def evaluate_data(
    setup: RunSetup, data: LabelledData, console: Console, title: str = "eval"
) -> tuple[dict, np.ndarray]:
    """The task's metrics over every example of `data` (none dropped) and the outputs."""
    batches = setup.batches(data, shuffle=False)
    progress = console.progress(title, len(batches))
    start = time.perf_counter()
    outputs = setup.trainer.predict(batches, len(data), progress)
    progress.close()
    seconds = time.perf_counter() - start
    metrics = task_metrics(setup.task, data.labels, outputs)
    metrics.update(
        num_examples=len(data),
        wall_seconds=seconds,
        examples_per_second=len(data) / max(seconds, 1e-9),
    )
    return metrics, outputs


# An epoch's end saves the run unless its last save is fresher than this (and no evaluation or
# run's end follows): a small set's epochs of two steps spent more time saving than training.
EPOCH_SAVE_GAP_SECONDS = 60.0


class EpochRunner:
    """One epoch's training (checkpointing, logging, stopping between host calls) and its
    evaluation, continuing from a `TrainingState`."""

    def __init__(
        self,
        setup: RunSetup,
        run_dir: TrainingRunDir,
        checkpoints: RunCheckpoints,
        console: Console,
        summaries: RunSummaries,
        summary: RunSummary,
        length: RunLength,
    ):
        self.setup, self.trainer, self.config = setup, setup.trainer, setup.config
        self.run_dir, self.checkpoints, self.console = run_dir, checkpoints, console
        self.summaries, self.summary, self.length = summaries, summary, length
        self.saved_at_epoch_end = False

    def train(self, state: TrainingState, stop: StopRequests) -> None:
        """Takes the epoch's remaining steps, evaluating every eval_every_steps (which may
        stop the run early); saves `latest` every save_every_steps / save_every_minutes and at
        the end when due (`_epoch_end_save_due`), or on a stop request before raising."""
        self.saved_at_epoch_end = False
        if state.stopped_early is not None:
            return  # early stopping ended this epoch; only its record remains
        batches = self.setup.batches(
            self.setup.train, shuffle=True, epoch=state.epoch, training=True, start=state.step
        )
        # --max-steps: a prefix of the plan takes a prefix of each bucket's batches
        batches.plan = batches.plan[: max(0, self.length.steps_in(state.epoch) - state.step)]
        if not len(batches):
            return  # the epoch's training was done; its evaluation remains
        t, start = self.config.train, state.step
        progress = self.console.progress(
            f"epoch {state.epoch + 1}/{self.length.epochs}", start + len(batches), start
        )
        plan = iter(batches.plan)
        seen, last_time = 0, time.perf_counter()
        last_save = (state.global_step, last_time)
        evaluations = self._evaluation_points(state, len(batches))
        with explain_errors(), self._shards_said(state):  # TF/XLA errors in plain words
            for results in self.trainer.run_plan(batches, ends=evaluations):
                now = time.perf_counter()
                rows = self._step_rows(results, plan, state)
                for row in rows:
                    row["examples_per_second"] = sum(r["examples"] for r in rows) / max(
                        now - last_time, 1e-9
                    )
                seen += sum(r["examples"] for r in rows)
                state.epoch_seconds += now - last_time
                last_time = now
                self.run_dir.append_steps(rows)
                self.summaries.steps(rows)
                diverged = next((r for r in rows if not math.isfinite(r["loss"])), None)
                if diverged is not None:
                    progress.close()
                    self._diverged(state, diverged)
                progress.update(
                    state.step, seen, loss=state.epoch_loss_sum / max(state.epoch_examples, 1)
                )
                if state.step - start in evaluations:
                    progress.close()
                    self._evaluate_inside_epoch(state)
                    last_time = time.perf_counter()  # the evaluation is not training time
                    if state.stopped_early is not None:
                        break
                if stop.signal is not None:
                    self._stop(state, stop.signal)
                if _save_due(t, state.global_step, last_save):
                    self.checkpoints.save_latest(state)
                    last_time = time.perf_counter()  # the save counts as saving, not training
                    last_save = (state.global_step, last_time)
        progress.close()
        if self._epoch_end_save_due(state):
            self.checkpoints.save_latest(state)  # a stop during evaluation resumes with it
            self.saved_at_epoch_end = True

    def _epoch_end_save_due(self, state: TrainingState) -> bool:
        """At the run's last epoch, before an evaluation, or when the last save is at least
        EPOCH_SAVE_GAP_SECONDS old (a stop then loses at most that much training)."""
        stale = self.checkpoints.seconds_since_save() >= EPOCH_SAVE_GAP_SECONDS
        return self._last_epoch(state) or self.setup.eval is not None or stale

    def _last_epoch(self, state: TrainingState) -> bool:
        return state.epoch + 1 >= self.length.epochs or state.stopped_early is not None

    @contextlib.contextmanager
    def _shards_said(self, state: TrainingState) -> Iterator[None]:
        """A streamed epoch that TensorFlow cannot read on (a bad checksum, a cut record, fewer
        records than planned) stops with the damaged shard named (`damaged_shard`) and the
        run marked failed, not with `DataLossError` / `End of sequence` naming none. The
        latest checkpoint is the last good one: the run resumes once the shards are whole."""
        try:
            yield
        except Exception as e:
            error = self.setup.train.read_error(e)  # a streamed set's damaged shard
            if error is None:
                raise
            self.run_dir.log(f"error: {error}")
            self.run_dir.save_metrics(
                dataclasses.replace(so_far(self.summary, state), status=FAILED, error=str(error))
            )
            raise error from None

    def _evaluation_points(self, state: TrainingState, steps: int) -> set[int]:
        """Where, counted in steps from `state`, the next `steps` steps evaluate: at every
        multiple of eval_every_steps of the run's steps, but the epoch's end (whose own
        evaluation that is)."""
        every = self.config.train.eval_every_steps
        if every is None or self.setup.eval is None:
            return set()
        return {n for n in range(1, steps) if (state.global_step + n) % every == 0}

    def _evaluate_inside_epoch(self, state: TrainingState) -> None:
        """An --eval-every-steps evaluation: recorded, kept as `best` when it is, and counted
        for early stopping."""
        metrics = self._evaluate(self.setup.eval)
        self.summaries.evaluation(metrics, state.global_step)
        evaluation = StepEvaluation(
            epoch=state.epoch + 1,
            step=state.step,
            global_step=state.global_step,
            metrics=metrics,
            best=self._judge(state, metrics),
        )
        if evaluation.best:
            self.checkpoints.save_best(state)
        state.evaluations.append(evaluation)
        self.run_dir.log(evaluation.describe())
        headline = ", ".join(
            f"{name} {metrics[name]:.4f}" for name in HEADLINE_METRICS[self.setup.task.kind]
        )
        self.console.info(
            f"step {state.global_step}: eval {headline}"
            + (" (best so far)" if evaluation.best else "")
        )
        self._stop_early_when_due(state)
        self.run_dir.save_metrics(so_far(self.summary, state))

    def _judge(self, state: TrainingState, metrics: dict) -> bool:
        """Whether the evaluation `metrics` is the best so far (then `state.best_value` takes
        it); counts it for early stopping unless it improved by more than the minimum delta."""
        metric, t = self.setup.best_metric, self.config.train
        value = metrics[metric]
        if is_better(metric, value, state.best_value, t.early_stopping_min_delta):
            state.evaluations_without_improvement = 0
        else:
            state.evaluations_without_improvement += 1
        best = is_better(metric, value, state.best_value)
        if best:
            state.best_value = value
            self.run_dir.save_best_eval_outputs(self.setup.eval.labels, self.outputs)
        return best

    def _stop_early_when_due(self, state: TrainingState, epoch_end: bool = False) -> None:
        """Marks the run stopped early once `early_stopping_patience` evaluations in a row did
        not improve (not after the last epoch's evaluation: nothing is left to stop)."""
        t = self.config.train
        if t.early_stopping_patience is None:
            return
        if state.evaluations_without_improvement < t.early_stopping_patience:
            return
        if epoch_end and state.epoch + 1 == self.length.epochs:
            return
        state.stopped_early = EarlyStop(
            epoch=state.epoch + 1,
            step=state.step,
            global_step=state.global_step,
            best_metric=self.setup.best_metric,
            best_value=state.best_value,
            patience=t.early_stopping_patience,
            min_delta=t.early_stopping_min_delta,
        )
        message = state.stopped_early.describe()
        self.run_dir.log(message)
        self.summaries.stopped_early(message, state.global_step)
        self.console.say(f"bertfit: {message}")

    def _step_rows(self, results, plan, state: TrainingState) -> list[dict]:
        """One steps.jsonl row per optimizer step of a host call, advancing `state`."""
        rows, wall_time = [], time.time()
        for loss, norm in results:
            examples = next(plan).num_examples
            state.step += 1
            state.global_step += 1
            state.epoch_loss_sum += loss * examples
            state.epoch_examples += examples
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
        return rows

    def finish(self, state: TrainingState, stop: StopRequests) -> None:
        """Evaluates the epoch, keeps the best weights, records it and moves to the next. An
        epoch that early stopping cut short is not evaluated again: the evaluation that
        stopped it is its record's."""
        record = EpochRecord(
            epoch=state.epoch + 1,
            train_loss=state.epoch_loss_sum / max(state.epoch_examples, 1),
            train_examples=state.epoch_examples,
            train_examples_per_second=state.epoch_examples / max(state.epoch_seconds, 1e-9),
            train_seconds=state.epoch_seconds,
            max_steps_cut=(
                state.step if self.length.cut(state.epoch) and state.stopped_early is None else None
            ),
        )
        if state.stopped_early is not None:
            stopping = state.evaluations[-1]
            record.eval, record.best = stopping.metrics, stopping.best
            record.stopped_after_steps = state.step
        else:
            if self.setup.eval is not None:
                record.eval = self._evaluate(self.setup.eval)
                self.summaries.evaluation(record.eval, state.global_step)
                record.best = self._judge(state, record.eval)
                self._stop_early_when_due(state, epoch_end=True)
            latest_saved = self.saved_at_epoch_end or self._last_epoch(state)
            if record.best or (self.setup.eval is None and latest_saved):
                self.checkpoints.save_best(state)  # without evaluation: the latest saved epoch
        state.history.append(record)
        state.epoch += 1
        state.step = 0
        state.epoch_loss_sum, state.epoch_examples, state.epoch_seconds = 0.0, 0, 0.0
        self.run_dir.log(record.describe())
        self.run_dir.save_metrics(so_far(self.summary, state))
        if stop.signal is not None:
            self._stop(state, stop.signal)

    def _evaluate(self, data: LabelledData) -> dict:
        """The epoch's evaluation; with --tune-threshold the multi-label thresholds (one per
        label) that suit these outputs best; a warning when single-label predictions
        collapsed. The outputs are kept for `_judge` (the best ones are calibrated)."""
        task = self.setup.task
        metrics, outputs = evaluate_data(self.setup, data, self.console)
        self.run_dir.save_eval_outputs(data.labels, outputs)
        self.outputs = outputs
        if self.config.train.tune_threshold and task.kind == MULTI_LABEL:
            tuned = dataclasses.replace(task, thresholds=label_thresholds(data.labels, outputs))
            metrics.pop("threshold")
            metrics.update(task_metrics(tuned, data.labels, outputs))
        pooler = untrained_pooler(
            self.config.model.pooling,
            self.setup.declared_pooling,
            self.trainer.model.encoder.load_report.missing,
        )
        warning = collapse_warning(
            task, data.labels, outputs, self.config.train, self.setup.training_labels, pooler
        )
        if warning:
            metrics["warnings"] = [warning]
            self.run_dir.log(f"warning: {warning}")
            self.console.say(f"bertfit: warning: {warning}")
        return metrics

    def _diverged(self, state: TrainingState, row: dict) -> None:
        """Ends a run whose loss stopped being a number: nothing after it can be trusted."""
        t = self.config.train
        fp16 = self.config.model.precision == "mixed_fp16"
        message = (
            f"the training loss became {row['loss']} at epoch {state.epoch + 1}, step "
            f"{row['step']} (global step {row['global_step']}, learning rate "
            f"{row['learning_rate']:.3g}): training diverged and was stopped. "
            f"The usual cause is a learning rate too high for this model (--learning-rate "
            f"{t.learning_rate:g}; fine-tuning uses 1e-5 to 1e-4)"
            + (", or float16 overflowing (try --precision mixed_bf16)" if fp16 else "")
            + "; lower it and rerun with --overwrite. Its steps are in "
            f"{self.run_dir.steps_file}."
        )
        self.run_dir.log(f"error: {message}")
        self.run_dir.save_metrics(
            dataclasses.replace(so_far(self.summary, state), status=DIVERGED, error=message)
        )
        raise TrainingDiverged(message)

    def _stop(self, state: TrainingState, signum: int) -> None:
        path = self.checkpoints.save_latest(state)
        where = f"epoch {state.epoch + 1}, step {state.step}"
        self.run_dir.log(f"stopped by {signal.Signals(signum).name} at {where}; saved {path}")
        raise TrainingInterrupted(
            f"stopped by {signal.Signals(signum).name} at {where}; checkpoint saved to {path}. "
            "Run the same command again to resume, or bertfit train --config "
            f"{self.run_dir.config_shown} --resume.",
            signum,
            run_dir=self.run_dir.shown,
        )


class TrainingDiverged(BertfitError):
    """The training loss became NaN or infinite; the message says where and what to change."""


def _save_due(t: TrainConfig, global_step: int, last_save: tuple[int, float]) -> bool:
    step, when = last_save
    return bool(
        (t.save_every_steps and global_step - step >= t.save_every_steps)
        or (t.save_every_minutes and time.perf_counter() - when >= 60 * t.save_every_minutes)
    )
