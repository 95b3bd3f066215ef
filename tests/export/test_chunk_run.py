"""A `bertfit train --long-documents chunk` run through every command that uses it (issue 35):
`evaluate` counts each document once and agrees with the run's own evaluation, `predict` writes
one row per document, the export and `bertfit serve` answer as `predict` does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import ModelServer, served_versions
from tests.serve.asgi import call, serving
from tests.tiny import FILLER, train_args, write_csv
from tests.training.test_long_documents import FLAGS, SPEC, documents

pytestmark = pytest.mark.slow  # trains (one epoch) and exports: about a minute on a busy 2-core CPU

# Beside the dev documents (2 to 60 words: 1 to 5 windows): one far past max_chunks, short ones
EXTRA = [" ".join(FILLER * 12), "good", "a bad film"]


@pytest.fixture(scope="module")
def run(trainable_hf_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunk-run")
    train = write_csv(folder / "train.csv", documents(29, 0, "single-label"))
    dev = write_csv(folder / "dev.csv", documents(13, 1, "single-label"))
    args = train_args(trainable_hf_dir, train, folder / "run", "--eval", str(dev), **FLAGS)
    assert main([*args, "--no-report"]) == 0  # one epoch: its evaluation is the best's
    return folder


@pytest.fixture(scope="module")
def texts(run) -> list[str]:
    return [text for text, _ in documents(13, 1, "single-label")] + EXTRA


@pytest.fixture(scope="module")
def expected(run, texts) -> np.ndarray:
    return load_classifier(run / "run").predict_proba(texts)


def test_the_documents_need_one_to_more_than_max_chunks_windows(texts):
    windows = SPEC.windows_needed([len(text.split()) for text in texts])
    assert windows.min() == 1 and 1 < np.median(windows) and windows.max() > SPEC.max_chunks


def test_evaluate_counts_each_document_once_as_the_run_evaluated(run, capsys):
    capsys.readouterr()
    argv = ["evaluate", "--run", str(run / "run"), "--data", str(run / "dev.csv"), "--json"]
    assert main(argv) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    final = json.loads((run / "run" / "metrics.json").read_text())["final"]
    assert metrics["num_examples"] == final["num_examples"] == 13
    assert metrics["accuracy"] == final["accuracy"]
    assert metrics["loss"] == pytest.approx(final["loss"], abs=1e-5)


def test_predict_writes_one_row_per_document(run, texts, expected):
    data = write_csv(run / "predict.csv", [(text, "") for text in texts], header=("text", "x"))
    output = run / "predictions.jsonl"
    assert (
        main(
            [
                "predict",
                "--run",
                str(run / "run"),
                "--data",
                str(data),
                "--output",
                str(output),
                "--quiet",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == len(texts)
    labels = load_classifier(run / "run").labels
    probabilities = [[row["probabilities"][label] for label in labels] for row in rows]
    np.testing.assert_allclose(probabilities, expected, rtol=0, atol=1e-6)


def test_the_export_equals_predict_within_1e_5(run, texts, expected):
    assert main(["export", "--run", str(run / "run"), str(run / "exported")]) == 0
    exported = load_classifier(run / "exported")
    assert exported.windows == SPEC
    np.testing.assert_allclose(exported.predict_proba(texts), expected, rtol=0, atol=1e-5)
    alone = [exported.predict_proba([text])[0] for text in texts[-4:]]
    np.testing.assert_allclose(alone, expected[-4:], rtol=0, atol=1e-5)


def test_serve_on_the_run_answers_a_long_document_as_predict(run, texts, expected):
    server = ModelServer(None, "docs", versions=served_versions(run / "run", max_wait=0.01))

    async def scenario(app):
        return await call(app, "/v1/models/docs:predict", {"instances": texts})

    status, body = serving(server, scenario)
    assert status == 200, body
    answered = [row["probabilities"] for row in body["predictions"]]
    np.testing.assert_allclose(answered, expected, rtol=0, atol=1e-5)
