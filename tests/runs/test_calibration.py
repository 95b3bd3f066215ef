"""Calibration (`bertfit.runs.calibration`): the temperature fit recovers a known
over-confidence, ECE and Brier match a hand computation and scikit-learn, per-label thresholds
keep a rare label that one micro-F1 threshold silences, calibration.json reads back (and a
damaged one is refused), and the temperatures are inside every graph a user runs."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.data.tasks import Task
from bertfit.errors import DataError
from bertfit.export.portable import numeric_outputs
from bertfit.export.serving import export_classifier
from bertfit.inference.outputs import task_outputs
from bertfit.inference.predictor import load_classifier
from bertfit.runs.calibration import (
    Calibration,
    brier_score,
    calibration_metrics,
    expected_calibration_error,
    fit_calibration,
    fit_label_temperatures,
    fit_temperature,
    label_thresholds,
    reliability_bins,
    sigmoid,
    softmax,
)
from bertfit.runs.metrics import best_threshold, multi_label_metrics


def _over_confident(n: int, classes: int, temperature: float, seed: int = 0):
    """Logits whose labels are drawn from softmax(logits / temperature): the logits are
    `temperature` times too sure, and the true fit is `temperature`."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * 4
    p = softmax(logits / temperature)
    labels = np.array([rng.choice(classes, p=row) for row in p])
    return logits, labels


def test_the_fit_recovers_a_known_temperature():
    logits, labels = _over_confident(6000, 3, temperature=2.5)
    assert fit_temperature(logits, labels) == pytest.approx(2.5, rel=0.06)
    calibrated, _ = _over_confident(6000, 3, temperature=1.0, seed=1)
    assert fit_temperature(calibrated, _) == pytest.approx(1.0, rel=0.06)


def test_multi_label_gets_one_temperature_per_label():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(6000, 2)) * 3
    truth = np.array([2.0, 0.5])  # label 0 over-confident, label 1 under-confident
    targets = (rng.random((6000, 2)) < sigmoid(logits / truth)).astype(np.float32)
    fitted = fit_label_temperatures(logits, targets)
    assert fitted == pytest.approx(truth, rel=0.08)
    targets[:, 1] = 0.0  # a label never on in the eval rows: nothing to fit
    assert fit_label_temperatures(logits, targets)[1] == 1.0


def test_ece_and_brier_against_a_hand_computation_and_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    labels = np.array([1, 0, 1, 1])
    p = np.array([[0.1, 0.9], [0.2, 0.8], [0.4, 0.6], [0.7, 0.3]])
    # confidences .9 (right), .8 (wrong), .6 (right), .7 (wrong); 15 bins: .6 / .7 / .8 / .9
    # each alone, so ECE = mean |correct - confidence| = (.1 + .8 + .4 + .7) / 4
    assert expected_calibration_error("single-label", labels, p) == pytest.approx(0.5)
    # Brier over both classes: twice the binary score of the positive class
    binary = sklearn_metrics.brier_score_loss(labels, p[:, 1])
    assert brier_score("single-label", labels, p) == pytest.approx(2 * binary)
    multi_targets = np.array([[1, 0], [0, 1], [1, 1]])
    multi_p = np.array([[0.9, 0.2], [0.3, 0.6], [0.5, 0.95]])
    assert brier_score("multi-label", multi_targets, multi_p) == pytest.approx(
        sklearn_metrics.brier_score_loss(multi_targets.ravel(), multi_p.ravel())
    )
    bins = reliability_bins("single-label", labels, p)
    assert [b["count"] for b in bins] == [1, 1, 1, 1]
    assert [b["frequency"] for b in bins] == [1.0, 0.0, 0.0, 1.0]  # .6, .7, .8, .9


def test_per_label_thresholds_keep_the_rare_label_one_micro_f1_threshold_silences():
    rng = np.random.default_rng(3)
    n = 600
    common = rng.random(n) < 0.4
    rare = rng.random(n) < 0.05
    targets = np.stack([common, rare], axis=1).astype(np.float32)
    # the common label is read well; the rare one is ranked right but its probabilities stay
    # low (as after a short run from the prior)
    p_common = np.where(common, rng.uniform(0.6, 0.99, n), rng.uniform(0.01, 0.45, n))
    p_rare = np.where(rare, rng.uniform(0.12, 0.3, n), rng.uniform(0.0, 0.15, n))
    p = np.stack([p_common, p_rare], axis=1)
    names = ("common", "rare")
    old = multi_label_metrics(targets, p, names, best_threshold(targets, p))
    new = multi_label_metrics(targets, p, names, np.array(label_thresholds(targets, p)))
    assert old["per_label_f1"]["rare"] < 0.2  # the global threshold sits above it
    assert new["per_label_f1"]["rare"] > 0.5
    assert new["macro_f1"] > old["macro_f1"] + 0.2
    assert set(new["thresholds"]) == {"common", "rare"} and "threshold" not in new


