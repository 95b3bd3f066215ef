"""Classification metrics computed on the host from every real example's probabilities."""

from __future__ import annotations

import numpy as np


def classification_metrics(labels: np.ndarray, probabilities: np.ndarray) -> dict:
    """Mean cross-entropy, accuracy and macro-F1 over all given examples.

    Macro-F1 averages per-class F1 over every class of the label map (a class that is never
    predicted nor present scores 0, as in scikit-learn's `zero_division=0`).

    Examples:
    >>> m = classification_metrics(np.array([0, 1, 1]), np.array([[.9, .1], [.2, .8], [.6, .4]]))
    >>> m["accuracy"], m["num_examples"]
    (0.6666666666666666, 3)
    """
    labels = np.asarray(labels)
    num_classes = probabilities.shape[1]
    predictions = probabilities.argmax(axis=1)
    picked = probabilities[np.arange(len(labels)), labels]
    f1s = []
    for c in range(num_classes):
        tp = np.sum((predictions == c) & (labels == c))
        fp = np.sum((predictions == c) & (labels != c))
        fn = np.sum((predictions != c) & (labels == c))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return {
        "loss": float(np.mean(-np.log(np.clip(picked, 1e-12, 1.0)))) if len(labels) else 0.0,
        "accuracy": float(np.mean(predictions == labels)) if len(labels) else 0.0,
        "macro_f1": float(np.mean(f1s)),
        "num_examples": int(len(labels)),
    }


def is_better(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of `metric` beats `best` (lower is better for loss)."""
    if best is None:
        return True
    return value < best if metric == "loss" else value > best
