"""ModernBERT through bertfit's encoder equals transformers' `ModernBertModel` (tiny random
checkpoints: global and sliding-window layers, a window narrower than the inputs, which are
long enough for the local layers to compute only the band)."""

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
from bertfit.model.modernbert import ModernBertSettings

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (50, 13, 5)  # right-padded to 50; the local window spans 7 tokens (|i - j| <= 3)
TINY = dict(
    vocab_size=100,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,  # global at 0 and 3, sliding-window at 1 and 2
    num_attention_heads=4,
    local_attention=6,
    global_attn_every_n_layers=3,
    max_position_embeddings=64,
    global_rope_theta=160_000.0,
    local_rope_theta=10_000.0,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
VARIANTS = {
    "eager": dict(attn_implementation="eager"),
    "sdpa-biases": dict(
        attn_implementation="sdpa", norm_bias=True, attention_bias=True, mlp_bias=True
    ),
}


def _write(path, **overrides):
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(**{**TINY, **overrides})
    model = transformers.ModernBertModel(config).eval()
    with torch.no_grad():  # norms and biases away from 1 and 0, so a misplaced one shows
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                parameter.copy_(1.0 + 0.3 * torch.randn_like(parameter))
            elif name.endswith("bias"):
                parameter.copy_(0.1 * torch.randn_like(parameter))
            elif "Wqkv" in name:  # larger projections: sharper attention, so the masks matter
                parameter.mul_(10.0)
    model.save_pretrained(path)
    return model


def _load(path, dtype=None) -> BertEncoder:
    return build_encoder(read_hf(path), dtype=dtype)


def _batch():
    rng = np.random.default_rng(1)
    length = max(LENGTHS)
    ids = rng.integers(3, TINY["vocab_size"], size=(len(LENGTHS), length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def loaded(request, tmp_path_factory):
    """(encoder, inputs, transformers' last_hidden_state, checkpoint path)."""
    path = tmp_path_factory.mktemp(f"modernbert_{request.param}")
    model = _write(path, **VARIANTS[request.param])
    inputs = _batch()
    with torch.no_grad():
        expected = model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    return _load(path), inputs, expected, path


def _real_diff(sequence, inputs, expected) -> float:
    real = inputs["input_mask"].astype(bool)
    return float(np.abs(np.asarray(sequence)[real] - expected[real]).max())


def test_matches_transformers(loaded):
    encoder, inputs, expected, _ = loaded
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-4
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []


def test_window_and_rotary_matter(loaded):
    """The checkpoint is strict: without the window, or with one rotary base for all layers,
    the outputs differ from transformers'."""
    encoder, inputs, expected, _ = loaded
    parts = encoder.parts
    window, frequencies = parts.settings.window, dict(parts.inverse_frequencies)
    try:
        object.__setattr__(parts.settings, "local_attention", 1000)
        assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) > 1e-3
        object.__setattr__(parts.settings, "local_attention", 2 * window)
        parts.inverse_frequencies["local"] = frequencies["global"]
        assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) > 1e-3
    finally:
        object.__setattr__(parts.settings, "local_attention", 2 * window)
        parts.inverse_frequencies.update(frequencies)
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-4


def test_pooled_only_is_the_first_token(loaded):
    encoder, inputs, _, _ = loaded
    pooled = encoder(inputs, pooled_only=True)["pooled_output"].numpy()
    first = encoder(inputs)["sequence_output"].numpy()[:, 0]
    np.testing.assert_allclose(pooled, first, atol=1e-5)


def test_xla_and_unknown_shapes(loaded):
    """XLA computes the local layers' band as eager does; a length known only at run time
    (the exports' signature) computes them densely: the same at every real token (a padding
    position whose window holds only padding has no defined output)."""
    encoder, inputs, expected, _ = loaded
    eager = encoder(inputs)["sequence_output"].numpy()
    compiled = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=True)
    np.testing.assert_allclose(compiled(inputs).numpy(), eager, atol=1e-5)
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}
    dynamic = tf.function(lambda x: encoder(x)["sequence_output"], input_signature=[spec])
    assert _real_diff(dynamic(inputs).numpy(), inputs, eager) <= 1e-5
    short = {k: v[1:, :9] for k, v in inputs.items()}  # another shape, same graph
    np.testing.assert_allclose(
        dynamic(short).numpy(), encoder(short)["sequence_output"].numpy(), atol=1e-5
    )


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_classifier_gradients_reach_every_weight(loaded, pooling):
    encoder, inputs, _, _ = loaded
    classifier = BertClassifier(encoder, 2, pooling=pooling, dropout=0.1, seed=0)
    labels = tf.constant([0, 1, 1])
    with tf.GradientTape() as tape:
        logits = classifier(inputs, training=True)
        loss = tf.reduce_mean(
            tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )
    variables = classifier.trainable_variables
    gradients = tape.gradient(loss, variables)
    assert len(variables) == len(encoder.named_variables()) + 2
    missing = [v.path for v, g in zip(variables, gradients, strict=True) if g is None]
    assert missing == []
    assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in gradients)


