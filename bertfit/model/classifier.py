"""`BertClassifier`: a `BertEncoder` with a pooling and a softmax classification layer."""

from __future__ import annotations

import keras
import tensorflow as tf

from bertfit.model.encoder import BertEncoder
from bertfit.model.inputs import MASK


class BertClassifier(keras.Model):
    """Encoder, pooling, dropout and a dense layer giving one logit per class.

    Args:
        encoder: a `BertEncoder` (usually from `bertfit.load_encoder`).
        num_classes: the number of labels.
        pooling: "cls" uses the encoder's pooler on [CLS]; "mean" averages the unmasked
            tokens of `sequence_output` (for checkpoints whose pooler was never trained).
        dropout: dropout rate before the dense layer.

    Logits are float32 whatever the encoder's dtype policy, so the loss is computed in float32.

    Examples:
    >>> from tests.tiny import tiny_encoder, tiny_inputs
    >>> classifier = BertClassifier(tiny_encoder(), num_classes=3, pooling="mean")
    >>> classifier(tiny_inputs(batch=2)).shape
    TensorShape([2, 3])
    """

    def __init__(self, encoder: BertEncoder, num_classes: int, pooling: str = "cls",
                 dropout: float = 0.1, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = keras.layers.Dropout(dropout, seed=seed, dtype=encoder.dtype_policy)
        self.head = keras.layers.Dense(
            num_classes, name="classifier", dtype=encoder.dtype_policy,
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range, seed=seed))
        self.head.build((None, encoder.config.hidden_size))

    def pool(self, outputs: dict, mask: tf.Tensor) -> tf.Tensor:
        if self.pooling == "cls":
            return outputs["pooled_output"]
        sequence = outputs["sequence_output"]
        weights = tf.cast(mask, sequence.dtype)[:, :, tf.newaxis]
        total = tf.reduce_sum(sequence * weights, axis=1)
        return total / tf.maximum(tf.reduce_sum(weights, axis=1), tf.cast(1e-9, sequence.dtype))

    def call(self, inputs, training=False):
        outputs = self.encoder(inputs, training=training)
        features = self.pool(outputs, tf.cast(inputs[MASK] if MASK in inputs else 1, tf.int32))
        logits = self.head(self.dropout(features, training=training))
        return tf.cast(logits, tf.float32)