def test_the_floor_keeps_a_label_predicted_when_no_grid_threshold_reaches_it():
    targets = np.array([[1, 0], [0, 1], [0, 1], [0, 0], [1, 0]] * 4)
    p = np.array([[0.9, 0.01], [0.2, 0.04], [0.1, 0.03], [0.1, 0.01], [0.8, 0.02]] * 4)
    common, rare = label_thresholds(targets, p)
    assert common == 0.5
    # 8 positives: at least 4 rows predicted; the fourth most likely is 0.04, the floor
    # just under it
    assert 0.0399 < rare < 0.04
    assert ((p[:, 1] >= rare) & (targets[:, 1] == 1)).sum() >= 4


def test_calibration_json_reads_back_and_a_damaged_one_is_refused(tmp_path):
    logits, labels = _over_confident(400, 2, temperature=3.0)
    task = Task("single-label", ("neg", "pos"))
    calibration = fit_calibration(task, labels, softmax(logits))
    assert calibration.applied and calibration.temperatures[0] > 1.5
    assert calibration.after["nll"] < calibration.before["nll"]
    assert calibration.after["ece"] < calibration.before["ece"]
    assert calibration.metrics["accuracy"] == pytest.approx(
        np.mean(logits.argmax(axis=1) == labels)
    )  # a temperature never moves the argmax
    file = tmp_path / "calibration.json"
    calibration.save(file)
    assert Calibration.load(file) == calibration
    assert calibration.calibrated_task(task).temperatures == calibration.temperatures

    values = json.loads(file.read_text())
    values["temperatures"] = [-1.0]
    file.write_text(json.dumps(values))
    with pytest.raises(DataError, match=r"calibration.json.*temperatures must be > 0"):
        Calibration.load(file)
    file.write_text("{")
    with pytest.raises(DataError, match="cannot read the calibration"):
        Calibration.load(file)


def test_what_fit_calibration_skips():
    rng = np.random.default_rng(4)
    p = softmax(rng.normal(size=(50, 2)))
    labels = rng.integers(0, 2, 50)
    task = Task("single-label", ("a", "b"))
    off = fit_calibration(task, labels, p, temperature=False)
    assert not off.applied and off.temperatures == () and off.after == off.before
    assert fit_calibration(task, labels[:10], p[:10]) is None  # too few eval rows


def test_a_regression_gets_a_split_conformal_interval_from_its_eval_residuals():
    rng = np.random.default_rng(5)
    task = Task("regression", mean=10.0, std=2.0)
    truth = rng.normal(size=(2000, 1))
    outputs = truth + rng.normal(scale=0.5, size=(2000, 1))  # standardised; 1.0 in units
    calibration = fit_calibration(task, truth[:, 0], outputs)
    # |N(0, 1)| holds 90% within 1.645
    assert calibration.interval == pytest.approx(1.645, rel=0.08)
    assert calibration.after["interval_coverage"] >= 0.9
    fresh = truth + rng.normal(scale=0.5, size=(2000, 1))
    held = calibration_metrics(calibration.calibrated_task(task), truth[:, 0], fresh)
    assert held["interval_coverage"] == pytest.approx(0.9, abs=0.03)
    assert fit_calibration(task, truth[:, 0], outputs, temperature=False) is None


def test_labels_json_refuses_calibration_that_does_not_fit_the_task(tmp_path):
    task = Task("multi-label", ("a", "b"), temperatures=(1.5, 0.8), thresholds=(0.3, 0.05))
    task.save(tmp_path / "labels.json")
    assert Task.load(tmp_path / "labels.json") == task
    with pytest.raises(DataError, match=r'"interval" must be a number >= 0'):
        Task.from_dict({**task.to_dict(), "interval": 1.0})  # a classifier has none
    for bad in ({"temperatures": [1.5]}, {"temperatures": [1.0, 0.0]}, {"thresholds": [2, 0.1]}):
        values = {**task.to_dict(), **bad}
        (tmp_path / "labels.json").write_text(json.dumps(values))
        with pytest.raises(DataError, match=r"labels.json.*must be a list of 2 numbers"):
            Task.load(tmp_path / "labels.json")


