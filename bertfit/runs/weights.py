"""A run's checkpoint weights, keyed by explicit variable names: the layout training saves and
everything that reads a run (evaluate, predict, export, serve) restores.

Keras 3 objects do not expose their layer lists to `tf.train.Checkpoint`'s object graph, so a
checkpoint of the model object silently misses most encoder weights. bertfit instead names
every variable itself: model weights by their canonical names, optimizer slots and the dropout
RNG states by position. The names are the checkpoint's format: a run saved by an older bertfit
restores only while they stay the same.

The files are TensorFlow's on every Keras backend: a JAX process writes and reads them through
`TensorFlowMirror` (tf.Variables copying its variables), so a run trained on JAX evaluates,
exports and serves in TensorFlow unchanged.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def _key(name: str) -> str:
    return name.replace("/", ".")


def model_variables(model) -> dict[str, object]:
    """Every weight of a `BertClassifier` under a stable name. A `ChunkedClassifier`'s are its
    classifier's, under the same names, and its window pooling's (the attention score's
    kernel as `window_pooling/score/kernel`; mean and max have none)."""
    classifier = getattr(model, "classifier", model)
    encoder = classifier.encoder
    if hasattr(encoder, "named_variables"):
        named = {f"encoder/{k}": v for k, v in encoder.named_variables().items()}
    else:  # an opaque wrapped SavedModel: its variable paths are stable
        named = {f"encoder/{v.path}": v for v in encoder.weights}
    named["head/kernel"] = classifier.head.kernel
    named["head/bias"] = classifier.head.bias
    score = getattr(getattr(model, "window_pooling", None), "score", None)
    if score is not None:
        named["window_pooling/score/kernel"] = score.kernel
    return named


def adapter_variables(model) -> dict[str, object]:
    """What a LoRA run trains, by `model_variables`' names: the adapters (`.../lora_a`,
    `.../lora_b`), the head and the window pooling's score; empty without LoRA. Together with
    the base checkpoint they are the whole model, in a small fraction of its size."""
    named = model_variables(model)
    if not any("/lora_" in name for name in named):
        return {}
    return {
        name: v for name, v in named.items() if "/lora_" in name or not name.startswith("encoder/")
    }


def rng_variables(model) -> list:
    """The state of every dropout seed generator, in the model's (deterministic) layer order."""
    return [v for v in model.variables if "seed_generator_state" in v.path]


class TensorFlowMirror:
    """tf.Variables that copy the variables of another Keras backend (JAX), so that
    `tf.train.Checkpoint` writes and reads the same files there: `push` copies the backend's
    values into the mirrors before a save, `pull` copies the mirrors back after a read. Each
    variable gets one mirror, however many checkpoints name it."""

    def __init__(self):
        self._pairs: dict[int, tuple[keras.Variable, tf.Variable]] = {}

    def of(self, variable: keras.Variable) -> tf.Variable:
        pair = self._pairs.get(id(variable))
        if pair is None:
            mirror = tf.Variable(_numpy(variable), trainable=False)
            pair = self._pairs[id(variable)] = (variable, mirror)
        return pair[1]

    def push(self) -> None:
        for variable, mirror in self._pairs.values():
            mirror.assign(_numpy(variable))

    def pull(self) -> None:
        for variable, mirror in self._pairs.values():
            variable.assign(mirror.numpy())


def _numpy(variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable.value))


def mirror_for_backend() -> TensorFlowMirror | None:
    """A `TensorFlowMirror` where Keras runs on another backend than TensorFlow, else None (a
    TensorFlow variable is checkpointed as it is)."""
    return None if keras.backend.backend() == "tensorflow" else TensorFlowMirror()


def _tf_variable(variable, mirror: TensorFlowMirror | None):
    if mirror is not None:
        return mirror.of(variable)
    return getattr(variable, "value", variable)


def make_checkpoint(
    model,
    optimizer=None,
    adapters_only: bool = False,
    mirror: TensorFlowMirror | None = None,
    **extra,
) -> tf.train.Checkpoint:
    """A checkpoint of the model's weights (and the optimizer's state, the RNG states and
    `extra` trackables when an optimizer is given: everything a resumed run needs);
    `adapters_only`: of a LoRA model's `adapter_variables` alone. On a backend other than
    TensorFlow it holds `mirror`'s copies of the variables (`mirror_for_backend`)."""
    named = adapter_variables(model) if adapters_only else model_variables(model)
    children = {_key("model/" + name): _tf_variable(v, mirror) for name, v in named.items()}
    if optimizer is not None:
        for i, variable in enumerate(optimizer.variables):
            children[_key(f"optimizer/{i}/{variable.name}")] = _tf_variable(variable, mirror)
        for i, variable in enumerate(rng_variables(model)):
            children[f"rng.{i}"] = _tf_variable(variable, mirror)
    return tf.train.Checkpoint(**children, **extra)


def _restore(model, path: str, adapters_only: bool = False) -> None:
    mirror = mirror_for_backend()
    status = make_checkpoint(model, adapters_only=adapters_only, mirror=mirror).read(path)
    status.assert_existing_objects_matched().expect_partial()
    if mirror is not None:
        mirror.pull()


def restore_model(model, path: str) -> None:
    """Loads every model weight from `path`; a missing weight is an error, not a silent skip."""
    _restore(model, path)


def restore_adapters(model, path: str) -> None:
    """Loads a LoRA run's adapters and head (`checkpoints/adapter`) into `model`, a classifier
    built on the run's base checkpoint with the run's `enable_lora`."""
    _restore(model, path, adapters_only=True)
