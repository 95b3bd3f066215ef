"""Evaluation metrics for each task, computed on the host from every real example's outputs.

`task_metrics` is what `bertfit train` and `bertfit evaluate` report:

- single-label: loss (cross-entropy), accuracy, macro_f1, mcc, roc_auc (two classes),
  per_class precision/recall/f1/support, confusion_matrix (rows: gold, columns: predicted);
- multi-label: loss (binary cross-entropy), micro_f1, macro_f1, per_label_f1, subset_accuracy,
  hamming_loss, at the task's decision threshold (one per label once tuned: `thresholds`);
- regression: loss (mean squared error of the standardised targets, what training minimises),
  rmse, mae, pearson, spearman in the targets' own units.

Every metric counts every example it is given (`num_examples`). A class (or label) with no
eval row has no recall to measure: its F1 is reported as 0 (scikit-learn's `zero_division=0`)
but macro-F1 averages the classes that have eval rows only, and the others are listed apart
as `labels_without_support` (a multi-label set where a rare label has no dev row would
otherwise score 0.68 for 0.85 on the labels it has).
"""

from __future__ import annotations

import numpy as np

from bertfit.config import TASK_METRICS
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL, Task

LOWER_IS_BETTER = {"loss", "rmse", "mae", "hamming_loss"}
# The two numbers a person reads first, per task (the demo's last line, the report, the table).
HEADLINE_METRICS = {
    SINGLE_LABEL: ("accuracy", "macro_f1"),
    MULTI_LABEL: ("micro_f1", "macro_f1"),
    REGRESSION: ("rmse", "pearson"),
}


def default_metric(kind: str) -> str:
    """The metric that picks the best checkpoint unless --best-metric says otherwise."""
    return TASK_METRICS[kind][0]


def task_metrics(task: Task, targets: np.ndarray, outputs: np.ndarray) -> dict:
    """The task's metrics. `outputs`: probabilities [n, labels] (classification) or the
    standardised predictions [n, 1] (regression); `targets` as `Task.targets` makes them."""
    if task.kind == REGRESSION:
        metrics = regression_metrics(task.values(targets), task.values(outputs[:, 0]))
        metrics["loss"] = float(np.mean((outputs[:, 0] - targets) ** 2)) if len(targets) else 0.0
        return metrics
    if task.kind == MULTI_LABEL:
        threshold = np.asarray(task.thresholds) if task.thresholds else task.threshold
        return multi_label_metrics(targets, outputs, task.labels, threshold)
    return classification_metrics(targets, outputs, task.labels)


def classification_metrics(
    labels: np.ndarray, probabilities: np.ndarray, names: tuple[str, ...] | None = None
) -> dict:
    """Single-label metrics of class ids `labels` [n] and `probabilities` [n, classes].

    Examples:
    >>> m = classification_metrics(np.array([0, 1, 1]), np.array([[.9, .1], [.2, .8], [.6, .4]]))
    >>> m["accuracy"], m["num_examples"], m["confusion_matrix"]
    (0.6666666666666666, 3, [[1, 0], [1, 1]])
    """
    labels = np.asarray(labels)
    num_classes = probabilities.shape[1]
    names = names or tuple(str(c) for c in range(num_classes))
    predictions = probabilities.argmax(axis=1) if len(labels) else labels
    confusion = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(confusion, (labels, predictions), 1)
    tp = np.diag(confusion)
    predicted, support = confusion.sum(axis=0), confusion.sum(axis=1)
    precision = _ratio(tp, predicted)
    recall = _ratio(tp, support)
    f1 = _ratio(2 * tp, predicted + support)
    picked = probabilities[np.arange(len(labels)), labels]
    metrics = {
        "loss": float(np.mean(-np.log(np.clip(picked, 1e-12, 1.0)))) if len(labels) else 0.0,
        "accuracy": float(np.mean(predictions == labels)) if len(labels) else 0.0,
        **macro_f1(f1, support, names),
        "mcc": _multiclass_mcc(confusion),
        "num_examples": int(len(labels)),
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(names, precision, recall, f1, support, strict=True)
        },
        "confusion_matrix": confusion.tolist(),
    }
    if num_classes == 2:
        metrics["roc_auc"] = roc_auc(labels == 1, probabilities[:, 1])
    return metrics


def multi_label_metrics(
    targets: np.ndarray,
    probabilities: np.ndarray,
    names: tuple[str, ...],
    threshold: float | np.ndarray = 0.5,
) -> dict:
    """Multi-label metrics of multi-hot `targets` and `probabilities` [n, labels], at one
    `threshold` or one per label (then reported as `thresholds` by name).

    Examples:
    >>> m = multi_label_metrics(np.array([[1, 0], [1, 1]]), np.array([[.9, .2], [.8, .3]]),
    ...                         ("a", "b"))
    >>> m["subset_accuracy"], m["hamming_loss"], m["micro_f1"]
    (0.5, 0.25, 0.8)
    """
    gold = np.asarray(targets) > 0.5
    predicted = probabilities >= threshold
    tp, support = (gold & predicted).sum(axis=0), gold.sum(axis=0)
    f1 = _ratio(2 * tp, support + predicted.sum(axis=0))
    p = np.clip(probabilities, 1e-7, 1 - 1e-7)
    bce = -(gold * np.log(p) + (~gold) * np.log(1 - p))
    n = len(gold)
    per_label = np.ndim(threshold) > 0
    return {
        "loss": float(bce.mean()) if n else 0.0,
        "micro_f1": float(_ratio(2 * tp.sum(), gold.sum() + predicted.sum())),
        **macro_f1(f1, support, names),
        "per_label_f1": {name: float(v) for name, v in zip(names, f1, strict=True)},
        "subset_accuracy": float(np.mean(np.all(gold == predicted, axis=1))) if n else 0.0,
        "hamming_loss": float(np.mean(gold != predicted)) if n else 0.0,
        **(
            {"thresholds": {name: float(t) for name, t in zip(names, threshold, strict=True)}}
            if per_label
            else {"threshold": float(threshold)}
        ),
        "num_examples": int(n),
    }


