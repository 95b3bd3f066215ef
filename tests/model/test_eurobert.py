"""EuroBERT beyond the parity every family has (tests/model/test_families.py: grouped key/value
heads, no biases, on both backends): a masked-LM checkpoint with biases and one key/value head
(as `EuroBertForMaskedLM` writes the released ones), its config in both spellings, what it
refuses, and its layers' own names for LoRA."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.families import family_of
from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from bertfit.model.classifier import BertClassifier
from bertfit.model.lora import enable_lora
from tests.model.test_families import padded_batch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,  # every query head shares one
    attention_bias=True,
    mlp_bias=True,
    max_position_embeddings=64,
    rope_parameters={"rope_theta": 250_000.0, "rope_type": "default"},
    pad_token_id=0,
)


def _batch() -> dict:
    ids, mask, _ = padded_batch(TINY["pad_token_id"], seq=20)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(transformers' `EuroBertForMaskedLM`, its folder), random weights everywhere."""
    path = tmp_path_factory.mktemp("eurobert")
    torch.manual_seed(0)
    model = transformers.EuroBertForMaskedLM(transformers.EuroBertConfig(**TINY)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model, path


def test_a_masked_lm_checkpoint_with_biases_matches_transformers(written):
    """The encoder's keys sit under "model."; the masked-LM head is ignored."""
    model, path = written
    encoder = build_encoder(read_hf(path))
    inputs = _batch()
    with torch.no_grad():
        expected = model.model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    real = inputs["input_mask"].astype(bool)
    sequence = encoder(inputs)["sequence_output"].numpy()
    np.testing.assert_allclose(sequence[real], expected[real], atol=1e-5)
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []
    assert report.ignored and all(name.startswith("lm_head.") for name in report.ignored)
    assert not any(name.startswith("embeddings/layer_norm") for name in encoder.named_variables())


def test_gradients_reach_every_weight(written):
    encoder = build_encoder(read_hf(written[1]))
    classifier = BertClassifier(encoder, 2, pooling="mean", dropout=0.1, seed=0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(classifier(_batch(), training=True) ** 2)
    variables = classifier.trainable_variables
    gradients = tape.gradient(loss, variables)
    assert len(variables) == len(encoder.named_variables()) + 2
    assert [v.path for v, g in zip(variables, gradients, strict=True) if g is None] == []


def test_lora_takes_the_familys_own_layer_names(written):
    model = BertClassifier(build_encoder(read_hf(written[1])), 2)
    mlp = enable_lora(model, 2, None, ["gate", "up"])
    assert sorted(mlp) == [f"layer_{i}/mlp/{p}" for i in (0, 1) for p in ("gate", "up")]


def test_config_reads_both_spellings(written):
    values = json.loads((written[1] / "config.json").read_text())
    family = family_of(values)
    config = family.read_config(values)
    assert family.name == "EuroBERT" and not config.has_pooler
    assert config.variant["rope_theta"] == 250_000.0 and config.variant["num_key_value_heads"] == 1
    assert config.max_sequence_length == 64
    # The released checkpoints' spelling (before transformers 5) reads the same.
    old = {k: v for k, v in values.items() if k != "rope_parameters"} | {"rope_theta": 250_000.0}
    assert family.read_config(old) == config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "scaled rotary"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "scaled rotary"),
        ({"head_dim": 16}, "head_dim 16"),
        ({"num_key_value_heads": 3}, "num_key_value_heads 3"),
    ],
)
def test_refuses_what_it_does_not_compute(change, message):
    values = {"model_type": "eurobert", "hidden_size": 32, "num_attention_heads": 4, **change}
    with pytest.raises(CheckpointError, match=message):
        family_of(values).read_config(values)
