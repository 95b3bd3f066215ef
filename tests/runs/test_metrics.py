"""Macro-F1 averages the classes (labels) that have eval rows; the others are listed apart,
not counted as an F1 of 0 (issue 56)."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.runs.metrics import classification_metrics, multi_label_metrics


def test_a_multi_label_label_without_eval_rows_is_reported_apart_from_macro_f1():
    # "acting" has no positive row here: its F1 cannot be measured, it is not a 0
    gold = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]])
    probabilities = np.array([[0.9, 0.1, 0.2], [0.8, 0.7, 0.1], [0.6, 0.8, 0.3], [0.2, 0.1, 0.1]])
    metrics = multi_label_metrics(gold, probabilities, ("fresh", "story", "acting"))
    fresh, story = 0.8, 1.0  # fresh: 2 right, 1 false positive; story: both right
    assert metrics["per_label_f1"] == pytest.approx({"fresh": fresh, "story": story, "acting": 0})
    assert metrics["macro_f1"] == pytest.approx((fresh + story) / 2)
    assert metrics["labels_without_support"] == ["acting"]


def test_a_single_label_class_absent_from_eval_is_reported_apart_from_macro_f1():
    labels = np.array([0, 0, 1, 1])  # "neutral" (class 2) has no eval row
    probabilities = np.array([[0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1], [0.3, 0.6, 0.1]])
    metrics = classification_metrics(labels, probabilities, ("neg", "pos", "neutral"))
    assert metrics["macro_f1"] == pytest.approx(1.0)
    assert metrics["labels_without_support"] == ["neutral"]
    assert metrics["per_class"]["neutral"]["support"] == 0


def test_every_class_with_eval_rows_lists_none_apart():
    metrics = classification_metrics(np.array([0, 1]), np.array([[0.9, 0.1], [0.2, 0.8]]))
    assert "labels_without_support" not in metrics