def macro_f1(f1: np.ndarray, support: np.ndarray, names: tuple[str, ...]) -> dict:
    """`macro_f1`: the mean F1 of the classes (labels) with eval rows (`support`), 0 when none
    has any; and `labels_without_support`, the others by name, when there are any.

    Examples:
    >>> macro_f1(np.array([0.5, 1.0, 0.0]), np.array([5, 3, 0]), ("a", "b", "c"))
    {'macro_f1': 0.75, 'labels_without_support': ['c']}
    """
    present = np.asarray(support) > 0
    value = {"macro_f1": float(np.mean(f1[present])) if present.any() else 0.0}
    absent = [name for name, has_rows in zip(names, present, strict=True) if not has_rows]
    return {**value, "labels_without_support": absent} if absent else value


def support_note(metrics: dict) -> str | None:
    """The line that says which classes had no eval rows (left out of macro_f1), or None.

    Examples:
    >>> support_note({"macro_f1": 0.85, "labels_without_support": ["acting"]})
    "no eval rows of 'acting': its F1 is not measured, and macro_f1 averages the others"
    """
    absent = metrics.get("labels_without_support")
    if not absent:
        return None
    names = ", ".join(repr(name) for name in absent)
    its = "its F1 is" if len(absent) == 1 else "their F1 is"
    return f"no eval rows of {names}: {its} not measured, and macro_f1 averages the others"


def regression_metrics(targets: np.ndarray, predictions: np.ndarray) -> dict:
    """RMSE, MAE, Pearson and Spearman correlation of `predictions` against `targets`.

    Examples:
    >>> m = regression_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.0, 2.5]))
    >>> round(m["mae"], 4), m["spearman"]
    (0.3333, 1.0)
    """
    targets, predictions = np.asarray(targets, np.float64), np.asarray(predictions, np.float64)
    error = predictions - targets
    return {
        "rmse": float(np.sqrt(np.mean(error**2))) if len(error) else 0.0,
        "mae": float(np.mean(np.abs(error))) if len(error) else 0.0,
        "pearson": _correlation(targets, predictions),
        "spearman": _correlation(_ranks(targets), _ranks(predictions)),
        "num_examples": int(len(targets)),
    }


def best_threshold(targets: np.ndarray, probabilities: np.ndarray) -> float:
    """The global decision threshold (0.05 .. 0.95) with the best micro-F1; ties go to the
    one nearest 0.5."""
    gold = np.asarray(targets) > 0.5
    candidates = np.round(np.arange(0.05, 0.951, 0.05), 2)
    scores = [
        _ratio(2 * (gold & (probabilities >= t)).sum(), gold.sum() + (probabilities >= t).sum())
        for t in candidates
    ]
    best = max(scores)
    return float(
        min(
            (t for t, s in zip(candidates, scores, strict=True) if s == best),
            key=lambda t: abs(t - 0.5),
        )
    )


def is_better(metric: str, value: float, best: float | None, min_delta: float = 0.0) -> bool:
    """Whether `value` of `metric` beats `best` by more than `min_delta` (lower is better for
    loss, rmse, mae and hamming_loss).

    Examples:
    >>> is_better("accuracy", 0.82, 0.80), is_better("accuracy", 0.82, 0.80, min_delta=0.05)
    (True, False)
    >>> is_better("loss", 0.30, 0.35)
    True
    """
    if best is None:
        return True
    return value < best - min_delta if metric in LOWER_IS_BETTER else value > best + min_delta


def roc_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (the Mann-Whitney statistic, ties counted half); 0.5 when one
    class is absent."""
    positive = np.asarray(positive, bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if not n_pos or not n_neg:
        return 0.5
    ranks = _ranks(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _ratio(numerator, denominator):
    numerator = np.asarray(numerator, np.float64)
    denominator = np.asarray(denominator, np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


def _multiclass_mcc(confusion: np.ndarray) -> float:
    """Matthews correlation for any number of classes (Gorodkin's R_K); 0 when undefined."""
    c = confusion.astype(np.float64)
    total, correct = c.sum(), np.trace(c)
    predicted, gold = c.sum(axis=0), c.sum(axis=1)
    numerator = correct * total - predicted @ gold
    denominator = np.sqrt((total**2 - predicted @ predicted) * (total**2 - gold @ gold))
    return float(numerator / denominator) if denominator > 0 else 0.0


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties averaged."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    unique, inverse = np.unique(values, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse] if len(unique) < len(values) else ranks


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])
