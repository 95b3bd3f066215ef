"""Multi-label and regression models export too: the one numeric output (sigmoid probabilities,
or the value in the targets' units) equals bertfit's, in each runtime's own process."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.tasks import Task
from bertfit.export.litert import export_litert
from bertfit.export.onnx import export_onnx
from bertfit.inference.graph import ClassifierModule
from bertfit.model.classifier import BertClassifier
from bertfit.text.tokenizer import BertTokenizer
from tests.export.runtimes import LITERT_CLIENT, ONNX_CLIENT, run_client
from tests.tiny import TINY_VOCAB, sentiment_rows, tiny_encoder

# Export, convert and run a process per test: seconds each (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow

TASKS = {
    "multi-label": Task("multi-label", ("a", "b", "c"), threshold=0.4),
    "regression": Task("regression", mean=3.0, std=2.0),
}
FORMATS = {"litert": (export_litert, LITERT_CLIENT), "onnx": (export_onnx, ONNX_CLIENT)}


@pytest.mark.parametrize("format_name", FORMATS)
@pytest.mark.parametrize("kind", TASKS)
def test_the_output_equals_bertfits(kind, format_name, tmp_path):
    task = TASKS[kind]
    model = BertClassifier(tiny_encoder(seed=3), task.num_outputs, dropout=0.0)
    module = ClassifierModule(model, BertTokenizer(TINY_VOCAB), task, 16, [8, 16])
    texts = [text for text, _ in sentiment_rows(20, seed=5)] + ["", "good " * 30]
    name = "value" if kind == "regression" else "probabilities"
    expected = module.classify_text(tf.constant(texts))[name].numpy()

    export, client = FORMATS[format_name]
    folder = export(types.SimpleNamespace(module=module), tmp_path / "export")
    assert json.loads((folder / "bertfit.json").read_text())["output"] == name
    got = run_client(client, folder, texts, tmp_path)
    assert got.shape == expected.shape == ((len(texts), 3) if kind == "multi-label" else (22,))
    np.testing.assert_allclose(got, expected, atol=1e-4)
