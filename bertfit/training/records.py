"""What a run records: one `EpochRecord` per epoch and the `RunSummary` that `train` returns and
`metrics.json` holds (`to_dict` writes exactly the keys metrics.json always had), with the
train.log line and the terminal table made from them."""

from __future__ import annotations

import dataclasses

from bertfit.training.metrics import HEADLINE_METRICS

RUNNING, FINISHED, DIVERGED = "running", "finished", "diverged"  # metrics.json's status


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

    def to_dict(self) -> dict:
        """As metrics.json has it: `eval` only when evaluated, `best` only when true."""
        record = dataclasses.asdict(self)
        if self.eval is None:
            del record["eval"]
        if not self.best:
            del record["best"]
        return record

    @classmethod
    def from_dict(cls, values: dict) -> EpochRecord:
        return cls(**values)

    def describe(self) -> str:
        """One readable train.log line."""
        text = (
            f"epoch {self.epoch}: train loss {self.train_loss:.4f} "
            f"({self.train_examples} examples, "
            f"{self.train_examples_per_second:.1f} ex/s, {self.train_seconds:.1f} s)"
        )
        if self.eval is not None:
            scores = ", ".join(
                f"{name} {value:.4f}"
                for name, value in self.eval.items()
                if isinstance(value, float) and name not in ("wall_seconds", "examples_per_second")
            )
            text += f"; eval on {self.eval['num_examples']} examples: {scores}"
        return text + ("; best so far" if self.best else "")


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

    def to_dict(self) -> dict:
        """metrics.json: the fields that are set (no `final` without evaluation)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["epochs"] = [record.to_dict() for record in self.epochs]
        return {key: value for key, value in values.items() if value is not None}

    @classmethod
    def from_dict(cls, values: dict) -> RunSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        known = {key: value for key, value in values.items() if key in names}
        known["epochs"] = [EpochRecord.from_dict(r) for r in values.get("epochs", [])]
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
                "best" if r.best else "",
            ]
            for r in self.epochs
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]
        ]
        return "\n".join(lines)
