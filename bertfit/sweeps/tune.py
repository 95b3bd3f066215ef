"""`tune`: a grid (or a random draw from it) of trials × seeds (× folds), each run a normal
bertfit run, one after another in this process, then the table, the choice and the report.

Resumable by its directories alone: rerunning the same sweep skips the runs whose metrics.json
says finished (or diverged), resumes an unfinished one from its checkpoint as `bertfit train`
does, and starts the rest (see `bertfit.sweeps.sweep_dir`).
"""

from __future__ import annotations

import copy
import json
from functools import partial
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.checkpoints.load import read_checkpoint
from bertfit.checkpoints.pooling import DeclaredPooling, decide_pooling, declared_pooling
from bertfit.checkpoints.registry import resolve
from bertfit.config import RunConfig, check_positions, override
from bertfit.errors import BertfitError, ConfigError
from bertfit.model.config import BertConfig
from bertfit.model.lora import check_rank_fits
from bertfit.progress import Console
from bertfit.report import write_report
from bertfit.runs.metrics import default_metric
from bertfit.runs.records import FINISHED, RunSummary
from bertfit.runs.run_dir import RunDir
from bertfit.sweeps.fold_data import FoldSplit, fold_files, out_of_fold_rows, split_training_rows
from bertfit.sweeps.fold_predictions import HeldOut, predict_held_out
from bertfit.sweeps.report import write_sweep_report
from bertfit.sweeps.results import RunResult, SweepResults, TrialResult
from bertfit.sweeps.spec import RunPlan, SweepSpec
from bertfit.sweeps.sweep_dir import SweepDir, run_state
from bertfit.training.backends import backend_of
from bertfit.training.run import TrainingDiverged, train
from bertfit.training.run_dir import with_saved_decisions


def tune(
    base: RunConfig,
    spec: SweepSpec,
    output_dir: str | Path,
    *,
    quiet: bool = False,
    reports: bool = True,
) -> SweepResults:
    """Runs (or resumes) the sweep `spec` over `base` in `output_dir`; returns its results.

    Args:
        base: the run config every trial starts from (every train flag), with --eval, or
            without one when `spec.folds` is set (each fold is evaluated on its held-out rows).
        spec: the grid, seeds, folds and random-search budget.
        output_dir: the sweep directory (see `bertfit.sweeps.sweep_dir`).
        quiet: no progress output.
        reports: write each run's report.html and the sweep's.

    Raises:
        ConfigError: no way to score a run, or the directory holds something else.
        TrainingInterrupted: SIGTERM or Ctrl-C stopped a run (rerun the sweep to resume it).
    """
    _check_scoring(base, spec)
    backend_of(base).check(base)  # what the backend refuses: before the sweep directory is written
    console = Console(quiet=quiet)
    sweep = SweepDir(output_dir)
    plans = spec.runs(base, sweep.path, partial(fold_files, sweep.folds_dir))  # configs valid
    _check_models(plans)  # every trial's --model and --max-seq-length, before any trains
    lock, note = sweep.claim(spec, base)
    try:
        if note:
            console.say(f"bertfit: {note}")
        return _sweep(base, spec, sweep, console, reports)
    finally:
        lock.release()


def _check_models(plans: list[RunPlan]) -> None:
    """What `bertfit train` would refuse of a trial only once it starts, checked for every
    trial first: its --model must load, its --max-seq-length fit the model's position table,
    its --lora-rank be below the model's hidden size, and a pooling it declares must be one
    bertfit has (or --pooling given). A bad grid value then costs no trained trial, and
    writes nothing."""
    configs: dict[str, BertConfig | None] = {}  # each --model's, read once
    declared: dict[str, DeclaredPooling | None] = {}
    for plan in plans:
        model = plan.config.model
        try:
            if model.name not in configs:
                checkpoint = read_checkpoint(resolve(model.name))
                configs[model.name] = checkpoint.config
                declared[model.name] = declared_pooling(checkpoint.path)
            decide_pooling(model.pooling, declared[model.name], model.name)
            config = configs[model.name]
            if config is None:  # a wrapped SavedModel: train says the rest
                continue
            if config.max_sequence_length is not None:
                check_positions(model.max_seq_length, config.max_sequence_length, model.name)
            check_rank_fits(model.lora_rank, config.hidden_size)
        except BertfitError as e:
            raise ConfigError(f"trial {plan.trial.name}: {e} Nothing was trained.") from None


def _check_scoring(base: RunConfig, spec: SweepSpec) -> None:
    if spec.folds and base.data.eval:
        raise ConfigError(
            "--folds evaluates each fold on its held-out training rows; --eval would not be "
            "used. Leave --eval out (and evaluate the chosen config on it later with bertfit "
            "train --config SWEEP/chosen.yaml --eval FILE), or drop --folds."
        )
    if not spec.folds and not base.data.eval:
        raise ConfigError(
            "a sweep chooses by the evaluation metric: pass --eval FILE, or --folds K to "
            "cross-validate on the training rows."
        )


