"""Multi-label, regression, pairs, class weights: each task end to end on a tiny BERT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.data.tasks import Task
from bertfit.export.serving import export_classifier
from bertfit.inference.predictor import load_classifier
from bertfit.runs.calibration import Calibration
from tests.tiny import (
    scored_rows,
    sentiment_rows,
    tagged_rows,
    train_args,
    write_csv,
    write_jsonl,
)

FLAGS = {  # over tests.tiny.TRAIN_FLAGS; each test says how many epochs
    "buckets": "8,16",
    "learning_rate": "5e-3",
    "dropout": 0,
    "seed": 0,
    "jit_compile": "false",
    "pooling": "mean",
    "json": True,
}


def _train(model, train, output, *extra, **flags) -> int:
    return main(train_args(model, train, output, *extra, **{**FLAGS, **flags}))


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def test_multi_label_trains_tunes_its_threshold_evaluates_and_predicts_label_lists(
    trainable_hf_dir, tmp_path, capsys
):
    train = write_jsonl(tmp_path / "train.jsonl", tagged_rows(160, seed=1))
    dev = write_jsonl(tmp_path / "dev.jsonl", tagged_rows(37, seed=2))
    run = tmp_path / "run"
    assert (
        _train(
            trainable_hf_dir,
            train,
            run,
            "--eval",
            str(dev),
            "--tune-threshold",
            "true",
            epochs=6,
            no_report=None,  # drawn: its F1 per label
        )
        == 0
    )
    assert "multi-label" in capsys.readouterr().err  # the inferred task is said
    final = _metrics(run)["final"]
    assert final["num_examples"] == 37
    assert set(final["per_label_f1"]) == {"neg", "plot", "pos"}
    assert final["micro_f1"] > 0.8 and 0 <= final["hamming_loss"] < 0.2
    assert set(final["thresholds"]) == {"neg", "plot", "pos"}  # one per label
    task = Task.load(run / "labels.json")
    calibration = Calibration.load(run / "calibration.json")  # fitted on dev at the end
    assert task.kind == "multi-label" and task.thresholds == calibration.thresholds
    assert len(task.temperatures) == 3 or not calibration.applied

    assert main(["evaluate", "--run", str(run), "--data", str(dev), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    # evaluate gives the calibrated model's numbers, as the end of training measured them
    assert evaluated["micro_f1"] == pytest.approx(calibration.metrics["micro_f1"], abs=1e-6)
    assert evaluated["macro_f1"] == pytest.approx(calibration.metrics["macro_f1"], abs=1e-6)
    assert evaluated["ece"] == pytest.approx(calibration.after["ece"], abs=1e-4)
    assert evaluated["brier"] == pytest.approx(calibration.after["brier"], abs=1e-5)

    rows = load_classifier(run).predict(["the plot was good", "it was awful"])
    assert set(rows[0]) == {"labels", "probabilities"}
    assert set(rows[0]["labels"]) == {"plot", "pos"} and rows[1]["labels"] == ["neg"]
    exported = load_classifier(export_classifier(load_classifier(run), tmp_path / "export"))
    again = exported.predict(["the plot was good", "it was awful"])
    assert [r["labels"] for r in again] == [r["labels"] for r in rows]
    assert [r["probabilities"] for r in again] == [pytest.approx(r["probabilities"]) for r in rows]
    serve = exported.signatures()["serving_default"]
    assert set(serve.structured_outputs) == {"probabilities", "predicted", "labels"}
    assert 'alt="F1 per label"' in (run / "report.html").read_text()


def test_regression_predicts_values_in_the_targets_units(trainable_hf_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", scored_rows(160, seed=3))
    dev = write_csv(tmp_path / "dev.csv", scored_rows(40, seed=4))
    run = tmp_path / "run"
    assert (
        _train(
            trainable_hf_dir,
            train,
            run,
            "--eval",
            str(dev),
            "--best-metric",
            "spearman",
            epochs=6,
            no_report=None,  # drawn: predicted against true values
        )
        == 0
    )
    assert "regression" in capsys.readouterr().err
    final = _metrics(run)["final"]
    assert {"rmse", "mae", "pearson", "spearman"} <= set(final)
    assert final["pearson"] > 0.8 and final["num_examples"] == 40
    task = Task.load(run / "labels.json")
    assert task.kind == "regression" and task.std > 0
    texts = ["good great fun", "awful bad boring"]
    values = [row["value"] for row in load_classifier(run).predict(texts)]
    assert values[0] > 1.5 and values[1] < -0.5  # +3.5 and -2.5 in the targets' units
    exported = load_classifier(export_classifier(load_classifier(run), tmp_path / "export"))
    assert [row["value"] for row in exported.predict(texts)] == pytest.approx(values, abs=1e-5)
    assert 'alt="predicted against true values"' in (run / "report.html").read_text()
    # the predictive interval from the dev residuals: in the run, its rows and its export
    calibration = Calibration.load(run / "calibration.json")
    assert task.interval == calibration.interval > 0
    assert calibration.after["interval_coverage"] >= 0.9  # split conformal on these rows
    row = exported.predict(texts)[0]
    assert row["interval"] == pytest.approx(
        [row["value"] - task.interval, row["value"] + task.interval]
    )
    graph = exported.outputs(texts)
    np.testing.assert_allclose(graph["value_high"] - graph["value"], task.interval, rtol=1e-5)
    assert main(["evaluate", "--run", str(run), "--data", str(dev), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["interval_coverage"] == pytest.approx(calibration.after["interval_coverage"])


def test_pairs_work_for_every_task(trainable_hf_dir, tmp_path):
    pairs = [
        (a, b, float(len(a.split()) - len(b.split())) + 0.5)
        for (a, _), (b, _) in zip(sentiment_rows(48, 5), sentiment_rows(48, 6), strict=True)
    ]
    train = write_jsonl(tmp_path / "pairs.jsonl", pairs, keys=("premise", "hypothesis", "y"))
    run = tmp_path / "run"
    assert (
        _train(
            trainable_hf_dir,
            train,
            run,
            "--text-column",
            "premise",
            "--text-pair-column",
            "hypothesis",
            "--label-column",
            "y",
            epochs=1,
        )
        == 0
    )
    classifier = load_classifier(run)
    assert classifier.pairs and classifier.task.kind == "regression"
    assert len(classifier.predict(["a film"], ["the plot"])) == 1


def test_balanced_class_weights_and_the_collapse_warning(trainable_hf_dir, tmp_path, capsys):
    skewed = [(t, "pos") for t, _ in sentiment_rows(60, 7)] + sentiment_rows(8, 8)
    train = write_csv(tmp_path / "skewed.csv", skewed)
    dev = write_csv(tmp_path / "dev.csv", sentiment_rows(20, 9))
    run = tmp_path / "run"
    # A learning rate too small to learn anything: the model predicts the majority class.
    assert (
        _train(
            trainable_hf_dir,
            train,
            run,
            "--eval",
            str(dev),
            epochs=1,
            learning_rate="1e-7",
            json=None,  # the summary for people
            no_report=None,  # and the report's path in it
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "warning" in err and "--class-weights balanced" in err
    scores, where, report = out.splitlines()  # three lines, not the final evaluation's JSON
    assert scores.startswith("final evaluation: accuracy 0.") and "macro_f1 0." in scores
    assert where == f"run directory: {run} (every metric: metrics.json)"
    assert report == f"report: {run / 'report.html'}"
    final = _metrics(run)["final"]
    assert "--class-weights balanced" in final["warnings"][0]
    assert final["per_class"]["neg"]["support"] == 10
    assert np.array(final["confusion_matrix"]).sum() == 20
    assert {"mcc", "roc_auc"} <= set(final)

    weighted = tmp_path / "weighted"
    assert _train(trainable_hf_dir, train, weighted, epochs=1, class_weights="balanced") == 0
    plain_loss = _metrics(run)["epochs"][0]["train_loss"]
    weighted_loss = _metrics(weighted)["epochs"][0]["train_loss"]
    assert weighted_loss != pytest.approx(plain_loss, rel=1e-3)


def test_a_mixed_label_column_stops_train_as_it_stops_check(trainable_hf_dir, tmp_path, capsys):
    rows = [(t, str(i % 2)) for i, (t, _) in enumerate(sentiment_rows(30))] + [("x", "pos")]
    train = write_csv(tmp_path / "mixed.csv", rows)
    assert _train(trainable_hf_dir, train, tmp_path / "run", epochs=1) == 2
    assert "mixes integers" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
