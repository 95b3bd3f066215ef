import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.model.encoder import BertEncoder
from tests.tiny import TINY_CONFIG, tiny_encoder, tiny_inputs


def test_outputs_have_the_documented_names_shapes_and_dtypes():
    outputs = tiny_encoder()(tiny_inputs(batch=3, seq=8))
    assert outputs["sequence_output"].shape == (3, 8, 32)
    assert outputs["pooled_output"].shape == (3, 32)
    assert len(outputs["encoder_outputs"]) == TINY_CONFIG.num_hidden_layers
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])


def test_padding_does_not_change_unmasked_positions():
    encoder = tiny_encoder()
    inputs = tiny_inputs(batch=1, seq=5)
    padded = {k: tf.pad(v, [[0, 0], [0, 7]]) for k, v in inputs.items()}
    short, long = encoder(inputs), encoder(padded)
    np.testing.assert_allclose(short["sequence_output"], long["sequence_output"][:, :5], atol=1e-5)
    np.testing.assert_allclose(short["pooled_output"], long["pooled_output"], atol=1e-5)


def test_xla_compiled_call_matches_eager():
    encoder = tiny_encoder()
    inputs = tiny_inputs()
    compiled = tf.function(lambda x: encoder(x), jit_compile=True)(inputs)
    np.testing.assert_allclose(
        compiled["sequence_output"], encoder(inputs)["sequence_output"], atol=1e-5
    )


def test_hugging_face_and_keras_hub_names_and_int64_are_accepted():
    encoder = tiny_encoder()
    inputs = tiny_inputs()
    expected = encoder(inputs)["pooled_output"]
    hf = {
        "input_ids": tf.cast(inputs["input_word_ids"], tf.int64),
        "attention_mask": inputs["input_mask"],
        "token_type_ids": inputs["input_type_ids"],
    }
    kh = {
        "token_ids": inputs["input_word_ids"],
        "padding_mask": inputs["input_mask"],
        "segment_ids": inputs["input_type_ids"],
    }
    np.testing.assert_allclose(encoder(hf)["pooled_output"], expected, atol=1e-6)
    np.testing.assert_allclose(encoder(kh)["pooled_output"], expected, atol=1e-6)


@pytest.mark.parametrize(
    "raw",
    [["a great film"], "a great film", tf.constant(["a great film"]), np.array(["a great film"])],
)
def test_raw_strings_are_refused_with_how_to_tokenize(raw):
    with pytest.raises(InputFormatError, match="takes token ids, not raw strings") as error:
        tiny_encoder()(raw)
    assert "tokenizer(" in str(error.value)


def test_unknown_keys_are_refused_with_the_expected_names():
    inputs = tiny_inputs()
    wrong = {"ids": inputs["input_word_ids"], "input_mask": inputs["input_mask"]}
    with pytest.raises(InputFormatError, match="Unknown input key 'ids'") as error:
        tiny_encoder()(wrong)
    for name in ("input_word_ids", "input_mask", "input_type_ids", "input_ids", "token_ids"):
        assert name in str(error.value)


def test_float_ids_are_refused():
    inputs = dict(tiny_inputs())
    inputs["input_word_ids"] = tf.cast(inputs["input_word_ids"], tf.float32)
    with pytest.raises(InputFormatError, match="must be integers"):
        tiny_encoder()(inputs)


def test_mixed_bfloat16_keeps_float32_weights_and_stays_close():
    reference = tiny_encoder()
    encoder = BertEncoder(TINY_CONFIG, dtype="mixed_bfloat16")
    for mine, theirs in zip(encoder.weights, reference.weights, strict=True):
        mine.assign(theirs)
    assert all(v.dtype == "float32" for v in encoder.weights)
    inputs = tiny_inputs()
    outputs = encoder(inputs)
    assert outputs["sequence_output"].dtype == tf.bfloat16
    drift = np.abs(
        tf.cast(outputs["sequence_output"], tf.float32) - reference(inputs)["sequence_output"]
    )
    assert drift.max() < 0.1


def test_builds_inside_a_strategy_scope():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        encoder = BertEncoder(TINY_CONFIG)
    assert isinstance(encoder.weights[0].value, tf.Variable)
    assert len(encoder.trainable_weights) == len(encoder.named_variables())


def test_config_round_trips_through_keras_serialization():
    encoder = BertEncoder(TINY_CONFIG)
    clone = BertEncoder.from_config(encoder.get_config())
    assert clone.config == TINY_CONFIG
    assert keras.layers.Layer in type(clone).__mro__


def test_pooled_only_computes_the_same_pooled_output_as_the_whole_encoder():
    encoder = tiny_encoder()
    inputs = tiny_inputs(batch=3, seq=8)  # rows padded to 8, 5 and 3 tokens
    whole = encoder(inputs)["pooled_output"]
    pooled = encoder(inputs, pooled_only=True)
    assert list(pooled) == ["pooled_output"]
    np.testing.assert_allclose(pooled["pooled_output"], whole, atol=1e-6)
    jitted = tf.function(lambda x: encoder(x, pooled_only=True), jit_compile=True)
    np.testing.assert_allclose(jitted(inputs)["pooled_output"], whole, atol=1e-5)


def test_an_encoder_to_be_loaded_starts_at_zero_but_for_its_pooler():
    encoder = BertEncoder(TINY_CONFIG, random_init=False)
    drawn = {name for name, v in encoder.named_variables().items() if np.any(v.numpy() != 0)}
    gammas = {name for name in encoder.named_variables() if name.endswith("gamma")}  # ones
    assert drawn - gammas == {"pooler/kernel"}
    random = BertEncoder(TINY_CONFIG).named_variables()
    assert np.std(random["embeddings/word_embeddings"].numpy()) > 0


def test_dense_layers_multiply_token_rows_without_tensordot():
    # Keras' Dense multiplies a 3-D input through tf.tensordot, whose shape arithmetic (and its
    # gradient's) was a quarter of the training graph when the sizes are known only at run time.
    encoder = tiny_encoder()
    ids = tf.TensorSpec([None, None], tf.int32)
    call = tf.function(lambda x: encoder({"input_word_ids": x, "input_mask": x}, training=True))
    graph = call.get_concrete_function(ids).graph
    assert not [op.name for op in graph.get_operations() if "Tensordot" in op.name]
