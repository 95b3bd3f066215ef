"""`--remat`: each layer's activations recomputed in the backward pass (`model/remat.py`) give
the gradients the plain step gives, dropout included, inside an XLA-compiled step, on
TensorFlow (`tf.recompute_grad`) and on JAX (`jax.checkpoint`)."""

from __future__ import annotations

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.model.classifier import BertClassifier
from bertfit.model.remat import seed_states
from tests.jax_process import run_in_jax
from tests.tiny import TINY_CONFIG, tiny_encoder

# dropout on, so the recomputation has to replay the forward pass's masks
DROPOUT_CONFIG = dataclasses.replace(
    TINY_CONFIG, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2
)


def _batch(seq: int = 12):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, TINY_CONFIG.vocab_size, (3, seq)).astype("int32")
    mask = np.ones_like(ids)
    mask[0, seq // 2 :] = 0  # padding in one row
    return {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.constant(mask),
        "input_type_ids": tf.zeros_like(ids),
    }, tf.constant([0, 1, 1])


def _step(model):
    """The training step's shape: forward in training mode, loss, gradients, XLA-compiled."""

    def step(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            )
        return tape.gradient(loss, model.trainable_variables), loss

    return tf.function(step, jit_compile=True)


def _model(remat: bool) -> BertClassifier:
    keras.utils.set_random_seed(0)  # the same dropout seeds in both models
    encoder = tiny_encoder(DROPOUT_CONFIG)
    encoder.remat = remat
    return BertClassifier(encoder, 2, "cls", dropout=0.0)


def _gradients(remat: bool, steps: int = 2):
    model = _model(remat)
    step = _step(model)
    features, labels = _batch()
    results = [step(features, labels) for _ in range(steps)]  # the second: the next masks
    states = [state.numpy() for state in seed_states(model.encoder)]
    return model, step, results, states


@pytest.mark.slow  # two XLA compilations: ~35 s on a busy 2-core CPU
def test_remat_gradients_equal_the_plain_ones_with_dropout_under_xla():
    _, _, plain, plain_states = _gradients(remat=False)
    _, remat_step, remat, remat_states = _gradients(remat=True)
    for (plain_grads, plain_loss), (remat_grads, remat_loss) in zip(plain, remat, strict=True):
        assert float(plain_loss) == pytest.approx(float(remat_loss), rel=1e-6)
        assert len(plain_grads) == len(remat_grads)
        for p, r in zip(plain_grads, remat_grads, strict=True):
            np.testing.assert_allclose(
                tf.convert_to_tensor(r).numpy(), tf.convert_to_tensor(p).numpy(), atol=1e-5
            )
    # the random stream goes on as without remat: the next step draws the same masks
    assert len(remat_states) == 1 + 2 * 2  # the embeddings' dropout, two per layer
    for p, r in zip(plain_states, remat_states, strict=True):
        np.testing.assert_array_equal(p, r)
    assert remat_step.experimental_get_tracing_count() == 1  # compiled once for the shape


@pytest.mark.slow  # ~4 s of tracing on a busy 2-core CPU
def test_remat_recomputes_in_the_backward_pass():
    """The remat step's gradient graph runs each layer's forward ops a second time: more
    matrix products than the plain step's (the proof it recomputes, not keeps)."""

    def matmuls(remat: bool) -> int:
        step = _step(_model(remat))  # traced, not compiled
        graph = step.get_concrete_function(*_batch()).graph
        return sum(op.type in ("MatMul", "BatchMatMulV2") for op in graph.get_operations())

    assert matmuls(True) > matmuls(False)


@pytest.mark.slow  # writes three transformers models: ~10 s
@pytest.mark.parametrize("family", ["deberta-v2", "modernbert", "albert"])
def test_remat_gradients_of_every_layer_kind(family, tmp_path):
    """DeBERTa's layers take the relative table through `context` (its gradient must still
    reach the table), ModernBERT has its own layers, ALBERT one layer shared by all."""
    from bertfit.checkpoints.hf import read_hf
    from bertfit.checkpoints.load import build_encoder
    from tests.families import write_family_model

    write_family_model(family, tmp_path)
    encoder = build_encoder(read_hf(tmp_path))
    model = BertClassifier(encoder, 2, "mean", dropout=0.0)
    features, labels = _batch()
    features["input_word_ids"] = features["input_word_ids"] % 90 + 5

    def gradients(remat: bool):
        encoder.remat = remat
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            )
        return tape.gradient(loss, model.trainable_variables)

    plain, remat = gradients(False), gradients(True)
    for variable, p, r in zip(model.trainable_variables, plain, remat, strict=True):
        assert (p is None) == (r is None), variable.path
        if p is not None:
            np.testing.assert_allclose(
                tf.convert_to_tensor(r).numpy(),
                tf.convert_to_tensor(p).numpy(),
                atol=1e-5,
                err_msg=variable.path,
            )


@pytest.mark.slow  # a child process, four jitted steps: ~40 s on a busy 2-core CPU
def test_remat_on_jax_gives_the_plain_gradients_and_random_stream_with_one_checkpoint_a_layer():
    """BERT's layer, and DeBERTa's, whose relative-position table enters each layer as context
    (its gradient flows through the checkpoint), with dropout at 0.2, in a process where
    TensorFlow cannot be imported (`tests/model/jax_remat_child.py`)."""
    args = ["tests.without_tensorflow", "tests.model.jax_remat_child", "bert", "deberta-v3"]
    report = json.loads(run_in_jax(args).strip().splitlines()[-1])

    for family, seen in report.items():
        plain, remat = seen["losses"]
        assert plain == pytest.approx(remat, rel=1e-6), family
        assert plain[0] != plain[1], family  # the second step drew new dropout masks
        assert seen["gradients"] > 20 and seen["gradient_error"] < 1e-5, family
        # the next step's masks are the plain run's: the seed states agree to the bit
        assert seen["states"] > 2 * seen["layers"] and seen["same_states"], family
        assert seen["checkpoints"] == [0, seen["layers"]], family  # one per encoder layer
