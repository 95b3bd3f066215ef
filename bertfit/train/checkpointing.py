"""Checkpoints keyed by explicit variable names.

Keras 3 objects do not expose their layer lists to `tf.train.Checkpoint`'s object graph, so a
checkpoint of the model object silently misses most encoder weights. bertfit instead names
every variable itself: model weights by their canonical names, optimizer slots by position.
"""

from __future__ import annotations

import tensorflow as tf


def _key(name: str) -> str:
    return name.replace("/", ".")


def model_variables(model) -> dict[str, object]:
    """Every weight of a `BertClassifier` under a stable name."""
    encoder = model.encoder
    if hasattr(encoder, "named_variables"):
        named = {f"encoder/{k}": v for k, v in encoder.named_variables().items()}
    else:  # an opaque wrapped SavedModel: its variable paths are stable
        named = {f"encoder/{v.path}": v for v in encoder.weights}
    named["head/kernel"] = model.head.kernel
    named["head/bias"] = model.head.bias
    return named


def _tf_variable(variable):
    return getattr(variable, "value", variable)


def make_checkpoint(model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """A checkpoint of the model's weights (and the optimizer's state and `extra` variables)."""
    children = {_key("model/" + name): _tf_variable(v) for name, v in model_variables(model).items()}
    if optimizer is not None:
        for i, variable in enumerate(optimizer.variables):
            children[_key(f"optimizer/{i}/{variable.name}")] = _tf_variable(variable)
    return tf.train.Checkpoint(**children, **extra)


def restore_model(model, path: str) -> None:
    """Loads every model weight from `path`; a missing weight is an error, not a silent skip."""
    status = make_checkpoint(model).read(path)
    status.assert_existing_objects_matched().expect_partial()
