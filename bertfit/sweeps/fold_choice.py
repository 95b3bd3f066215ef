"""The audit's out-of-fold predictions from a sweep of several trials (a learning-rate grid, say):
for every seed and fold, the trial whose fold run scores best on its own validation slice, the
slice cut from its training part (`bertfit.sweeps.folds.validation_rows`), by the sweep's metric
(`--best-metric`, what each run chose its checkpoint by), of its final weights: the weights that
predicted its held-out rows. Never the held-out rows' score: `bertfit tune` chooses its trial
that way, which is cross-validation's purpose, but an audit that did would pick its
probabilities with the labels it then judges.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertfit.errors import ConfigError
from bertfit.runs.metrics import is_better
from bertfit.runs.run_dir import RunDir

CHOSEN_BY = (
    "each fold run's score on its own validation slice (the sweep's metric, its final "
    "weights), the best; ties: the earlier trial; the held-out rows' labels never choose"
)


@dataclasses.dataclass(frozen=True)
class FoldChoice:
    """The trial whose run predicted fold `fold`'s held-out rows at seed `seed`, and its
    `metric` on its validation slice."""

    seed: int
    fold: int
    trial: str
    metric: str
    validation_score: float


def choose_trials(
    sweep: Path, trials: list[str], seed: int, folds: list[int], metric: str
) -> list[FoldChoice]:
    """For each of `folds` (1-based), the trial among `trials` (in the sweep's order) whose run
    at `seed` scores best on its validation slice by `metric`.

    Raises:
        ConfigError: a fold none of the trials' runs finished.
    """
    choices = []
    for fold in folds:
        best = None
        for trial in trials:
            score = _validation_score(sweep / "runs" / trial / f"seed{seed}-fold{fold}", metric)
            if score is not None and (best is None or is_better(metric, score, best[1])):
                best = (trial, score)
        if best is None:
            raise ConfigError(
                f"{sweep}: no trial's seed {seed} fold {fold} run finished with a validation "
                f"{metric}; rerun the sweep's command to finish it, then audit."
            )
        choices.append(FoldChoice(seed, fold, best[0], metric, best[1]))
    return choices


def combine(per_trial: dict[str, list[dict]], choices: list[FoldChoice]) -> list[dict]:
    """One seed's out-of-fold rows, each row from the trial chosen for its fold; `per_trial`:
    each trial's rows (the same rows, in the same order).

    Examples:
    >>> rows = lambda name: [{"row": 0, "fold": 1, "by": name}, {"row": 1, "fold": 2, "by": name}]
    >>> choices = [FoldChoice(1, 1, "t2", "accuracy", 0.8), FoldChoice(1, 2, "t1", "accuracy", 0.7)]
    >>> [r["by"] for r in combine({"t1": rows("t1"), "t2": rows("t2")}, choices)]
    ['t2', 't1']
    """
    trial_of_fold = {c.fold: c.trial for c in choices}
    first = next(iter(per_trial.values()))
    return [per_trial[trial_of_fold[r["fold"]]][i] for i, r in enumerate(first)]


def _validation_score(run: Path, metric: str) -> float | None:
    """The run's final `metric` on its validation slice; None when it did not finish."""
    value = (RunDir(run).finished_scores() or {}).get(metric)
    return None if value is None else float(value)
