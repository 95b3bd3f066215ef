"""`BertClassifier`: a `BertEncoder` with a pooling and a classification layer."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from bertfit.config import POOLINGS
from bertfit.errors import ConfigError
from bertfit.model.backend import ReplicaJit
from bertfit.model.encoder import BertEncoder
from bertfit.model.inputs import MASK, STARTS, is_packed, normalize_inputs
from bertfit.model.layers import Dropout


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
        head_bias: the dense layer's initial bias, one value per output (zeros when None).
            bertfit's trainer gives a multi-label head the training labels' log-odds
            (`prior_log_odds`), so training starts from the base rates instead of 50%.
        normalize_features: the head reads the pooled vector divided by its length (its
            direction), as sentence-transformers' Normalize module gives it: `--few-shot`'s
            first stage trains only the cosine between these vectors.

    Logits are float32 whatever the encoder's dtype policy, so the loss is computed in float32.

    Examples:
    >>> from bertfit.model.config import BertConfig
    >>> config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=2, intermediate_size=64)
    >>> classifier = BertClassifier(BertEncoder(config), num_classes=3, pooling="mean")
    >>> ids = np.array([[2, 7, 3]], "int32")
    >>> tuple(classifier({"input_word_ids": ids, "input_mask": np.ones_like(ids)}).shape)
    (1, 3)
    """

    def __init__(
        self,
        encoder: BertEncoder,
        num_classes: int,
        pooling: str = "cls",
        dropout: float = 0.1,
        seed: int | None = None,
        head_bias: Sequence[float] | None = None,
        normalize_features: bool = False,
        **kwargs,
    ):
        if pooling not in POOLINGS:  # a run's undecided pooling (None) would pool as "mean"
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}.")
        super().__init__(**kwargs)
        self.encoder = encoder
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout_rate = dropout
        self.seed = seed
        self.head_bias = None if head_bias is None else [float(b) for b in head_bias]
        self.normalize_features = normalize_features
        self.dropout = Dropout(dropout, seed=seed, dtype=encoder.dtype_policy)
        # A trained head keeps float32 weights under a bfloat16 encoder (a frozen bf16 base).
        head_policy = "float32" if encoder.dtype_policy.name == "bfloat16" else None
        self.head = keras.layers.Dense(
            num_classes,
            name="classifier",
            dtype=head_policy or encoder.dtype_policy,
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range, seed=seed
            ),
            bias_initializer="zeros"
            if head_bias is None
            else keras.initializers.Constant(self.head_bias),
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

    def pool(self, outputs: dict, mask, slots: int | None = None):
        """One vector per example: the encoder's pooled output ("cls"), or the mean of its
        tokens in `sequence_output` ("mean"). `slots`: a packed batch's examples per row,
        whose `mask` numbers each token's example (`segment_means`)."""
        if self.pooling == "cls":
            return outputs["pooled_output"]
        sequence = outputs["sequence_output"]
        if slots is not None:
            return segment_means(sequence, mask, slots)
        # expand_dims, not [:, :, None]: LiteRT has no builtin for that slice when the length
        # is known only at run time (its export pads to the batch's bucket).
        weights = keras.ops.expand_dims(keras.ops.cast(mask, sequence.dtype), -1)
        total = keras.ops.sum(sequence * weights, axis=1)
        return total / keras.ops.maximum(
            keras.ops.sum(weights, axis=1), keras.ops.cast(1e-9, sequence.dtype)
        )

    def features(self, inputs, training=False):
        """What the head reads: one pooled vector per example (`pool`), divided by its length
        with `normalize_features`."""
        inputs = normalize_inputs(inputs)
        outputs = self.encoder(inputs, training=training, pooled_only=self.pooling == "cls")
        slots = inputs[STARTS].shape[1] if is_packed(inputs) else None
        features = self.pool(outputs, inputs[MASK], slots)
        if not self.normalize_features:
            return features
        length = keras.ops.sqrt(keras.ops.sum(keras.ops.square(features), -1, keepdims=True))
        return features / keras.ops.maximum(length, keras.ops.cast(1e-12, features.dtype))

    def call(self, inputs, training=False):
        """Logits [batch, outputs]; for a packed batch one row per example slot, [batch *
        slots, outputs] (an empty slot's are computed and carry no weight)."""
        features = self.features(inputs, training=training)
        logits = self.head(self.dropout(features, training=training))
        return keras.ops.cast(logits, "float32")

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout_rate,
            "seed": self.seed,
            "head_bias": self.head_bias,
            "normalize_features": self.normalize_features,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        return cls(encoder, **config)

    def build_from_config(self, config):
        """Every layer builds its weights in `__init__`, so a model loaded from a `.keras` file
        has them already; Keras' default would call `build` with the saved input shapes, which
        a model of dict inputs cannot take, and warn on every load."""
        self.built = True


def segment_means(sequence, segments, slots: int):
    """The mean of each example's tokens in a packed batch: `sequence` [batch, seq, hidden],
    `segments` [batch, seq] numbering each token's example 1..`slots` (0 on padding); returns
    [batch * slots, hidden] (zeros for an empty slot).

    Examples:
    >>> sequence = keras.ops.convert_to_tensor([[[1.0], [3.0], [8.0], [0.0]]])
    >>> means = segment_means(sequence, keras.ops.convert_to_tensor([[1, 1, 2, 0]]), slots=3)
    >>> keras.ops.convert_to_numpy(means)[:, 0].tolist()
    [2.0, 8.0, 0.0]
    """
    numbers = keras.ops.arange(1, slots + 1, dtype="int32")
    # [batch, slots, seq]: 1 where the token is the slot's example's
    members = keras.ops.cast(
        keras.ops.equal(keras.ops.expand_dims(segments, 1), numbers[None, :, None]), sequence.dtype
    )
    totals = keras.ops.matmul(members, sequence)
    counts = keras.ops.sum(members, axis=-1, keepdims=True)
    means = totals / keras.ops.maximum(counts, keras.ops.cast(1.0, sequence.dtype))
    return keras.ops.reshape(means, (-1, sequence.shape[-1]))


def prior_log_odds(targets: np.ndarray, floor: float = 1e-3) -> list[float]:
    """Each label's log-odds log(p / (1 - p)) in multi-hot training `targets` [n, labels], p
    clipped to [floor, 1 - floor]: the bias at which a sigmoid head predicts each label's base
    rate. A head started at 0 predicts 50% for every label, and its first steps spend
    themselves pushing rare labels down (the bias of focal loss's "prior" initialisation).

    Examples:
    >>> [round(b, 3) for b in prior_log_odds(np.array([[1, 0], [0, 0], [0, 0], [0, 1]]))]
    [-1.099, -1.099]
    """
    p = np.clip(np.asarray(targets, np.float64).mean(axis=0), floor, 1 - floor)
    return [float(v) for v in np.log(p / (1 - p))]
