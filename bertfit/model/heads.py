"""What a classifier's scores mean to a user: the one place logits become probabilities and labels.

The exported SavedModel, the in-memory predictor and `bertfit serve` all call this, so they
cannot disagree.
"""

from __future__ import annotations

import tensorflow as tf

OUTPUT_NAMES = ("probabilities", "label", "label_id")


def classification_outputs(logits: tf.Tensor, label_names: tf.Tensor) -> dict[str, tf.Tensor]:
    """Single-label outputs: softmax `probabilities` [batch, labels] (float32), the most
    probable `label_id` [batch] (int32) and its name `label` [batch] (string).

    Examples:
    >>> out = classification_outputs(tf.constant([[0.0, 2.0]]), tf.constant(["neg", "pos"]))
    >>> out["label"].numpy().tolist(), out["label_id"].numpy().tolist()
    ([b'pos'], [1])
    """
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
    label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    return {"probabilities": probabilities, "label": tf.gather(label_names, label_id),
            "label_id": label_id}
