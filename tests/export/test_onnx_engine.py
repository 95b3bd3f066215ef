"""`--engine onnx`: the run's ONNX export in ONNX Runtime behind the predictor's interface. Its
outputs are the TensorFlow engine's (within 1e-5) for single texts, text pairs, multi-label and
regression models; its ids are the in-graph tokenizer's; a run's export is made once and kept in
the run, found again without TensorFlow, and made anew when the run changes; what it cannot run
it refuses, naming --engine tensorflow."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.data.tasks import Task
from bertfit.errors import BertfitError, ConfigError, MissingDependencyError
from bertfit.export.onnx_engine import (
    CACHE_DIR,
    check_engine_installed,
    engine_export,
    kept_export,
    onnx_engine_folder,
    run_fingerprint,
)
from bertfit.inference.graph import ClassifierModule
from bertfit.inference.onnx_runtime import load_onnx_classifier
from bertfit.inference.predictor import Classifier
from bertfit.model.classifier import BertClassifier
from bertfit.text.tokenizer import BertTokenizer
from bertfit.text.windows import WindowSpec
from tests.export.conftest import PROBES
from tests.tiny import TINY_VOCAB, sentiment_rows, tiny_encoder

TOLERANCE = 1e-5
TASKS = {
    # calibrated as a run with --eval is (bertfit.runs.calibration): the ONNX graph divides by
    # the temperatures, the engine applies each label's threshold and the interval
    "single-label": Task("single-label", ("neg", "pos"), temperatures=(2.0,)),
    "multi-label": Task(
        "multi-label", ("a", "b", "c"), temperatures=(2.0, 0.5, 1.0), thresholds=(0.3, 0.6, 0.45)
    ),
    "regression": Task("regression", mean=3.0, std=2.0, interval=0.75),
}


def _module(task: Task, pairs: bool = False, windows=None) -> ClassifierModule:
    model = BertClassifier(tiny_encoder(seed=3), task.num_outputs, dropout=0.0)
    return ClassifierModule(model, BertTokenizer(TINY_VOCAB), task, 16, [8, 16], pairs, windows)


def _both_engines(module: ClassifierModule, tmp_path):
    """The TensorFlow classifier of `module` and the onnx engine's, from its ONNX export."""
    metadata = {"task": module.task.to_dict(), "pairs": module.pairs, "max_seq_length": 16}
    tensorflow = Classifier(module, metadata, batch_size=8)
    folder = engine_export(types.SimpleNamespace(module=module), tmp_path / "onnx", "test")
    return tensorflow, load_onnx_classifier(folder, batch_size=8)


def _assert_equal_outputs(expected: dict, got: dict) -> None:
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(got[name], value, atol=TOLERANCE, err_msg=name)
        else:
            assert got[name].tolist() == value.tolist(), name


TEXTS = [text for text, _ in sentiment_rows(20, seed=5)] + PROBES


@pytest.mark.slow  # converts a model with tf2onnx per task: seconds each
@pytest.mark.parametrize("kind", TASKS)
def test_outputs_equal_the_tensorflow_engines(kind, tmp_path):
    tensorflow, onnx = _both_engines(_module(TASKS[kind]), tmp_path)
    _assert_equal_outputs(tensorflow.outputs(TEXTS), onnx.outputs(TEXTS))
    assert onnx.predict(TEXTS[:3])[0].keys() == tensorflow.predict(TEXTS[:3])[0].keys()
    _assert_equal_outputs(tensorflow.classify_batch(TEXTS[:5]), onnx.classify_batch(TEXTS[:5]))
    _assert_equal_outputs(tensorflow.outputs([]), onnx.outputs([]))


@pytest.mark.slow  # converts a model with tf2onnx: seconds
def test_text_pairs_equal_the_tensorflow_engines_and_tokenize_as_the_graph(tmp_path):
    module = _module(TASKS["single-label"], pairs=True)
    tensorflow, onnx = _both_engines(module, tmp_path)
    pairs = list(reversed(TEXTS))
    _assert_equal_outputs(tensorflow.outputs(TEXTS, pairs), onnx.outputs(TEXTS, pairs))
    # The ids the engine feeds are the in-graph tokenizer's, truncated alike (longest first).
    ids, type_ids = onnx._encode(onnx._rows(TEXTS, pairs))
    expected = module.tokenizer(TEXTS, pairs, max_seq_length=16, padding="longest")
    mask = expected["input_mask"].numpy().astype(bool)
    for name, got in (("input_word_ids", ids), ("input_type_ids", type_ids)):
        rows = zip(expected[name].numpy(), mask, strict=True)
        assert [row.tolist() for row in got] == [row[keep].tolist() for row, keep in rows], name
    with pytest.raises(BertfitError, match="takes text pairs"):
        onnx.outputs(TEXTS)


