"""Every encoder family, from a checkpoint saved by transformers 5 (tokenizer.json, no vocab.txt):
trains the same over two replicas as on one device, compiles every bucket for a TPU in `check`,
evaluates every row, exports a SavedModel that gives `bertfit predict`'s probabilities and serves
it through TF Serving's REST API."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import ModelServer
from tests.distributed import cluster
from tests.families import FAMILIES, write_family_checkpoint
from tests.serve.asgi import call, serving
from tests.tiny import sentiment_rows, write_csv

pytestmark = pytest.mark.distributed

pytest.importorskip("transformers")


# Each architecture with the tokenizer its checkpoints ship (mmBERT, ModernBERT with a byte-fallback
# BPE: tests/training/test_mmbert.py).
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_trains_checks_and_exports(family, tmp_path, capsys):
    rows = sentiment_rows(48, seed=7)
    model = tmp_path / "model"
    write_family_checkpoint(family, model, [text for text, _ in rows])
    data = str(write_csv(tmp_path / "train.csv", rows))

    one, two = tmp_path / "one", tmp_path / "two"
    # One device in this process (a second TensorFlow start would cost ~5 s a family); the
    # replicas in their own, whose logical CPU devices must exist before TensorFlow starts.
    assert main(["train", *cluster.train_args(model, data, one, "--strategy", "default")]) == 0
    capsys.readouterr()
    cluster.train(
        cluster.train_args(model, data, two, "--strategy", "mirrored", "--cpu-replicas", "2")
    )
    losses = cluster.step_losses(two)
    assert len(losses) == 6 and np.isfinite(losses).all()
    np.testing.assert_allclose(losses, cluster.step_losses(one), rtol=1e-4)
    cluster.assert_same_weights(two, one, atol=1e-4)

    check = ["check", "--model", str(model), "--train", data, "--max-seq-length", "32"]
    assert main([*check, "--target", "tpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["errors"] == 0, report["findings"]
    assert report["compiled"] and all(c["ok"] for c in report["compiled"])

    assert main(["evaluate", "--run", str(one), "--data", data, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["num_examples"] == len(rows)

    export = tmp_path / "export"
    assert main(["export", "--run", str(one), str(export)]) == 0
    texts = [text for text, _ in rows[:10]] + ["an unseen word: zyzzyva!", ""]
    expected = load_classifier(one).predict_proba(texts)
    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    probabilities = serve(text=tf.constant(texts))["probabilities"].numpy()
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)

    server = ModelServer(load_classifier(export), "sst", max_batch=8, max_wait=0.01)
    status, answer = serving(
        server, lambda app: call(app, "/v1/models/sst:predict", {"instances": texts})
    )
    assert status == 200, answer
    served = [row["probabilities"] for row in answer["predictions"]]
    np.testing.assert_allclose(served, expected, atol=1e-5)
