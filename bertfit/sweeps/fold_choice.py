"""The audit's out-of-fold predictions from a sweep of several trials (a learning-rate grid, say):
for every seed and fold, the trial whose fold run fits its own validation slice best, the slice
cut from its training part (`bertfit.sweeps.folds.validation_rows`). Never the held-out rows'
score: `bertfit tune` chooses its trial that way, which is cross-validation's purpose, but an
audit that did would pick its probabilities with the labels it then judges.

The fit is the validation loss (cross-entropy) of the run's final weights, the weights that
predicted its held-out rows: the audit ranks rows by their probabilities, and the loss scores
probabilities where accuracy scores only the top class.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bertfit.errors import ConfigError
from bertfit.runs.records import FINISHED

CHOSEN_BY = (
    "each fold run's loss on its own validation slice (its final weights), lowest; ties: the "
    "earlier trial; the held-out rows' labels never choose"
)


@dataclasses.dataclass(frozen=True)
class FoldChoice:
    """The trial whose run predicted fold `fold`'s held-out rows at seed `seed`."""

    seed: int
    fold: int
    trial: str
    validation_loss: float


def choose_trials(sweep: Path, trials: list[str], seed: int, folds: list[int]) -> list[FoldChoice]:
    """For each of `folds` (1-based), the trial among `trials` (in the sweep's order) whose run
    at `seed` has the lowest loss on its validation slice.

    Raises:
        ConfigError: a fold none of the trials' runs finished.
    """
    choices = []
    for fold in folds:
        losses = {
            t: _validation_loss(sweep / "runs" / t / f"seed{seed}-fold{fold}") for t in trials
        }
        scored = {t: loss for t, loss in losses.items() if loss is not None}
        if not scored:
            raise ConfigError(
                f"{sweep}: no trial's seed {seed} fold {fold} run finished with a validation "
                "loss; rerun the sweep's command to finish it, then audit."
            )
        best = min(scored, key=lambda t: (scored[t], trials.index(t)))
        choices.append(FoldChoice(seed, fold, best, scored[best]))
    return choices


def combine(per_trial: dict[str, list[dict]], choices: list[FoldChoice]) -> list[dict]:
    """One seed's out-of-fold rows, each row from the trial chosen for its fold; `per_trial`:
    each trial's rows (the same rows, in the same order).

    Examples:
    >>> rows = lambda name: [{"row": 0, "fold": 1, "by": name}, {"row": 1, "fold": 2, "by": name}]
    >>> choices = [FoldChoice(1, 1, "t2", 0.4), FoldChoice(1, 2, "t1", 0.5)]
    >>> [r["by"] for r in combine({"t1": rows("t1"), "t2": rows("t2")}, choices)]
    ['t2', 't1']
    """
    trial_of_fold = {c.fold: c.trial for c in choices}
    first = next(iter(per_trial.values()))
    return [per_trial[trial_of_fold[r["fold"]]][i] for i, r in enumerate(first)]


def _validation_loss(run: Path) -> float | None:
    """The run's final loss on its validation slice; None when it did not finish."""
    path = run / "metrics.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    loss = (summary.get("final") or {}).get("loss")
    return float(loss) if summary.get("status") == FINISHED and loss is not None else None
