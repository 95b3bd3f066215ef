"""`bertfit` with `--backend jax` where TensorFlow cannot be imported (a TPU VM or GPU box with
`pip install 'bertfit[jax]'` alone, issue 55): a Hugging Face checkpoint trains, resumes exactly
after a kill (the steps it repeats give the losses they gave), predicts, evaluates and is
checked; the commands that need TensorFlow are refused in one line naming the extra; and the run
exports on a machine with TensorFlow (this process) to the predictions it gave on JAX, within
1e-5. `bertfit distill --backend jax` distils there the student TensorFlow distils here. A
command that imports TensorFlow fails here: the import raises in the child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertfit.jax_devices import ONEDNN_SWITCH
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import steps_of

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # a JAX process that compiles: a minute on a busy CPU


def without_tensorflow(stage: str, *paths) -> subprocess.CompletedProcess:
    """`tests.jax_without_tensorflow STAGE PATHS` on JAX, TensorFlow blocked. Each compiled
    step is kept in the session's JAX cache (tests/conftest.py), so the resumed run and the
    commands after it load what the killed run compiled: XLA's own kernels, since a oneDNN
    step cannot be cached (`jax_trainer.use_compilation_cache`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax", ONEDNN_SWITCH: "0"}
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    module = ["tests.without_tensorflow", "tests.jax_without_tensorflow", stage]
    return subprocess.run(
        [sys.executable, "-m", *module, *map(str, paths)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.slow  # two JAX processes that compile, and an export: 30 s
def test_jax_commands_run_without_tensorflow_and_the_run_exports_with_it(
    one_layer_hf_dir, tmp_path
):
    from bertfit.export.serving import export_classifier
    from bertfit.inference.predictor import Classifier, load_classifier
    from bertfit.inference.run import predict

    train = write_csv(tmp_path / "train.csv", sentiment_rows(128, seed=21))
    dev = write_csv(tmp_path / "dev.csv", sentiment_rows(24, seed=22))
    run = tmp_path / "run"
    paths = (one_layer_hf_dir, train, dev, run)

    killed = without_tensorflow("killed", *paths)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = steps_of(run)
    assert [s["global_step"] for s in before] == [1, 2, 3, 4, 5]  # its checkpoint: step 3
    done = without_tensorflow("resumed", *paths)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    assert report["loaded"] == []  # no TensorFlow module was imported
    codes = {"train": 0, "predict": 0, "evaluate": 0, "check": 0, "export": 2, "serve": 2}
    assert report["codes"] == codes, report["errors"]
    assert any("resuming the unfinished run" in line for line in report["errors"]["train"])
    assert "resumed at epoch 1, step 3 (global step 3)" in (run / "train.log").read_text()
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"
    steps = steps_of(run)
    assert [s["global_step"] for s in steps] == list(range(1, len(steps) + 1))
    assert steps[-1]["epoch"] == 4
    # Steps 4 and 5 again from the checkpoint: the same weights, optimizer state, learning
    # rate, batches and dropout masks as before the kill
    for name in ("loss", "grad_norm", "learning_rate"):
        again, first = ([s[name] for s in rows[3:5]] for rows in (steps, before))
        np.testing.assert_allclose(again, first, rtol=1e-6, err_msg=name)
    assert report["errors"]["export"] == [
        "bertfit export: error: bertfit export needs TensorFlow, which is not installed "
        "here: pip install 'bertfit[cpu]' (a run trained with --backend jax exports on any "
        "machine that has it)."
    ]
    (serve,) = report["errors"]["serve"]
    assert serve.startswith("bertfit serve: error: bertfit serve needs TensorFlow")

    predictions = tmp_path / "run-predictions.jsonl"
    on_jax = [json.loads(line) for line in predictions.read_text().splitlines()]
    exported = export_classifier(load_classifier(run), tmp_path / "export")
    on_tensorflow = predict(Classifier.from_export(exported), str(dev), quiet=True)
    labels = [r["label"] for r in on_tensorflow]
    assert set(labels) == {"neg", "pos"}  # a model that learned to tell them apart
    assert [r["label"] for r in on_jax] == labels
    jax_probabilities, tensorflow_probabilities = (
        np.array([[r["probabilities"][k] for k in ("neg", "pos")] for r in rows])
        for rows in (on_jax, on_tensorflow)
    )
    np.testing.assert_allclose(jax_probabilities, tensorflow_probabilities, atol=1e-5)


@pytest.mark.slow  # a JAX process that labels, cuts and trains, and the same on TensorFlow: 20 s
def test_a_jax_distillation_without_tensorflow_takes_the_tensorflow_distillations_steps(
    trained_run, tmp_path
):
    """`bertfit distill --backend jax` where TensorFlow cannot be imported, beside the same
    command on TensorFlow: the teacher's probabilities on JAX are TensorFlow's within 1e-5,
    its host tokenizer keeps the same ids of the pruned vocabulary, the student cut from its
    JAX weights is the same tensors, and from the same first weights (each backend draws the
    new head its own way) the student takes the same steps: the distillation loss is one
    function of keras.ops on both."""
    from safetensors.numpy import load_file

    from bertfit.cli import main
    from bertfit.distill.soft_labels import SoftLabels
    from tests.jax_without_tensorflow import distill_args, starting_from

    teacher = trained_run[1].run_dir
    unlabelled = write_csv(tmp_path / "more.csv", sentiment_rows(8, seed=5))
    initial, on_tensorflow, on_jax = tmp_path / "initial", tmp_path / "tf", tmp_path / "jax"
    with starting_from(str(initial)):
        assert main(distill_args(teacher, str(unlabelled), str(on_tensorflow), "tensorflow")) == 0
    done = without_tensorflow("distill", teacher, unlabelled, initial, on_jax)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"loaded": []}

    tensorflow, jax = (
        SoftLabels.load(run / "distill" / "soft_labels.npz") for run in (on_tensorflow, on_jax)
    )
    assert jax.probabilities.shape == (32 + 8, 2)
    np.testing.assert_allclose(jax.probabilities, tensorflow.probabilities, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(jax.given, tensorflow.given)
    cuts = [run / "distill" / "student" for run in (on_tensorflow, on_jax)]
    kept = [np.load(cut / "vocab_map.npy") for cut in cuts]
    assert len(kept[0]) < 41  # pruned: fewer ids than the tiny vocabulary's
    np.testing.assert_array_equal(kept[1], kept[0])
    tensors = [load_file(cut / "model.safetensors") for cut in cuts]
    assert tensors[1].keys() == tensors[0].keys()
    for name, value in tensors[0].items():
        np.testing.assert_array_equal(tensors[1][name], value, err_msg=name)
    steps = [steps_of(run) for run in (on_tensorflow, on_jax)]
    assert len(steps[1]) == len(steps[0]) == 6  # 40 rows in batches of 8, in 2 length buckets
    for name in ("loss", "grad_norm"):
        np.testing.assert_allclose(
            [s[name] for s in steps[1]], [s[name] for s in steps[0]], atol=1e-4, err_msg=name
        )
