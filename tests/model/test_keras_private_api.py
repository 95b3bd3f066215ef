"""Keras' private names that bertfit relies on, all in one place: a Keras release that moves or
renames one fails here, with the name and the bertfit code that needs it, rather than deep
inside a training run. pyproject pins Keras to the minor version tested (issue 32, item 10);
raise the pin only with this test passing."""

from __future__ import annotations

import importlib

import keras
import numpy as np
import tensorflow as tf


def _module_function():
    return importlib.import_module("keras.src.losses.loss").unscale_loss_for_distribution


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    return model


def _mean_squared_error_of_zeros_to_ones(model) -> float:
    loss = model._compute_loss(
        x=np.zeros((1, 2)),
        y=np.ones((1, 1)),
        y_pred=np.zeros((1, 1)),
        sample_weight=None,
        training=False,
    )
    return float(loss)


def _jit_compile_is_the_flag(model) -> bool:
    model._jit_compile = False
    off = model.jit_compile is False
    model._jit_compile = True
    return off and model.jit_compile is True


def _optimizer_slots():
    variables = [keras.Variable(np.ones(3, "float32")), keras.Variable(np.ones(2, "float32"))]
    optimizer = keras.optimizers.AdamW(weight_decay=0.01)
    optimizer.build(variables)
    index = [optimizer._get_variable_index(v) for v in variables]
    shapes = [tuple(optimizer._momentums[i].shape) for i in index]
    shapes += [tuple(optimizer._velocities[i].shape) for i in index]
    decays = [optimizer._use_weight_decay(v) for v in variables]
    return shapes == [(3,), (2,), (3,), (2,)] and decays == [True, True]


def _stateless_scope_records_updates() -> bool:
    """The current scope, and an update recorded in it that a read inside it sees."""
    stateless_scope = importlib.import_module("keras.src.backend.common.stateless_scope")
    variable = keras.Variable(np.zeros(2, "float32"))
    with keras.StatelessScope([(variable, np.ones(2, "float32"))]) as scope:
        current = stateless_scope.get_stateless_scope() is scope
        scope.add_update((variable, np.full(2, 2.0, "float32")))
        read = keras.ops.convert_to_numpy(variable.value).tolist()
        recorded = keras.ops.convert_to_numpy(scope.get_current_value(variable)).tolist()
    outside = stateless_scope.get_stateless_scope() is None
    return current and outside and read == recorded == [2.0, 2.0]


def _variable_backed_by_a_tf_variable() -> bool:
    wrapped = keras.Variable(np.zeros(2, "float32"))
    variable = tf.Variable(np.ones(2, "float32"))
    wrapped._value = variable
    return wrapped.value is variable and wrapped.numpy().tolist() == [1.0, 1.0]


def _dense_lora_internals() -> bool:
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    kernel = layer.kernel
    layer.enable_lora(1)
    adapters_tracked = any(v is layer.lora_kernel_a for v in layer._trainable_variables)
    layer._tracker.unlock()
    layer._tracker.lock()
    return layer._kernel is kernel and not kernel.trainable and adapters_tracked


# (private name, the bertfit code that uses it, a check that is True while it works as used)
PRIVATE_NAMES = [
    (
        "keras.src.losses.loss.unscale_loss_for_distribution",
        "bertfit/model/replica_jit.py (ReplicaJit.train_step/test_step)",
        lambda: callable(_module_function()),
    ),
    (
        "keras.Model._compute_loss(x=, y=, y_pred=, sample_weight=, training=)",
        "bertfit/model/replica_jit.py (ReplicaJit._gradients, test_step)",
        lambda: _mean_squared_error_of_zeros_to_ones(_model()) == 1.0,
    ),
    (
        "keras.Model._loss_tracker (a Mean metric)",
        "bertfit/model/replica_jit.py (ReplicaJit.train_step/test_step)",
        lambda: hasattr(_model()._loss_tracker, "update_state"),
    ),
    (
        "keras.Model._jit_compile (what the jit_compile property reads)",
        "bertfit/model/replica_jit.py (ReplicaJit._without_outer_jit)",
        lambda: _jit_compile_is_the_flag(_model()),
    ),
    (
        "keras.layers.Layer._flatten_layers(include_self=False)",
        "bertfit/model/encoder.py (BertEncoder._start_at_zero)",
        lambda: any(
            isinstance(layer, keras.layers.Dense)
            for layer in _model()._flatten_layers(include_self=False)
        ),
    ),
    (
        "keras.layers.Dense._kernel, ._tracker, ._trainable_variables (with enable_lora)",
        "bertfit/model/lora.py (adapted_layers, merge_lora), bertfit/model/blocks.py",
        _dense_lora_internals,
    ),
    (
        "keras.optimizers.AdamW._get_variable_index, ._momentums, ._velocities, ._use_weight_decay",
        "bertfit/training/fused_adamw.py (FusedAdamW.__init__)",
        _optimizer_slots,
    ),
    (
        "keras.src.backend.common.stateless_scope.get_stateless_scope, "
        "StatelessScope.add_update/get_current_value",
        "bertfit/model/jax_remat.py (recompute_layer)",
        _stateless_scope_records_updates,
    ),
    (
        "keras.Variable._value (the backing tf.Variable, read by .value)",
        "bertfit/checkpoints/savedmodel.py (_adopt)",
        _variable_backed_by_a_tf_variable,
    ),
]


def test_the_private_keras_names_bertfit_uses_still_work():
    broken = []
    for name, user, works in PRIVATE_NAMES:
        try:
            ok = works()
        except Exception as e:  # a moved name raises: AttributeError, ImportError, TypeError
            ok, why = False, f"{type(e).__name__}: {e}"
        else:
            why = "behaves differently"
        if not ok:
            broken.append(f"{name} ({why}), used by {user}")
    assert not broken, (
        f"Keras {keras.__version__} moved private names bertfit uses; adapt the code named "
        "and the keras pin in pyproject.toml:\n  " + "\n  ".join(broken)
    )
