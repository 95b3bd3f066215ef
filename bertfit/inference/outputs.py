"""What a classifier's logits mean to a user: the one place they become probabilities, labels or
values. The exported SavedModel, the in-memory predictor and `bertfit serve` all use it, so they
cannot disagree.

- single-label: `probabilities` [batch, labels] (softmax), `label_id` [batch] (int32), `label`
  [batch] (string);
- multi-label: `probabilities` [batch, labels] (sigmoid per label), `predicted` [batch, labels]
  (int32 1 at or above the threshold), `labels` [batch] (the predicted names joined by the
  task's separator, "" for none);
- regression: `value` [batch] (float32, in the training targets' units).
"""

from __future__ import annotations

import tensorflow as tf

from bertfit.data.tasks import MULTI_LABEL, REGRESSION, Task


def task_outputs(task: Task, logits: tf.Tensor, label_names: tf.Tensor) -> dict[str, tf.Tensor]:
    """The named outputs of `task` for a batch of `logits`.

    Examples:
    >>> out = task_outputs(Task("single-label", ("neg", "pos")), tf.constant([[0.0, 2.0]]),
    ...                    tf.constant(["neg", "pos"]))
    >>> out["label"].numpy().tolist(), out["label_id"].numpy().tolist()
    ([b'pos'], [1])
    """
    logits = tf.cast(logits, tf.float32)
    if task.kind == REGRESSION:
        return {"value": logits[:, 0] * task.std + task.mean}
    if task.kind == MULTI_LABEL:
        probabilities = tf.sigmoid(logits)
        predicted = probabilities >= task.threshold
        names = tf.ragged.boolean_mask(tf.broadcast_to(label_names, tf.shape(predicted)), predicted)
        return {
            "probabilities": probabilities,
            "predicted": tf.cast(predicted, tf.int32),
            "labels": tf.strings.reduce_join(names, axis=-1, separator=task.separator),
        }
    probabilities = tf.nn.softmax(logits, axis=-1)
    label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    return {
        "probabilities": probabilities,
        "label": tf.gather(label_names, label_id),
        "label_id": label_id,
    }
