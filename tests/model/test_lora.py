"""LoRA on bertfit's encoders (`bertfit.model.lora`): only the adapters and the head train, the
base stays bitwise as loaded, and merging the adapters changes no output."""

from __future__ import annotations

import dataclasses
import gc

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import ConfigError
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from bertfit.model.int8 import dequantized_kernel, is_int8, quantize_base
from bertfit.model.lora import (
    adapted_layers,
    enable_lora,
    lora_call,
    lora_parameters,
    merge_lora,
)
from tests.families import FAMILIES, write_family_model
from tests.tiny import TINY_CONFIG, tiny_encoder, tiny_inputs


def _classifier(config=TINY_CONFIG) -> BertClassifier:
    return BertClassifier(tiny_encoder(config), num_classes=3, dropout=0.0, seed=0)


def _train(model, steps: int = 3) -> None:
    """A few SGD steps on random labels, through the trainable variables only."""
    inputs, labels = tiny_inputs(batch=4, seq=8), tf.constant([0, 1, 2, 1])
    optimizer = keras.optimizers.SGD(0.5)
    optimizer.build(model.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))

    for _ in range(steps):
        step()


@pytest.mark.slow  # about 4 s: traces a training step
def test_only_adapters_and_head_train_and_the_base_stays_bitwise_the_same():
    model = _classifier()
    layers = enable_lora(model, rank=2, alpha=4.0, targets=["auto"], seed=0)
    assert sorted(layers) == [
        f"layer_{i}/attention/{n}" for i in (0, 1) for n in ("query", "value")
    ]
    trainable = sorted(v.path for v in model.trainable_variables)
    assert all("lora_kernel" in p or p.startswith("classifier/") for p in trainable)
    assert len(trainable) == 4 * 2 + 2  # A and B of 4 layers, the head's kernel and bias
    assert lora_parameters(model) == 4 * (32 * 2 + 2 * 32)
    base = {v.path: v.numpy().copy() for v in model.encoder.weights if "lora" not in v.path}
    head = model.head.kernel.numpy().copy()

    _train(model)

    for v in model.encoder.weights:
        if "lora" not in v.path:
            np.testing.assert_array_equal(v.numpy(), base[v.path], err_msg=v.path)
    assert not np.array_equal(model.head.kernel.numpy(), head)
    assert all(np.abs(layer.lora_kernel_b.numpy()).max() > 0 for layer in layers.values())


@pytest.mark.slow  # about 10 s: traces a training step of 12 adapted layers
def test_merged_model_gives_the_unmerged_outputs_and_holds_no_adapter():
    model = _classifier()
    enable_lora(model, rank=4, alpha=8.0, targets=["all"], seed=1)
    _train(model)
    inputs = tiny_inputs(batch=3, seq=8, seed=5)
    unmerged = model(inputs).numpy()

    assert merge_lora(model) == 2 * 6  # query, key, value, attention output, intermediate, output
    merged = model(inputs).numpy()

    np.testing.assert_allclose(merged, unmerged, atol=1e-5)
    assert not any("lora" in v.path for v in model.weights)
    assert lora_parameters(model) == 0
    assert all(v.trainable for v in model.head.weights)


