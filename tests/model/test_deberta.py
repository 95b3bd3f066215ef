"""DeBERTa-v2/v3 through bertfit's one encoder equals transformers' `DebertaV2Model` on the same
tiny random checkpoints (disentangled attention, log-bucketed relative positions, the v2
convolution), under XLA and mixed precision too."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.families import family_of
from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.deberta import DebertaSettings, relative_buckets
from bertfit.model.encoder import BertEncoder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=64,
)

# name -> (DebertaV2Config arguments, sequence length of the test batch)
VARIANTS = {
    # DeBERTa-v3: no position table, no token types, shared keys, normalised table; 40 tokens
    # with 8 buckets reach the logarithmic ones.
    "v3": (
        dict(
            relative_attention=True,
            position_buckets=8,
            max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            type_vocab_size=0,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
        ),
        40,
    ),
    # DeBERTa-v2 xlarge-like: the first layer's convolution, a position table and token types,
    # separate position projections, exact distances clamped at 16, the old "p2c|c2p" string.
    "v2-conv": (
        dict(
            relative_attention=True,
            position_buckets=-1,
            max_relative_positions=16,
            pos_att_type="p2c|c2p",
            position_biased_input=True,
            type_vocab_size=2,
            share_att_key=False,
            norm_rel_ebd="none",
            conv_kernel_size=3,
            conv_act="gelu",
        ),
        24,
    ),
    # One relative term (scale sqrt(2 * head_size)) with its own key projection.
    "c2p-only": (
        dict(
            relative_attention=True,
            position_buckets=16,
            max_relative_positions=32,
            pos_att_type=["c2p"],
            position_biased_input=False,
            type_vocab_size=0,
            share_att_key=False,
            norm_rel_ebd="layer_norm",
        ),
        24,
    ),
    # No relative attention (a position table instead); the scale still counts pos_att_type.
    "absolute": (
        dict(
            relative_attention=False,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=True,
            type_vocab_size=0,
        ),
        16,
    ),
}


def _write(path, arguments, model_class=None, seed=0):
    """A tiny random DeBERTa-v2 (every weight random, LayerNorms too) saved to `path`; the
    torch model, in eval mode."""
    config = transformers.DebertaV2Config(**TINY, **arguments)
    torch.manual_seed(seed)
    model = (model_class or transformers.DebertaV2Model)(config).eval()
    with torch.no_grad():
        for _, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def _load(path, dtype="float32"):
    """The checkpoint at `path` through bertfit's public path: (encoder, load report)."""
    encoder = build_encoder(read_hf(path), dtype=dtype)
    return encoder, encoder.load_report


def _batch(length, type_vocab_size=0, seed=0):
    """A right-padded batch of 3: full length, two shorter rows."""
    rng = np.random.RandomState(seed)
    ids = rng.randint(1, 99, (3, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, length * 3 // 4 :] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    if type_vocab_size:
        types[:, length // 2 :] = 1
        types[mask == 0] = 0
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _reference(model, inputs):
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long),
        )
    return out.last_hidden_state.numpy()


@pytest.fixture(scope="module", params=list(VARIANTS))
def loaded(request, tmp_path_factory):
    """(variant name, encoder, report, inputs, transformers' last_hidden_state)."""
    arguments, length = VARIANTS[request.param]
    path = tmp_path_factory.mktemp(f"deberta-{request.param}")
    model = _write(path, arguments)
    encoder, report = _load(path)
    inputs = _batch(length, arguments.get("type_vocab_size", 0))
    return request.param, encoder, report, inputs, _reference(model, inputs)


def _max_diff(sequence, reference, inputs):
    real = inputs["input_mask"].astype(bool)
    return float(np.abs(np.asarray(sequence, np.float32)[real] - reference[real]).max())


def test_matches_transformers(loaded):
    _, encoder, report, inputs, reference = loaded
    assert report.unexpected == [] and report.missing == []
    assert len(report.loaded) == len(encoder.named_variables())
    assert _max_diff(encoder(inputs)["sequence_output"], reference, inputs) <= 1e-4


def test_xla_equals_eager(loaded):
    _, encoder, _, inputs, reference = loaded
    eager = encoder(inputs)["sequence_output"].numpy()
    compiled = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=True)
    assert np.abs(compiled(inputs).numpy() - eager).max() <= 1e-5
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}
    dynamic = tf.function(lambda x: encoder(x)["sequence_output"], input_signature=[spec])
    assert np.abs(dynamic(inputs).numpy() - eager).max() <= 1e-5
    # The same graph at another length (the gather indices follow the length).
    shorter = {k: v[:, :9] for k, v in inputs.items()}
    expected = encoder(shorter)["sequence_output"].numpy()
    assert np.abs(dynamic(shorter).numpy() - expected).max() <= 1e-5


def test_classifier_gets_every_gradient(loaded):
    from bertfit.model.classifier import BertClassifier

    _, encoder, _, inputs, _ = loaded
    classifier = BertClassifier(encoder, 2, pooling="cls", seed=0)
    labels = tf.constant([0, 1, 1])
    with tf.GradientTape() as tape:
        logits = classifier(inputs, training=True)
        loss = tf.reduce_mean(
            tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )
    variables = classifier.trainable_variables
    gradients = tape.gradient(loss, variables)
    assert len(variables) >= len(encoder.named_variables())
    missing = [v.path for v, g in zip(variables, gradients, strict=True) if g is None]
    assert missing == []