def _sweep(
    base: RunConfig, spec: SweepSpec, sweep: SweepDir, console: Console, reports: bool
) -> SweepResults:
    split = split_training_rows(base, spec.folds, sweep.folds_dir) if spec.folds else None
    sweep.record(spec, base)  # once the data was read and split without a mistake
    plans = spec.runs(base, sweep.path, split.files if split else None)
    trials = spec.trial_list()
    sweep.log(
        f"sweep: {len(trials)} trial(s) × {len(spec.seeds)} seed(s)"
        + (f" × {spec.folds} folds" if spec.folds else "")
        + f" = {len(plans)} runs"
    )
    summaries: dict[str, RunSummary] = {}
    for number, plan in enumerate(plans, 1):
        summaries[plan.name] = _run(plan, f"run {number}/{len(plans)}", console, sweep, reports)
        if split and plan.fold == spec.folds:  # the seed's folds are scored on their held-out rows
            _write_out_of_fold(split, [p for p in plans if _same_seed(p, plan)], sweep, console)
        results = _results(base, spec, plans, summaries)
        write_text_atomic(sweep.results_file, json.dumps(results.to_dict(), indent=2))
    chosen = results.chosen
    if chosen is not None:
        _chosen_config(base, chosen, results).save(sweep.chosen_file)
    if reports:
        write_sweep_report(sweep.path)
    console.info(results.table())
    score = f"{results.metric} {chosen.mean:.4f} ± {chosen.sd:.4f}" if chosen else "no trial"
    sweep.log(f"finished; chosen {chosen.name if chosen else 'none'} ({score})")
    return results


def _run(plan: RunPlan, title: str, console: Console, sweep: SweepDir, reports: bool) -> RunSummary:
    """The run's summary: read when it finished (or diverged) before, else trained (or
    resumed) now."""
    state = run_state(plan.path)
    if state in (FINISHED, "diverged"):
        console.info(f"bertfit tune: {title} {plan.name}: {state} before, kept")
        summary = _saved_summary(plan.path)
    else:
        doing = "resuming" if state == "unfinished" else "training"
        tell = console.say if state == "unfinished" else console.info  # as train tells it
        tell(f"bertfit tune: {title} {plan.name}: {doing}")
        sweep.log(f"{doing} {plan.name}")
        try:
            summary = train(plan.config, quiet=console.quiet, resume=None)
        except TrainingDiverged as e:
            console.say(f"bertfit tune: {plan.name} diverged: {e}")
            summary = _saved_summary(plan.path)
        sweep.log(f"{plan.name}: {summary.status}")
    if reports and not (plan.path / "report.html").exists():
        write_report(plan.path)
    return summary


def _saved_summary(path: Path) -> RunSummary:
    return RunSummary.from_dict(json.loads((path / "metrics.json").read_text(encoding="utf-8")))


def _results(
    base: RunConfig, spec: SweepSpec, plans: list[RunPlan], summaries: dict[str, RunSummary]
) -> SweepResults:
    """The results so far: runs not yet trained are "pending"."""
    first = next(iter(summaries.values()))
    metric = base.train.best_metric or default_metric(first.task)
    trials = []
    for trial in spec.trial_list():
        runs = []
        for plan in (p for p in plans if p.trial.name == trial.name):
            summary = summaries.get(plan.name)
            if summary is None:
                runs.append(RunResult(plan.seed, plan.fold, str(plan.path), "pending"))
            else:
                runs.append(RunResult.of(summary, plan.seed, plan.fold, metric, _held_out(plan)))
        trials.append(TrialResult(trial.name, trial.params, runs))
    return SweepResults(metric, trials, spec.folds)


def _held_out(plan: RunPlan) -> dict | None:
    """A fold run's metrics on the rows it held out, once its seed's folds were predicted."""
    path = _held_out_file(plan)
    if not plan.fold or not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))[str(plan.fold)]


def _held_out_file(plan: RunPlan) -> Path:
    """runs/TRIAL/heldout-seedS.json: each fold's metrics on its held-out rows, by fold."""
    return plan.path.parent / f"heldout-seed{plan.seed}.json"


def _same_seed(plan: RunPlan, last: RunPlan) -> bool:
    return plan.trial.name == last.trial.name and plan.seed == last.seed


def _write_out_of_fold(
    split: FoldSplit, folds: list[RunPlan], sweep: SweepDir, console: Console
) -> None:
    """runs/TRIAL/oof-seedS.jsonl: every training row once, predicted by the fold run that
    held it out (its final weights); and each fold run's score, its metrics on the rows it
    held out (`_held_out_file`)."""
    path = folds[0].path.parent / f"oof-seed{folds[0].seed}.jsonl"
    if path.exists():
        return
    if any(run_state(p.path) != FINISHED for p in folds):
        console.say(
            f"bertfit tune: no out-of-fold predictions for {path.parent.name}: a fold "
            "run did not finish"
        )
        return
    held_out = [HeldOut(str(plan.path), plan.held_out_file) for plan in folds]
    predicted = predict_held_out(held_out)  # in TensorFlow, also when this sweep trains on JAX
    scores = {p.fold: fold["metrics"] for p, fold in zip(folds, predicted, strict=True)}
    write_text_atomic(_held_out_file(folds[0]), json.dumps(scores, indent=2))
    predictions = {p.fold: fold["predictions"] for p, fold in zip(folds, predicted, strict=True)}
    rows = out_of_fold_rows(split, predictions)
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    sweep.log(f"wrote {len(rows)} out-of-fold predictions to {path}")


def _chosen_config(base: RunConfig, chosen: TrialResult, results: SweepResults) -> RunConfig:
    """The chosen trial's settings on the sweep's data (with --folds: all the training rows),
    at the chosen run's seed (with --folds: the base seed), with the pooling, batch size and
    epochs its runs decided (their config.yaml) where the flags left them to the run."""
    config = copy.deepcopy(base)
    run = results.chosen_run
    override(config, {**chosen.params, "train.seed": run.seed if run else base.train.seed})
    config.output_dir = None
    return with_saved_decisions(RunDir(chosen.runs[0].run_dir).load_config(), config)
