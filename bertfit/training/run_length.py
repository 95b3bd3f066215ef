"""How long a run trains: `--epochs` whole epochs, or with `--max-steps N` exactly N optimizer
steps, over as many epochs as they need, the last one cut short.

Each epoch's batch plan is a pure function of the data and the config (in memory and
streamed), so where a `--max-steps` run stops is known before its first step, and a resumed
run stops at the same step: `RunLength` is computed from the plan's length alone.
"""

from __future__ import annotations

import dataclasses

from bertfit.config import TrainConfig


@dataclasses.dataclass(frozen=True)
class RunLength:
    """The epochs a run trains and the steps of each.

    Args:
        steps_per_epoch: optimizer steps in one epoch's plan.
        max_steps: `--max-steps` (None: `epochs` whole epochs).
        whole_epochs: `--epochs`.

    Examples:
    >>> length = RunLength(steps_per_epoch=13, max_steps=30, whole_epochs=3)
    >>> length.epochs, length.total_steps, [length.steps_in(e) for e in range(3)]
    (3, 30, [13, 13, 4])
    >>> RunLength(13, None, 2).epochs, RunLength(13, None, 2).steps_in(1)
    (2, 13)
    """

    steps_per_epoch: int
    max_steps: int | None
    whole_epochs: int

    @classmethod
    def of(cls, train: TrainConfig, steps_per_epoch: int) -> RunLength:
        return cls(steps_per_epoch, train.max_steps, train.epochs)

    @property
    def epochs(self) -> int:
        """Epochs the run trains (with --max-steps the last may be cut short)."""
        if self.max_steps is None:
            return self.whole_epochs
        return -(-self.max_steps // max(self.steps_per_epoch, 1))

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole run: what the learning-rate schedule spans."""
        if self.max_steps is None:
            return self.steps_per_epoch * self.whole_epochs
        return self.max_steps

    def steps_in(self, epoch: int) -> int:
        """Steps epoch `epoch` (0-based) trains: its whole plan, or the part of it that
        --max-steps leaves."""
        left = self.total_steps - epoch * self.steps_per_epoch
        return max(0, min(self.steps_per_epoch, left))

    def cut(self, epoch: int) -> bool:
        """Whether --max-steps ends epoch `epoch` before its plan does."""
        return self.steps_in(epoch) < self.steps_per_epoch

    def describe(self) -> str:
        """What train.log says about the run's length."""
        if self.max_steps is None:
            return f"{self.whole_epochs} epochs of {self.steps_per_epoch} steps"
        last = self.steps_in(self.epochs - 1)
        return (
            f"--max-steps {self.max_steps}: {self.epochs} epoch(s) of {self.steps_per_epoch} "
            f"steps, the last {'cut at ' if last < self.steps_per_epoch else ''}{last} steps "
            "(--epochs is not used)"
        )
