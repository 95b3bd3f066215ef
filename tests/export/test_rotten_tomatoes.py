"""The real case: MiniLM-L6 fine-tuned once on Rotten Tomatoes, its exports run in their own
runtime's process on real test texts (every eighth of the test split's 1283, and the two that
hold '…') against `bertfit predict`: the TF Serving SavedModel in a process with only
TensorFlow, and the int8 LiteRT and ONNX exports.

The fp32 portable exports' exactness is pinned on the tiny model (tests/export/test_litert.py,
test_onnx.py: the same converters and clients); what only a real model on real text shows is
how far int8 drifts, and the in-graph tokenizer LiteRT carries on every real text. Each
conversion of MiniLM costs ~40 s of a 2-core CI machine."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.export.runtimes import LITERT_CLIENT, ONNX_CLIENT, drift, run_client, run_tf_client

pytestmark = pytest.mark.slow

# int8 (dynamic range) against fp32 bertfit, measured on this run (and printed, pytest -s).
INT8_LABEL_AGREEMENT = 0.97
INT8_MAX_DRIFT = 0.1

# `bertfit export ARGV` for each ARGV of the JSON list argv[1], in this one process.
EXPORT_ALL = """
import json, sys
from bertfit.cli import main
for argv in json.loads(sys.argv[1]):
    assert main(argv) == 0, argv
"""


@pytest.fixture(scope="module")
def minilm(rotten_tomatoes, tmp_path_factory):
    """A MiniLM run (256 training rows, one epoch), test texts and what bertfit predicts for
    them: (run directory, classifier, texts, probabilities)."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.data.sources import read_examples
    from bertfit.inference.predictor import load_classifier
    from bertfit.training.run import train

    config = RunConfig(
        output_dir=str(tmp_path_factory.mktemp("minilm") / "run"),
        model=ModelConfig(name="minilm-l6", max_seq_length=64, pooling="mean"),
        data=DataConfig(train=str(rotten_tomatoes / "train.csv"), max_train_examples=256),
        train=TrainConfig(batch_size=32, epochs=1, learning_rate=1e-4, jit_compile=False),
    )
    train(config, quiet=True)
    texts = [e.text for e in read_examples(str(rotten_tomatoes / "test.csv"))]
    assert len(texts) == 1283
    # Each text costs four passes of MiniLM (predict, the SavedModel, LiteRT, ONNX): an eighth
    # of the split, and the two texts FastBertTokenizer splits otherwise (they hold '…').
    texts = [text for i, text in enumerate(texts) if i % 8 == 0 or "…" in text]
    assert len(texts) == 162
    classifier = load_classifier(config.output_dir)
    return config.output_dir, classifier, texts, classifier.predict_proba(texts)


def test_minilm_savedmodel_equals_bertfit_predict_on_the_real_test_split(minilm, tmp_path):
    from bertfit.cli import main

    run, classifier, texts, expected = minilm
    assert main(["export", "--run", run, str(tmp_path / "export")]) == 0
    probabilities, labels = run_tf_client(tmp_path / "export" / "1", texts, tmp_path)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    assert labels == [classifier.labels[i] for i in expected.argmax(axis=1)]


def test_minilm_int8_exports_agree_with_bertfit_predict_on_the_real_test_split(minilm, tmp_path):
    from bertfit.export.litert import fast_bert_tokenizer

    run, classifier, texts, expected = minilm
    # The texts FastBertTokenizer tokenizes as bertfit does (all but the 2 that hold '…').
    tokenizer = classifier.module.tokenizer
    same = np.array(
        [
            a == b
            for a, b in zip(
                tokenizer.tokenize(texts).to_list(),
                fast_bert_tokenizer(tokenizer).tokenize(texts).to_list(),
                strict=True,
            )
        ]
    )
    assert same.sum() == len(texts) - 2
    # Both conversions in one process of their own, as a user runs `bertfit export`: the
    # converters' native code crashed a pytest worker that had run hundreds of tests.
    clients = {"litert": LITERT_CLIENT, "onnx": ONNX_CLIENT}
    roots = {name: tmp_path / f"{name}-int8" for name in clients}
    exports = [
        ["export", "--format", name, "--quantize", "int8", "--run", run, str(root)]
        for name, root in roots.items()
    ]
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_ALL, json.dumps(exports)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, client in clients.items():
        root = roots[name]
        work = tmp_path / f"{root.name}-client"
        work.mkdir()
        got = run_client(client, root / "1", texts, work)
        agreement, max_drift = drift(expected, got)
        print(f"{root.name}: labels agree {agreement:.2%}, max drift {max_drift:.2e}")
        assert agreement >= INT8_LABEL_AGREEMENT
        assert max_drift <= INT8_MAX_DRIFT
