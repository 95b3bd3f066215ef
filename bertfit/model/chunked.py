"""`ChunkedClassifier`: a `BertClassifier` over the windows of long documents (issue 35).

Its inputs are `bertfit.text.windows` outputs: the three int32 inputs `[batch, K, seq]` and a
`window_mask` `[batch, K]`. The encoder runs on the `batch * K` windows as one `[batch * K, seq]`
batch (static shapes for XLA), the classifier's own pooling (`cls` or `mean`) makes one vector
per window, `WindowPooling` makes one vector per document from its real windows only, and the
classifier's dropout and dense layer give one row of logits per document.
"""

from __future__ import annotations

import keras

from bertfit.errors import ConfigError, InputFormatError
from bertfit.model.backend import ReplicaJit
from bertfit.model.classifier import BertClassifier
from bertfit.model.inputs import ALIASES, MASK, WINDOW_MASK, normalize_inputs

CHUNK_POOLINGS = ("mean", "max", "attention")


@keras.saving.register_keras_serializable(package="bertfit")
class WindowPooling(keras.layers.Layer):
    """One vector per document from its window vectors; padding windows count for nothing.

    Padding windows are selected away (`where`), never multiplied by 0, so not even a NaN or an
    infinity in one of them reaches the output.

    Args:
        pooling: "mean" of the real windows, element-wise "max", or "attention": a softmax
            over the real windows of a learned score (one dense unit), whose weights start
            at 0 so it starts as the mean.

    Examples:
    >>> vectors = keras.ops.convert_to_tensor([[[1.0, 2.0], [3.0, 6.0], [9e9, 9e9]]])
    >>> pooled = WindowPooling("mean")(vectors, keras.ops.convert_to_tensor([[1, 1, 0]]))
    >>> keras.ops.convert_to_numpy(pooled).tolist()
    [[2.0, 4.0]]
    """

    def __init__(self, pooling: str = "mean", **kwargs):
        super().__init__(**kwargs)
        if pooling not in CHUNK_POOLINGS:
            raise ConfigError(f"chunk pooling {pooling!r} is not one of {CHUNK_POOLINGS}.")
        self.pooling = pooling
        self.score = None
        if pooling == "attention":
            self.score = keras.layers.Dense(
                1, use_bias=False, kernel_initializer="zeros", name="window_score", dtype="float32"
            )

    def build(self, vectors_shape, mask_shape=None):
        if self.score is not None:
            self.score.build((None, vectors_shape[-1]))

    def call(self, vectors, mask):
        real = keras.ops.cast(mask, "bool")[:, :, None]  # [batch, K, 1]
        values = keras.ops.cast(vectors, "float32")
        zeros = keras.ops.zeros_like(values)
        if self.pooling == "max":
            lowest = keras.ops.full_like(values, float("-inf"))
            pooled = keras.ops.max(keras.ops.where(real, values, lowest), axis=1)
            any_real = keras.ops.any(real, axis=1)
            pooled = keras.ops.where(any_real, pooled, keras.ops.zeros_like(pooled))
        else:
            if self.pooling == "mean":
                weights = keras.ops.cast(real, "float32")
            else:  # a softmax over the real windows, written out (a window alone weighs 1)
                scores = self.score(keras.ops.where(real, values, zeros))
                scores = keras.ops.where(real, scores, keras.ops.full_like(scores, -1e9))
                scores = scores - keras.ops.max(scores, axis=1, keepdims=True)
                exp = keras.ops.where(real, keras.ops.exp(scores), 0.0)
                weights = exp / keras.ops.maximum(keras.ops.sum(exp, axis=1, keepdims=True), 1e-30)
            total = keras.ops.sum(keras.ops.where(real, values * weights, zeros), axis=1)
            pooled = total / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1e-9)
        return keras.ops.cast(pooled, vectors.dtype)

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling}


@keras.saving.register_keras_serializable(package="bertfit")
class ChunkedClassifier(ReplicaJit, keras.Model):
    """A classifier of whole documents from their windows; see the module docstring.

    Args:
        classifier: the `BertClassifier` whose encoder, window pooling, dropout and head are used.
        chunk_pooling: how window vectors become a document vector (`CHUNK_POOLINGS`).

    Examples:
    >>> import numpy as np
    >>> from bertfit.model.config import BertConfig
    >>> from bertfit.model.encoder import BertEncoder
    >>> config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=2, intermediate_size=64)
    >>> model = ChunkedClassifier(BertClassifier(BertEncoder(config), 3), chunk_pooling="max")
    >>> ids = np.array([[[2, 7, 3], [2, 3, 0]]], "int32")  # one document, K = 2 windows
    >>> tuple(model({"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"),
    ...              "window_mask": np.array([[1, 0]], "int32")}).shape)
    (1, 3)
    """

    def __init__(self, classifier: BertClassifier, chunk_pooling: str = "mean", **kwargs):
        super().__init__(**kwargs)
        self.classifier = classifier
        self.chunk_pooling = chunk_pooling
        self.window_pooling = WindowPooling(chunk_pooling, name="window_pooling")
        self.window_pooling.build((None, None, classifier.encoder.config.hidden_size))

    @property
    def encoder(self):
        """The classifier's encoder (its load report, dtype policy and config)."""
        return self.classifier.encoder

    @property
    def input_dtype(self):
        """Token ids, not the compute dtype: Keras builds and saves this model with int32."""
        return "int32"

    def build(self, input_shape=None):
        """Nothing to make: the classifier's layers and the window pooling are built."""
        self.built = True

    def document_vectors(self, inputs, training=False):
        """`[batch, hidden]`: each document's pooled window vectors, before dropout and head."""
        if WINDOW_MASK not in inputs:
            raise InputFormatError(
                f"ChunkedClassifier needs {WINDOW_MASK!r} [batch, K] next to the windows; make "
                "the inputs with bertfit.text.windows.tokenize_windows."
            )
        windows = {k: v for k, v in inputs.items() if k in ALIASES}
        first = next(iter(windows.values()))
        batch, k, seq = (keras.ops.shape(first)[i] for i in range(3))
        flat = normalize_inputs(
            {
                name: keras.ops.reshape(t, (-1, first.shape[-1] or seq))
                for name, t in windows.items()
            }
        )
        classifier = self.classifier
        outputs = classifier.encoder(
            flat, training=training, pooled_only=classifier.pooling == "cls"
        )
        vectors = classifier.pool(outputs, flat[MASK])
        vectors = keras.ops.reshape(vectors, (batch, k, vectors.shape[-1]))
        return self.window_pooling(vectors, inputs[WINDOW_MASK])

    def call(self, inputs, training=False):
        features = self.document_vectors(inputs, training=training)
        logits = self.classifier.head(self.classifier.dropout(features, training=training))
        return keras.ops.cast(logits, "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "chunk_pooling": self.chunk_pooling,
            "classifier": keras.saving.serialize_keras_object(self.classifier),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        classifier = keras.saving.deserialize_keras_object(config.pop("classifier"))
        return cls(classifier, **config)
