"""Model Garden / TF Hub exports, Google's TF1 checkpoints and bertfit's own `convert --to
tf-hub` output are read by what they store: the activation each really computes, the casing they
record (never a path), and encoders built in a name scope (`bert_v2`) load natively. Each
artifact is compared with `tf.saved_model.load` of itself."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.hub_export import write_hub_encoder
from bertfit.checkpoints.inspect import inspect_checkpoint
from bertfit.checkpoints.load import load_encoder, read_checkpoint
from bertfit.checkpoints.names import identify, tf1_table
from bertfit.checkpoints.weights import read_weights
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from tests.checkpoints.model_garden import write_model_garden_encoder
from tests.tiny import (
    TINY_CONFIG,
    TINY_VOCAB,
    tiny_encoder,
    tiny_inputs,
    write_tiny_tf1,
    write_vocab,
)

ATOL = 1e-5


def _assert_same(encoder, reference, inputs=None):
    inputs = tiny_inputs() if inputs is None else inputs
    got, want = encoder(inputs), reference(inputs)
    for key in ("pooled_output", "sequence_output"):
        np.testing.assert_allclose(got[key], want[key], atol=ATOL, rtol=0)


def _loaded(path):
    """The artifact as TF Hub users run it: `tf.saved_model.load` and its `__call__`."""
    loaded = tf.saved_model.load(str(path))
    return lambda inputs: loaded(inputs, training=False)


# ---- finding 1: the GELU each format really computes ----


def test_model_garden_savedmodel_loads_with_the_tanh_gelu_it_computes(tmp_path):
    write_model_garden_encoder(tmp_path / "encoder")
    encoder, _ = load_encoder(tmp_path / "encoder")
    assert isinstance(encoder, BertEncoder)
    assert encoder.config.hidden_act == "gelu_new"
    _assert_same(encoder, _loaded(tmp_path / "encoder"))
    # the exact GELU on the same weights is measurably different: the test can tell them apart
    exact = BertEncoder(dataclasses.replace(encoder.config, hidden_act="gelu"))
    exact(tiny_inputs())
    for variable, value in zip(exact.weights, encoder.weights, strict=True):
        variable.assign(value)
    with pytest.raises(AssertionError):
        _assert_same(exact, _loaded(tmp_path / "encoder"))


@pytest.mark.parametrize(("recorded", "expected"), [("Text>gelu", "gelu_new"), ("relu", "relu")])
def test_an_activation_in_keras_metadata_is_used(tmp_path, recorded, expected):
    write_model_garden_encoder(tmp_path / "encoder", activation=expected, keras_activation=recorded)
    encoder, _ = load_encoder(tmp_path / "encoder")
    assert encoder.config.hidden_act == expected
    _assert_same(encoder, _loaded(tmp_path / "encoder"))


def test_bertfits_own_tf_hub_export_keeps_an_hf_sources_exact_gelu(tmp_path):
    source = tiny_encoder()  # TINY_CONFIG: "gelu", Hugging Face's exact GELU
    assert source.config.hidden_act == "gelu"
    write_hub_encoder(source, tmp_path / "encoder", write_vocab(tmp_path), lower_case=True)
    encoder, _ = load_encoder(tmp_path / "encoder")
    assert encoder.config.hidden_act == "gelu"
    _assert_same(encoder, source)
    _assert_same(encoder, _loaded(tmp_path / "encoder"))


def _google_bert_config(config) -> dict:
    """`bert_config.json` as Google ships it: no model_type, and "gelu" meaning tanh."""
    keys = (
        "vocab_size hidden_size num_hidden_layers num_attention_heads intermediate_size "
        "hidden_dropout_prob attention_probs_dropout_prob max_position_embeddings "
        "type_vocab_size initializer_range"
    ).split()
    return {**{k: getattr(config, k) for k in keys}, "hidden_act": "gelu"}


def test_a_google_bert_config_gelu_is_the_tanh_approximation(tmp_path):
    source = write_tiny_tf1(tmp_path)  # weights and vocab; the config is replaced below
    (tmp_path / "bert_config.json").write_text(json.dumps(_google_bert_config(TINY_CONFIG)))
    tanh = BertEncoder(dataclasses.replace(source.config, hidden_act="gelu_new"))
    tanh(tiny_inputs())
    for variable, value in zip(tanh.weights, source.weights, strict=True):
        variable.assign(value)
    encoder, _ = load_encoder(tmp_path)
    assert encoder.config.hidden_act == "gelu_new"
    _assert_same(encoder, tanh)


def test_convert_to_hf_writes_the_activation_the_source_computes(tmp_path):
    from bertfit.checkpoints.convert import convert

    write_model_garden_encoder(tmp_path / "encoder")
    convert(tmp_path / "encoder", tmp_path / "hf", "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["hidden_act"] == "gelu_new"
    encoder, _ = load_encoder(tmp_path / "hf")
    _assert_same(encoder, _loaded(tmp_path / "encoder"))


# ---- finding 2: casing from what the checkpoint says, never from its path ----


def _words(tokenizer, text):
    return tokenizer.tokenize([text]).to_list()[0]


def test_model_garden_do_lower_case_wins_over_a_folder_named_cased(tmp_path):
    path = tmp_path / "cased_experiments" / "encoder"
    path.parent.mkdir()
    write_model_garden_encoder(path, lower_case=True)
    checkpoint = read_checkpoint(path)
    assert checkpoint.lower_case is True
    assert checkpoint.vocab_file.name == "wordpieces.txt"  # the root's vocab_file asset
    _, tokenizer = load_encoder(path)
    assert _words(tokenizer, "The FILM") == [TINY_VOCAB.index("the"), TINY_VOCAB.index("film")]


def test_model_garden_cased_export_stays_cased_in_a_folder_named_uncased(tmp_path):
    path = tmp_path / "uncased_L-2_H-32" / "encoder"
    path.parent.mkdir()
    write_model_garden_encoder(path, lower_case=False)
    assert read_checkpoint(path).lower_case is False


def test_tf1_casing_comes_from_the_vocab_not_the_folder_name(tmp_path):
    uncased = tmp_path / "cased_experiments"
    uncased.mkdir()
    write_tiny_tf1(uncased)  # an all-lowercase vocab
    assert read_checkpoint(uncased).lower_case is True

    cased = tmp_path / "uncased_but_not_really"
    cased.mkdir()
    write_tiny_tf1(cased)
    capitals = [w.capitalize() for w in TINY_VOCAB[5:20]]
    write_vocab(cased, TINY_VOCAB[: len(TINY_VOCAB) - len(capitals)] + capitals)
    assert read_checkpoint(cased).lower_case is False


# ---- finding 3: an encoder built in a name scope (EncoderConfig type "bert_v2") ----

SCOPE = "bert_encoder_v2/"


def test_identify_accepts_a_scope_before_model_garden_names():
    assert identify({SCOPE + "word_embeddings/embeddings"}) is None  # not an encoder alone
    names = {
        SCOPE + "word_embeddings/embeddings",
        SCOPE + "transformer/layer_0/self_attention/query/kernel",
    }
    assert identify(names) == "tf2-variables"


def test_a_bert_v2_export_loads_natively_and_fine_tunes(tmp_path):
    write_model_garden_encoder(tmp_path / "encoder", scope=SCOPE)
    report = inspect_checkpoint(tmp_path / "encoder")
    assert report["fine_tunable"] is True
    encoder, _ = load_encoder(tmp_path / "encoder")
    assert isinstance(encoder, BertEncoder)
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    _assert_same(encoder, _loaded(tmp_path / "encoder"))
    classifier = BertClassifier.from_checkpoint(str(tmp_path / "encoder"), num_classes=3)
    assert classifier(tiny_inputs()).shape == (3, 3)


def _dataset():
    inputs = tiny_inputs(batch=4)
    return tf.data.Dataset.from_tensor_slices((inputs, [0, 1, 0, 1])).batch(4)


def test_a_wrapped_savedmodel_has_a_config_and_takes_a_head(tmp_path):
    import bertfit
    from tests.tiny import write_opaque_savedmodel

    write_opaque_savedmodel(tmp_path / "opaque")
    encoder, _ = load_encoder(tmp_path / "opaque")
    assert type(encoder).__name__ == "SavedModelEncoder"
    assert encoder.config.hidden_size == 8  # the width of its pooled_output
    model = BertClassifier(encoder, num_classes=2, pooling="mean")
    assert model(tiny_inputs()).shape == (3, 2)
    report = bertfit.check(dataset=_dataset(), encoder=encoder, num_classes=2, compile=False)
    assert not {"grad-step-failed", "grad-none"} & set(report.codes), report.codes


# ---- finding 5: TF Hub's interface ----


def test_bertfits_encoder_export_has_tf_hubs_default_output(tmp_path):
    source = tiny_encoder()
    write_hub_encoder(source, tmp_path / "encoder", write_vocab(tmp_path), lower_case=True)
    loaded = tf.saved_model.load(str(tmp_path / "encoder"))
    out = loaded(tiny_inputs(), training=False)
    np.testing.assert_array_equal(out["default"], out["pooled_output"])
    served = loaded.signatures["serving_default"](**tiny_inputs())
    np.testing.assert_array_equal(served["default"], served["pooled_output"])


def test_google_names_table_still_reads_tf1_savedmodel_names():
    # the TF1 scheme is unaffected by the scope rule
    assert identify(tf1_table(1)["embeddings/word_embeddings"].names) == "tf1"


def test_read_weights_roundtrip_with_a_scoped_table():
    from bertfit.checkpoints.names import tf2_variable_table

    encoder = tiny_encoder()
    table = tf2_variable_table(2, 4, SCOPE)
    stored = read_weights(encoder, table)
    assert all(name.startswith(SCOPE) for name in stored)


def test_tf2_checkpoints_and_hub_modules_without_a_config_use_the_tanh_gelu(tmp_path):
    from tests.tiny import write_tiny_hub_module, write_tiny_tf2

    for name, writer in (("tf2", write_tiny_tf2), ("module", write_tiny_hub_module)):
        (tmp_path / name).mkdir()
        source = writer(tmp_path / name)
        assert source.config.hidden_act == "gelu_new"
        assert read_checkpoint(tmp_path / name).config.hidden_act == "gelu_new"
