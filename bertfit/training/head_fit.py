"""The classifier's head fitted to fixed features: an L2-regularised logistic regression, as
SetFit fits scikit-learn's on its embeddings, solved here in NumPy so that both backends (and
a JAX install without scikit-learn) have it. `--few-shot` fits the head this way on the
encoder its first stage tuned (`training.few_shot`).

The head is a Dense layer on the classifier's features (unit vectors in a `--few-shot` run:
`BertClassifier.normalize_features`), so the regression is fitted on them as the classifier
computes them: softmax over the classes for a single-label task, a sigmoid per label for a
multi-label one. The penalty on the kernel (not the bias) is
`l2` times the mean squared norm of the features, so that it means the same whatever their
scale: at `l2` 1 it is scikit-learn's `C=1` on features scaled to a mean norm of 1.

>>> features = np.array([[2.0, 0.0], [1.5, 0.5], [0.0, 2.0], [0.5, 1.5]])
>>> fit = fit_linear_head(features, np.array([0, 0, 1, 1]), classes=2)
>>> (features @ fit.kernel + fit.bias).argmax(1).tolist(), fit.converged
([0, 0, 1, 1], True)
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class HeadFit:
    """A fitted head: `kernel` [features, outputs] and `bias` [outputs] (float32), the steps
    the solver took and whether it converged within them."""

    kernel: np.ndarray
    bias: np.ndarray
    steps: int
    converged: bool


def fit_linear_head(
    features: np.ndarray,
    targets: np.ndarray,
    classes: int,
    weights: np.ndarray | None = None,
    l2: float = 1.0,
    tolerance: float = 1e-6,
    max_steps: int = 20_000,
) -> HeadFit:
    """The logistic regression of `targets` on `features` [rows, dim]: class ids [rows]
    (softmax over `classes`) or multi-hot rows [rows, classes] (a sigmoid each); `weights`
    [rows] scale each row's loss (the run's class weights). Solved by Nesterov's accelerated
    gradient descent with adaptive restarts (the problem is smooth and strongly convex): it
    stops when the gradient's norm is below `tolerance` of the loss's scale, or after
    `max_steps`."""
    x = np.asarray(features, np.float64)
    rows, dim = x.shape
    multi_label = np.asarray(targets).ndim == 2
    y = np.asarray(targets, np.float64) if multi_label else np.eye(classes)[targets]
    w = np.ones(rows) if weights is None else np.asarray(weights, np.float64)
    with_bias = np.hstack([x, np.ones((rows, 1))])
    penalty = np.append(np.full(dim, l2 * np.mean(np.sum(x * x, axis=1))), 0.0)[:, None]
    # The loss's curvature in the logits is at most 1/4 (a sigmoid) or 1/2 (a softmax).
    curvature = (0.25 if multi_label else 0.5) * np.linalg.norm(
        with_bias * np.sqrt(w)[:, None], 2
    ) ** 2
    step_size = 1.0 / (curvature + penalty.max())

    def gradient(theta: np.ndarray) -> np.ndarray:
        logits = with_bias @ theta
        predicted = _sigmoid(logits) if multi_label else _softmax(logits)
        return with_bias.T @ ((predicted - y) * w[:, None]) + penalty * theta

    theta = np.zeros((dim + 1, classes))
    ahead, momentum = theta, 1.0
    scale = tolerance * max(1.0, w.sum())
    for steps in range(1, max_steps + 1):
        g = gradient(ahead)
        if np.linalg.norm(g) <= scale:
            return HeadFit(*_split(ahead), steps=steps, converged=True)
        new = ahead - step_size * g
        if np.sum(g * (new - theta)) > 0:  # moving uphill: restart the momentum
            momentum = 1.0
        following = (1 + np.sqrt(1 + 4 * momentum**2)) / 2
        ahead = new + (momentum - 1) / following * (new - theta)
        theta, momentum = new, following
    return HeadFit(*_split(ahead), steps=max_steps, converged=False)


def _split(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return theta[:-1].astype(np.float32), theta[-1].astype(np.float32)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * logits))
