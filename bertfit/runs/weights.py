"""A run's checkpoint weights, keyed by explicit variable names: the layout training saves and
everything that reads a run (evaluate, predict, export, serve) restores.

Keras 3 objects do not expose their layer lists to `tf.train.Checkpoint`'s object graph, so a
checkpoint of the model object silently misses most encoder weights. bertfit instead names
every variable itself: model weights by their canonical names, optimizer slots and the dropout
RNG states by position. The names are the checkpoint's format: a run saved by an older bertfit
restores only while they stay the same.
"""

from __future__ import annotations

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


def rng_variables(model) -> list:
    """The state of every dropout seed generator, in the model's (deterministic) layer order."""
    return [v for v in model.variables if "seed_generator_state" in v.path]


def _tf_variable(variable):
    return getattr(variable, "value", variable)


def make_checkpoint(model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """A checkpoint of the model's weights (and the optimizer's state, the RNG states and
    `extra` trackables when an optimizer is given: everything a resumed run needs)."""
    children = {
        _key("model/" + name): _tf_variable(v) for name, v in model_variables(model).items()
    }
    if optimizer is not None:
        for i, variable in enumerate(optimizer.variables):
            children[_key(f"optimizer/{i}/{variable.name}")] = _tf_variable(variable)
        for i, variable in enumerate(rng_variables(model)):
            children[f"rng.{i}"] = _tf_variable(variable)
    return tf.train.Checkpoint(**children, **extra)


def restore_model(model, path: str) -> None:
    """Loads every model weight from `path`; a missing weight is an error, not a silent skip."""
    status = make_checkpoint(model).read(path)
    status.assert_existing_objects_matched().expect_partial()
