import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.config import TrainConfig
from bertfit.training.fused_adamw import FusedAdamW
from bertfit.training.optimizer import make_optimizer


def _model(seed: int = 0) -> keras.Model:
    """Weights AdamW decays (kernels) and weights it does not (a bias, a LayerNorm)."""
    model = keras.Sequential([keras.layers.Dense(8), keras.layers.LayerNormalization()])
    model.build((None, 4))
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.5, variable.shape).astype("float32"))
    return model


def _gradients(model: keras.Model, step: int) -> list[tf.Tensor]:
    rng = np.random.default_rng(100 + step)
    return [tf.constant(rng.normal(0, 1, v.shape).astype("float32")) for v in model.weights]


def _state(model: keras.Model, optimizer) -> list[np.ndarray]:
    return [v.numpy() for v in model.weights] + [v.numpy() for v in optimizer.variables]


def test_the_fused_update_is_keras_adamw_with_its_weight_decay_and_schedule():
    config = TrainConfig(learning_rate=0.05, warmup_ratio=0.25, weight_decay=0.1)
    runs = {}
    for name in ("keras", "fused"):
        model = _model()
        optimizer = make_optimizer(config, total_steps=4)
        optimizer.build(model.weights)
        if name == "keras":
            update = tf.function(lambda g, o=optimizer, m=model: o.apply(g, m.weights))
        else:
            update = tf.function(FusedAdamW(optimizer, model.weights).apply)
        for step in range(4):  # warmup, the peak, the decay to 0
            update(_gradients(model, step))
        assert int(optimizer.iterations.numpy()) == 4
        runs[name] = _state(model, optimizer)
    # The kernel forms 1 - β2 in float32 (0.0010000467, Keras: 0.001): v differs by ~5e-5
    # relative, the weights by ~1e-6 here. A step of weight decay alone is 2.5e-3.
    for keras_value, fused_value in zip(runs["keras"], runs["fused"], strict=True):
        np.testing.assert_allclose(fused_value, keras_value, rtol=1e-4, atol=2e-6)
    assert not np.allclose(runs["fused"][0], _model().weights[0].numpy())  # it trained


def test_mirrored_variables_are_left_to_keras():
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = _model()
        optimizer = make_optimizer(TrainConfig(), total_steps=4)
        optimizer.build(model.weights)
    assert not FusedAdamW.applies_to(model.weights)
    with pytest.raises(ValueError, match="one device"):
        FusedAdamW(optimizer, model.weights)
