"""ChunkedClassifier and WindowPooling (issue 35): one vector per document from its real
windows; a document's vector does not depend on what else is in its batch, nor on padding."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import ConfigError, InputFormatError
from bertfit.model.chunked import ChunkedClassifier, WindowPooling
from bertfit.model.classifier import BertClassifier
from bertfit.text import BertTokenizer
from bertfit.text.windows import WindowSpec, tokenize_windows
from tests.tiny import TINY_VOCAB, WORDS, tiny_encoder, write_vocab

LONG = " ".join(WORDS * 2)  # 62 ids: 6 windows of 14 ids with stride 4
SPEC = WindowSpec(max_seq_length=16, stride=4, max_chunks=8)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return BertTokenizer(write_vocab(tmp_path_factory.mktemp("vocab")))


@pytest.fixture(scope="module")
def encoder():
    return tiny_encoder()


def _model(encoder, chunk_pooling: str, pooling: str = "cls") -> ChunkedClassifier:
    model = ChunkedClassifier(BertClassifier(encoder, 3, pooling, seed=1), chunk_pooling)
    if chunk_pooling == "attention":  # a non-zero score, so attention is not the mean
        score = model.window_pooling.score.kernel
        score.assign(np.random.default_rng(0).normal(0, 1, score.shape).astype("float32"))
    return model


def _inputs(tokenizer, texts, k):
    out = tokenize_windows(tokenizer, texts, SPEC, max_chunks=k)
    return {n: out[n] for n in ("input_word_ids", "input_mask", "input_type_ids", "window_mask")}


@pytest.mark.parametrize("chunk_pooling", ["mean", "max", "attention"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_document_gets_the_same_vector_alone_with_short_documents_or_padding(
    tokenizer, encoder, chunk_pooling, pooling
):
    model = _model(encoder, chunk_pooling, pooling)
    windows = int(tokenize_windows(tokenizer, [LONG], SPEC)["windows"][0])
    assert windows == 6
    alone = model.document_vectors(_inputs(tokenizer, [LONG], windows)).numpy()
    mixed = model.document_vectors(_inputs(tokenizer, ["a film", LONG, "bad"], windows)).numpy()
    padded = _inputs(tokenizer, ["good", LONG, "", "", ""], 8)  # K 8 > 6, empty documents
    padded["window_mask"] = tf.tensor_scatter_nd_update(
        padded["window_mask"], [[2, 0], [3, 0], [4, 0]], [0, 0, 0]
    )  # padding documents: no real window at all
    in_padding = model.document_vectors(padded).numpy()
    np.testing.assert_allclose(mixed[1], alone[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(in_padding[1], alone[0], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(in_padding[2:], 0.0)  # a document without windows: zeros
    logits = model(padded).numpy()
    assert logits.shape == (5, 3) and np.isfinite(logits).all()


@pytest.mark.parametrize("chunk_pooling", ["mean", "max", "attention"])
def test_what_padding_windows_hold_never_reaches_the_output(tokenizer, encoder, chunk_pooling):
    model = _model(encoder, chunk_pooling)
    inputs = _inputs(tokenizer, [LONG, "a good film"], 8)
    rng = np.random.default_rng(3)
    noisy = dict(inputs)
    pad = ~tf.cast(inputs["window_mask"], tf.bool)[:, :, None]
    random_ids = rng.integers(5, len(TINY_VOCAB), inputs["input_word_ids"].shape, dtype="int32")
    noisy["input_word_ids"] = tf.where(pad, random_ids, inputs["input_word_ids"])
    noisy["input_mask"] = tf.where(pad, 1, inputs["input_mask"])
    np.testing.assert_array_equal(model(noisy).numpy(), model(inputs).numpy())


def test_window_pooling_follows_its_definition_on_real_windows_only():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2, 4, 5)).astype("float32")
    vectors[0, 3] = np.nan  # a padding window: never read, not even multiplied by 0
    vectors[1, 2:] = np.inf
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], "int32")
    real = [vectors[0, :3], vectors[1, :2]]
    mean = WindowPooling("mean")(vectors, mask).numpy()
    maxed = WindowPooling("max")(vectors, mask).numpy()
    np.testing.assert_allclose(mean, [r.mean(0) for r in real], rtol=1e-6)
    np.testing.assert_array_equal(maxed, [r.max(0) for r in real])
    attention = WindowPooling("attention")
    np.testing.assert_allclose(attention(vectors, mask).numpy(), mean, rtol=1e-6)  # starts as mean
    w = rng.normal(size=(5, 1)).astype("float32")
    attention.score.kernel.assign(w)
    expected = []
    for r in real:
        p = np.exp(r @ w[:, 0] - (r @ w[:, 0]).max())
        expected.append((p / p.sum()) @ r)
    np.testing.assert_allclose(attention(vectors, mask).numpy(), expected, rtol=1e-5)


def test_the_attention_score_learns_and_padding_windows_get_no_gradient():
    pooling = WindowPooling("attention")
    vectors = tf.Variable(np.random.default_rng(1).normal(size=(1, 3, 4)).astype("float32"))
    with tf.GradientTape() as tape:
        out = pooling(vectors, tf.constant([[1, 1, 0]]))
        loss = tf.reduce_sum(out * tf.constant([[1.0, -2.0, 0.5, 3.0]]))
    grad_vectors, grad_score = tape.gradient(loss, [vectors, pooling.score.kernel])
    assert np.abs(grad_score.numpy()).sum() > 0
    np.testing.assert_array_equal(grad_vectors.numpy()[0, 2], 0.0)


def test_the_model_saves_and_loads_with_its_pooling(tokenizer, encoder, tmp_path):
    model = _model(encoder, "attention", "mean")
    inputs = _inputs(tokenizer, [LONG, "bad"], 8)
    expected = model(inputs).numpy()
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, ChunkedClassifier) and loaded.chunk_pooling == "attention"
    np.testing.assert_allclose(loaded(inputs).numpy(), expected, atol=1e-6)


def test_bad_pooling_and_missing_window_mask_are_refused(tokenizer, encoder):
    with pytest.raises(ConfigError, match="not one of"):
        WindowPooling("sum")
    inputs = _inputs(tokenizer, ["a"], 2)
    del inputs["window_mask"]
    with pytest.raises(InputFormatError, match="tokenize_windows"):
        _model(encoder, "mean")(inputs)