def test_the_graph_divides_the_logits_by_the_temperatures_and_uses_each_labels_threshold():
    logits = tf.constant([[2.0, -1.0], [0.5, 0.2]])
    single = Task("single-label", ("a", "b"), temperatures=(2.0,))
    got = task_outputs(single, logits, tf.constant(["a", "b"]))["probabilities"].numpy()
    np.testing.assert_allclose(got, softmax(logits.numpy() / 2.0), atol=1e-6)
    multi = Task("multi-label", ("a", "b"), temperatures=(2.0, 0.5), thresholds=(0.7, 0.5))
    out = task_outputs(multi, logits, tf.constant(["a", "b"]))
    np.testing.assert_allclose(
        out["probabilities"].numpy(), sigmoid(logits.numpy() / [2.0, 0.5]), atol=1e-6
    )
    # sigmoid(1) = 0.73 >= 0.7; sigmoid(0.25) = 0.56 < 0.7; label b: sigmoid(-2) no, (0.4) yes
    assert out["predicted"].numpy().tolist() == [[1, 0], [0, 1]]


def test_the_litert_and_onnx_graphs_divide_by_the_same_temperatures():
    # `portable.numeric_outputs` is what the LiteRT and ONNX exports compute after the model
    logits = tf.constant([[2.0, -1.0], [0.5, 0.2]])
    multi = SimpleNamespace(task=Task("multi-label", ("a", "b"), temperatures=(2.0, 0.5)))
    got = numeric_outputs(multi, logits)["probabilities"].numpy()
    np.testing.assert_allclose(got, sigmoid(logits.numpy() / [2.0, 0.5]), atol=1e-6)
    single = SimpleNamespace(task=Task("single-label", ("a", "b"), temperatures=(4.0,)))
    got = numeric_outputs(single, logits)["probabilities"].numpy()
    np.testing.assert_allclose(got, softmax(logits.numpy() / 4.0), atol=1e-6)


