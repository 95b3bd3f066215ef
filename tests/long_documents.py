"""A tiny classifier of long documents (`--long-documents chunk`) in memory, and documents of one,
several and more than `max_chunks` windows: what the inference, export and serve tests of issue
35 share."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertfit.config import DataConfig, ModelConfig, RunConfig
from bertfit.data.tasks import Task
from bertfit.inference.graph import ClassifierModule
from bertfit.inference.predictor import Classifier, run_metadata
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.text import BertTokenizer
from bertfit.text.windows import WindowSpec
from tests.tiny import WORDS, tiny_encoder, write_vocab

# Windows of 16 ids (14 of text), 4 shared: 1 window up to 14 ids, then one per 10 more.
MODEL = ModelConfig(
    max_seq_length=16,
    long_documents="chunk",
    chunk_stride=4,
    max_chunks=4,
    chunk_pooling="attention",
)
SPEC = WindowSpec.for_model(MODEL)
ONE_WINDOW = "a good film"
THREE_WINDOWS = " ".join(WORDS)  # 31 ids
CUT = " ".join(WORDS[::-1] * 3)  # 93 ids: 9 windows, the first 4 kept
SHORT = ["bad", "the plot was fun", "", "boring !"]
DOCUMENTS = [CUT, SHORT[0], THREE_WINDOWS, ONE_WINDOW, *SHORT[1:], THREE_WINDOWS[::-1]]


SINGLE_LABEL = Task("single-label", ("neg", "neutral", "pos"))


def chunk_classifier(folder: Path, batch_size: int = 64, task: Task = SINGLE_LABEL) -> Classifier:
    """A random tiny `ChunkedClassifier` of `task` (attention pooling with a non-zero score, a
    head with large weights, so documents get clearly different outputs) loaded as
    `load_classifier` loads a chunk run."""
    classifier = BertClassifier(tiny_encoder(), task.num_outputs, "mean", dropout=0.0)
    model = ChunkedClassifier(classifier, "attention")
    rng = np.random.default_rng(7)
    for variable in (model.window_pooling.score.kernel, model.classifier.head.kernel):
        variable.assign(rng.normal(0, 2, variable.shape).astype("float32"))
    tokenizer = BertTokenizer(write_vocab(folder))
    config = RunConfig(model=MODEL, data=DataConfig(buckets=[8, 16]))
    module = ClassifierModule(model, tokenizer, task, 16, [8, 16], False, SPEC)
    return Classifier(module, run_metadata(config, task), batch_size=batch_size)
