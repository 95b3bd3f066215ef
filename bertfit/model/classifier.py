"""`BertClassifier`: a `BertEncoder` with a pooling and a classification layer."""

from __future__ import annotations

import keras
import tensorflow as tf

from bertfit.model.encoder import BertEncoder
from bertfit.model.inputs import MASK, normalize_inputs
from bertfit.model.layers import Dropout
from bertfit.model.replica_jit import ReplicaJit


@keras.saving.register_keras_serializable(package="bertfit")
class BertClassifier(ReplicaJit, keras.Model):
    """Encoder, pooling, dropout and a dense layer giving one logit per class.

    A Keras model like any other: call it on the three int32 inputs, put it in a functional
    model, `compile`/`fit` it (under a `tf.distribute` strategy too), save it as `.keras`.

    Args:
        encoder: a `BertEncoder` (usually from `bertfit.load_encoder`).
        num_classes: the number of labels (outputs).
        pooling: "cls" uses the encoder's pooler on [CLS]; "mean" averages the unmasked
            tokens of `sequence_output` (for checkpoints whose pooler was never trained).
        dropout: dropout rate before the dense layer.
        seed: seeds the head's initialisation and its dropout.

    Logits are float32 whatever the encoder's dtype policy, so the loss is computed in float32.

    Examples:
    >>> from bertfit.model.config import BertConfig
    >>> config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=2, intermediate_size=64)
    >>> classifier = BertClassifier(BertEncoder(config), num_classes=3, pooling="mean")
    >>> ids = tf.constant([[2, 7, 3]])
    >>> classifier({"input_word_ids": ids, "input_mask": tf.ones_like(ids)}).shape
    TensorShape([1, 3])
    """

    def __init__(
        self,
        encoder: BertEncoder,
        num_classes: int,
        pooling: str = "cls",
        dropout: float = 0.1,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout_rate = dropout
        self.seed = seed
        self.dropout = Dropout(dropout, seed=seed, dtype=encoder.dtype_policy)
        self.head = keras.layers.Dense(
            num_classes,
            name="classifier",
            dtype=encoder.dtype_policy,
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range, seed=seed
            ),
        )
        self.head.build((None, encoder.config.hidden_size))

    @classmethod
    def from_checkpoint(
        cls,
        path: str,
        num_classes: int,
        *,
        pooling: str = "cls",
        dropout: float = 0.1,
        seed: int | None = None,
        dtype: str | None = None,
    ) -> BertClassifier:
        """A classifier on the pretrained encoder at `path` ("minilm-l6", a directory or an
        archive in any format `bertfit inspect` knows), with a new randomly initialised head.

        Examples:
        >>> model = BertClassifier.from_checkpoint("minilm-l6", num_classes=2)  # doctest: +SKIP
        """
        from bertfit.checkpoints.load import load_encoder

        encoder, _ = load_encoder(path, dtype=dtype)
        return cls(encoder, num_classes, pooling, dropout, seed=seed)

    @property
    def input_dtype(self):
        """Token ids, not the compute dtype: Keras builds and saves this model with int32."""
        return "int32"

    def pool(self, outputs: dict, mask: tf.Tensor) -> tf.Tensor:
        if self.pooling == "cls":
            return outputs["pooled_output"]
        sequence = outputs["sequence_output"]
        weights = keras.ops.cast(mask, sequence.dtype)[:, :, None]
        total = keras.ops.sum(sequence * weights, axis=1)
        return total / keras.ops.maximum(
            keras.ops.sum(weights, axis=1), keras.ops.cast(1e-9, sequence.dtype)
        )

    def call(self, inputs, training=False):
        inputs = normalize_inputs(inputs)
        outputs = self.encoder(inputs, training=training, pooled_only=self.pooling == "cls")
        features = self.pool(outputs, inputs[MASK])
        logits = self.head(self.dropout(features, training=training))
        return keras.ops.cast(logits, "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout_rate,
            "seed": self.seed,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        return cls(encoder, **config)
