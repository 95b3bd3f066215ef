"""One model on two backends: the same code and the same weights give the same numbers on Keras'
TensorFlow and JAX backends, for every family's encoder, the heads, their pooling and the
chunk aggregation.

This process runs TensorFlow (Keras' backend is chosen once per process); a second process with
`KERAS_BACKEND=jax`, where TensorFlow cannot be imported (`tests/without_tensorflow.py`), builds
the same models from the same configs, loads the weights this one saved (Keras' `.weights.h5`
and `.keras` files, which name weights by layer path, not by backend) and writes its outputs
and gradients back. The gradients compare TensorFlow's kernels with their gradients written out
(`model/tf_kernels.py`) against JAX differentiating the `keras.ops` formulas (`model/layers.py`).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from bertfit.config import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from bertfit.model.attention import FUSED
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.model.config import BertConfig
from bertfit.model.deberta import DebertaSettings
from bertfit.model.encoder import BertEncoder
from bertfit.model.eurobert import EuroBertSettings
from bertfit.model.gated_mlp import SPLIT
from bertfit.model.losses import outputs, per_example_loss
from bertfit.model.modernbert import ModernBertSettings
from bertfit.model.rotary_glu import RotaryGluSettings

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=24,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
NO_POSITIONS = dict(absolute_positions=False, type_vocab_size=0)

# Each family's switches (BERT's layer) or its own layers (DeBERTa, ModernBERT, MPNet, ...).
CONFIGS = {
    "bert": BertConfig(**TINY),
    "electra": BertConfig(**TINY, embedding_size=8, model_type="electra"),
    "albert": BertConfig(
        **TINY, embedding_size=8, share_layers=True, hidden_act="gelu_new", model_type="albert"
    ),
    "roberta": BertConfig(
        **TINY, position_offset=2, type_vocab_size=1, pad_token_id=1, model_type="roberta"
    ),
    "distilbert": BertConfig(
        **{**TINY, "type_vocab_size": 0}, has_pooler=False, model_type="distilbert"
    ),
    "deberta-v3": BertConfig(
        **TINY,
        **NO_POSITIONS,
        has_pooler=False,
        model_type="deberta-v2",
        variant=DebertaSettings(position_buckets=4, max_relative_positions=32).to_dict(),
    ),
    "deberta-v2-conv": BertConfig(
        **TINY,
        **NO_POSITIONS,
        model_type="deberta-v2",
        variant=DebertaSettings(
            position_buckets=0,
            max_relative_positions=6,
            share_att_key=False,
            conv_kernel_size=3,
            conv_act="gelu",
        ).to_dict(),
    ),
    "modernbert": BertConfig(
        **{**TINY, "num_hidden_layers": 3},
        **NO_POSITIONS,
        has_pooler=False,
        layer_norm_eps=1e-5,
        model_type="modernbert",
        variant=dataclasses.asdict(
            ModernBertSettings(local_attention=4, global_attn_every_n_layers=2)
        ),
    ),
    "mpnet": BertConfig(
        **{**TINY, "max_position_embeddings": 34},
        type_vocab_size=0,
        position_offset=2,
        pad_token_id=1,
        model_type="mpnet",
        variant={"relative_attention_num_buckets": 32},
    ),
    "gte": BertConfig(
        **TINY,
        absolute_positions=False,
        has_pooler=False,
        model_type="gte",
        variant=dataclasses.asdict(RotaryGluSettings(ntk_factor=2.0)),
    ),
    "nomic_bert": BertConfig(
        **{**TINY, "hidden_act": "silu"},
        absolute_positions=False,
        has_pooler=False,
        model_type="nomic_bert",
        variant=dataclasses.asdict(
            RotaryGluSettings(
                rope_theta=1000.0,
                rotary_fraction=0.5,
                qkv_bias=False,
                attention_output_bias=False,
                mlp_layout=SPLIT,
                mlp_output_bias=False,
            )
        ),
    ),
    "eurobert": BertConfig(
        **TINY,
        **NO_POSITIONS,
        has_pooler=False,
        hidden_act="silu",
        layer_norm_eps=1e-5,
        model_type="eurobert",
        variant=dataclasses.asdict(EuroBertSettings(num_key_value_heads=1, mlp_bias=True)),
    ),
}


# A family of each kind of attention, computed on JAX through Keras' fused op as well
# (`model/attention.py`): a padding mask alone (BERT), an additive bias (DeBERTa's
# disentangled scores; MPNet's relative buckets and ModernBERT's window are biases too),
# grouped key/value heads (EuroBERT). Each costs a JAX compile of ~3-5 s on 2 cores (quick XLA).
FUSED_FAMILIES = ("bert", "deberta-v3", "eurobert")


def build(family: str) -> ChunkedClassifier:
    """The family's encoder under a classifier (BERT's: mean pooling, the others' "cls") under
    a chunked classifier (attention over windows): every part in one model."""
    pooling = "mean" if family == "bert" else "cls"
    encoder = BertEncoder(CONFIGS[family])
    classifier = BertClassifier(encoder, 3, pooling=pooling, dropout=0.0, seed=0)
    model = ChunkedClassifier(classifier, chunk_pooling="attention")
    model.build()  # every weight exists already; saving and loading want it said
    return model


def windows(config: BertConfig) -> dict:
    """Two documents of up to three windows of 10 tokens: padded tokens, a padding window."""
    rng = np.random.default_rng(3)
    ids = rng.integers(5, config.vocab_size, (2, 3, 10)).astype("int32")
    lengths = np.array([[10, 7, 3], [4, 10, 0]])
    mask = (np.arange(10) < lengths[..., None]).astype("int32")
    types = np.zeros_like(ids)
    if config.type_vocab_size > 1:
        types[:, :, 5:] = 1
    return {
        "input_word_ids": np.where(mask == 1, ids, config.pad_token_id).astype("int32"),
        "input_mask": mask,
        "input_type_ids": types,
        "window_mask": (lengths > 0).astype("int32"),
    }


def flat(inputs: dict) -> dict:
    """The first document's windows as a batch of sequences, for the encoder alone."""
    return {k: v[0] for k, v in inputs.items() if k != "window_mask"}


