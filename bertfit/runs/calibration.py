"""Probabilities a user can trust: temperature scaling and per-label thresholds, fitted on --eval.

A fine-tuned classifier is over-confident: its 0.95 is right less often than 95% of the time.
Temperature scaling (Guo et al., 2017) divides the logits by one number T, fitted to minimise the
negative log-likelihood of the evaluation labels; it moves no prediction of a single-label model
(the argmax is unchanged), only how sure it says it is. A multi-label model gets one temperature
per label (each sigmoid is its own binary classifier). A temperature is kept only where it also
lowers the NLL of eval rows it was not fitted on by more than noise (`held_out_gains`, 2-fold
cross-fitting): a model that is calibrated already is left alone rather than nudged. Nor is one
kept that the eval rows cannot measure (`unmeasurable`): rows of one class, or rows every one of
which is predicted right (perfectly separated), whose NLL only falls as T shrinks, so the fit
runs to the search's bound and would turn a 0.67 into 0.999999; nor any fit at that bound. The
run says so (`Calibration.notes`: train.log, the console, metrics.json). The
temperatures live in the run's `Task` (labels.json), so `bertfit.inference.outputs` applies
them inside every graph: the SavedModel, LiteRT, ONNX, `bertfit serve` and `bertfit predict`
all give the calibrated probabilities.

Multi-label decisions get one threshold per label (`label_thresholds`): each label's F1-best on
--eval, and never above its floor, the probability at which the label would still be predicted
on at least half as many eval rows as carry it, so that a rare label is never silenced. A label
that no eval row carries, or that every one does, keeps 0.5: those rows cannot place it.

A regression gets a predictive interval instead (`residual_interval`): value ± the absolute eval
residual that held 90% of the eval rows (split conformal), in `Task.interval`, given by predict
and the SavedModel (`value_low`, `value_high`); `bertfit evaluate` reports its coverage.

What the fit did is kept in the run directory as calibration.json (`Calibration`: the
temperatures, the thresholds, expected calibration error, Brier score and NLL before and after,
and the reliability bins the report draws). `calibration_metrics` is what `bertfit evaluate`
adds: `ece` and `brier`.

Examples:
>>> rng = np.random.default_rng(0)
>>> logits = rng.normal(size=(4000, 2)) * 3
>>> labels = (rng.random(4000) < softmax(logits / 3.0)[:, 1]).astype(int)
>>> abs(fit_temperature(logits, labels) - 3.0) < 0.2  # the logits are 3x too confident
True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.data.tasks import INTERVAL_LEVEL, MULTI_LABEL, REGRESSION, SINGLE_LABEL, Task
from bertfit.errors import DataError
from bertfit.runs.metrics import task_metrics

ECE_BINS = 15  # equal-width confidence bins, as Guo et al.
TEMPERATURE_RANGE = (0.05, 20.0)  # the fit searches log T between these
THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
# A label is predicted on at least this share of the eval rows that carry it (its floor).
THRESHOLD_FLOOR_SHARE = 0.5
FLOOR_MARGIN = 1e-5  # a floor sits this far under its row's probability
MIN_EVAL_ROWS = 20
# Why a temperature is not kept (`unmeasurable`): on rows all predicted right the NLL falls as T
# shrinks, without a minimum.
SEPARATED = "every eval row is predicted right (perfectly separated)"
SEPARATED_LABEL = "its eval rows are perfectly separated (each on the right side of 0.5)"
LOW, HIGH = TEMPERATURE_RANGE
AT_BOUND = f"the fit ran to the edge of its search ({LOW:g} .. {HIGH:g}), the NLL still falling"
# A temperature is kept when its held-out NLL gain is over this many standard errors: a gain
# within noise is no reason to move a model's probabilities (measured: docs/calibration.md).
SIGNIFICANT_GAIN = 2.0  # fewer eval rows than this fit nothing: the temperature would be noise
CALIBRATION_FILE = "calibration.json"
CALIBRATION_INVALID = "data-calibration-invalid"  # `DataError.code` of a damaged file
PROBABILITY_FLOOR = 1e-7  # float32 probabilities are clipped here before going back to logits


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def logits_of(kind: str, probabilities: np.ndarray) -> np.ndarray:
    """Logits (float64) that give `probabilities`: log p for softmax (it ignores a shift), the
    log-odds for sigmoids. A float32 probability within 1e-7 of 0 or 1 is clipped there."""
    p = np.clip(np.asarray(probabilities, np.float64), PROBABILITY_FLOOR, 1 - PROBABILITY_FLOOR)
    return np.log(p / (1 - p)) if kind == MULTI_LABEL else np.log(p)


def _softmax_nll(logits: np.ndarray, labels: np.ndarray) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_z - shifted[np.arange(len(labels)), labels]))


def _sigmoid_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    # log(1 + e^-z) for positives, log(1 + e^z) for negatives, without overflow
    signed = np.where(targets > 0.5, logits, -logits)
    return float(np.mean(np.logaddexp(0.0, -signed)))


def _minimise_log_temperature(nll) -> float:
    """The T in `TEMPERATURE_RANGE` minimising `nll(T)` (convex in 1/T): golden-section search
    on log T, to 1e-4 relative."""
    lo, hi = (math.log(t) for t in TEMPERATURE_RANGE)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(math.exp(a)), nll(math.exp(b))
    while hi - lo > 1e-4:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(math.exp(b))
    return math.exp((lo + hi) / 2)


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The softmax temperature minimising the NLL of class ids `labels` [n] under
    `logits` [n, classes] / T."""
    logits, labels = np.asarray(logits, np.float64), np.asarray(labels, np.int64)
    return _minimise_log_temperature(lambda t: _softmax_nll(logits / t, labels))


