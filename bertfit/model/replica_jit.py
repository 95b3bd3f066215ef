"""`ReplicaJitModel`: `compile(jit_compile=True)` + `fit` that works under MirroredStrategy.

Keras 3 (TensorFlow backend) XLA-compiles `strategy.run(train_step)` as one function. With several
replicas that function reaches every replica's variables from the first device, and XLA stops
with "Trying to access resource .../replica_1/... located in device CPU:1 from device CPU:0"
(TF's known XLA issue "tf.Variable on a different device"). Compiling only the per-replica
`train_step` does not help either: the optimizer's cross-replica update inside it touches all
replicas' variables. What works, and what bertfit's own trainer does: XLA-compile each
replica's forward and backward pass, then all-reduce and apply outside the compiled code.

This model does exactly that when `jit_compile=True` meets more than one replica; otherwise it
is Keras's own model, unchanged. On a TPU the strategy compiles the whole step itself.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras.src.losses import loss as keras_loss


class ReplicaJit:
    """The behaviour, as a mixin for `keras.Model` subclasses: `class M(ReplicaJit, keras.Model)`.

    `BertClassifier` uses the mixin rather than subclassing `ReplicaJitModel`: building a
    functional `ReplicaJitModel(inputs, outputs)` makes Keras rewrite that class's bases to
    `Functional` (keras.src.models.model.inject_functional_model_class), which would turn
    every subclass of it into a functional model too.
    """

    def _replica_jit(self) -> bool:
        # A `tf.distribute` matter: on another backend the model is Keras' own.
        if keras.backend.backend() != "tensorflow":
            return False
        return bool(self.jit_compile) and self.distribute_strategy.num_replicas_in_sync > 1

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        if not self._replica_jit():
            return super().make_train_function(force)
        self._replica_gradients = tf.function(self._gradients, jit_compile=True)
        return self._without_outer_jit(super().make_train_function, force)

    def make_test_function(self, force=False):
        if self.test_function is not None and not force:
            return self.test_function
        if not self._replica_jit():
            return super().make_test_function(force)
        self._replica_forward = tf.function(self._forward, jit_compile=True)
        return self._without_outer_jit(super().make_test_function, force)

    def _without_outer_jit(self, make, force):
        self._jit_compile = False  # strategy.run stays outside XLA; the replica parts are inside
        try:
            return make(force)
        finally:
            self._jit_compile = True

    def _forward(self, x, training):
        return self(x, training=training)

    def _gradients(self, x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            scaled = self.optimizer.scale_loss(loss) if self.optimizer is not None else loss
        return tape.gradient(scaled, self.trainable_weights), y_pred, loss

    def train_step(self, *args):
        if not self._replica_jit():
            return super().train_step(*args)  # JAX's Keras passes (state, data)
        (data,) = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        gradients, y_pred, loss = self._replica_gradients(x, y, sample_weight)
        self._loss_tracker.update_state(
            keras_loss.unscale_loss_for_distribution(loss), sample_weight=_batch_size(x)
        )
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights, strict=True))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def test_step(self, *args):
        if not self._replica_jit():
            return super().test_step(*args)  # JAX's Keras passes (state, data)
        (data,) = args
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = self._replica_forward(x, training=False)
        loss = self._compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
        )
        self._loss_tracker.update_state(
            keras_loss.unscale_loss_for_distribution(loss), sample_weight=_batch_size(x)
        )
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


def _batch_size(x):
    return tf.shape(next(t for t in tf.nest.flatten(x) if t is not None))[0]


@keras.saving.register_keras_serializable(package="bertfit")
class ReplicaJitModel(ReplicaJit, keras.Model):
    """A `keras.Model` whose `jit_compile=True` also works with several replicas.

    Use it as `keras.Model` itself: build a functional model with it, or subclass it.

    Examples:
    >>> inputs = keras.Input((4,))
    >>> model = ReplicaJitModel(inputs, keras.layers.Dense(2)(inputs))
    >>> model.compile(optimizer="adam", loss="mse", jit_compile=True)
    """
