"""The loss of each task on a static-shape batch, for bertfit's trainer and for your own loop.

A batch (see `bertfit.data.pipeline.BucketedInput` and `bertfit.make_dataset`) carries
`label`, `example_weight` (0 on padding rows; the class weight on real ones) and
`global_examples` (the real examples of the whole global batch). `batch_loss` sums the weighted
per-example losses and divides by `global_examples`, so summing it over replicas gives the
global batch's mean, and padding rows weigh nothing.

    logits = model(features, training=True)
    loss = bertfit.losses.batch_loss("multi-label", batch, logits)
"""

from __future__ import annotations

import tensorflow as tf

from bertfit.config import MULTI_LABEL, REGRESSION
from bertfit.model.inputs import GLOBAL_EXAMPLES, LABEL, WEIGHT


def per_example_loss(kind: str, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """[batch] losses: softmax cross-entropy (single-label), binary cross-entropy averaged over
    the labels (multi-label) or squared error of the standardised target (regression)."""
    logits = tf.cast(logits, tf.float32)
    if kind == MULTI_LABEL:
        per_label = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.reduce_mean(per_label, axis=-1)
    if kind == REGRESSION:
        return tf.square(logits[:, 0] - labels)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def batch_loss(kind: str, batch: dict, logits: tf.Tensor) -> tf.Tensor:
    """This replica's share of the global batch's mean loss (weighted, padding excluded)."""
    losses = per_example_loss(kind, batch[LABEL], logits)
    return tf.reduce_sum(losses * batch[WEIGHT]) / batch[GLOBAL_EXAMPLES]


def outputs(kind: str, logits: tf.Tensor) -> tf.Tensor:
    """What the model's logits mean: probabilities (softmax, or sigmoid per label for
    multi-label), or the standardised prediction (regression)."""
    logits = tf.cast(logits, tf.float32)
    if kind == MULTI_LABEL:
        return tf.sigmoid(logits)
    if kind == REGRESSION:
        return logits
    return tf.nn.softmax(logits, axis=-1)
