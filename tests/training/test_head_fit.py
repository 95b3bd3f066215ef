"""`fit_linear_head`: the logistic regression `--few-shot` fits its head with, on fixed
features (scikit-learn's `C=1` on features of mean length 1)."""

from __future__ import annotations

import numpy as np

from bertfit.training.head_fit import fit_linear_head


def _rows(rows: int = 60, dim: int = 6, classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows)
    centres = rng.normal(0.0, 1.0, (classes, dim))
    return centres[labels] + rng.normal(0.0, 1.5, (rows, dim)), labels


def _objective(features, targets, weights, kernel, bias) -> float:
    """The regression's definition: the weighted softmax cross-entropy summed over the rows,
    plus half the kernel's squared norm times the features' mean squared length."""
    logits = features @ kernel + bias
    logits = logits - logits.max(1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    loss = -np.sum(weights * log_p[np.arange(len(targets)), targets])
    return loss + 0.5 * np.mean(np.sum(features**2, 1)) * np.sum(kernel**2)


def test_the_fit_is_the_minimum_of_the_regularised_loss():
    features, labels = _rows()
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(labels))
    fit = fit_linear_head(features, labels, classes=3, weights=weights)
    assert fit.converged and fit.kernel.shape == (6, 3) and fit.bias.shape == (3,)
    kernel, bias = fit.kernel.astype(np.float64), fit.bias.astype(np.float64)
    best = _objective(features, labels, weights, kernel, bias)
    rng = np.random.default_rng(2)
    for _ in range(20):  # convex: no small step anywhere goes lower
        step_k, step_b = rng.normal(0, 1e-3, kernel.shape), rng.normal(0, 1e-3, bias.shape)
        assert _objective(features, labels, weights, kernel + step_k, bias + step_b) > best - 1e-7


def test_the_features_scale_changes_nothing_but_the_kernels():
    features, labels = _rows()
    fit = fit_linear_head(features, labels, classes=3)
    scaled = fit_linear_head(10.0 * features, labels, classes=3)
    np.testing.assert_allclose(10.0 * scaled.kernel, fit.kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scaled.bias, fit.bias, rtol=1e-4, atol=1e-5)


def test_multi_label_rows_get_a_sigmoid_per_label():
    rng = np.random.default_rng(3)
    features = rng.normal(0.0, 1.0, (80, 4))
    hot = np.stack([features[:, 0] > 0, features[:, 1] > 0.5, features[:, 0] < -1], 1)
    fit = fit_linear_head(features, hot.astype(np.int64), classes=3)
    predicted = features @ fit.kernel + fit.bias > 0
    assert fit.converged and (predicted == hot).mean() > 0.9
