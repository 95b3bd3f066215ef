"""Every encoder family, from a checkpoint saved by transformers 5 (tokenizer.json, no vocab.txt):
trains the same over two replicas as on one device, compiles every bucket for a TPU in `check`,
and exports a SavedModel that gives `bertfit predict`'s probabilities. BERT's run also trains
over replicas through the CLI, evaluates every row and serves its export through TF Serving's
REST API: code every family shares."""

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

ROWS = sentiment_rows(48, seed=7)
TEXTS = [text for text, _ in ROWS[:10]] + ["an unseen word: zyzzyva!", ""]
WHOLE = "bert"  # the family whose run also goes through the CLI over replicas, evaluate and serve
OTHERS = sorted(set(FAMILIES) - {WHOLE})


def family_data(family: str, folder) -> tuple:
    """`family`'s tiny checkpoint and the training file, under `folder`."""
    model = folder / family
    write_family_checkpoint(family, model, [text for text, _ in ROWS])
    return model, str(write_csv(folder / "train.csv", ROWS))


def assert_trained_alike(replicated, one_device, steps: int = 6) -> None:
    losses = cluster.step_losses(replicated)
    assert len(losses) == steps and np.isfinite(losses).all(), replicated
    np.testing.assert_allclose(
        losses, cluster.step_losses(one_device), rtol=1e-4, err_msg=str(replicated)
    )
    cluster.assert_same_weights(replicated, one_device, atol=1e-4)


def train_check_and_export(family: str, tmp_path, capsys):
    """Trains `family` on one device in this process, checks it for a TPU and exports the run;
    returns (model, data, run, export, bertfit predict's probabilities of TEXTS)."""
    model, data = family_data(family, tmp_path)
    run = tmp_path / "one"
    assert main(["train", *cluster.train_args(model, data, run, "--strategy", "default")]) == 0
    capsys.readouterr()

    check = ["check", "--model", str(model), "--train", data, "--max-seq-length", "32"]
    assert main([*check, "--target", "tpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["errors"] == 0, report["findings"]
    assert report["compiled"] and all(c["ok"] for c in report["compiled"])

    export = tmp_path / "export"
    assert main(["export", "--run", str(run), str(export)]) == 0
    capsys.readouterr()
    expected = load_classifier(run).predict_proba(TEXTS)
    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    probabilities = serve(text=tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    return model, data, run, export, expected


# Each architecture with the tokenizer its checkpoints ship (mmBERT, ModernBERT with a byte-fallback
# BPE: tests/training/test_mmbert.py).
@pytest.mark.parametrize("family", OTHERS)
def test_a_family_checks_and_exports(family, tmp_path, capsys):
    train_check_and_export(family, tmp_path, capsys)


def test_bert_trains_over_replicas_checks_evaluates_exports_and_serves(tmp_path, capsys):
    model, data, one, export, expected = train_check_and_export(WHOLE, tmp_path, capsys)
    # The replicas in their own process, whose logical CPU devices must exist before TensorFlow
    # starts.
    two = tmp_path / "two"
    cluster.train(
        cluster.train_args(model, data, two, "--strategy", "mirrored", "--cpu-replicas", "2")
    )
    assert_trained_alike(two, one)

    assert main(["evaluate", "--run", str(one), "--data", data, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["num_examples"] == len(ROWS)

    server = ModelServer(load_classifier(export), "sst", max_batch=8, max_wait=0.01)
    status, answer = serving(
        server, lambda app: call(app, "/v1/models/sst:predict", {"instances": TEXTS})
    )
    assert status == 200, answer
    served = [row["probabilities"] for row in answer["predictions"]]
    np.testing.assert_allclose(served, expected, atol=1e-5)


# The other families take two steps over two replicas and two on one device (the second step
# runs on each replica's copy of the first's update), all in one process, eagerly (a TensorFlow
# start and a traced replicated step would cost ~25 s a family): the same step code as BERT's
# traced run above, on each family's layers and variables. XLM-RoBERTa's are RoBERTa's
# (bertfit/checkpoints/families/roberta.py: only the tokenizer differs, and it checks and
# exports above).
REPLICATED = [family for family in OTHERS if family != "xlm-roberta"]


def test_two_steps_over_two_replicas_equal_two_on_one_device(tmp_path):
    runs, args = {}, []
    for family in REPLICATED:
        model, data = family_data(family, tmp_path)
        runs[family] = tmp_path / f"{family}-one", tmp_path / f"{family}-two"
        for run, strategy in zip(runs[family], ("default", "mirrored"), strict=True):
            flags = ("--strategy", strategy, "--cpu-replicas", "2", "--max-steps", "2")
            args.append(cluster.train_args(model, data, run, *flags))
    cluster.train_eagerly(args)
    for one, two in runs.values():
        assert_trained_alike(two, one, steps=2)
