"""What a classifier's logits mean to a user: the one place they become probabilities, labels or
values. The exported SavedModel, the in-memory predictor, `bertfit serve`, `bertfit evaluate` and
`bertfit predict` all use it, so they cannot disagree; and the probabilities are the trainer's
(`bertfit.model.losses.outputs`) of the logits divided by the run's calibration temperatures
(`Task.temperatures`, fitted on --eval at the end of training: `bertfit.runs.calibration`),
so every export and server gives the calibrated probabilities. The LiteRT and ONNX exports
(`bertfit.export.portable`) divide by the same `calibrated_logits`.

`task_outputs` (in the graph) gives every output by name:

- single-label: `probabilities` [batch, labels] (softmax), `label_id` [batch] (int32), `label`
  [batch] (string);
- multi-label: `probabilities` [batch, labels] (sigmoid per label), `predicted` [batch, labels]
  (int32 1 at or above the label's threshold, `Task.decision_thresholds`), `labels` [batch]
  (the predicted names joined by the task's separator, "" for none);
- regression: `value` [batch] (float32, in the training targets' units); with a predictive
  interval fitted on --eval (`Task.interval`), `value_low` and `value_high` too.

`prediction_rows` and `metric_inputs` read those arrays back (numpy): as `predict`'s rows, and as
what `task_metrics` takes; `numpy_task_outputs` makes the same arrays from probabilities in numpy,
for an engine that runs no TensorFlow (`bertfit.inference.onnx_runtime`), and `logit_outputs`
from the logits (`bertfit.inference.jax_classifier`): those processes never import TensorFlow,
which is why it is imported inside `task_outputs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from bertfit.data.tasks import MULTI_LABEL, REGRESSION, Task

if TYPE_CHECKING:
    import tensorflow as tf


def task_outputs(task: Task, logits: tf.Tensor, label_names: tf.Tensor) -> dict[str, tf.Tensor]:
    """The named outputs of `task` for a batch of `logits`.

    Examples:
    >>> import tensorflow as tf
    >>> out = task_outputs(Task("single-label", ("neg", "pos")), tf.constant([[0.0, 2.0]]),
    ...                    tf.constant(["neg", "pos"]))
    >>> out["label"].numpy().tolist(), out["label_id"].numpy().tolist()
    ([b'pos'], [1])
    """
    import tensorflow as tf

    from bertfit.model.losses import outputs as logit_meaning

    # a tf.Tensor already on TensorFlow's Keras backend; on JAX's (`inference.jax_classifier`,
    # eager) keras.ops gives a jax.Array, and the string ops below take tensors
    meaning = tf.convert_to_tensor(logit_meaning(task.kind, calibrated_logits(task, logits)))
    if task.kind == REGRESSION:
        value = meaning[:, 0] * task.std + task.mean
        if not task.interval:
            return {"value": value}
        return {
            "value": value,
            "value_low": value - task.interval,
            "value_high": value + task.interval,
        }
    if task.kind == MULTI_LABEL:
        predicted = meaning >= tf.constant(task.decision_thresholds, tf.float32)
        names = tf.ragged.boolean_mask(tf.broadcast_to(label_names, tf.shape(predicted)), predicted)
        return {
            "probabilities": meaning,
            "predicted": tf.cast(predicted, tf.int32),
            "labels": tf.strings.reduce_join(names, axis=-1, separator=task.separator),
        }
    label_id = tf.argmax(meaning, axis=-1, output_type=tf.int32)
    return {
        "probabilities": meaning,
        "label": tf.gather(label_names, label_id),
        "label_id": label_id,
    }


def calibrated_logits(task: Task, logits: tf.Tensor) -> tf.Tensor:
    """`logits` (float32) divided by the task's temperatures (unchanged when uncalibrated).

    Examples:
    >>> import tensorflow as tf
    >>> task = Task("single-label", ("neg", "pos"), temperatures=(2.0,))
    >>> calibrated_logits(task, tf.constant([[0.0, 2.0]])).numpy().tolist()
    [[0.0, 1.0]]
    """
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    if not task.temperatures:
        return logits
    return logits / tf.constant(task.temperatures, tf.float32)


def numpy_task_outputs(task: Task, meaning: np.ndarray) -> dict[str, np.ndarray]:
    """`task_outputs`' arrays, as the TensorFlow graph gives them (strings as bytes), from what
    the logits mean: the probabilities, or for regression the value in the targets' units.

    Examples:
    >>> out = numpy_task_outputs(Task("single-label", ("neg", "pos")), np.array([[0.25, 0.75]]))
    >>> out["label"].tolist(), out["label_id"].tolist()
    ([b'pos'], [1])
    """
    if task.kind == REGRESSION:
        value = np.asarray(meaning, np.float32)
        if not task.interval:
            return {"value": value}
        return {
            "value": value,
            "value_low": value - task.interval,
            "value_high": value + task.interval,
        }
    meaning = np.asarray(meaning, np.float32)
    names = np.array([name.encode("utf-8") for name in task.labels], dtype=object)
    if task.kind == MULTI_LABEL:
        predicted = meaning >= np.asarray(task.decision_thresholds, np.float32)
        separator = task.separator.encode("utf-8")
        labels = [separator.join(names[row]) for row in predicted]
        return {
            "probabilities": meaning,
            "predicted": predicted.astype(np.int32),
            "labels": np.array(labels, dtype=object),
        }
    label_id = meaning.argmax(axis=-1).astype(np.int32)
    return {"probabilities": meaning, "label": names[label_id], "label_id": label_id}


def logit_outputs(task: Task, logits: np.ndarray) -> dict[str, np.ndarray]:
    """`task_outputs`' arrays from a batch of logits, without TensorFlow: calibrated,
    given their meaning by `bertfit.model.losses.outputs` (Keras ops, on this process's
    backend) and read as `numpy_task_outputs` reads them.

    Examples:
    >>> task = Task("single-label", ("neg", "pos"), temperatures=(2.0,))
    >>> out = logit_outputs(task, np.array([[0.0, 2.0]]))
    >>> out["label"].tolist(), [round(float(p), 4) for p in out["probabilities"][0]]
    ([b'pos'], [0.2689, 0.7311])
    """
    from bertfit.model.losses import outputs as logit_meaning

    logits = np.asarray(logits, np.float32)
    if task.temperatures:
        logits = logits / np.asarray(task.temperatures, np.float32)
    meaning = np.asarray(logit_meaning(task.kind, logits), np.float32)
    if task.kind == REGRESSION:
        meaning = meaning[:, 0] * task.std + task.mean
    return numpy_task_outputs(task, meaning)


def prediction_rows(task: Task, outputs: dict[str, np.ndarray]) -> list[dict]:
    """One row per example of `task_outputs`' arrays: `{"label", "probabilities"}`
    (single-label), `{"labels", "probabilities"}` (multi-label) or `{"value"}` (regression,
    with `interval` [low, high] when the run fitted one on --eval); probabilities by label
    name.

    Examples:
    >>> task = Task("single-label", ("neg", "pos"))
    >>> prediction_rows(task, {"probabilities": np.array([[0.25, 0.75]]), "label_id": [1]})
    [{'label': 'pos', 'probabilities': {'neg': 0.25, 'pos': 0.75}}]
    """
    if task.kind == REGRESSION:
        if not task.interval:
            return [{"value": float(v)} for v in outputs["value"]]
        return [
            {"interval": [float(v) - task.interval, float(v) + task.interval], "value": float(v)}
            for v in outputs["value"]
        ]
    labels = list(task.labels)
    rows = [
        {"probabilities": {name: float(v) for name, v in zip(labels, p, strict=True)}}
        for p in outputs["probabilities"]
    ]
    if task.kind == MULTI_LABEL:
        for row, chosen in zip(rows, outputs["predicted"], strict=True):
            row["labels"] = [name for name, on in zip(labels, chosen, strict=True) if on]
    else:
        for row, label_id in zip(rows, outputs["label_id"], strict=True):
            row["label"] = labels[int(label_id)]
    return [dict(sorted(row.items())) for row in rows]


def metric_inputs(task: Task, outputs: dict[str, np.ndarray]) -> np.ndarray:
    """What `task_metrics` takes from `task_outputs`' arrays, as the trainer gives it: the
    probabilities, or [n, 1] standardised values (regression)."""
    if task.kind == REGRESSION:
        return ((outputs["value"] - task.mean) / task.std)[:, None]
    return outputs["probabilities"]
