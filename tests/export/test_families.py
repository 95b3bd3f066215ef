"""The families of issue 57 whose checkpoints ship a WordPiece (MPNet, NomicBERT) export as
ONNX (tokenizer.json beside) and LiteRT, and each runtime, in a process without TensorFlow or
bertfit, gives bertfit's probabilities; their SavedModels are checked in TensorFlow's three
loaders in test_loaders.py."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.checkpoints.load import load_encoder
from bertfit.data.tasks import Task
from bertfit.export.litert import export_litert
from bertfit.export.onnx import export_onnx
from bertfit.inference.graph import ClassifierModule
from bertfit.inference.predictor import Classifier
from bertfit.model.classifier import BertClassifier
from tests.export.runtimes import LITERT_CLIENT, ONNX_CLIENT, run_client
from tests.families import write_family_checkpoint
from tests.tiny import sentiment_rows

# Two conversions and two runtime processes a family: seconds.
pytestmark = pytest.mark.slow

TEXTS = [text for text, _ in sentiment_rows(12, seed=4)] + ["", "naïve déjà-vu?!", "good " * 30]


@pytest.mark.parametrize("family", ["mpnet", "nomic_bert"])
def test_onnx_and_litert_give_bertfits_probabilities(family, tmp_path):
    pytest.importorskip("transformers")
    write_family_checkpoint(family, tmp_path / "model", TEXTS, trainable=False)
    encoder, tokenizer = load_encoder(tmp_path / "model")
    task = Task("single-label", ("neg", "neutral", "pos"))
    model = BertClassifier(encoder, task.num_outputs, pooling="mean", dropout=0.0)
    encoder_weights = {id(v) for v in encoder.weights}
    rng = np.random.default_rng(0)
    for variable in model.weights:  # a head far from uniform, so the rows differ
        if id(variable) not in encoder_weights:
            variable.assign(rng.normal(0, 1.0, variable.shape).astype("float32"))
    module = ClassifierModule(model, tokenizer, task, 16, [8, 16], pairs=False)
    classifier = Classifier(module, {"task": task.to_dict(), "pairs": False})
    expected = classifier.predict_proba(TEXTS)
    assert np.ptp(expected, axis=0).max() > 1e-3  # rows differ: a test of the inputs too
    for client, export in (
        (ONNX_CLIENT, export_onnx(classifier, tmp_path / "onnx")),
        (LITERT_CLIENT, export_litert(classifier, tmp_path / "litert")),
    ):
        got = run_client(client, export, TEXTS, tmp_path)
        np.testing.assert_allclose(got, expected, atol=1e-5)