def test_a_chunk_model_is_refused_naming_the_tensorflow_engine(tmp_path):
    module = _module(TASKS["single-label"], windows=WindowSpec(16, 8, 4))
    with pytest.raises(ConfigError, match="long-documents chunk.*--engine tensorflow"):
        engine_export(types.SimpleNamespace(module=module), tmp_path / "onnx", "x")
    assert not (tmp_path / "onnx").exists()


def test_a_folder_that_is_no_onnx_export_is_refused_with_what_to_pass(tmp_path):
    (tmp_path / "saved" / "1").mkdir(parents=True)
    (tmp_path / "saved" / "1" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(
        BertfitError, match="neither a run directory nor an ONNX export.*tensorflow"
    ):
        load_onnx_classifier(tmp_path / "saved")
    with pytest.raises(ConfigError, match="remote.*bertfit export --format onnx"):
        onnx_engine_folder("gs://bucket/run")


def test_each_engine_says_which_engine_runs_the_other_kind_of_export(tmp_path, capsys):
    onnx = tmp_path / "onnx" / "1"
    onnx.mkdir(parents=True)
    (onnx / "model.onnx").write_bytes(b"")
    saved = tmp_path / "saved" / "1"
    saved.mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"")
    (tmp_path / "new.csv").write_text("text\ngood\n")
    for engine, export, advice in (
        ("tensorflow", onnx, "--engine onnx"),
        ("onnx", saved, "--engine tensorflow"),
    ):
        argv = ["predict", "--engine", engine, "--run", str(export.parent)]
        assert main([*argv, "--data", str(tmp_path / "new.csv")]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and advice in error, error


def _fake_run(tmp_path):
    run = tmp_path / "run"
    for name in ("config.yaml", "labels.json", "checkpoints/best/ckpt-1.index"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(name)
    return run


def _fake_export(run, version: int, fingerprint: str):
    folder = run / CACHE_DIR / str(version)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"")
    (folder / "bertfit.json").write_text(json.dumps({"run_fingerprint": fingerprint}))
    return folder


def test_the_kept_export_is_the_one_made_from_the_run_as_it_is_now(tmp_path):
    run = _fake_run(tmp_path)
    before = run_fingerprint(run)
    older = _fake_export(run, 1, before)
    assert kept_export(run, before) == older
    assert onnx_engine_folder(run) == older  # found: nothing exported, no TensorFlow needed
    checkpoint = run / "checkpoints" / "best" / "ckpt-1.index"
    checkpoint.write_text("a new best checkpoint")
    os.utime(checkpoint, ns=(1, 1))
    now = run_fingerprint(run)
    assert now != before and kept_export(run, now) is None
    newer = _fake_export(run, 2, now)
    assert kept_export(run, now) == newer


def _without(monkeypatch, package: str) -> None:
    """`package` is not installed, as far as `importlib.util.find_spec` says."""
    find_spec = importlib.util.find_spec

    def installed(name, *args):
        return None if name == package else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", installed)


def test_a_missing_package_is_named_with_the_engine_flag_and_the_extra(tmp_path, monkeypatch):
    run = _fake_run(tmp_path)
    _without(monkeypatch, "tf2onnx")  # makes the export: needed while none is kept
    needs = r"--engine onnx needs tf2onnx: pip install 'bertfit\[export\]' \(or run with --engine"
    with pytest.raises(MissingDependencyError, match=needs):
        check_engine_installed(run)
    _fake_export(run, 1, run_fingerprint(run))
    check_engine_installed(run)  # kept: ONNX Runtime runs it, tf2onnx has nothing to do
    _without(monkeypatch, "onnxruntime")
    with pytest.raises(MissingDependencyError, match="--engine onnx needs onnxruntime: "):
        check_engine_installed(run)


def test_a_missing_package_is_said_before_anything_is_read(tmp_path, monkeypatch, capsys):
    run = _fake_run(tmp_path)
    _without(monkeypatch, "onnxruntime")
    (tmp_path / "new.csv").write_text("text\ngood\n")
    argv = ["predict", "--engine", "onnx", "--run", str(run), "--data", str(tmp_path / "new.csv")]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("bertfit predict: error: --engine onnx needs onnxruntime: pip ")
    assert error.count("\n") == 1 and "--format" not in error


@pytest.fixture(scope="module")
def engine_run(trained_run, tmp_path_factory):
    """A copy of the tiny trained run (the onnx engine writes its export into it) and its eval
    file."""
    import shutil

    config, summary = trained_run
    folder = tmp_path_factory.mktemp("engine-run") / "run"
    shutil.copytree(summary.run_dir, folder)
    return folder, config.data.eval


@pytest.mark.slow  # exports the run once (seconds), then starts a process
def test_predict_with_the_onnx_engine_makes_the_export_once_and_equals_tensorflow(
    engine_run, tmp_path
):
    run, data = engine_run
    rows = {}
    for engine in ("tensorflow", "onnx"):
        output = tmp_path / f"{engine}.csv"
        argv = ["predict", "--engine", engine, "--run", str(run), "--data", data]
        assert main([*argv, "--output", str(output), "--quiet"]) == 0
        with open(output, newline="", encoding="utf-8") as f:
            rows[engine] = list(csv.DictReader(f))
    assert [r["label"] for r in rows["onnx"]] == [r["label"] for r in rows["tensorflow"]]
    for got, expected in zip(rows["onnx"], rows["tensorflow"], strict=True):
        got, expected = json.loads(got["probabilities"]), json.loads(expected["probabilities"])
        assert got.keys() == expected.keys()
        assert max(abs(got[k] - expected[k]) for k in got) <= TOLERANCE
    (kept,) = (run / CACHE_DIR).iterdir()
    made = (kept / "model.onnx").stat().st_mtime_ns

    # A second process finds the export and never imports TensorFlow.
    code = (
        "import sys; from bertfit.cli import main; "
        f"code = main(['predict', '--engine', 'onnx', '--run', {str(run)!r}, '--data', "
        f"{data!r}, '--output', {str(tmp_path / 'again.csv')!r}, '--quiet']); "
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "again.csv").read_text() == (tmp_path / "onnx.csv").read_text()
    assert (kept / "model.onnx").stat().st_mtime_ns == made
    assert [p.name for p in (run / CACHE_DIR).iterdir()] == [kept.name]


@pytest.mark.slow  # exports the run (seconds)
def test_the_first_call_says_it_exports_the_run_once(trained_run, tmp_path, capsys):
    import shutil

    config, summary = trained_run
    run = tmp_path / "run"
    shutil.copytree(summary.run_dir, run)
    argv = ["predict", "--engine", "onnx", "--run", str(run), "--data", config.data.eval]
    said = []
    for output in ("first.jsonl", "again.jsonl"):
        assert main([*argv, "--output", str(tmp_path / output)]) == 0
        said.append([line for line in capsys.readouterr().err.splitlines() if "ONNX" in line])
    assert said == [
        [
            f"bertfit: --engine onnx: exporting {run} to ONNX, once (about 30 s for MiniLM-L6 on "
            f"2 CPU cores); later calls run the export kept in {run / CACHE_DIR}"
        ],
        [],
    ]


@pytest.mark.slow  # exports the run once (seconds)
def test_evaluate_with_the_onnx_engine_gives_the_tensorflow_engines_metrics(engine_run, capsys):
    run, data = engine_run
    metrics = {}
    for engine in ("tensorflow", "onnx"):
        assert (
            main(["evaluate", "--engine", engine, "--run", str(run), "--data", data, "--json"]) == 0
        )
        metrics[engine] = json.loads(capsys.readouterr().out)
    for name in ("accuracy", "loss", "num_examples"):
        assert metrics["onnx"][name] == pytest.approx(metrics["tensorflow"][name], abs=1e-5)


@pytest.mark.slow  # exports the run once (seconds)
def test_streamed_predict_with_the_onnx_engine_gives_the_whole_files_rows(engine_run):
    from bertfit.inference.run import predict, predict_chunks

    run, data = engine_run
    folder = onnx_engine_folder(run)
    chunks = list(predict_chunks(folder, data, rows=7, engine="onnx"))
    assert [len(chunk) for chunk in chunks[:-1]] == [7] * (len(chunks) - 1)
    streamed = [row for chunk in chunks for row in chunk]
    whole = predict(folder, data, engine="onnx")
    assert [row["label"] for row in streamed] == [row["label"] for row in whole]
    for got, expected in zip(streamed, whole, strict=True):  # other batches: float rounding
        assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=TOLERANCE)


@pytest.mark.slow  # exports the run once (seconds)
def test_an_unfinished_run_is_predicted_with_the_warning_the_tensorflow_engine_gives(
    engine_run, tmp_path, capsys
):
    import shutil

    run, data = engine_run
    unfinished = tmp_path / "run"
    shutil.copytree(run, unfinished)
    metrics = json.loads((unfinished / "metrics.json").read_text())
    (unfinished / "metrics.json").write_text(json.dumps({**metrics, "status": "running"}))
    warnings = {}
    for engine in ("tensorflow", "onnx"):
        argv = ["predict", "--engine", engine, "--run", str(unfinished), "--data", data]
        assert main([*argv, "--output", str(tmp_path / f"{engine}.csv"), "--quiet"]) == 0
        warnings[engine] = capsys.readouterr().err
    assert "is an unfinished run" in warnings["onnx"]
    assert warnings["onnx"] == warnings["tensorflow"]
