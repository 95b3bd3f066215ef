"""The distillation loss: the student learns the teacher's softened probabilities and, on the
rows that have one, the given label (Hinton et al., 2015, "Distilling the Knowledge in a Neural
Network").

A distillation batch's `label` is float32 [batch, classes + 1]: the teacher's probabilities
softened at the temperature T (`soften`), then the given class index, or -1 on a row without a
label (an `--unlabelled` text). Per row:

    soft = T² · KL(teacher_T || softmax(logits / T))
    hard = cross-entropy(given label, softmax(logits))
    loss = soft_weight · soft + (1 - soft_weight) · hard      (a labelled row)
    loss = soft                                                (an unlabelled row)

T² keeps the soft term's gradients the size of the hard term's whatever T is.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from bertfit.config import SINGLE_LABEL
from bertfit.model.inputs import GLOBAL_EXAMPLES
from bertfit.model.losses import example_targets
from bertfit.model.losses import per_example_loss as task_loss

UNLABELLED = -1  # the hard-label column of a row the teacher alone labels


def soften(probabilities: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) from softmax(logits): p^(1/T), renormalised (exact: the softmax's
    normaliser cancels), float64 for the small probabilities a high T lifts."""
    tempered = np.power(np.asarray(probabilities, np.float64), 1.0 / temperature)
    return tempered / tempered.sum(axis=-1, keepdims=True)


def distillation_targets(
    probabilities: np.ndarray, hard: np.ndarray, temperature: float
) -> np.ndarray:
    """The [rows, classes + 1] float32 targets `per_example_loss` reads: the softened
    probabilities, then the given class index (or `UNLABELLED`)."""
    soft = soften(probabilities, temperature)
    return np.concatenate([soft, np.asarray(hard, np.float64)[:, None]], axis=1).astype(np.float32)


def per_example_loss(targets, logits, temperature: float, soft_weight: float):
    """[batch] losses of `distillation_targets` rows against the student's logits (keras.ops:
    either backend)."""
    logits = ops.cast(logits, "float32")
    teacher, hard = targets[:, :-1], ops.cast(targets[:, -1], "int32")
    student = ops.log_softmax(logits / temperature, axis=-1)
    # x·log x, 0 where x is 0 (the teacher's entropy: the KL's constant term)
    entropy = ops.sum(teacher * ops.log(ops.where(teacher > 0, teacher, 1.0)), axis=-1)
    soft = temperature**2 * (entropy - ops.sum(teacher * student, axis=-1))
    labelled = hard != UNLABELLED
    given = task_loss(SINGLE_LABEL, ops.where(labelled, hard, 0), logits)
    mixed = soft_weight * soft + (1.0 - soft_weight) * given
    return ops.where(labelled, mixed, soft)


def batch_loss(batch: dict, logits, temperature: float, soft_weight: float):
    """This replica's share of the global batch's mean distillation loss, weighted as
    `bertfit.model.losses.batch_loss` weighs the task's (padding rows weigh nothing)."""
    targets, weights = example_targets(batch)  # a packed batch's per slot (--packing)
    losses = per_example_loss(targets, logits, temperature, soft_weight)
    return ops.sum(losses * weights) / batch[GLOBAL_EXAMPLES]
