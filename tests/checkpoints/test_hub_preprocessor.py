"""`convert --to tf-hub` writes a preprocessing SavedModel with TF Hub's contract: the default
call on [batch] or scalar strings, `tokenize` → [batch, words, wordpieces], and
`bert_pack_inputs(segments, seq_length)`; TF Hub's pair-classification recipe runs on it
unchanged (tf_keras + hub.KerasLayer, in a child process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

from bertfit.checkpoints.load import load_encoder
from bertfit.text.preprocessor import BertPreprocessor

TEXTS = ["a good film", "bad [SEP] plot, truly bad"]
PAIRS = ["the plot", "good"]

# TF Hub's "Solve GLUE tasks using BERT" recipe for sentence pairs, with local paths.
RECIPE = textwrap.dedent("""
    import sys
    import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # noqa: F401
    PREPROCESS, ENCODER = sys.argv[1], sys.argv[2]
    preprocessor = hub.load(PREPROCESS)
    text_inputs = [tf.keras.layers.Input(shape=(), dtype=tf.string) for _ in range(2)]
    tokenize = hub.KerasLayer(preprocessor.tokenize)
    tokenized_inputs = [tokenize(segment) for segment in text_inputs]
    seq_length = 32
    bert_pack_inputs = hub.KerasLayer(preprocessor.bert_pack_inputs,
                                      arguments=dict(seq_length=seq_length))
    encoder_inputs = bert_pack_inputs(tokenized_inputs)
    encoder = hub.KerasLayer(ENCODER, trainable=True)
    pooled = encoder(encoder_inputs)["pooled_output"]
    model = tf.keras.Model(text_inputs, tf.keras.layers.Dense(2)(pooled))
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    texts = tf.constant(["a good film", "bad plot"] * 4)
    pairs = tf.constant(["good", "the plot"] * 4)
    history = model.fit((texts, pairs), tf.constant([1, 0] * 4), epochs=2, verbose=0)
    ids = bert_pack_inputs([tokenize(texts), tokenize(pairs)])["input_word_ids"]
    print("shape", ids.shape, "trainable", len(model.trainable_variables))
""")


def test_preprocessor_savedmodel_has_tf_hubs_interface(tf_hub_export, trainable_hf_dir):
    _, tokenizer = load_encoder(trainable_hf_dir)
    reference = BertPreprocessor(tokenizer, seq_length=16)
    loaded = tf.saved_model.load(str(tf_hub_export / "preprocess"))
    batch = loaded(tf.constant(TEXTS))
    assert batch["input_word_ids"].shape == (2, 16) and batch["input_word_ids"].dtype == tf.int32
    np.testing.assert_array_equal(batch["input_word_ids"], reference(TEXTS)["input_word_ids"])
    scalar = loaded(tf.constant(TEXTS[0]))
    np.testing.assert_array_equal(scalar["input_word_ids"], batch["input_word_ids"][0])

    words = loaded.tokenize(tf.constant(TEXTS))
    assert isinstance(words, tf.RaggedTensor) and words.shape.rank == 3
    assert words.merge_dims(-2, -1).to_list() == tokenizer.tokenize(TEXTS).to_list()
    assert words[1][1].numpy().tolist() == [tokenizer.sep_id]  # "[SEP]" written in a text

    pair = loaded.bert_pack_inputs(
        [loaded.tokenize(tf.constant(TEXTS)), loaded.tokenize(tf.constant(PAIRS))], tf.constant(24)
    )
    expected = tokenizer(TEXTS, PAIRS, max_seq_length=24)
    for name, value in expected.items():
        np.testing.assert_array_equal(pair[name], value)


def test_in_memory_preprocessor_takes_a_string_a_batch_or_a_pair_tuple(trainable_hf_dir):
    _, tokenizer = load_encoder(trainable_hf_dir)
    preprocessor = BertPreprocessor(tokenizer, seq_length=16)
    assert preprocessor("a good film")["input_word_ids"].shape == (16,)
    assert preprocessor(TEXTS)["input_mask"].shape == (2, 16)
    pair = preprocessor((TEXTS, PAIRS))
    assert pair["input_type_ids"].numpy().max() == 1
    packed = preprocessor.bert_pack_inputs(
        [preprocessor.tokenize(TEXTS), preprocessor.tokenize(PAIRS)]
    )
    np.testing.assert_array_equal(packed["input_word_ids"], pair["input_word_ids"])


def test_tf_hubs_pair_recipe_runs_unchanged_on_the_export(tf_hub_export):
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            RECIPE,
            str(tf_hub_export / "preprocess"),
            str(tf_hub_export / "encoder"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shape (8, 32)" in done.stdout