@pytest.mark.slow
def test_a_run_is_calibrated_and_its_export_gives_the_calibrated_probabilities(
    trained_run, tmp_path, capsys
):
    config, summary = trained_run
    run = summary.run_dir
    calibration = Calibration.load(f"{run}/calibration.json")
    assert calibration.eval_rows == 37 and calibration.task == "single-label"
    assert load_classifier(run).task.temperatures == calibration.temperatures
    metrics = json.loads(open(f"{run}/metrics.json", encoding="utf-8").read())
    assert metrics["calibration"] == calibration.summary()
    texts = ["a great film", "dull and long", "fine"]
    # A stronger temperature than the tiny run's fit, so that calibration cannot be a no-op
    # here; set before the graph is first traced (its constants are read then).
    plain = load_classifier(run)
    plain.module.task = dataclasses.replace(plain.task, temperatures=())
    uncalibrated = plain.outputs(texts)["probabilities"]
    forced = load_classifier(run)
    forced.task = forced.module.task = dataclasses.replace(forced.task, temperatures=(3.0,))
    forced.metadata["task"] = forced.task.to_dict()
    calibrated = forced.outputs(texts)["probabilities"]
    np.testing.assert_allclose(calibrated, softmax(np.log(uncalibrated) / 3.0), atol=1e-5)
    export = export_classifier(forced, tmp_path / "export")
    served = tf.saved_model.load(str(export)).signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_allclose(served["probabilities"].numpy(), calibrated, atol=1e-5)
    assert load_classifier(export).task.temperatures == (3.0,)

    report = open(f"{run}/report.html", encoding="utf-8").read()
    assert (
        'alt="reliability diagram before and after calibration"' in report
        and "expected calibration error" in report
    )
    assert main(["evaluate", "--run", str(run), "--data", config.data.eval, "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert 0 <= evaluated["ece"] <= 1 and 0 <= evaluated["brier"] <= 2


def test_a_damaged_calibration_in_labels_json_is_one_line_and_exit_2(trained_run, tmp_path, capsys):
    import shutil

    _, summary = trained_run
    run = tmp_path / "run"
    shutil.copytree(summary.run_dir, run, ignore=shutil.ignore_patterns("checkpoints"))
    values = json.loads((run / "labels.json").read_text())
    values["temperatures"] = ["hot"]
    (run / "labels.json").write_text(json.dumps(values))
    assert main(["report", str(run)]) == 2
    error = capsys.readouterr().err
    assert "temperatures" in error and "labels.json" in error and "Traceback" not in error
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        main(["train", "--train", "t.csv", "--calibrate", "sometimes"])
    assert usage.value.code == 2
    assert "--calibrate: invalid choice: 'sometimes'" in capsys.readouterr().err


def test_a_temperature_the_eval_rows_cannot_measure_is_not_kept():
    """Perfectly separated eval rows: the NLL falls as T shrinks, the fit ran to the search's
    bound (T = 0.050002) and was kept, turning 0.668 into 0.999999 (issue 56)."""
    labels = np.arange(40) % 2
    sure = np.random.default_rng(6).uniform(0.55, 0.95, 40)
    p = np.stack([np.where(labels == 0, sure, 1 - sure), np.where(labels == 1, sure, 1 - sure)], 1)
    task = Task("single-label", ("neg", "pos"))
    separated = fit_calibration(task, labels, p)
    assert separated.fitted_temperatures[0] == pytest.approx(0.05, rel=1e-3)  # the bound
    assert not separated.applied and separated.temperatures == ()
    assert separated.after == separated.before  # the probabilities stay as the model gives them
    said = (
        "temperature not kept (fit 0.050): every eval row is predicted right (perfectly separated)"
    )
    assert separated.notes == [said] and said in separated.describe()
    assert separated.summary()["notes"] == [said]

    one_class = fit_calibration(task, np.ones(40, int), p)  # half of them wrong
    assert not one_class.applied
    assert one_class.notes[0].endswith(": the eval rows hold one class")

    wrong = fit_calibration(task, 1 - labels, p)  # every row wrong: T runs to the upper bound
    assert wrong.fitted_temperatures[0] == pytest.approx(20.0, rel=1e-3) and not wrong.applied
    assert wrong.notes == [
        "temperature not kept (fit 19.999): the fit ran to the edge of its search (0.05 .. 20), "
        "the NLL still falling"
    ]


def test_a_multi_label_label_on_every_eval_row_keeps_threshold_one_half_and_is_said():
    rng = np.random.default_rng(7)
    targets = np.stack([np.ones(40), rng.random(40) < 0.5], axis=1).astype(np.float32)
    p = np.stack([rng.uniform(0.2, 0.45, 40), rng.uniform(0.1, 0.9, 40)], axis=1)
    assert label_thresholds(targets, p)[0] == 0.5  # not "predict it on every row" at 0.2
    task = Task("multi-label", ("always", "some"))
    calibration = fit_calibration(task, targets, p)
    assert calibration.temperatures[:1] in ((), (1.0,))  # never fitted to 'always'
    assert calibration.notes[0] == (
        "label 'always': temperature not kept (fit 1.000) and threshold left at 0.5: every "
        "eval row carries it"
    )


def test_a_run_says_what_its_eval_rows_could_not_calibrate(tmp_path, capsys):
    """Only train.log said `temperature fitted 0.050, kept 0.050`; now the console, train.log
    and metrics.json say the temperature was not kept, and why."""
    from bertfit.config import RunConfig
    from bertfit.progress import Console
    from bertfit.training.run import _calibrate
    from bertfit.training.run_dir import TrainingRunDir

    labels = np.arange(40) % 2
    p = np.where(labels[:, None] == [0, 1], 0.67, 0.33)  # every row right at 0.67
    run_dir = TrainingRunDir(tmp_path / "run")
    run_dir.create()
    run_dir.save_best_eval_outputs(labels, p)
    setup = SimpleNamespace(task=Task("single-label", ("neg", "pos")), config=RunConfig())
    calibration = _calibrate(setup, run_dir, Console(quiet=True))
    note = (
        "temperature not kept (fit 0.050): every eval row is predicted right (perfectly separated)"
    )
    assert f"bertfit: calibration: {note}" in capsys.readouterr().err
    assert note in run_dir.log_file.read_text()
    assert calibration.summary() == {
        "applied": False, "temperatures": [], "thresholds": [], "notes": [note]
    }  # fmt: skip
    assert Task.load(run_dir.labels_file).temperatures == ()  # served as the model gives them
