"""What a run records: one `EpochRecord` per epoch, a `StepEvaluation` per evaluation inside an
epoch (`--eval-every-steps`), the `EarlyStop` that ended a run early, and the `RunSummary` that
`train` returns and `metrics.json` holds (`to_dict` writes exactly the keys metrics.json always
had, plus `evaluations` and `stopped_early` only when a run has them), with the train.log lines
and the terminal table made from them."""

from __future__ import annotations

import dataclasses

from bertfit.runs.metrics import HEADLINE_METRICS

RUNNING, FINISHED, DIVERGED = "running", "finished", "diverged"  # metrics.json's status
FAILED = "failed"  # stopped by an error its message names (a damaged shard); resumable


@dataclasses.dataclass
class EpochRecord:
    """One finished epoch: its training totals, its evaluation (with `--eval`) and whether
    that evaluation was the best so far."""

    epoch: int
    train_loss: float
    train_examples: int
    train_examples_per_second: float
    train_seconds: float
    eval: dict | None = None
    best: bool = False
    stopped_after_steps: int | None = None
    max_steps_cut: int | None = None

    def to_dict(self) -> dict:
        """As metrics.json has it: `eval` only when evaluated, `best` only when true,
        `stopped_after_steps` only when early stopping cut the epoch short (its `eval` is then
        the step evaluation that stopped it), `max_steps_cut` (the steps it took) only when
        `--max-steps` did."""
        record = dataclasses.asdict(self)
        if self.eval is None:
            del record["eval"]
        if not self.best:
            del record["best"]
        for cut in ("stopped_after_steps", "max_steps_cut"):
            if record[cut] is None:
                del record[cut]
        return record

    @classmethod
    def from_dict(cls, values: dict) -> EpochRecord:
        return cls(**values)

    def describe(self) -> str:
        """One readable train.log line."""
        cut = (
            f" (stopped early after {self.stopped_after_steps} steps)"
            if self.stopped_after_steps is not None
            else f" (cut at --max-steps after {self.max_steps_cut} steps)"
            if self.max_steps_cut is not None
            else ""
        )
        text = (
            f"epoch {self.epoch}{cut}: train loss {self.train_loss:.4f} "
            f"({self.train_examples} examples, "
            f"{self.train_examples_per_second:.1f} ex/s, {self.train_seconds:.1f} s)"
        )
        if self.eval is not None:
            text += f"; {describe_scores(self.eval)}"
        return text + ("; best so far" if self.best else "")


def describe_scores(metrics: dict) -> str:
    """An evaluation's scores in words: "eval on 24 examples: accuracy 0.9167, loss 0.3012"."""
    scores = ", ".join(
        f"{name} {value:.4f}"
        for name, value in metrics.items()
        if isinstance(value, float) and name not in ("wall_seconds", "examples_per_second")
    )
    return f"eval on {metrics['num_examples']} examples: {scores}"


