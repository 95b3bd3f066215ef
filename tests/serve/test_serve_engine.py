"""`bertfit serve --engine onnx`: the run's ONNX export answers the text requests the batcher
gathers, equal to the TensorFlow engine's answers (1e-5); the signatures stay TensorFlow's."""

from __future__ import annotations

import types

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.data.tasks import Task
from bertfit.export.onnx_engine import engine_export
from bertfit.inference.graph import ClassifierModule
from bertfit.inference.onnx_runtime import load_onnx_classifier
from bertfit.inference.predictor import Classifier
from bertfit.model.classifier import BertClassifier
from bertfit.serve.app import ModelServer
from bertfit.serve.core import ServedVersion
from bertfit.text.tokenizer import BertTokenizer
from tests.serve.asgi import call, serving
from tests.tiny import TINY_VOCAB, sentiment_rows, tiny_encoder


@pytest.mark.slow  # converts a model with tf2onnx: seconds
def test_text_requests_answered_by_onnx_runtime_equal_tensorflows(tmp_path):
    task = Task("single-label", ("neg", "pos"))
    model = BertClassifier(tiny_encoder(seed=3), task.num_outputs, dropout=0.0)
    module = ClassifierModule(model, BertTokenizer(TINY_VOCAB), task, 16, [8, 16])
    tensorflow = Classifier(module, {"task": task.to_dict(), "max_seq_length": 16})
    onnx = load_onnx_classifier(
        engine_export(types.SimpleNamespace(module=module), tmp_path / "onnx", "test")
    )
    texts = [text for text, _ in sentiment_rows(12, seed=21)] + ["", "good film " * 20]
    onnx_batches = []
    classify_batch = onnx.classify_batch
    onnx.classify_batch = lambda *args: onnx_batches.append(args) or classify_batch(*args)
    answers = {}
    for name, engine in (("tensorflow", None), ("onnx", onnx)):
        served = ServedVersion(1, tensorflow, max_wait=0.001, texts_engine=engine)
        server = ModelServer(None, "sst", versions=[served])

        async def scenario(app):
            return await call(app, "/v1/models/sst:predict", {"instances": texts})

        status, answers[name] = serving(server, scenario)
        assert status == 200, answers[name]
    assert sum(len(batch[0]) for batch in onnx_batches) == len(texts)  # all by ONNX Runtime
    got, expected = answers["onnx"]["predictions"], answers["tensorflow"]["predictions"]
    assert [row["label"] for row in got] == [row["label"] for row in expected]
    np.testing.assert_allclose(
        [row["probabilities"] for row in got],
        [row["probabilities"] for row in expected],
        atol=1e-5,
    )


def test_the_onnx_engine_serves_a_run_not_an_export_base(tmp_path, capsys):
    (tmp_path / "base" / "1").mkdir(parents=True)
    (tmp_path / "base" / "1" / "saved_model.pb").write_bytes(b"")
    assert main(["serve", "--engine", "onnx", "--export", str(tmp_path / "base")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--run RUN" in error and "--engine tensorflow" in error
