"""A Keras model inside a `tf.Module` that `tf.saved_model.save` writes for every loader.

A Keras 3 variable is a wrapper around a `tf.Variable`. When a SavedModel is written, each
Keras variable the object graph reaches is exported as two graph variables: a copy of the
`tf.Variable` it wraps, which the traced functions (the signatures) read, and a new
`tf.Variable` initialized from that copy, which the checkpoint's restore op fills
(`keras.src.backend.tensorflow.core.Variable._export_to_saved_model_graph`).
`tf.saved_model.load` rebuilds objects from the object graph and wires both to the one
restored variable, so the model runs there; TensorFlow's Session loader (`LoadSavedModel` in C++,
what `tensorflow_model_server` runs, and `tf.compat.v1.saved_model.loader.load`) runs the
restore op and then the signatures' graph, whose variables nothing filled: "Could not find
variable ...". Keras' own `ExportArchive` works around this by tracking the layer's variables
twice (each weight stored twice in `variables/`).

`hold_keras_model` instead keeps the model out of the object graph and tracks the `tf.Variable`s
themselves: one graph variable each, restored and read under the same name, stored once.
"""

from __future__ import annotations

import tensorflow as tf


def hold_keras_model(module: tf.Module, name: str, model) -> None:
    """Sets `module.<name> = model` without tracking it, and `module.<name>_variables` to the
    `tf.Variable`s behind every Keras variable of `model` (weights, and the seed generators'
    state that a training-mode call reads), tracked: what the module's traced functions read
    is then what its SavedModel restores (see the module docstring). `model` must be built:
    a variable it creates later is not tracked, and `tf.saved_model.save` refuses a function
    that reads an untracked resource."""
    object.__setattr__(module, name, model)  # AutoTrackable.__setattr__ would track it
    setattr(module, f"{name}_variables", [variable.value for variable in model.variables])
