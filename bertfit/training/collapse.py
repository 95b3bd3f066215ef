"""The warning after a run's evaluation when its single-label predictions collapse onto few
classes, and the flags to rerun it with: class weights when a class is rare, longer training
when none is (docs/quality.md measures both). Scoring itself is `bertfit.runs.metrics`."""

from __future__ import annotations

import numpy as np

from bertfit.config import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, NO_CLASS_WEIGHTS, TrainConfig
from bertfit.data.tasks import SINGLE_LABEL, Task

COLLAPSE_SHARE, COLLAPSE_GOLD_SHARE = 0.9, 0.7
# A class under this share of an even split (25% of 2 classes, 17% of 3) is rare: a collapse
# onto the majority is then the imbalance's doing, not too little training.
RARE_CLASS_SHARE = 0.5


def collapse_warning(
    task: Task,
    targets: np.ndarray,
    probabilities: np.ndarray,
    train: TrainConfig | None = None,
    training_labels: np.ndarray | None = None,
    untrained_pooler: str | None = None,
) -> str | None:
    """A warning when single-label predictions collapse onto few classes: they fall on fewer
    classes than the gold labels use, or one class takes > 90% of them while its gold share is
    under 70%. What it advises depends on the cause it can see in the training labels
    (`training_labels`, else the gold ones): with a rare class (under half of an even share),
    the majority took over, and `collapse_advice(train)` says how to weigh the classes; with
    near-balanced classes (a 58/42 split) nothing pulls towards one class, the run is
    under-trained, and `undertrained_advice(train)` says how to train it longer. A run that
    pooled with a pooler the checkpoint never trained (`untrained_pooler`: why, from
    `checkpoints.pooling.untrained_pooler`) is told to pool with the mean first: on MiniLM
    that collapse (499 of 500 rows one class) was the pooler's, not the training length's."""
    if task.kind != SINGLE_LABEL or not len(targets):
        return None
    predicted = np.bincount(probabilities.argmax(axis=1), minlength=len(task.labels))
    gold = np.bincount(targets, minlength=len(task.labels))
    top = int(predicted.argmax())
    share, gold_share = predicted[top] / len(targets), gold[top] / len(targets)
    if (predicted > 0).sum() >= (gold > 0).sum() and (
        share <= COLLAPSE_SHARE or gold_share >= COLLAPSE_GOLD_SHARE
    ):
        return None
    total, classes = len(targets), int((predicted > 0).sum())
    found = (
        f"the model predicts only {classes} of the {int((gold > 0).sum())} classes in the "
        "evaluation data"
        if classes < (gold > 0).sum()
        else "the model's predictions collapse onto one class"
    ) + (
        f": {task.labels[top]!r} takes {predicted[top]} of the {total} predictions "
        f"({percent(share)}) but is {gold[top]} of the {total} gold labels ({percent(gold_share)})"
    )
    counts = np.bincount(
        targets if training_labels is None else training_labels, minlength=len(task.labels)
    )
    rarest = min((i for i in range(len(counts)) if counts[i]), key=lambda i: counts[i])
    rarest_share, present = counts[rarest] / counts.sum(), int((counts > 0).sum())
    which = "training" if training_labels is not None else "evaluation"
    rare = rarest_share < RARE_CLASS_SHARE / present
    advice = (collapse_advice if rare else undertrained_advice)(
        train or TrainConfig(batch_size=DEFAULT_BATCH_SIZE, epochs=DEFAULT_EPOCHS)
    )
    if untrained_pooler:
        advice = (
            f"It pooled with --pooling cls, but {untrained_pooler}: rerun with --pooling mean "
            f"first, and if it still collapses, {advice[0].lower()}{advice[1:]}"
        )
    name, said = task.labels[rarest], percent(rarest_share)
    if rare:
        return (
            f"{found}; it has collapsed onto the majority class ({name!r} is {said} of "
            f"the {which} labels; macro_f1 shows it, accuracy hides it). {advice}"
        )
    cause = (
        ""
        if untrained_pooler
        else (": the run is under-trained (it has not learned to tell the classes apart yet)")
    )
    return (
        f"{found}. The {which} labels are near-balanced (the rarest, {name!r}, is {said} "
        f"of them), so class imbalance does not explain it{cause}. {advice}"
    )


def percent(share: float) -> str:
    """A share as a percentage that never rounds to 0% or 100% unless it is exactly that.

    Examples:
    >>> percent(0.998), percent(1.0), percent(0.42), percent(0.0004)
    ('99.8%', '100%', '42%', '0.04%')
    """
    for digits in range(4):
        text = f"{share * 100:.{digits}f}"
        if share in (0, 1) or float(text) not in (0, 100):
            return f"{text}%"
    return f"{share * 100:.6g}%"


def undertrained_advice(train: TrainConfig) -> str:
    """What to rerun an under-trained run with: twice the steps and twice the learning rate
    (capped at 1e-4, the top of fine-tuning's usual range, unless it is already higher).

    Examples:
    >>> undertrained_advice(TrainConfig(epochs=1))
    'Rerun with --epochs 2 --learning-rate 0.0001.'
    """
    longer = (
        f"--max-steps {train.max_steps * 2}"
        if train.max_steps is not None
        else f"--epochs {train.epochs * 2}"
    )
    rate = max(min(train.learning_rate * 2, 1e-4), train.learning_rate)
    return f"Rerun with {longer} --learning-rate {rate:g}."


def collapse_advice(train: TrainConfig) -> str:
    """What to rerun with after a collapse: `--class-weights balanced` when the run had no class
    weights (measured in docs/quality.md: on a 586-row 3-class set with an 8% class it lifted
    MiniLM's test macro-F1 from 0.259 to 0.665-0.675 on both seeds run), else more epochs and a
    higher learning rate (not measured).

    Examples:
    >>> collapse_advice(TrainConfig())[:45]
    'Rerun with --class-weights balanced (the same'
    """
    if train.class_weights == NO_CLASS_WEIGHTS:
        return (
            "Rerun with --class-weights balanced (the same command plus that flag; "
            "docs/quality.md measures it)."
        )
    return (
        f"It already uses --class-weights {train.class_weights}: rerun with "
        f"--epochs {train.epochs * 2} --learning-rate {train.learning_rate * 2:g} "
        "(docs/quality.md)."
    )