# Two variants cover every part (compiling each takes a few seconds on a CPU).
@pytest.mark.parametrize("name", ["v3", "v2-conv"])
def test_xla_gradients_equal_eager(name, tmp_path):
    arguments, length = VARIANTS[name]
    _write(tmp_path, arguments)
    encoder, _ = _load(tmp_path)
    inputs = _batch(length, arguments.get("type_vocab_size", 0))

    def gradients(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(encoder(x)["sequence_output"]))
        return tape.gradient(loss, encoder.trainable_variables)

    eager = gradients(inputs)
    compiled = tf.function(gradients, jit_compile=True)(inputs)
    for e, c in zip(eager, compiled, strict=True):
        e, c = tf.convert_to_tensor(e).numpy(), tf.convert_to_tensor(c).numpy()
        assert np.abs(e - c).max() <= 1e-4 * max(1.0, np.abs(e).max())


def test_mixed_bfloat16_is_close(loaded, tmp_path):
    name, encoder, _, inputs, reference = loaded
    arguments, _ = VARIANTS[name]
    _write(tmp_path, arguments)
    mixed, _ = _load(tmp_path, dtype="mixed_bfloat16")
    sequence = mixed(inputs)["sequence_output"]
    assert sequence.dtype == tf.bfloat16
    assert _max_diff(tf.cast(sequence, tf.float32), reference, inputs) <= 1e-1


def test_config_round_trips_json(loaded):
    _, encoder, _, _, _ = loaded
    config = encoder.config
    again = BertConfig(**json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert DebertaSettings(**again.variant) == DebertaSettings(**config.variant)
    rebuilt = BertEncoder.from_config(json.loads(json.dumps(encoder.get_config())))
    assert sorted(rebuilt.named_variables()) == sorted(encoder.named_variables())


def _hf_buckets(distance, buckets, max_position):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    return make_log_bucket_position(torch.tensor(distance), buckets, max_position).long().numpy()


@pytest.mark.parametrize("buckets,max_position", [(256, 512), (8, 64), (16, 32), (3, 100)])
def test_relative_buckets_match_transformers(buckets, max_position):
    distance = np.arange(-3000, 3001, dtype=np.int64)
    expected = _hf_buckets(distance, buckets, max_position)
    ours = relative_buckets(tf.constant(distance, tf.int32), buckets, max_position)
    assert np.array_equal(ours.numpy(), expected)
    compiled = tf.function(lambda d: relative_buckets(d, buckets, max_position), jit_compile=True)
    assert np.array_equal(compiled(tf.constant(distance, tf.int32)).numpy(), expected)


def test_task_checkpoint_heads_are_ignored(tmp_path):
    """A `DebertaV2ForSequenceClassification` checkpoint: the encoder under "deberta.", its
    ContextPooler and classifier known heads."""
    arguments, length = VARIANTS["v3"]
    model = _write(tmp_path, arguments, transformers.DebertaV2ForSequenceClassification)
    encoder, report = _load(tmp_path)
    assert report.unexpected == []
    assert any(name.startswith("pooler.") for name in report.ignored)
    assert any(name.startswith("classifier.") for name in report.ignored)
    inputs = _batch(length)
    reference = _reference(model.deberta, inputs)
    assert _max_diff(encoder(inputs)["sequence_output"], reference, inputs) <= 1e-4


def test_family_and_v1_refused():
    assert family_of({"model_type": "deberta-v2"}).name == "DeBERTa-v3"
    with pytest.raises(CheckpointError, match="'deberta'"):
        family_of({"model_type": "deberta"})


_BASE = dict(TINY, model_type="deberta-v2", relative_attention=True, position_buckets=8)


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(embedding_size=16), "embedding_size"),
        (dict(conv_kernel_size=3, conv_groups=2), "conv_groups"),
        (dict(conv_kernel_size=4), "conv_kernel_size"),
        (dict(conv_kernel_size=3, conv_act="mish"), "conv_act"),
        (dict(pos_att_type="p2c|c2p|p2p"), "p2p"),
        (dict(attention_head_size=16), "attention_head_size"),
    ],
)
def test_unsupported_settings_are_refused(change, reason):
    values = {**_BASE, **change}
    with pytest.raises(CheckpointError, match=reason):
        family_of(values).read_config(values)


def test_v3_defaults():
    """A deberta-v3-base-like config.json: the DebertaV2Config defaults BERT's differ from."""
    values = {
        "model_type": "deberta-v2",
        "vocab_size": 128100,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "relative_attention": True,
        "position_buckets": 256,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "pos_att_type": "p2c|c2p",
        "position_biased_input": False,
        "max_relative_positions": -1,
        "layer_norm_eps": 1e-7,
        "type_vocab_size": 0,
    }
    config = family_of(values).read_config(values)
    settings = DebertaSettings(**config.variant)
    assert config.type_vocab_size == 0
    assert not config.absolute_positions and not config.has_pooler
    assert config.layer_norm_eps == 1e-7
    assert settings == DebertaSettings()  # the defaults are v3's
    names = family_of(values).table(config)
    assert names["encoder/relative_embeddings"].names == ("encoder.rel_embeddings.weight",)
    assert "layer_0/attention/position_key/kernel" not in names
