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
    """One fold run and the rows it did not train on, in the order their predictions come."""

    run: str
    texts: list[str]
    pairs: list[str | None]  # None for a row without a second text


def predict_held_out(folds: list[HeldOut]) -> list[list[dict]]:
    """Each fold run's prediction rows (`prediction_rows`) of its held-out texts, from its
    final weights (those its held-out score is of); in a TensorFlow process when this one's
    Keras runs on another backend."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return [_predict(fold) for fold in folds]
    return _predict_in_tensorflow(folds)


def _predict(fold: HeldOut) -> list[dict]:
    from bertfit.inference.outputs import prediction_rows
    from bertfit.inference.predictor import load_classifier

    classifier = load_classifier(fold.run, which="latest")
    pairs = fold.pairs if classifier.pairs else None
    return prediction_rows(classifier.task, classifier.outputs(fold.texts, pairs))


def _predict_in_tensorflow(folds: list[HeldOut]) -> list[list[dict]]:
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
