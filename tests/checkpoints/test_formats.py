"""Every format, written by its real tool, loads through `load_encoder` with the same outputs."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.detect import detect
from bertfit.checkpoints.inspect import format_report, inspect_checkpoint
from bertfit.checkpoints.load import load_encoder
from bertfit.checkpoints.savedmodel import SavedModelEncoder
from bertfit.model.encoder import BertEncoder
from tests.tiny import tiny_inputs as make_inputs
from tests.tiny import (
    write_opaque_savedmodel,
    write_tiny_hf,
    write_tiny_hub_module,
    write_tiny_savedmodel,
    write_tiny_tf1,
    write_tiny_tf2,
    write_tiny_torch_bin,
)

WRITERS = {
    "hf": write_tiny_hf,
    "hf-bin": write_tiny_torch_bin,
    "tf1-checkpoint": write_tiny_tf1,
    "tf2-checkpoint": write_tiny_tf2,
    "tf2-savedmodel": write_tiny_savedmodel,
    "tf1-hub-module": write_tiny_hub_module,
}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def written(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param.replace("-", "_")) / "model"
    path.mkdir()
    return request.param, path, WRITERS[request.param](path)


def _assert_close(encoder, source):
    inputs = make_inputs()
    got, want = encoder(inputs), source(inputs)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, rtol=0)
    for a, b in zip(got["encoder_outputs"], want["encoder_outputs"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_each_format_loads_natively_with_the_source_outputs(written):
    fmt, path, source = written
    encoder, tokenizer = load_encoder(path)
    assert isinstance(encoder, BertEncoder)
    assert encoder.load_report.format == fmt
    assert encoder.checkpoint_detection.format == fmt
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    assert encoder.config.num_attention_heads == source.config.num_attention_heads
    _assert_close(encoder, source)
    assert tokenizer.vocab_size == source.config.vocab_size


def test_inspect_reports_format_architecture_and_vocab(written):
    fmt, path, source = written
    report = inspect_checkpoint(path)
    assert report["format"] == fmt
    assert report["fine_tunable"] is True
    arch = report["architecture"]
    config = source.config
    assert (arch["layers"], arch["hidden"], arch["heads"], arch["intermediate"], arch["vocab"]) == (
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
        config.vocab_size,
    )
    assert report["vocab"]["casing"] == "uncased"
    json.dumps(report)
    assert fmt in format_report(report)


def test_tf1_checkpoint_prefix_is_accepted_too(tmp_path):
    source = write_tiny_tf1(tmp_path)
    encoder, _ = load_encoder(tmp_path / "bert_model.ckpt")
    _assert_close(encoder, source)
    assert "cls/predictions/output_bias" in encoder.load_report.ignored


def test_opaque_savedmodel_is_wrapped_and_all_its_variables_train(tmp_path):
    module = write_opaque_savedmodel(tmp_path)
    layer, _ = load_encoder(tmp_path)
    assert isinstance(layer, SavedModelEncoder)
    inputs = make_inputs()
    np.testing.assert_allclose(
        layer(inputs)["pooled_output"], module(inputs)["pooled_output"], atol=1e-6
    )
    before = [v.numpy().copy() for v in layer.trainable_weights]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(inputs, training=True)["pooled_output"] ** 2)
    grads = tape.gradient(loss, layer.trainable_weights)
    assert len(grads) == 2 and all(g is not None for g in grads)
    for v, g in zip(layer.trainable_weights, grads, strict=True):
        v.assign_sub(0.1 * tf.convert_to_tensor(g))
    assert all(
        not np.allclose(b, v.numpy()) for b, v in zip(before, layer.trainable_weights, strict=True)
    )
    assert inspect_checkpoint(tmp_path)["loads_into"].startswith("SavedModelEncoder")


def test_signature_only_savedmodel_is_detected(tmp_path):
    write_tiny_savedmodel(tmp_path, signature_only=True)
    found = detect(tmp_path)
    assert found.format == "tf2-savedmodel-signature" and not found.fine_tunable
    report = inspect_checkpoint(tmp_path)
    assert report["fine_tunable"] is False
    assert "input_word_ids" in report["inputs"]
