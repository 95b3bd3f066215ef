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

from keras import ops

from bertfit.config import MULTI_LABEL, REGRESSION
from bertfit.model.inputs import GLOBAL_EXAMPLES, LABEL, WEIGHT


def per_example_loss(kind: str, labels, logits):
    """[batch] losses: softmax cross-entropy (single-label), binary cross-entropy averaged over
    the labels (multi-label) or squared error of the standardised target (regression)."""
    logits = ops.cast(logits, "float32")
    if kind == MULTI_LABEL:
        # TensorFlow's sigmoid_cross_entropy_with_logits on TensorFlow; log-sigmoids on JAX.
        per_label = ops.binary_crossentropy(labels, logits, from_logits=True)
        return ops.mean(per_label, axis=-1)
    if kind == REGRESSION:
        return ops.square(logits[:, 0] - labels)
    # TensorFlow's sparse_softmax_cross_entropy_with_logits on TensorFlow.
    return ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def example_targets(batch: dict) -> tuple:
    """The batch's labels and loss weights, one per example in the order of the logits' rows:
    a packed batch's [rows, slots, ...] (`--packing`) flattened slot after slot."""
    weights, labels = batch[WEIGHT], batch[LABEL]
    labels = ops.reshape(labels, (-1, *labels.shape[len(weights.shape) :]))
    return labels, ops.reshape(weights, (-1,))


def batch_loss(kind: str, batch: dict, logits):
    """This replica's share of the global batch's mean loss (weighted, padding excluded)."""
    labels, weights = example_targets(batch)
    losses = per_example_loss(kind, labels, logits)
    return ops.sum(losses * weights) / batch[GLOBAL_EXAMPLES]


def outputs(kind: str, logits):
    """What the model's logits mean: probabilities (softmax, or sigmoid per label for
    multi-label), or the standardised prediction (regression)."""
    logits = ops.cast(logits, "float32")
    if kind == MULTI_LABEL:
        return ops.sigmoid(logits)
    if kind == REGRESSION:
        return logits
    return ops.softmax(logits, axis=-1)


def batch_cosine_loss(embeddings, alike, weights):
    """The weighted squared error between the cosine of every two of a batch's embeddings
    ([batch, hidden]) and how alike the two rows are (`alike` [batch, batch]: 1 alike, 0 not;
    `weights` [batch, batch], summing to 1, `data.pairs.pair_weights`): sentence-transformers'
    CosineSimilarityLoss, which SetFit's contrastive stage trains with, over all of a batch's
    pairs at once (`--few-shot`)."""
    unit = ops.normalize(ops.cast(embeddings, "float32"), axis=-1)
    cosine = ops.matmul(unit, ops.transpose(unit))
    error = ops.square(cosine - ops.cast(alike, "float32"))
    return ops.sum(ops.cast(weights, "float32") * error)
