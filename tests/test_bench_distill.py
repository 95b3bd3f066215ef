"""bench/distill.py's measures of a run and its summary over seeds (issue 49)."""

from __future__ import annotations

import pytest

from bench.distill import measure, summary


def test_the_summary_gives_each_measure_mean_sd_and_range_over_the_seeds():
    per_seed = {
        42: {"teacher": {"test_accuracy": 0.8}, "distilled": {"test_accuracy": 0.7}},
        43: {"teacher": {"test_accuracy": 0.9}},
    }
    got = summary(per_seed)
    assert got["teacher"]["test_accuracy"]["mean"] == pytest.approx(0.85)
    assert got["teacher"]["test_accuracy"]["sd"] == pytest.approx(0.0707107, rel=1e-5)
    assert (got["teacher"]["test_accuracy"]["min"], got["teacher"]["test_accuracy"]["max"]) == (
        0.8,
        0.9,
    )
    assert got["distilled"]["test_accuracy"]["sd"] is None  # one seed: no spread
    assert "direct" not in got


@pytest.mark.slow
def test_measure_gives_the_accuracy_evaluate_gives_and_the_exports_size(trained_run, tmp_path):
    from bertfit.inference.run import evaluate
    from tests.tiny import sentiment_rows, write_csv

    test = write_csv(tmp_path / "test.csv", sentiment_rows(40, seed=3))
    run = trained_run[1].run_dir
    measured = measure({"teacher": run}, test, tmp_path)["teacher"]
    assert measured["test_accuracy"] == pytest.approx(evaluate(run, str(test))["accuracy"])
    assert measured["predict_texts_per_second"] > 0
    assert measured["parameters"] > 0 and measured["saved_model_mib"] > 0.1
