"""The predictions of k-fold runs on the rows each held out, for a sweep's out-of-fold file.

A run predicts through its TensorFlow graph (the in-graph tokenizer, `load_classifier`), which
Keras builds only on its TensorFlow backend; a sweep whose Keras runs on JAX (`bertfit tune
--backend jax`) therefore predicts in a TensorFlow process of its own: this module, run as
`python -m bertfit.sweeps.fold_predictions REQUESTS.json OUT.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bertfit.atomic import write_text_atomic


@dataclass(frozen=True)
class HeldOut:
    """One fold run and the file of the rows it did not train on (in the run's columns)."""

    run: str
    file: str


def predict_held_out(folds: list[HeldOut]) -> list[dict]:
    """Each fold run's `predictions` (`prediction_rows`, in its held-out file's order) and
    `metrics` (`task_metrics`: the fold's score) of its held-out rows, from its final weights
    (not its best checkpoint: a validation slice of a few rows ties early epochs; where early
    stopping ended the run, that slice decided it, never these rows); in a TensorFlow process
    when this one's Keras runs on another backend."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return [_predict(fold) for fold in folds]
    return _predict_in_tensorflow(folds)


def _predict(fold: HeldOut) -> dict:
    from bertfit.data.sources import read_examples
    from bertfit.inference.outputs import metric_inputs, prediction_rows
    from bertfit.inference.predictor import load_classifier
    from bertfit.inference.run import classifier_source_spec
    from bertfit.runs.metrics import task_metrics

    classifier = load_classifier(fold.run, which="latest")
    task = classifier.task
    examples = read_examples(fold.file, classifier_source_spec(classifier, None, None))
    pairs = [e.text_pair for e in examples] if classifier.pairs else None
    outputs = classifier.outputs([e.text for e in examples], pairs)
    targets = task.targets(examples, fold.file)
    return {
        "predictions": prediction_rows(task, outputs),
        "metrics": task_metrics(task, targets, metric_inputs(task, outputs)),
    }


def _predict_in_tensorflow(folds: list[HeldOut]) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bertfit-fold-predictions-") as folder:
        requests, out = Path(folder, "requests.json"), Path(folder, "predictions.json")
        requests.write_text(json.dumps([asdict(f) for f in folds]), encoding="utf-8")
        env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(requests), str(out)],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:  # not the user's mistake: the runs finished and load here
            raise RuntimeError(
                f"predicting the held-out rows in TensorFlow failed:\n{done.stderr[-3000:]}"
            )
        return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str]) -> None:
    from bertfit.tf_startup import start_tensorflow

    requests, out = argv
    start_tensorflow(for_inference=True)
    folds = [HeldOut(**f) for f in json.loads(Path(requests).read_text(encoding="utf-8"))]
    write_text_atomic(Path(out), json.dumps(predict_held_out(folds), ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
