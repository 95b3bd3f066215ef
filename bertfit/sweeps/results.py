"""What a sweep concluded: each run's score, each trial's mean ± sd over its runs, and the choice.

The rule: a run's score is its `--best-metric` on the evaluation data (the best epoch's, the
checkpoint the run keeps; with --folds, its final weights' on the rows its fold held out, once
its seed's folds are all trained: the weights its out-of-fold predictions come from; the run
chose on its fold's validation slice, and the held-out rows are only predicted). A trial's
score is the mean over its runs (seeds × folds).
The chosen trial has the best mean (highest; lowest for loss, rmse, mae and hamming_loss), the
earlier trial on a tie; a trial with a diverged or unfinished run is never chosen. The chosen
run is the chosen trial's best run (none with --folds: each fold trained on part of the data,
so `chosen.yaml` is the config to train on all of it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from bertfit.runs.metrics import LOWER_IS_BETTER, is_better
from bertfit.runs.records import FINISHED, RunSummary


@dataclasses.dataclass
class RunResult:
    """One run's outcome: `value` of the sweep's metric (None until it finished), and the
    evaluation it came from."""

    seed: int
    fold: int | None
    run_dir: str
    status: str
    value: float | None = None
    metrics: dict | None = None

    @classmethod
    def of(
        cls,
        summary: RunSummary,
        seed: int,
        fold: int | None,
        metric: str,
        held_out: dict | None = None,
    ) -> RunResult:
        """A run's result: with a fold, its final weights' metrics on its held-out rows
        (`held_out`; None until they were predicted); else its best (`best`, what its best
        checkpoint scored)."""
        if fold:
            evaluation = held_out or {}
            value = evaluation.get(metric)
        else:
            evaluation = _best_epoch_eval(summary) or {}
            value = (summary.best or {}).get(metric)
        if summary.status != FINISHED or value is None:
            value = None
        scores = {k: v for k, v in evaluation.items() if isinstance(v, (int, float))}
        value = None if value is None else float(value)
        return cls(seed, fold, str(summary.run_dir), summary.status, value, scores)


def _best_epoch_eval(summary: RunSummary) -> dict | None:
    best = [r.eval for r in summary.epochs if r.best and r.eval is not None]
    return best[-1] if best else summary.final


@dataclasses.dataclass
class TrialResult:
    """A trial's runs and their mean and sample standard deviation (0 for one run)."""

    name: str
    params: dict
    runs: list[RunResult]

    @property
    def complete(self) -> bool:
        return bool(self.runs) and all(r.value is not None for r in self.runs)

    @property
    def values(self) -> list[float]:
        return [r.value for r in self.runs if r.value is not None]

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.values)) if self.values else None

    @property
    def sd(self) -> float | None:
        values = self.values
        return float(np.std(values, ddof=1)) if len(values) > 1 else (0.0 if values else None)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "params": self.params,
            "mean": self.mean,
            "sd": self.sd,
            "complete": self.complete,
            "runs": [dataclasses.asdict(r) for r in self.runs],
        }


@dataclasses.dataclass
class SweepResults:
    """Every trial's results and the choice (see the module docstring for the rule)."""

    metric: str
    trials: list[TrialResult]
    folds: int | None = None

    @property
    def chosen(self) -> TrialResult | None:
        best = None
        for trial in self.trials:
            if trial.complete and (best is None or is_better(self.metric, trial.mean, best.mean)):
                best = trial
        return best

    @property
    def chosen_run(self) -> RunResult | None:
        trial = self.chosen
        if trial is None or self.folds:
            return None
        best = trial.runs[0]
        for run in trial.runs[1:]:
            if is_better(self.metric, run.value, best.value):
                best = run
        return best

    def to_dict(self) -> dict:
        chosen, run = self.chosen, self.chosen_run
        return {
            "metric": self.metric,
            "higher_is_better": self.metric not in LOWER_IS_BETTER,
            "rule": "best mean over the trial's runs (seeds × folds); ties: the earlier trial",
            "folds": self.folds,
            "chosen_trial": chosen.name if chosen else None,
            "chosen_run": run.run_dir if run else None,
            "trials": [t.to_dict() for t in self.trials],
        }

    def table(self) -> str:
        """The end-of-sweep table: one row per trial, its settings, mean ± sd and each run."""
        fields = list(self.trials[0].params) if self.trials else []
        header = ["trial", *(f.split(".")[-1] for f in fields), "runs", f"{self.metric} mean ± sd"]
        header.append("per run" + (" (seed/fold)" if self.folds else " (seed)"))
        chosen = self.chosen
        rows = []
        for t in self.trials:
            score = f"{t.mean:.4f} ± {t.sd:.4f}" if t.mean is not None else "-"
            runs = " ".join(_value(r) for r in t.runs)
            mark = "  ← chosen" if t is chosen else ""
            rows.append(
                [t.name, *(_setting(t.params[f]) for f in fields), str(len(t.runs)), score]
                + [runs + mark]
            )
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        return "\n".join(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]
        )


def _setting(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _value(run: RunResult) -> str:
    if run.value is None:
        return run.status
    return f"{run.value:.4f}" if math.isfinite(run.value) else str(run.value)