def outputs_and_gradients(family: str, model: ChunkedClassifier) -> dict[str, np.ndarray]:
    """The model's logits, the encoder's sequence output, and the gradients of a sum of the
    logits' squares with respect to every trainable weight, on the current backend."""
    inputs = windows(CONFIGS[family])
    if keras.backend.backend() == "jax":
        logits, sequence, gradients = _on_jax(model, inputs)
    else:
        logits = model(inputs)
        sequence = model.encoder(flat(inputs))["sequence_output"]
        gradients = _gradients_on_tensorflow(model, inputs)
    results = {
        "logits": keras.ops.convert_to_numpy(logits),
        "sequence": keras.ops.convert_to_numpy(sequence),
    }
    for i, gradient in enumerate(gradients):
        results[f"gradient_{i}"] = np.asarray(keras.ops.convert_to_numpy(gradient))
    return results


def _on_jax(model, inputs):
    """The logits, the encoder's sequence output and the gradients, from one jitted function of
    the weights: eager JAX compiles every operation at each new shape (~1 min for the first
    family on 2 cores)."""
    import jax

    def weights(layer):
        return [v.value for v in layer.trainable_variables], [
            v.value for v in layer.non_trainable_variables
        ]

    trainable, frozen = weights(model)

    def logits(trainable, training):
        return model.stateless_call(trainable, frozen, inputs, training=training)[0]

    def loss(trainable):
        return keras.ops.sum(keras.ops.square(logits(trainable, training=True)))

    def sequence(encoder_weights):
        outputs, _ = model.encoder.stateless_call(*encoder_weights, flat(inputs))
        return outputs["sequence_output"]

    def everything(trainable, encoder_weights):
        return logits(trainable, False), sequence(encoder_weights), jax.grad(loss)(trainable)

    return jax.jit(everything)(trainable, weights(model.encoder))


def _gradients_on_tensorflow(model, inputs):
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(inputs, training=True)))
    variables = model.trainable_variables
    gradients = tape.gradient(loss, variables)
    # An unused weight (the pooler under mean pooling) has None here and zeros on JAX.
    return [
        tf.zeros(v.shape) if g is None else tf.convert_to_tensor(g)
        for v, g in zip(variables, gradients, strict=True)
    ]


def losses() -> dict[str, np.ndarray]:
    """Each task's per-example losses and outputs on fixed logits (large ones included)."""
    logits = np.array([[2.0, -1.0, 30.0], [-40.0, 0.5, 0.0], [0.0, 0.0, 0.0]], "float32")
    labels = {
        SINGLE_LABEL: np.array([2, 0, 1], "int32"),
        MULTI_LABEL: np.array([[1, 0, 1], [0, 0, 1], [1, 1, 0]], "float32"),
        REGRESSION: np.array([1.5, -2.0, 0.0], "float32"),
    }
    results = {}
    for kind, targets in labels.items():
        loss = per_example_loss(kind, keras.ops.convert_to_tensor(targets), logits)
        results[f"{kind}.loss"] = keras.ops.convert_to_numpy(loss)
        results[f"{kind}.outputs"] = keras.ops.convert_to_numpy(outputs(kind, logits))
    return results


def write_outputs(directory: str) -> None:
    """Loads each family's weights from `directory` into models built on this process's
    backend and writes `<family>.<backend>.npz` there (the subprocess's entry point)."""
    backend = keras.backend.backend()
    for family in CONFIGS:
        model = build(family)
        model.load_weights(os.path.join(directory, f"{family}.weights.h5"))
        results = outputs_and_gradients(family, model)
        np.savez(os.path.join(directory, f"{family}.{backend}.npz"), **results)
        if backend == "jax" and family in FUSED_FAMILIES:
            model.encoder.use_attention(FUSED)
            results = outputs_and_gradients(family, model)
            np.savez(os.path.join(directory, f"{family}.{backend}.fused.npz"), **results)
    saved = keras.saving.load_model(os.path.join(directory, "bert.keras"))
    logits = keras.ops.convert_to_numpy(saved(windows(CONFIGS["bert"])))
    np.save(os.path.join(directory, f"bert.keras.{backend}.npy"), logits)
    np.savez(os.path.join(directory, f"losses.{backend}.npz"), **losses())