def test_mixed_bfloat16_is_close(loaded):
    encoder, inputs, expected, path = loaded
    half = _load(path, dtype="mixed_bfloat16")
    sequence = half(inputs)["sequence_output"]
    assert sequence.dtype == tf.bfloat16
    sequence = tf.cast(sequence, tf.float32).numpy()
    real = inputs["input_mask"].astype(bool)
    scale = np.abs(expected[real]).max()
    assert _real_diff(sequence, inputs, expected) <= 0.03 * scale
    assert np.abs(sequence[real] - expected[real]).mean() <= 0.003 * scale


def test_config_round_trip_and_both_spellings(loaded):
    _, _, _, path = loaded
    values = json.loads((path / "config.json").read_text())
    family = family_of(values)
    assert family.name == "ModernBERT"
    config = family.read_config(values)
    assert BertConfig(**json.loads(json.dumps(config.to_dict()))) == config
    settings = ModernBertSettings(**config.variant)
    assert (settings.window, settings.global_attn_every_n_layers) == (3, 3)
    assert config.max_sequence_length == 64 and not config.has_pooler
    # The released checkpoints' spelling (before transformers 5) reads the same.
    old = {k: v for k, v in values.items() if k not in ("layer_types", "rope_parameters")}
    old |= {"global_rope_theta": 160_000.0, "local_rope_theta": 10_000.0}
    assert family.read_config(old) == config
    # A null local base means the global one, as in transformers 4.
    assert (
        family.read_config(old | {"local_rope_theta": None}).variant["local_rope_theta"]
        == 160_000.0
    )


def test_refuses_what_it_cannot_compute(loaded):
    _, _, _, path = loaded
    values = json.loads((path / "config.json").read_text())
    family = family_of(values)
    scaled = json.loads(json.dumps(values))
    scaled["rope_parameters"]["full_attention"] |= {"rope_type": "linear", "factor": 2.0}
    with pytest.raises(CheckpointError, match="rotary"):
        family.read_config(scaled)
    irregular = values | {"layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2}
    with pytest.raises(CheckpointError, match="layer_types"):
        family.read_config(irregular)


def test_masked_lm_checkpoint(tmp_path):
    """The released checkpoints are `ModernBertForMaskedLM`s: the encoder's keys under "model.",
    the masked-LM head's ignored."""
    torch.manual_seed(0)
    model = transformers.ModernBertForMaskedLM(
        transformers.ModernBertConfig(**TINY, attn_implementation="eager")
    ).eval()
    model.save_pretrained(tmp_path)
    checkpoint = read_hf(tmp_path)
    assert checkpoint.family == "ModernBERT"
    encoder = build_encoder(checkpoint)
    inputs = _batch()
    with torch.no_grad():
        expected = model.model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-4
    report = encoder.load_report
    assert report.unexpected == [] and report.missing == []
    assert report.ignored and all(n.startswith(("head.", "decoder.")) for n in report.ignored)