@dataclasses.dataclass
class StepEvaluation:
    """An evaluation inside an epoch (`--eval-every-steps`): where it was taken, its metrics
    (as an epoch's `eval`) and whether it was the best so far (then `checkpoints/best` holds
    the weights it evaluated).

    Args:
        epoch: the epoch it was taken in (1-based).
        step: that epoch's steps taken.
        global_step: the run's steps taken.
        metrics: the evaluation's metrics.
        best: whether its `best_metric` value was the best so far.
    """

    epoch: int
    step: int
    global_step: int
    metrics: dict
    best: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One readable train.log line."""
        return (
            f"evaluation at epoch {self.epoch}, step {self.step} (global step "
            f"{self.global_step}): {describe_scores(self.metrics)}"
            + ("; best so far" if self.best else "")
        )


@dataclasses.dataclass
class EarlyStop:
    """Where and why early stopping ended a run (metrics.json's `stopped_early`).

    Args:
        epoch: the epoch it ended in (1-based); step: that epoch's steps taken (all of them
            when it stopped at the epoch's end); global_step: the run's steps taken.
        best_metric, best_value: the metric watched and its best value.
        patience: the evaluations in a row without an improvement that stopped the run.
        min_delta: the smallest change that counted as an improvement.
    """

    epoch: int
    step: int
    global_step: int
    best_metric: str
    best_value: float
    patience: int
    min_delta: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The one line train.log and the terminal show."""
        return (
            f"stopped early at epoch {self.epoch}, step {self.step} (global step "
            f"{self.global_step}): {self.patience} evaluation(s) in a row did not improve "
            f"{self.best_metric} by more than {self.min_delta:g} on its best {self.best_value:.4f} "
            f"(--early-stopping-patience {self.patience}); checkpoints/best holds that best"
        )


@dataclasses.dataclass
class RunSummary:
    """A run's results: what `train` returns and `metrics.json` holds.

    Args:
        status: "running", "finished" or "diverged".
        task, labels: the task's kind and labels.
        model, data, strategy: what was trained, on what, how (as metrics.json describes them).
        epochs: one record per finished epoch.
        run_dir: the run directory; None on a non-chief worker, which writes none.
        final: the last epoch's evaluation (with `--eval`); best: {best_metric: best value}.
        error: why a diverged run stopped.
        wall_seconds, train_num_examples, trace_counts, time: the finished run's totals.
        evaluations: the evaluations inside epochs (`--eval-every-steps`), None without.
        stopped_early: where and why early stopping ended the run, None when it did not.
        stopped_at_max_steps: `--max-steps` when the run ended after taking that many steps
            (None without it, or when early stopping ended the run first).
        calibration: what the end of the run fitted on --eval (`Calibration.summary`: the
            temperatures applied, the thresholds, and notes on what the eval rows could not
            measure); None without it.
        schedule: the batch size and epochs bertfit chose for a small training set, as the
            run said it (`training.schedule`); None where the flags or the defaults set them.
        few_shot: with `--few-shot`, its first stage (`training.few_shot`): pairs, steps,
            batch size, sequence length, cosine loss of its first and last steps, seconds.
    """

    status: str
    task: str
    labels: list[str]
    model: dict
    data: dict
    strategy: dict
    epochs: list[EpochRecord] = dataclasses.field(default_factory=list)
    run_dir: str | None = None
    final: dict | None = None
    best: dict | None = None
    error: str | None = None
    wall_seconds: float | None = None
    train_num_examples: int | None = None
    trace_counts: dict | None = None
    time: dict | None = None
    evaluations: list[StepEvaluation] | None = None
    stopped_early: EarlyStop | None = None
    stopped_at_max_steps: int | None = None
    calibration: dict | None = None
    schedule: str | None = None
    few_shot: dict | None = None

    def to_dict(self) -> dict:
        """metrics.json: the fields that are set (no `final` without evaluation)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["epochs"] = [record.to_dict() for record in self.epochs]
        if self.evaluations is not None:
            values["evaluations"] = [e.to_dict() for e in self.evaluations]
        if self.stopped_early is not None:
            values["stopped_early"] = self.stopped_early.to_dict()
        return {key: value for key, value in values.items() if value is not None}

    @classmethod
    def from_dict(cls, values: dict) -> RunSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        known = {key: value for key, value in values.items() if key in names}
        known["epochs"] = [EpochRecord.from_dict(r) for r in values.get("epochs", [])]
        if values.get("evaluations") is not None:
            known["evaluations"] = [StepEvaluation(**e) for e in values["evaluations"]]
        if values.get("stopped_early") is not None:
            known["stopped_early"] = EarlyStop(**values["stopped_early"])
        return cls(**known)

    @property
    def headline(self) -> dict:
        """What `bertfit train` prints: the final evaluation, or the last training loss."""
        if self.final is not None:
            return self.final
        return {"train_loss": self.epochs[-1].train_loss} if self.epochs else {}

    def epoch_table(self) -> str:
        """The end-of-run table: one row per epoch with the task's headline metrics."""
        names = [
            n
            for n in (*HEADLINE_METRICS[self.task], "loss")
            if any(r.eval is not None and n in r.eval for r in self.epochs)
        ]
        header = ["epoch", "train loss", *(f"eval {n}" for n in names), "ex/s", "seconds", ""]
        rows = [
            [
                str(r.epoch),
                f"{r.train_loss:.4f}",
                *(f"{r.eval[n]:.4f}" for n in names),
                f"{r.train_examples_per_second:.1f}",
                f"{r.train_seconds:.0f}",
                ", ".join(
                    ["best"] * r.best
                    + ["stopped early"] * (r.stopped_after_steps is not None)
                    + ["max steps"] * (r.max_steps_cut is not None)
                ),
            ]
            for r in self.epochs
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]
        ]
        if self.stopped_early is not None:
            lines.append(self.stopped_early.describe())
        if self.stopped_at_max_steps is not None:
            lines.append(f"stopped at --max-steps {self.stopped_at_max_steps}")
        return "\n".join(lines)
