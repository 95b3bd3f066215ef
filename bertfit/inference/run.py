"""`evaluate` and `predict`: a trained classifier (a run or an export) over a file of texts, run
by an engine (`engine`): "tensorflow", the run's graph (`bertfit.inference.predictor`), or "onnx",
an ONNX export in ONNX Runtime (`bertfit.inference.onnx_runtime`; `bertfit.export.onnx_engine`
makes a run's). Each engine's modules are imported only when it runs: the onnx engine's process
never imports TensorFlow. Each function also takes a classifier loaded already in place of the
path: `inference.jax_classifier.JaxClassifier`, a run's model on the JAX devices (`--backend jax`,
`inference/backends.py`), comes that way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertfit.config import ENGINES
from bertfit.data.chunks import read_chunks
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.errors import ConfigError
from bertfit.inference.onnx_runtime import load_onnx_classifier
from bertfit.inference.outputs import metric_inputs, prediction_rows
from bertfit.inference.texts import TextClassifier
from bertfit.progress import Progress
from bertfit.runs.calibration import calibration_metrics
from bertfit.runs.metrics import task_metrics

if TYPE_CHECKING:
    from bertfit.inference.predictor import Classifier

STREAM_ROWS = 256  # rows of standard input predicted together (`predict_chunks`)


def load_for_engine(path: str | Path, engine: str = "tensorflow"):
    """The classifier at `path` run by `engine`: a run directory or SavedModel export in
    TensorFlow, or an ONNX export folder in ONNX Runtime (same interface; for a run directory,
    `bertfit.export.onnx_engine.onnx_engine_folder` gives the folder, as the CLI does)."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}.")
    if engine == "onnx":
        return load_onnx_classifier(path)
    from bertfit.inference.predictor import load_classifier

    return load_classifier(path)


def loaded(run: str | Path | TextClassifier, engine: str = "tensorflow") -> TextClassifier:
    """`run` itself when it is a classifier loaded already (`JaxClassifier`), else
    the classifier at that path run by `engine` (`load_for_engine`)."""
    return run if isinstance(run, TextClassifier) else load_for_engine(run, engine)


def classifier_source_spec(
    classifier: Classifier, format: str | None = None, columns: dict | None = None
) -> SourceSpec:
    """How to read files for a trained classifier: the columns its training files used, or
    those `columns` names ({"text": ..., "text_pair": ..., "label": ...}: a file whose columns
    are named otherwise, as `--text-column` and co. say)."""
    saved = classifier.metadata.get("columns") or {}
    given = {role: name for role, name in (columns or {}).items() if name is not None}
    if "text_pair" in given and not classifier.pairs:
        raise ConfigError(
            "--text-pair-column: this classifier was trained on single texts, so it reads no "
            "second text; leave the flag out."
        )
    columns = {**saved, **given}
    return SourceSpec(
        format=format,
        text_column=columns.get("text", "text"),
        text_pair_column=columns.get("text_pair"),
        label_column=columns.get("label", "label"),
        empty_labels=True,
    )


def evaluate(
    run_path: str | Path | TextClassifier,
    data_path: str,
    *,
    quiet: bool = False,
    format: str | None = None,
    columns: dict | None = None,
    engine: str = "tensorflow",
) -> dict:
    """The task's metrics (e.g. accuracy, macro_f1, loss) of a trained run (or an export) on a
    labelled file (`format`: its format, else from its name; `columns`: its column names
    where they differ from the training files', see `classifier_source_spec`), with
    num_examples; every row counts. `engine`: see `load_for_engine`. A classifier's metrics
    include `ece` (expected calibration error) and `brier` of the probabilities it gives
    (calibrated when the run was); a regression with a predictive interval its
    `interval_coverage`. `run_path` may be a classifier loaded already (`loaded`).
    """
    classifier = loaded(run_path, engine)
    spec = classifier_source_spec(classifier, format, columns)
    examples = read_examples(data_path, spec)
    targets = classifier.task.targets(examples, data_path)
    start = time.perf_counter()
    outputs = _outputs(classifier, examples, "evaluate", quiet)
    seconds = time.perf_counter() - start
    meaning = metric_inputs(classifier.task, outputs)
    metrics = task_metrics(classifier.task, targets, meaning)
    metrics.update(calibration_metrics(classifier.task, targets, meaning))
    metrics.update(
        num_examples=len(examples),
        wall_seconds=seconds,
        examples_per_second=len(examples) / max(seconds, 1e-9),
    )
    return metrics


def predict(
    run_path: str | Path | TextClassifier,
    data_path: str,
    *,
    quiet: bool = False,
    format: str | None = None,
    columns: dict | None = None,
    engine: str = "tensorflow",
) -> list[dict]:
    """One prediction per input row, in input order: the label and a probability per label
    (single-label), the labels and a probability per label (multi-label), or the value.
    `format` reads `data_path` in that format (standard input is CSV without it); `columns`
    names its text columns where they differ from the training files'. `engine`: see
    `load_for_engine`; `run_path` may be a classifier loaded already (`loaded`)."""
    classifier = loaded(run_path, engine)
    spec = classifier_source_spec(classifier, format, columns)
    examples = read_examples(data_path, spec, labels_required=False)
    return prediction_rows(classifier.task, _outputs(classifier, examples, "predict", quiet))


def predict_chunks(
    run_path: str | Path | TextClassifier,
    data_path: str,
    *,
    format: str | None = None,
    rows: int = STREAM_ROWS,
    columns: dict | None = None,
    engine: str = "tensorflow",
) -> Iterator[list[dict]]:
    """`predict`'s rows, `rows` input rows at a time, each chunk predicted as soon as it is
    read: memory stays bounded whatever the input's length, and `predict --data -` answers an
    endless standard input as it goes (a row waits for at most `rows - 1` after it)."""
    classifier = loaded(run_path, engine)
    spec = classifier_source_spec(classifier, format, columns)
    for chunk in read_chunks(data_path, spec, rows=rows, labels_required=False):
        pairs = [e.text_pair for e in chunk] if classifier.pairs else None
        yield prediction_rows(classifier.task, classifier.outputs([e.text for e in chunk], pairs))


def _outputs(
    classifier: Classifier, examples: list[Example], title: str, quiet: bool
) -> dict[str, np.ndarray]:
    pairs = [e.text_pair for e in examples] if classifier.pairs else None
    progress = Progress(title, -(-len(examples) // classifier.batch_size), quiet=quiet)
    outputs = classifier.outputs([e.text for e in examples], pairs, progress)
    progress.close()
    return outputs
