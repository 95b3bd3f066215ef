"""bertfit's metrics (numpy, no scikit-learn at run time) equal scikit-learn's and scipy's on
random data: accuracy, macro-F1 (over the classes with eval rows), per-class P/R/F1, MCC, the
confusion matrix, ROC-AUC with ties, the multi-label metrics and the regression correlations
(issue 45)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertfit.runs.metrics import (
    classification_metrics,
    multi_label_metrics,
    regression_metrics,
    roc_auc,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")
scipy_stats = pytest.importorskip("scipy.stats")

cases = st.tuples(st.integers(1, 60), st.integers(2, 5), st.integers(0, 2**32 - 1))


def _single_label(n: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) + 2.0 * np.eye(classes)[labels] * rng.random(n)[:, None]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return labels, probabilities


# scikit-learn's matthews_corrcoef notes a one-class sample (n=1); bertfit's is 0 there too.
@pytest.mark.filterwarnings("ignore:A single label was found:UserWarning")
@settings(max_examples=60, deadline=None)
@given(cases)
def test_single_label_metrics_equal_scikit_learns(case):
    labels, probabilities = _single_label(*case)
    classes = probabilities.shape[1]
    ours = classification_metrics(labels, probabilities)
    predictions = probabilities.argmax(axis=1)
    every = list(range(classes))
    assert ours["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(labels, predictions))
    present = sorted(set(labels.tolist()))  # macro-F1 over the classes with eval rows
    macro = sklearn_metrics.f1_score(
        labels, predictions, labels=present, average="macro", zero_division=0
    )
    assert ours["macro_f1"] == pytest.approx(macro)
    absent = [str(c) for c in every if c not in present]
    assert ours.get("labels_without_support", []) == absent
    assert ours["mcc"] == pytest.approx(
        sklearn_metrics.matthews_corrcoef(labels, predictions), abs=1e-12
    )
    confusion = sklearn_metrics.confusion_matrix(labels, predictions, labels=every)
    assert ours["confusion_matrix"] == confusion.tolist()
    p, r, f, s = sklearn_metrics.precision_recall_fscore_support(
        labels, predictions, labels=every, zero_division=0
    )
    for c in every:
        row = ours["per_class"][str(c)]
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((p[c], r[c], f[c]))
        assert row["support"] == s[c]
    log_loss = sklearn_metrics.log_loss(labels, probabilities, labels=every)
    assert ours["loss"] == pytest.approx(log_loss, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 80), st.integers(0, 2**32 - 1), st.booleans())
def test_roc_auc_equals_scikit_learns_with_ties(n, seed, rounded):
    rng = np.random.default_rng(seed)
    positive = rng.random(n) < 0.4
    scores = rng.random(n) + 0.3 * positive
    if rounded:  # many ties
        scores = np.round(scores, 1)
    expected = sklearn_metrics.roc_auc_score(positive, scores) if 0 < positive.sum() < n else 0.5
    assert roc_auc(positive, scores) == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_multi_label_metrics_equal_scikit_learns(n, labels, seed):
    """Two labels or more: scikit-learn reads a one-column matrix as binary targets."""
    rng = np.random.default_rng(seed)
    gold = rng.random((n, labels)) < 0.3
    probabilities = np.clip(rng.random((n, labels)) * 0.6 + 0.4 * gold, 0, 1)
    names = tuple(f"l{i}" for i in range(labels))
    ours = multi_label_metrics(gold.astype(np.float32), probabilities, names, threshold=0.5)
    predicted = probabilities >= 0.5
    f1 = dict(average=None, zero_division=0)
    assert ours["micro_f1"] == pytest.approx(
        sklearn_metrics.f1_score(gold, predicted, average="micro", zero_division=0)
    )
    per_label = sklearn_metrics.f1_score(gold, predicted, **f1)
    assert list(ours["per_label_f1"].values()) == pytest.approx(list(per_label))
    supported = gold.any(axis=0)  # macro-F1 over the labels with eval rows
    macro = float(np.mean(per_label[supported])) if supported.any() else 0.0
    assert ours["macro_f1"] == pytest.approx(macro)
    assert ours["subset_accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(gold, predicted))
    assert ours["hamming_loss"] == pytest.approx(sklearn_metrics.hamming_loss(gold, predicted))


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 80), st.integers(0, 2**32 - 1), st.booleans())
def test_regression_metrics_equal_scikit_learns_and_scipys(n, seed, rounded):
    rng = np.random.default_rng(seed)
    targets = rng.normal(size=n)
    predictions = targets + rng.normal(scale=0.5, size=n)
    if rounded:  # ties in both rankings
        targets, predictions = np.round(targets), np.round(predictions)
    ours = regression_metrics(targets, predictions)
    assert ours["mae"] == pytest.approx(sklearn_metrics.mean_absolute_error(targets, predictions))
    assert ours["rmse"] == pytest.approx(
        np.sqrt(sklearn_metrics.mean_squared_error(targets, predictions))
    )
    if targets.std() > 0 and predictions.std() > 0:
        assert ours["pearson"] == pytest.approx(scipy_stats.pearsonr(targets, predictions)[0])
        assert ours["spearman"] == pytest.approx(scipy_stats.spearmanr(targets, predictions)[0])
