"""The Keras backend `evaluate` and `predict` run a run's model on (`--backend`), chosen once
(`inference_backend`): `check` refuses what it cannot run before anything loads, `classifier`
turns the run (or export, or ONNX folder) the engine chose into what `inference.run` takes.

TensorFlow runs any run or export, with either engine. JAX runs a run directory's checkpoint
on the JAX devices (`inference/jax_classifier.py`), so neither an export (a TensorFlow
SavedModel) nor the onnx engine (ONNX Runtime runs the model, no Keras backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from bertfit.config import BACKENDS, JAX_BACKEND, TENSORFLOW_BACKEND
from bertfit.errors import ConfigError
from bertfit.inference.texts import TextClassifier
from bertfit.storage import is_url


class InferenceBackend(Protocol):
    name: str

    def check(self, path: str | Path, engine: str) -> None:
        """Refuses (ConfigError) a run, export or engine this backend cannot run."""

    def classifier(self, path: str | Path) -> str | Path | TextClassifier:
        """What `inference.run`'s functions take for `path`: the path, or a classifier
        loaded already."""

    def run_classifier(self, path: str | Path) -> TextClassifier:
        """The run directory's classifier, loaded on this backend."""


class TensorFlowInference:
    """Keras on TensorFlow (or ONNX Runtime with `--engine onnx`): `inference.run` loads it."""

    name = TENSORFLOW_BACKEND

    def check(self, path: str | Path, engine: str) -> None:
        pass

    def classifier(self, path: str | Path) -> str | Path:
        return path

    def run_classifier(self, path: str | Path) -> TextClassifier:
        from bertfit.inference.predictor import Classifier

        return Classifier.from_run(path)


class JaxInference:
    """A run directory's model on Keras' JAX backend (`JaxClassifier`)."""

    name = JAX_BACKEND

    def check(self, path: str | Path, engine: str) -> None:
        if engine != "tensorflow":
            raise ConfigError(
                f"--backend jax runs the run's model with Keras on JAX; --engine {engine} runs "
                "an export in another runtime: leave out one of them."
            )
        if not is_url(path) and not (Path(path) / "config.yaml").is_file():  # a URL: when read
            raise ConfigError(
                f"--backend jax runs a run directory's checkpoint (bertfit train --output-dir); "
                f"{path} is not one. An export is a TensorFlow SavedModel: run it with "
                "--backend tensorflow (the default), or pass the run directory it was exported "
                "from."
            )

    def classifier(self, path: str | Path) -> TextClassifier:
        from bertfit.inference.jax_classifier import JaxClassifier

        return JaxClassifier(path)

    def run_classifier(self, path: str | Path) -> TextClassifier:
        return self.classifier(path)


INFERENCE_BACKENDS: dict[str, InferenceBackend] = {
    b.name: b for b in (TensorFlowInference(), JaxInference())
}


def inference_backend(name: str) -> InferenceBackend:
    """The backend `--backend` names."""
    try:
        return INFERENCE_BACKENDS[name]
    except KeyError:
        raise ConfigError(f"--backend {name!r}: expected one of {', '.join(BACKENDS)}.") from None