def fit_label_temperatures(logits: np.ndarray, targets: np.ndarray) -> tuple[float, ...]:
    """One sigmoid temperature per label (column) of multi-hot `targets` [n, labels]; a label
    whose eval column is all one value keeps 1 (nothing to fit: any T > 1 would look better)."""
    logits, gold = np.asarray(logits, np.float64), np.asarray(targets) > 0.5
    temperatures = []
    for j in range(logits.shape[1]):
        if gold[:, j].all() or not gold[:, j].any():
            temperatures.append(1.0)
            continue
        column, target = logits[:, j], gold[:, j]
        temperatures.append(
            _minimise_log_temperature(lambda t, z=column, y=target: _sigmoid_nll(z / t, y))
        )
    return tuple(temperatures)


def scaled(kind: str, logits: np.ndarray, temperatures) -> np.ndarray:
    """The probabilities of `logits` divided by `temperatures` (what the graph computes)."""
    z = np.asarray(logits, np.float64) / np.asarray(temperatures, np.float64)
    return sigmoid(z) if kind == MULTI_LABEL else softmax(z)


def _confidence_and_outcome(
    kind: str, targets: np.ndarray, probabilities: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What the reliability of a task is measured on: single-label, the top probability and
    whether that class is right; multi-label, every (row, label) probability and whether the
    label is on."""
    p = np.asarray(probabilities, np.float64)
    if kind == MULTI_LABEL:
        return p.ravel(), (np.asarray(targets) > 0.5).ravel().astype(np.float64)
    labels = np.asarray(targets, np.int64)
    return p.max(axis=1), (p.argmax(axis=1) == labels).astype(np.float64)


def reliability_bins(
    kind: str, targets: np.ndarray, probabilities: np.ndarray, bins: int = ECE_BINS
) -> list[dict]:
    """Equal-width bins over [0, 1] of the confidence: each bin's `count`, mean `confidence`
    and observed `frequency` (accuracy, or the share of labels on); empty bins are left out.

    Examples:
    >>> bins = reliability_bins(SINGLE_LABEL, np.array([1, 0]), np.array([[.1, .9], [.2, .8]]))
    >>> [(b["count"], b["confidence"], b["frequency"]) for b in bins]  # the 0.8 is wrong
    [(1, 0.8, 0.0), (1, 0.9, 1.0)]
    """
    confidence, outcome = _confidence_and_outcome(kind, targets, probabilities)
    index = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    rows = []
    for b in range(bins):
        inside = index == b
        if inside.any():
            rows.append(
                {
                    "lower": round(b / bins, 6),
                    "upper": round((b + 1) / bins, 6),
                    "count": int(inside.sum()),
                    "confidence": float(confidence[inside].mean()),
                    "frequency": float(outcome[inside].mean()),
                }
            )
    return rows


def expected_calibration_error(
    kind: str, targets: np.ndarray, probabilities: np.ndarray, bins: int = ECE_BINS
) -> float:
    """Σ over bins of (bin share of rows) × |frequency − confidence| (0 for no rows)."""
    rows = reliability_bins(kind, targets, probabilities, bins)
    total = sum(r["count"] for r in rows)
    return float(
        sum(r["count"] * abs(r["frequency"] - r["confidence"]) for r in rows) / max(total, 1)
    )


def brier_score(kind: str, targets: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean squared error of the probabilities against the one-hot (single-label) or multi-hot
    (multi-label) truth; single-label sums over classes (Brier's original score), multi-label
    averages over (row, label) pairs (each label a binary score, as scikit-learn's
    `brier_score_loss`)."""
    p = np.asarray(probabilities, np.float64)
    if not len(p):
        return 0.0
    if kind == MULTI_LABEL:
        return float(np.mean((p - (np.asarray(targets) > 0.5)) ** 2))
    truth = np.zeros_like(p)
    truth[np.arange(len(p)), np.asarray(targets, np.int64)] = 1.0
    return float(np.mean(np.sum((p - truth) ** 2, axis=1)))


def negative_log_likelihood(kind: str, targets: np.ndarray, probabilities: np.ndarray) -> float:
    """The loss the temperature minimises, from probabilities (clipped at 1e-7)."""
    if not len(probabilities):
        return 0.0
    logits = logits_of(kind, probabilities)
    if kind == MULTI_LABEL:
        return _sigmoid_nll(logits, np.asarray(targets))
    return _softmax_nll(logits, np.asarray(targets, np.int64))


def calibration_metrics(task: Task, targets: np.ndarray, probabilities: np.ndarray) -> dict:
    """`ece` and `brier` of a classifier's probabilities; for a regression with a predictive
    interval, `interval_coverage`: the share of true values inside it (`task_metrics`'
    inputs: standardised targets and outputs [n, 1])."""
    if task.kind == REGRESSION:
        if not task.interval:
            return {}
        error = np.abs(task.values(targets) - task.values(np.asarray(probabilities)[:, 0]))
        return {"interval_coverage": float(np.mean(error <= task.interval)) if len(error) else 0.0}
    return {
        "ece": expected_calibration_error(task.kind, targets, probabilities),
        "brier": brier_score(task.kind, targets, probabilities),
    }


def label_thresholds(targets: np.ndarray, probabilities: np.ndarray) -> tuple[float, ...]:
    """One decision threshold per label: the grid value (0.05 .. 0.95) with the label's best F1
    (ties nearest 0.5), capped at the label's floor: the probability of its
    ⌈`THRESHOLD_FLOOR_SHARE` × positives⌉-th most likely eval row, so that the label is still
    predicted on at least that many rows. A label with no positive in the eval rows, or no
    negative (any threshold under its lowest probability is then "best"), keeps 0.5.

    Examples:
    >>> gold = np.array([[1, 0], [1, 0], [0, 1], [0, 0]])
    >>> p = np.array([[.9, .02], [.8, .01], [.3, .04], [.2, .01]])
    >>> label_thresholds(gold, p)  # the rare label's probabilities all sit under 0.05
    (0.5, 0.03999)
    """
    gold, p = np.asarray(targets) > 0.5, np.asarray(probabilities, np.float64)
    thresholds = []
    for j in range(p.shape[1]):
        positives = int(gold[:, j].sum())
        if positives in (0, len(gold)):
            thresholds.append(0.5)
            continue
        scores = [_f1(gold[:, j], p[:, j] >= t) for t in THRESHOLD_GRID]
        best = max(scores)
        chosen = min(
            (t for t, s in zip(THRESHOLD_GRID, scores, strict=True) if s == best),
            key=lambda t: abs(t - 0.5),
        )
        keep = math.ceil(THRESHOLD_FLOOR_SHARE * positives)
        # just under that row's probability: the float32 graph must still predict it
        floor = max(float(np.sort(p[:, j])[::-1][keep - 1]) - FLOOR_MARGIN, 0.0)
        thresholds.append(math.floor(min(float(chosen), floor) * 1e6) / 1e6)
    return tuple(thresholds)


def _f1(gold: np.ndarray, predicted: np.ndarray) -> float:
    denominator = gold.sum() + predicted.sum()
    return float(2 * (gold & predicted).sum() / denominator) if denominator else 0.0


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What the end of a run fitted on --eval (calibration.json).

    Args:
        task: the task kind.
        temperatures: the temperatures the model applies (one, or one per label; 1 for a
            label whose fit was not kept); empty when none was kept.
        fitted_temperatures: what the fit on all the eval rows gave (empty: --calibrate off).
        held_out_gains, held_out_errors: per fitted temperature, how much it lowered the NLL of
            eval rows it was not fitted on and the standard error of that (`held_out_gains`);
            kept only where the gain is over `SIGNIFICANT_GAIN` standard errors.
        thresholds: multi-label decision thresholds per label (empty for single-label).
        applied: whether any temperature was kept.
        eval_rows: how many eval rows the fit saw.
        before, after: `ece`, `brier` and `nll` on the eval rows without and with them.
        reliability_before, reliability_after: `reliability_bins` without and with them.
        metrics: the task's metrics on the eval rows as the calibrated model gives them (with
            the thresholds: micro- and macro-F1 side by side), what `bertfit evaluate` on the
            same rows reports.
        interval: regression: the predictive interval's half-width (`residual_interval`);
            `after` then holds its `interval_coverage` on the eval rows.
        notes: what the eval rows could not measure, one sentence each (`calibration_notes`):
            a temperature not kept for it, a threshold left at 0.5.
    """

    task: str
    temperatures: tuple[float, ...]
    fitted_temperatures: tuple[float, ...]
    held_out_gains: list
    held_out_errors: list
    thresholds: tuple[float, ...]
    applied: bool
    eval_rows: int
    before: dict
    after: dict
    reliability_before: list
    reliability_after: list
    metrics: dict
    interval: float = 0.0
    notes: list = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        """One line for train.log and the console."""
        if self.task == REGRESSION:
            return (
                f"predictive interval on {self.eval_rows} eval rows: value ± {self.interval:.6g} "
                f"holds {self.after['interval_coverage']:.1%} of them"
            )
        fitted = ", ".join(f"{t:.3f}" for t in self.fitted_temperatures) or "none (off)"
        kept = ", ".join(f"{t:.3f}" for t in self.temperatures) or "none"
        line = (
            f"calibration on {self.eval_rows} eval rows: temperature fitted {fitted}, kept "
            f"{kept} (kept where it lowers held-out eval NLL beyond noise); ECE "
            f"{self.before['ece']:.4f} -> {self.after['ece']:.4f}, NLL {self.before['nll']:.4f}"
            f" -> {self.after['nll']:.4f}"
        )
        if self.thresholds:
            line += (
                f"; thresholds per label {', '.join(f'{t:.2f}' for t in self.thresholds)}: "
                f"micro-F1 {self.metrics['micro_f1']:.4f}, macro-F1 {self.metrics['macro_f1']:.4f}"
            )
        return "; ".join([line, *self.notes])

    def summary(self) -> dict:
        """What metrics.json says of it: the temperatures applied, the thresholds, and the
        notes on what the eval rows could not measure."""
        return {
            "applied": self.applied,
            "temperatures": list(self.temperatures),
            "thresholds": list(self.thresholds),
            **({"interval": self.interval} if self.task == REGRESSION else {}),
            "notes": list(self.notes),
        }

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values.update(
            temperatures=list(self.temperatures),
            fitted_temperatures=list(self.fitted_temperatures),
            thresholds=list(self.thresholds),
        )
        return values

    def save(self, file: str | os.PathLike) -> None:
        write_text_atomic(file, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, file: str | os.PathLike) -> Calibration:
        """Reads calibration.json; a damaged one is a `DataError` naming the file."""
        name = os.fspath(file)
        try:
            values = json.loads(Path(file).read_text(encoding="utf-8"))
            fields = {f.name for f in dataclasses.fields(cls)}
            if isinstance(values, dict):  # written before runs noted what they could not fit
                values.setdefault("notes", [])
            if not isinstance(values, dict) or set(values) != fields:
                raise ValueError(f"expected the keys {sorted(fields)}")
            calibration = cls(**values)
            calibration.check()
        except FileNotFoundError:
            raise DataError("not found", path=name, code="data-file-not-found") from None
        except (OSError, ValueError, TypeError) as e:
            raise DataError(
                f"cannot read the calibration: {e}. It is written by bertfit train at the end "
                "of a run with --eval; retrain, or delete the file",
                path=name,
                code=CALIBRATION_INVALID,
            ) from None
        return calibration

    def check(self) -> None:
        """ValueError unless the numbers can be what a fit wrote."""
        object.__setattr__(self, "temperatures", tuple(self.temperatures))
        object.__setattr__(self, "thresholds", tuple(self.thresholds))
        object.__setattr__(self, "fitted_temperatures", tuple(self.fitted_temperatures))
        if not isinstance(self.notes, list) or not all(isinstance(n, str) for n in self.notes):
            raise ValueError("notes must be a list of sentences")
        numbers = [*self.temperatures, *self.fitted_temperatures, *self.thresholds]
        if self.task not in (SINGLE_LABEL, MULTI_LABEL, REGRESSION):
            raise ValueError(f"task {self.task!r} is not a task bertfit trains")
        if not isinstance(self.interval, int | float) or not self.interval >= 0:
            raise ValueError("interval must be a number >= 0")
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in numbers):
            raise ValueError("temperatures and thresholds must be finite numbers")
        if not all(t > 0 for t in (*self.temperatures, *self.fitted_temperatures)) or not all(
            0 <= t <= 1 for t in self.thresholds
        ):
            raise ValueError("temperatures must be > 0 and thresholds in [0, 1]")

    def calibrated_task(self, task: Task) -> Task:
        """`task` with these temperatures (when applied) and thresholds, or interval."""
        if task.kind == REGRESSION:
            return dataclasses.replace(task, interval=self.interval)
        return dataclasses.replace(
            task,
            temperatures=self.temperatures if self.applied else (),
            thresholds=self.thresholds,
        )


def _summary(kind: str, targets: np.ndarray, probabilities: np.ndarray) -> dict:
    return {
        "ece": expected_calibration_error(kind, targets, probabilities),
        "brier": brier_score(kind, targets, probabilities),
        "nll": negative_log_likelihood(kind, targets, probabilities),
    }


def _fit(kind: str, logits: np.ndarray, targets: np.ndarray) -> tuple[float, ...]:
    if kind == MULTI_LABEL:
        return fit_label_temperatures(logits, targets)
    return (fit_temperature(logits, targets),)


def _row_losses(kind: str, logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each row's NLL under each temperature's share: [n, 1] single-label (cross-entropy),
    [n, labels] multi-label (each label's binary cross-entropy)."""
    if kind == MULTI_LABEL:
        signed = np.where(np.asarray(targets) > 0.5, logits, -logits)
        return np.logaddexp(0.0, -signed)
    labels = np.asarray(targets, np.int64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    return (log_z - shifted[np.arange(len(labels)), labels])[:, None]


def held_out_gains(
    kind: str, logits: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How much each temperature lowers the NLL of eval rows it was not fitted on, and the
    standard error of that gain (2-fold cross-fitting: fitted on the even rows and scored on
    the odd ones, and the other way round; every row scored once). A temperature fitted and
    judged on the same rows always looks better; this says whether it generalises beyond
    noise, which is what `--calibrate auto` keeps it for (`SIGNIFICANT_GAIN`)."""
    even = np.arange(len(targets)) % 2 == 0
    differences = []
    for fitted_on, scored_on in ((even, ~even), (~even, even)):
        temperatures = np.asarray(_fit(kind, logits[fitted_on], targets[fitted_on]))
        z, y = logits[scored_on], targets[scored_on]
        differences.append(_row_losses(kind, z, y) - _row_losses(kind, z / temperatures, y))
    rows = np.concatenate(differences)
    return rows.mean(axis=0), rows.std(axis=0, ddof=1) / np.sqrt(len(rows))


def fit_calibration(
    task: Task,
    targets: np.ndarray,
    probabilities: np.ndarray,
    *,
    temperature: bool = True,
    tune_thresholds: bool = True,
) -> Calibration | None:
    """The calibration of a classifier from its uncalibrated eval `probabilities` (a
    regression's predictive interval from its standardised outputs [n, 1]), or None (fewer
    than `MIN_EVAL_ROWS` rows). Each temperature is kept only when it lowers the NLL of
    held-out eval rows by more than `SIGNIFICANT_GAIN` standard errors (`held_out_gains`); a
    label whose temperature is not kept gets 1. `temperature=False` (--calibrate off) fits
    none. Multi-label thresholds are chosen either way (unless `tune_thresholds` is False:
    --tune-threshold false), on the probabilities the model will give."""
    if len(targets) < MIN_EVAL_ROWS:
        return None
    if task.kind == REGRESSION:  # --calibrate off: no interval either
        if not temperature:
            return None
        return _regression_calibration(task, np.asarray(targets), np.asarray(probabilities))
    targets = np.asarray(targets)
    logits = logits_of(task.kind, probabilities)
    fitted = tuple(round(t, 6) for t in _fit(task.kind, logits, targets)) if temperature else ()
    gains, errors = (
        held_out_gains(task.kind, logits, targets) if temperature else (np.zeros(0),) * 2
    )
    unmeasured = (
        [
            why or (AT_BOUND if at_bound(t) else None)
            for t, why in zip(fitted, unmeasurable(task.kind, logits, targets), strict=True)
        ]
        if temperature
        else []
    )
    kept = tuple(
        t if g > SIGNIFICANT_GAIN * e and why is None else 1.0
        for t, g, e, why in zip(fitted, gains, errors, unmeasured, strict=True)
    )
    applied = any(t != 1.0 for t in kept)
    final = scaled(task.kind, logits, kept) if applied else np.asarray(probabilities, np.float64)
    tuned = task.kind == MULTI_LABEL and tune_thresholds
    thresholds = label_thresholds(targets, final) if tuned else ()
    calibrated = dataclasses.replace(task, thresholds=thresholds)
    return Calibration(
        task=task.kind,
        temperatures=kept if applied else (),
        fitted_temperatures=fitted,
        held_out_gains=[round(float(g), 8) for g in gains],
        held_out_errors=[round(float(e), 8) for e in errors],
        thresholds=thresholds,
        applied=applied,
        eval_rows=int(len(targets)),
        before=_summary(task.kind, targets, probabilities),
        after=_summary(task.kind, targets, final),
        reliability_before=reliability_bins(task.kind, targets, probabilities),
        reliability_after=reliability_bins(task.kind, targets, final),
        metrics=task_metrics(calibrated, targets, final),
        notes=calibration_notes(task, targets, fitted, unmeasured, tuned),
    )


def at_bound(temperature: float) -> bool:
    """Whether a fitted temperature sits on `TEMPERATURE_RANGE`'s edge (to the search's
    1e-4 in log T): the NLL was still falling there, the fit found no minimum."""
    return any(abs(math.log(temperature / edge)) < 1e-3 for edge in TEMPERATURE_RANGE)


def unmeasurable(kind: str, logits: np.ndarray, targets: np.ndarray) -> list[str | None]:
    """Per temperature (one, or one per label), why these eval rows cannot measure it, or
    None: single-label rows of one class, or every row predicted right; a multi-label label
    that no row carries, or every row, or whose rows all sit on the right side of 0.5. On
    rows predicted right the NLL falls as T shrinks, without a minimum.

    Examples:
    >>> unmeasurable(SINGLE_LABEL, np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    ['every eval row is predicted right (perfectly separated)']
    """
    if kind == MULTI_LABEL:
        gold = np.asarray(targets) > 0.5
        reasons = []
        for j in range(gold.shape[1]):
            separated = np.all((logits[:, j] > 0) == gold[:, j])
            reasons.append(
                _one_value(int(gold[:, j].sum()), len(gold))
                or (SEPARATED_LABEL if separated else None)
            )
        return reasons
    labels = np.asarray(targets, np.int64)
    if len(np.unique(labels)) < 2:
        return ["the eval rows hold one class"]
    return [SEPARATED if np.all(logits.argmax(axis=1) == labels) else None]


def calibration_notes(
    task: Task,
    targets: np.ndarray,
    fitted: tuple[float, ...],
    unmeasured: list[str | None],
    tuned: bool,
) -> list[str]:
    """One sentence per temperature the eval rows could not measure (`unmeasured`, beside
    `fitted`) and per multi-label threshold they could not place (`tuned`: a label on no eval
    row, or on every one), a label's two said together.

    Examples:
    >>> calibration_notes(Task(SINGLE_LABEL, ("a", "b")), np.array([0, 1]), (0.05,),
    ...                   ["every eval row is predicted right (perfectly separated)"], False)
    ['temperature not kept (fit 0.050): every eval row is predicted right (perfectly separated)']
    """
    carried = (np.asarray(targets) > 0.5).sum(axis=0) if tuned else ()
    notes = []
    for j in range(len(task.labels) if task.kind == MULTI_LABEL else 1):
        done, why = [], unmeasured[j] if j < len(unmeasured) else None
        if why is not None:
            done.append(f"temperature not kept (fit {fitted[j]:.3f})")
        if tuned and _one_value(carried[j], len(targets)):
            done.append("threshold left at 0.5")
            why = why or _one_value(carried[j], len(targets))
        if done:
            who = f"label {task.labels[j]!r}: " if task.kind == MULTI_LABEL else ""
            notes.append(f"{who}{' and '.join(done)}: {why}")
    return notes


def _one_value(carried: int, rows: int) -> str | None:
    """Why a multi-label label's eval column measures nothing (no row carries it, or every
    one does), or None."""
    if carried == 0:
        return "no eval row carries it"
    return "every eval row carries it" if carried == rows else None


def residual_interval(task: Task, targets: np.ndarray, outputs: np.ndarray) -> float:
    """The split-conformal half-width (targets' units): the ⌈(n + 1) × `INTERVAL_LEVEL`⌉-th
    smallest absolute eval residual, so that `value ± it` holds at least that share of new
    rows' true values when they are like the eval rows (the largest residual for a small n).

    Examples:
    >>> task = Task(REGRESSION, mean=0.0, std=2.0)  # standardised: values are twice as large
    >>> residual_interval(task, np.zeros(9), np.arange(1, 10, dtype=float)[:, None] / 10)
    1.8
    """
    error = np.sort(np.abs(task.values(targets) - task.values(outputs[:, 0])))
    rank = min(math.ceil((len(error) + 1) * INTERVAL_LEVEL), len(error))
    return round(float(error[rank - 1]), 6)


def _regression_calibration(task: Task, targets: np.ndarray, outputs: np.ndarray) -> Calibration:
    interval = residual_interval(task, targets, outputs)
    calibrated = dataclasses.replace(task, interval=interval)
    coverage = calibration_metrics(calibrated, targets, outputs)
    return Calibration(
        task=task.kind,
        temperatures=(),
        fitted_temperatures=(),
        held_out_gains=[],
        held_out_errors=[],
        thresholds=(),
        applied=interval > 0,
        eval_rows=int(len(targets)),
        before={},
        after=coverage,
        reliability_before=[],
        reliability_after=[],
        metrics=task_metrics(calibrated, targets, outputs),
        interval=interval,
    )