@pytest.mark.slow  # about 3 s: two forward and backward passes of 12 adapted layers
def test_the_factored_call_gives_keras_merged_kernel_outputs_and_adapter_gradients():
    """bertfit's x W + s (x A) B against Keras' own `enable_lora` call, x (W + s A B): the same
    weights give the same logits and the same gradients of A, B and the head."""
    model = _classifier()
    layers = enable_lora(model, rank=4, alpha=8.0, targets=["all"], seed=1)
    rng = np.random.default_rng(0)
    for layer in layers.values():  # B nonzero: A's gradient is not zero
        layer.lora_kernel_b.assign(rng.normal(0, 0.05, layer.lora_kernel_b.shape))
    inputs, labels = tiny_inputs(batch=4, seq=8), tf.constant([0, 1, 2, 1])

    def logits_and_gradients():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return [logits, *tape.gradient(loss, model.trainable_variables)]

    assert all(layer.call.__func__ is lora_call for layer in layers.values())
    factored = logits_and_gradients()
    for layer in layers.values():  # Keras' `Dense.call`: x @ layer.kernel, W + s A B merged
        del layer.__dict__["call"]
    merged = logits_and_gradients()

    assert len(factored) == 1 + 2 * len(layers) + 2  # logits, every A and B, the head's two
    assert all(np.abs(g).max() > 0 for g in factored[1:])
    for got, want in zip(factored, merged, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_auto_targets_are_the_familys_attention_query_and_value():
    modern = dataclasses.replace(
        TINY_CONFIG,
        model_type="modernbert",
        variant={"global_attn_every_n_layers": 1, "local_attention": 8},
    )
    model = BertClassifier(tiny_encoder(modern), num_classes=2)
    assert sorted(enable_lora(model, 2, None, ["auto"])) == [
        "layer_0/attention/qkv",
        "layer_1/attention/qkv",
    ]


def test_adapters_start_as_peft_s_a_uniform_within_one_over_root_fan_in_and_b_zero():
    """PEFT's `kaiming_uniform_(a=sqrt(5))`, not Keras' He-uniform (2.4 times wider): the update
    A @ B scales with A, so PEFT's learning rates mean the same here."""
    layers = enable_lora(_classifier(), rank=8, alpha=16.0, targets=["all"], seed=0)
    for name, layer in layers.items():
        a, b = layer.lora_kernel_a.numpy(), layer.lora_kernel_b.numpy()
        bound = 1 / np.sqrt(a.shape[0])  # fan-in: the layer's input width
        assert np.abs(a).max() <= bound, name
        assert np.abs(a).max() > 0.9 * bound, name  # He-uniform's would pass the bound above
        np.testing.assert_allclose(a.std(), bound / np.sqrt(3), rtol=0.25, err_msg=name)
        assert not b.any(), name


def test_a_target_naming_no_layer_lists_the_layers_there_are():
    with pytest.raises(ConfigError, match=r"--lora-targets querry.*query, value"):
        enable_lora(_classifier(), 2, None, ["querry"])


def test_a_rank_not_below_both_sides_of_an_adapted_kernel_is_refused_before_any_adapter():
    """The tiny encoder's query and value kernels are [32, 32]: adapters of rank 32 would
    hold more weights than the kernel (2 x 32 x 32) and change it no more freely."""
    model = _classifier()
    with pytest.raises(ConfigError, match=r"--lora-rank 32: layer_0/attention/\w+'s kernel is "):
        enable_lora(model, 32, None, ["auto"])
    assert lora_parameters(model) == 0  # refused before the first layer was adapted
    assert len(enable_lora(model, 31, None, ["auto"])) == 4


@pytest.mark.slow  # about 4 s: traces a training step
def test_a_bfloat16_base_keeps_float32_adapters_and_head_and_merges_within_its_rounding():
    """The merged kernel is W + s A B rounded once to bfloat16, which the factored step
    (`lora_call`: x W + s (x A) B) never computes: the two differ by bfloat16's rounding
    (2**-8 of a value, ~1e-3 on these logits), not by float32's as on a float32 base."""
    encoder = BertEncoder(TINY_CONFIG, dtype="bfloat16")  # --base-precision bf16
    for variable, value in zip(encoder.weights, tiny_encoder().weights, strict=True):
        variable.assign(value.numpy())
    model = BertClassifier(encoder, num_classes=3, dropout=0.0, seed=0)
    enable_lora(model, rank=2, alpha=4.0, targets=["auto"], seed=0)
    assert {v.dtype for v in model.encoder.weights if not v.trainable} == {"bfloat16"}
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    _train(model)
    inputs = tiny_inputs(batch=3, seq=8, seed=5)
    unmerged = model(inputs).numpy()
    merge_lora(model)
    bfloat16_step = 2**-8 * np.abs(unmerged).max()
    np.testing.assert_allclose(model(inputs).numpy(), unmerged, rtol=0, atol=bfloat16_step)


@pytest.mark.slow  # writes each family's tiny model with transformers: about 3 s a family
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_only_its_adapters_and_head_and_merges(family, tmp_path):
    pytest.importorskip("torch")
    write_family_model(family, tmp_path)
    encoder = build_encoder(read_hf(tmp_path))
    model = BertClassifier(encoder, num_classes=2, pooling="mean", dropout=0.0, seed=0)
    layers = enable_lora(model, rank=2, alpha=None, targets=["auto"], seed=0)
    assert layers and all(
        name.rsplit("/", 1)[-1] in ("query", "value", "qkv") for name in layers
    ), sorted(layers)
    inputs = tiny_inputs(batch=2, seq=8)
    inputs["input_word_ids"] = inputs["input_word_ids"] % encoder.config.vocab_size
    inputs["input_type_ids"] = tf.zeros_like(inputs["input_type_ids"])  # RoBERTa has one type
    for layer in layers.values():  # as after training: B moved away from zero
        layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.01, "float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(inputs) ** 2)
    gradients = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in gradients)
    assert len(model.trainable_variables) == 2 * len(layers) + 2
    unmerged = model(inputs).numpy()
    merge_lora(model)
    bfloat16_step = 2**-8 * np.abs(unmerged).max()
    np.testing.assert_allclose(model(inputs).numpy(), unmerged, rtol=0, atol=bfloat16_step)


def _int8_classifier() -> BertClassifier:
    """The tiny classifier with an int8 base (`--base-precision int8`: all 12 kernels of its
    layers) and rank-2 adapters on query and value, trained a few steps."""
    model = _classifier()
    assert quantize_base(adapted_layers(model).values()) == 2 * 6
    enable_lora(model, rank=2, alpha=4.0, targets=["auto"], seed=0)
    _train(model)
    return model