def _random_weights(model: keras.Model, seed: int) -> None:
    """Every weight random (biases, norms, the window score too): a strict comparison."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if variable.trainable:
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))


@pytest.fixture(scope="module")
def both_backends(tmp_path_factory):
    """(TensorFlow's results, JAX's results) per family, from the same saved weights."""
    assert keras.backend.backend() == "tensorflow"
    directory = tmp_path_factory.mktemp("backends")
    tensorflow = {}
    for seed, family in enumerate(CONFIGS):
        model = build(family)
        _random_weights(model, seed)
        model.save_weights(directory / f"{family}.weights.h5")
        tensorflow[family] = outputs_and_gradients(family, model)
        if family == "bert":
            model.save(directory / "bert.keras")
            tensorflow["bert.keras"] = tensorflow[family]["logits"]
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    # TensorFlow cannot be imported there: the JAX model needs none of it
    script = (
        "from tests.without_tensorflow import block_tensorflow; block_tensorflow(); "
        f"from {__name__} import write_outputs; write_outputs({str(directory)!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    jax = {family: dict(np.load(directory / f"{family}.jax.npz")) for family in CONFIGS}
    jax["bert.keras"] = np.load(directory / "bert.keras.jax.npy")
    for family in FUSED_FAMILIES:
        jax[f"{family}.fused"] = dict(np.load(directory / f"{family}.jax.fused.npz"))
    tensorflow["losses"], jax["losses"] = losses(), dict(np.load(directory / "losses.jax.npz"))
    return tensorflow, jax


@pytest.mark.slow
@pytest.mark.parametrize("family", list(CONFIGS))
def test_jax_outputs_equal_tensorflow_outputs_from_the_same_weights(both_backends, family):
    tensorflow, jax = both_backends
    for name in ("logits", "sequence"):
        np.testing.assert_allclose(jax[family][name], tensorflow[family][name], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(CONFIGS))
def test_jax_gradients_equal_tensorflows_written_out_gradients(both_backends, family):
    tensorflow, jax = both_backends
    names = [k for k in tensorflow[family] if k.startswith("gradient_")]
    assert names and sorted(names) == sorted(k for k in jax[family] if k.startswith("gradient_"))
    for name in names:
        expected = tensorflow[family][name]
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(jax[family][name], expected, atol=1e-5 * scale, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_fused_attention_gives_the_written_out_numbers_and_gradients_on_jax(both_backends, family):
    """On every token: a padding token whose every key is masked (ModernBERT's window over
    padding alone) gets a uniform average of other keys from either, not the same one."""
    _, jax = both_backends
    fused, explicit = jax[f"{family}.fused"], jax[family]
    assert sorted(fused) == sorted(explicit)
    tokens = flat(windows(CONFIGS[family]))["input_mask"][..., None]
    for name, expected in explicit.items():
        if name == "sequence":
            fused[name], expected = fused[name] * tokens, expected * tokens
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(fused[name], expected, atol=1e-5 * scale, err_msg=name)


@pytest.mark.slow
def test_a_keras_file_saved_on_tensorflow_loads_and_predicts_on_jax(both_backends):
    tensorflow, jax = both_backends
    np.testing.assert_allclose(jax["bert.keras"], tensorflow["bert.keras"], atol=1e-5)


@pytest.mark.slow
def test_every_tasks_loss_and_outputs_are_the_same_on_jax(both_backends):
    tensorflow, jax = both_backends
    assert sorted(jax["losses"]) == sorted(tensorflow["losses"])
    for name, expected in tensorflow["losses"].items():
        np.testing.assert_allclose(jax["losses"][name], expected, atol=1e-6, err_msg=name)


def test_the_losses_are_tensorflows_kernels_on_tensorflow():
    """keras.ops' losses run TensorFlow's own fused kernels there: the numbers bertfit's
    TensorFlow training has always had, to the bit."""
    import tensorflow as tf

    computed = losses()
    logits = tf.constant([[2.0, -1.0, 30.0], [-40.0, 0.5, 0.0], [0.0, 0.0, 0.0]])
    multi = tf.constant([[1, 0, 1], [0, 0, 1], [1, 1, 0]], tf.float32)
    expected = {
        f"{SINGLE_LABEL}.loss": tf.nn.sparse_softmax_cross_entropy_with_logits([2, 0, 1], logits),
        f"{MULTI_LABEL}.loss": tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(multi, logits), axis=-1
        ),
        f"{REGRESSION}.loss": tf.square(logits[:, 0] - [1.5, -2.0, 0.0]),
        f"{SINGLE_LABEL}.outputs": tf.nn.softmax(logits),
        f"{MULTI_LABEL}.outputs": tf.sigmoid(logits),
    }
    for name, value in expected.items():
        np.testing.assert_array_equal(computed[name], value.numpy(), err_msg=name)
