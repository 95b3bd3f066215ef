"""What a sweep is: the grid of settings, the seeds, the folds, an optional random-search budget,
and the runs they make. Light (no TensorFlow): the CLI builds a `SweepSpec` while parsing.

A trial is one combination of the swept settings; each trial runs once per seed (and, with
folds, once per fold), each run a normal bertfit run directory.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np

from bertfit.config import RunConfig, override
from bertfit.run_flags import RUN_FLAGS

# The flags `bertfit tune` sweeps (comma-separated values) and the short names in trial names.
SWEPT_FLAGS = {
    "--learning-rate": "lr",
    "--epochs": "ep",
    "--batch-size": "bs",
    "--warmup-ratio": "warmup",
    "--weight-decay": "wd",
    "--dropout": "dropout",
    "--clip-norm": "clip",
    "--class-weights": "cw",
    "--pooling": "pool",
    "--max-seq-length": "len",
    "--model": "model",
}


@dataclasses.dataclass(frozen=True)
class Trial:
    """One combination of the swept settings.

    Args:
        name: its folder under SWEEP/runs/, e.g. "t01-lr2e-05-ep3".
        params: dotted config field → value, e.g. {"train.learning_rate": 2e-05}.
    """

    name: str
    params: dict


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One run of a sweep: a trial at a seed (and a fold), in its own run directory."""

    trial: Trial
    seed: int
    fold: int | None  # 1-based; None without --folds
    config: RunConfig
    held_out_file: str | None = None  # the rows the fold's run only predicts (with --folds)

    @property
    def path(self) -> Path:
        return Path(self.config.output_dir)

    @property
    def name(self) -> str:
        return f"{self.trial.name}/{self.path.name}"


@dataclasses.dataclass
class SweepSpec:
    """A sweep's settings.

    Args:
        grid: dotted config field → the values to try, in the order given; the grid is their
            product (an empty grid: one trial, the base config).
        seeds: every trial runs once per seed.
        folds: K for k-fold cross-validation (None: train on --train, select on --eval).
        trials: a random-search budget: this many of the grid's combinations, drawn at random
            (with `search_seed`) without replacement; None runs the whole grid.
        search_seed: seeds the draw of `trials`.

    Examples:
    >>> spec = SweepSpec({"train.learning_rate": [2e-5, 5e-5], "train.epochs": [3]}, [42])
    >>> [t.name for t in spec.trial_list()]
    ['t1-lr2e-05-ep3', 't2-lr5e-05-ep3']
    """

    grid: dict[str, list]
    seeds: list[int]
    folds: int | None = None
    trials: int | None = None
    search_seed: int = 0

    def trial_list(self) -> list[Trial]:
        """The trials in order: the grid's product (first setting slowest), or the drawn
        subset of it, kept in grid order."""
        fields = list(self.grid)
        combinations = list(itertools.product(*(self.grid[f] for f in fields)))
        if self.trials is not None and self.trials < len(combinations):
            drawn = np.random.default_rng(self.search_seed).choice(
                len(combinations), self.trials, replace=False
            )
            combinations = [combinations[i] for i in sorted(drawn)]
        width = len(str(len(combinations)))
        trials = []
        for i, values in enumerate(combinations, 1):
            params = dict(zip(fields, values, strict=True))
            trials.append(Trial(f"t{i:0{width}d}{_suffix(params)}", params))
        return trials

    def runs(self, base: RunConfig, sweep_dir: Path, fold_files=None) -> list[RunPlan]:
        """Every run, in the order they train: trial by trial, seed by seed, fold by fold.
        `fold_files(k)` gives (train file, validation file, held-out file) of fold k (with
        folds): a fold's run trains on the first and chooses (early stopping, thresholds,
        its best checkpoint) on the second, and is not calibrated, so that every fold's
        probabilities are on the same scale (its model's own) and none saw a held-out label."""
        plans = []
        for trial in self.trial_list():
            for seed in self.seeds:
                for fold in range(1, self.folds + 1) if self.folds else [None]:
                    name = f"seed{seed}" + (f"-fold{fold}" if fold else "")
                    config = copy.deepcopy(base)
                    override(config, {**trial.params, "train.seed": seed})
                    config.output_dir = str(sweep_dir / "runs" / trial.name / name)
                    held_out = None
                    if fold:
                        train, valid, held_out = map(str, fold_files(fold))
                        config.data.train, config.data.eval = train, valid
                        config.train.calibrate = "off"
                        config.data.format = None  # the fold files are JSON lines
                        config.data.max_train_examples = None  # applied before the split
                    plans.append(RunPlan(trial, seed, fold, config.validate(), held_out))
        return plans

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> SweepSpec:
        return cls(**values)


def _suffix(params: dict) -> str:
    """ "-lr2e-05-ep3": each swept setting's short name and value, safe in a folder name."""
    shorts = {RUN_FLAGS[flag].field: short for flag, short in SWEPT_FLAGS.items()}
    parts = []
    for field, value in params.items():
        text = f"{value:g}" if isinstance(value, float) else str(value)
        text = re.sub(r"[^A-Za-z0-9.+-]+", "_", Path(text).name if "/" in text else text)
        parts.append(f"{shorts.get(field, field.split('.')[-1])}{text[:24]}")
    return "".join(f"-{p}" for p in parts)