@pytest.mark.slow  # about 5 s: traces a training step
def test_an_int8_base_trains_float32_adapters_and_merges_into_a_float32_model():
    reference = _classifier()  # the same seeds: the float32 base the int8 one rounds
    model = _int8_classifier()
    assert [layer._kernel.dtype for layer in adapted_layers(model).values()] == ["int8"] * 12
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    query = adapted_layers(model)["layer_0/attention/query"]
    base = adapted_layers(reference)["layer_0/attention/query"].kernel.numpy()
    rounded = dequantized_kernel(query).numpy()  # within half a step of its column's scale
    assert np.all(np.abs(rounded - base) <= 0.5 / query.kernel_scale.numpy() + 1e-7)

    inputs = tiny_inputs(batch=3, seq=8, seed=5)
    unmerged = model(inputs).numpy()
    merge_lora(model)

    assert {v.dtype for v in model.weights} == {"float32"}
    assert not any(is_int8(layer) for layer in adapted_layers(model).values())
    assert not any("lora" in v.path or "scale" in v.path for v in model.weights)
    # Float rounding only (~1e-8 here): the activations are not quantized (`model/int8.py`).
    np.testing.assert_allclose(model(inputs).numpy(), unmerged, atol=1e-6)


@pytest.mark.slow  # about 4 s: two models' gradients
def test_an_int8_base_passes_the_gradients_of_its_dequantized_float32_base():
    model, reference = _classifier(), _classifier()
    quantize_base(adapted_layers(model).values())
    for m in (model, reference):  # the adapters' gradients pass through the int8 key, FFN
        enable_lora(m, rank=2, alpha=4.0, targets=["auto"], seed=0)
    int8_layers, float_layers = adapted_layers(model), adapted_layers(reference)
    for name, layer in int8_layers.items():  # the same weights, the base stored two ways
        float_layers[name]._kernel.assign(dequantized_kernel(layer))
        if layer.lora_enabled:  # B nonzero: the adapters' own gradients reach A
            layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.05, "float32"))
            float_layers[name].lora_kernel_b.assign(layer.lora_kernel_b)
    inputs, labels = tiny_inputs(batch=4, seq=8), tf.constant([0, 1, 2, 1])

    @tf.function(jit_compile=True)  # as the training step: XLA-compiled
    def gradients(m):
        with tf.GradientTape() as tape:
            logits = m(inputs, training=True)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return tape.gradient(loss, m.trainable_variables)

    for got, want in zip(gradients(model), gradients(reference), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # about 5 s: a training step's gradients, eagerly
def test_an_int8_base_under_mixed_bfloat16_computes_and_passes_gradients_in_bfloat16():
    """`--base-precision int8 --precision mixed_bf16`: an int8 layer computes in the compute
    dtype as its neighbours do, so TensorFlow's GELU after the feed-forward's int8 layer (not
    adapted) meets a bfloat16 gradient on a bfloat16 input (a float32 product failed there:
    `Mul` of bfloat16 and float32)."""
    model = BertClassifier(
        BertEncoder(TINY_CONFIG, dtype="mixed_bfloat16"), num_classes=3, dropout=0.0, seed=0
    )
    quantize_base(adapted_layers(model).values())
    enable_lora(model, rank=2, alpha=4.0, targets=["auto"], seed=0)
    intermediate = adapted_layers(model)["layer_0/intermediate"]
    assert is_int8(intermediate) and not intermediate.lora_enabled
    inputs, labels = tiny_inputs(batch=4, seq=8), tf.constant([0, 1, 2, 1])
    hidden = tf.ones([4, 8, TINY_CONFIG.hidden_size], tf.bfloat16)
    assert intermediate(hidden).dtype == tf.bfloat16

    with tf.GradientTape() as tape:
        logits = model(inputs, training=True)
        loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    gradients = tape.gradient(loss, model.trainable_variables)
    assert len(gradients) == 2 * 2 * 2 + 2  # A and B of query and value in 2 layers, the head
    assert all(np.isfinite(g.numpy()).all() and np.any(g.numpy()) for g in gradients[-2:])
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in gradients)


def test_quantizing_and_merging_collect_garbage_once_not_once_a_variable():
    """Keras collects all garbage for each variable a layer deletes (`model/variable_removal.py`):
    storing 12 kernels in int8 and merging 4 adapted layers run one full collection each."""
    model = _classifier()
    full_collections = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full_collections.append(info)

    gc.disable()  # only the explicit collections are counted
    gc.callbacks.append(count)
    try:
        quantize_base(adapted_layers(model).values())
        assert len(full_collections) == 1
        enable_lora(model, rank=2, alpha=4.0, targets=["auto"], seed=0)
        assert merge_lora(model) == 4
        assert len(full_collections) == 2
    finally:
        gc.callbacks.remove(count)
        gc.enable()
