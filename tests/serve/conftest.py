"""Models the REST conformance and gRPC tests both serve: a regression run exported as TF
Serving reads it, and an untrained multi-label text-pair classifier in memory."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import scored_rows, write_csv

PAIR_TEXTS = ["a fine, moving film", "dull and far too long", "it was fine"]


@pytest.fixture(scope="session")
def regression_export(trainable_hf_dir, tmp_path_factory):
    """(the run directory, its export root) of one epoch of regression on the toy scores."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.export.serving import export_classifier
    from bertfit.inference.predictor import load_classifier
    from bertfit.training.run import train

    path = tmp_path_factory.mktemp("regression")
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(
            name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0, task="regression"
        ),
        data=DataConfig(
            train=str(write_csv(path / "train.csv", scored_rows(32, seed=3))), buckets=[8, 16]
        ),
        train=TrainConfig(batch_size=8, epochs=1, learning_rate=5e-3, seed=0, strategy="default"),
    )
    run = train(config, quiet=True).run_dir
    export_classifier(load_classifier(run), path / "export")
    return run, path / "export"


@pytest.fixture(scope="session")
def pair_classifier():
    """(classifier, its probabilities for `PAIR_TEXTS` paired with themselves reversed) of an
    untrained multi-label pair model: the numbers only need to agree between the calls."""
    from bertfit.data.tasks import Task
    from bertfit.inference.graph import ClassifierModule
    from bertfit.inference.predictor import Classifier
    from bertfit.model.classifier import BertClassifier
    from bertfit.text.tokenizer import BertTokenizer
    from tests.tiny import TINY_VOCAB, tiny_encoder

    task = Task("multi-label", ("a", "b", "c"), threshold=0.4)
    model = BertClassifier(tiny_encoder(seed=3), task.num_outputs, dropout=0.0)
    module = ClassifierModule(model, BertTokenizer(TINY_VOCAB), task, 16, [8, 16], pairs=True)
    classifier = Classifier(module, {"task": task.to_dict(), "pairs": True})
    return classifier, classifier.predict_proba(PAIR_TEXTS, PAIR_TEXTS[::-1])


@pytest.fixture(scope="session")
def text_classifier():
    """An untrained single-label ("neg", "pos") classifier of single texts in memory, cutting
    texts at 16 tokens: for the API tests, whose numbers only need to agree between calls."""
    from bertfit.data.tasks import Task
    from bertfit.inference.graph import ClassifierModule
    from bertfit.inference.predictor import Classifier
    from bertfit.model.classifier import BertClassifier
    from bertfit.text.tokenizer import BertTokenizer
    from tests.tiny import TINY_VOCAB, tiny_encoder

    task = Task("single-label", ("neg", "pos"))
    model = BertClassifier(tiny_encoder(seed=5), task.num_outputs, dropout=0.0)
    module = ClassifierModule(model, BertTokenizer(TINY_VOCAB), task, 16, [8, 16])
    return Classifier(module, {"task": task.to_dict(), "pairs": False, "max_seq_length": 16})


ROOT = Path(__file__).resolve().parents[2]


def start_serve(*arguments: str) -> subprocess.Popen:
    """`bertfit serve ARGUMENTS` in a subprocess of this checkout, its output as text."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", "serve", *arguments],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines_until(process: subprocess.Popen, marker: str, timeout: float) -> list[str]:
    """The lines `process` prints up to the one containing `marker`."""

    def read() -> list[str]:
        lines = []
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if marker in line:
                break
        return lines

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            lines = pool.submit(read).result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            process.kill()  # ends the read
            raise AssertionError(f"the server said no {marker!r} line in {timeout:.0f}s") from None
    assert lines and marker in lines[-1], process.communicate()[1][-3000:]
    return lines
