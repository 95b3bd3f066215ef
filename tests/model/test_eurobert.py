"""EuroBERT through bertfit's encoder equals transformers' `EuroBertModel` (tiny random
checkpoints: grouped key/value heads, rotary positions, RMSNorm, SwiGLU, with and without
biases), and its config reads as the released checkpoints write it."""

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
from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder
from bertfit.model.eurobert import EuroBertSettings
from bertfit.model.lora import enable_lora

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (20, 13, 5)
TINY = dict(
    vocab_size=100,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_parameters={"rope_theta": 250_000.0, "rope_type": "default"},
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    mask_token_id=3,
)
VARIANTS = {
    "grouped": {},
    "biases-one-kv-head": dict(attention_bias=True, mlp_bias=True, num_key_value_heads=1),
}


def _write(path, model_class=None, **overrides):
    torch.manual_seed(0)
    config = transformers.EuroBertConfig(**{**TINY, **overrides})
    model = (model_class or transformers.EuroBertModel)(config).eval()
    with torch.no_grad():  # norms and biases away from 1 and 0, so a misplaced one shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1.0 + 0.3 * torch.randn_like(parameter))
            elif name.endswith("bias"):
                parameter.copy_(0.1 * torch.randn_like(parameter))
            elif "proj" in name:  # larger projections: sharper attention, so the masks matter
                parameter.mul_(5.0)
    model.save_pretrained(path)
    return model


def _batch():
    rng = np.random.default_rng(1)
    length = max(LENGTHS)
    ids = rng.integers(4, TINY["vocab_size"], size=(len(LENGTHS), length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


def _theirs(model, inputs) -> np.ndarray:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def loaded(request, tmp_path_factory):
    """(encoder, inputs, transformers' last_hidden_state, checkpoint path)."""
    path = tmp_path_factory.mktemp(f"eurobert_{request.param}")
    model = _write(path, **VARIANTS[request.param])
    inputs = _batch()
    return build_encoder(read_hf(path)), inputs, _theirs(model, inputs), path


def _real_diff(sequence, inputs, expected) -> float:
    real = inputs["input_mask"].astype(bool)
    return float(np.abs(np.asarray(sequence)[real] - expected[real]).max())


def test_matches_transformers(loaded):
    encoder, inputs, expected, _ = loaded
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-5
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []
    assert not any(name.startswith("embeddings/layer_norm") for name in encoder.named_variables())


def test_pooled_only_is_the_first_token(loaded):
    encoder, inputs, _, _ = loaded
    pooled = encoder(inputs, pooled_only=True)["pooled_output"].numpy()
    first = encoder(inputs)["sequence_output"].numpy()[:, 0]
    np.testing.assert_allclose(pooled, first, atol=1e-5)


@pytest.mark.slow  # compiles the encoder with XLA and traces it for unknown shapes: ~3 s
def test_xla_and_unknown_shapes(loaded):
    encoder, inputs, _, _ = loaded
    eager = encoder(inputs)["sequence_output"].numpy()
    compiled = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=True)
    np.testing.assert_allclose(compiled(inputs).numpy(), eager, atol=1e-5)
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}
    dynamic = tf.function(lambda x: encoder(x, pooled_only=True), input_signature=[spec])
    np.testing.assert_allclose(dynamic(inputs)["pooled_output"].numpy(), eager[:, 0], atol=1e-5)


def test_classifier_gradients_reach_every_weight(loaded):
    encoder, inputs, _, _ = loaded
    classifier = BertClassifier(encoder, 2, pooling="mean", dropout=0.1, seed=0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(classifier(inputs, training=True) ** 2)
    variables = classifier.trainable_variables
    gradients = tape.gradient(loss, variables)
    assert len(variables) == len(encoder.named_variables()) + 2
    assert [v.path for v, g in zip(variables, gradients, strict=True) if g is None] == []


def test_lora_takes_the_familys_own_layer_names(tmp_path):
    _write(tmp_path)
    encoder = build_encoder(read_hf(tmp_path))
    model = BertClassifier(encoder, 2)
    auto = enable_lora(model, 2, None, ["auto"])
    assert sorted(auto) == [f"layer_{i}/attention/{p}" for i in (0, 1) for p in ("query", "value")]
    model = BertClassifier(build_encoder(read_hf(tmp_path)), 2)
    mlp = enable_lora(model, 2, None, ["gate", "up"])
    assert sorted(mlp) == [f"layer_{i}/mlp/{p}" for i in (0, 1) for p in ("gate", "up")]


def test_config_reads_both_spellings_and_round_trips(loaded):
    _, _, _, path = loaded
    values = json.loads((path / "config.json").read_text())
    family = family_of(values)
    assert family.name == "EuroBERT"
    config = family.read_config(values)
    assert BertConfig(**json.loads(json.dumps(config.to_dict()))) == config
    settings = EuroBertSettings(**config.variant)
    assert settings.rope_theta == 250_000.0 and settings.num_key_value_heads in (1, 2)
    assert config.max_sequence_length == 64 and not config.has_pooler
    # The released checkpoints' spelling (before transformers 5) reads the same.
    old = {k: v for k, v in values.items() if k != "rope_parameters"} | {"rope_theta": 250_000.0}
    assert family.read_config(old) == config


def test_refuses_what_it_cannot_compute(loaded):
    _, _, _, path = loaded
    values = json.loads((path / "config.json").read_text())
    family = family_of(values)
    scaled = values | {"rope_parameters": {"rope_type": "linear", "factor": 2.0}}
    with pytest.raises(CheckpointError, match="rotary"):
        family.read_config(scaled)
    with pytest.raises(CheckpointError, match="head_dim 16"):
        family.read_config(values | {"head_dim": 16})
    with pytest.raises(CheckpointError, match="num_key_value_heads 3"):
        BertEncoder(family.read_config(values | {"num_key_value_heads": 3}))


def test_masked_lm_checkpoint(tmp_path):
    """The released checkpoints are `EuroBertForMaskedLM`s: the encoder's keys under "model.",
    the masked-LM head's ignored."""
    model = _write(tmp_path, transformers.EuroBertForMaskedLM)
    checkpoint = read_hf(tmp_path)
    assert checkpoint.family == "EuroBERT"
    encoder = build_encoder(checkpoint)
    inputs = _batch()
    expected = _theirs(model.model, inputs)
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-5
    report = encoder.load_report
    assert report.unexpected == [] and report.missing == []
    assert report.ignored and all(n.startswith("lm_head.") for n in report.ignored)
