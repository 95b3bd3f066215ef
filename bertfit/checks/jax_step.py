"""`bertfit check --backend jax`: the gradients of the run's loss on one batch through the
`JaxTrainer`'s own code, then its train step lowered and compiled ahead of time for every
bucket shape (`jax.jit(...).lower(shapes).compile()`: no step runs), each compilation counted
and XLA's memory plan of each executable reported, then two steps of the first bucket through
the trainer's own loop: a step's state is donated to XLA, so the second step is the first to
read what the first one gave back (the check's own weights change; nothing is saved).

This is the only part of `check` that differs by backend: the data, tokenizer, label, batch
shape and dtype checks read the tf.data pipeline, which feeds both backends unchanged, and the
memory plan (`checks/memory.py`) is arithmetic on the model's shapes.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from bertfit.checks.batches import shape_text, split_element
from bertfit.checks.findings import Report
from bertfit.checks.model import report_failure, report_gradients
from bertfit.model.inputs import INDEX, WORD_IDS
from bertfit.training.jax_step import xla_memory

STEP = "jax train step"
STAGE = "jax.jit"
STEPS_TAKEN = "JAX train steps"  # the stat `check_two_steps` reports

# What the TensorFlow check finds that this one cannot, said in the report.
NOT_CHECKED = (
    "variables without a gradient (grad-none, grad-head-disconnected, grad-pooler-unused): "
    "jax.grad gives every trained weight a gradient, zeros where it does not reach the loss, "
    "which is reported as grad-zero",
)


def global_batch(element: dict, replicas: int) -> dict:
    """One replica's pipeline batch as the shapes of the global batch the `JaxTrainer` takes:
    rows times `replicas` (it splits them over its devices), a scalar as it is, the example
    index left out (the step does not read it)."""
    shapes = {}
    for name, value in element.items():
        if name == INDEX:
            continue
        shape = tuple(value.shape)
        if len(shape):
            shape = (shape[0] * replicas, *shape[1:])
        shapes[name] = jax.ShapeDtypeStruct(shape, np.dtype(value.dtype.as_numpy_dtype))
    return shapes


def check_jax_gradients(report: Report, trainer, element: dict, replicas: int, where: str) -> None:
    """The gradients of the run's loss on the first batch (repeated on every replica to make
    a global batch), as the train step computes them: all-zero ones are findings, as on
    TensorFlow (`checks.model`)."""
    for text in NOT_CHECKED:
        report.not_checked.append(f"not checked on JAX: {text}")
    try:
        gradients, _ = trainer.gradients(_global_arrays(element, replicas))
    except Exception as e:  # reported as a finding
        report_failure(
            report, "grad-step-failed", "one training step on one batch failed", e, where
        )
        return
    weights = split_element(element)[2]
    report_gradients(report, trainer.model, trainer.variables, gradients, weights, ())


def _global_arrays(element: dict, replicas: int) -> dict:
    """One replica's pipeline batch as a global batch of numpy arrays (repeated on every
    replica), less the example index."""
    arrays = {name: np.asarray(value) for name, value in element.items() if name != INDEX}
    return {
        name: np.concatenate([value] * replicas) if value.ndim else value
        for name, value in arrays.items()
    }


def check_two_steps(
    report: Report, trainer, element: dict, replicas: int, where: str, compiled
) -> None:
    """Two optimizer steps on the first batch, each a call of the trainer's host loop
    (`JaxTrainer.train_steps`) with the step `compiled` ahead of time, as a run takes its first
    two: the first call donates the state the Keras variables hold and writes the new one
    back, the second reads it from there. A failure is a `grad-step-failed` finding."""
    batch = _global_arrays(element, replicas)
    try:
        losses = [trainer.train_steps(iter([batch]), 1, compiled)[0, 0] for _ in range(2)]
    except Exception as e:  # reported as a finding
        report_failure(
            report, "grad-step-failed", "two training steps on one batch failed", e, where
        )
        return
    report.stats[STEPS_TAKEN] = f"2 on the first batch: loss {losses[0]:.4g}, then {losses[1]:.4g}"


def compile_buckets(report: Report, trainer, elements: list[dict], replicas: int) -> list:
    """Compiles the trainer's train step once per bucket (one first batch of each in
    `elements`, per replica); each bucket's outcome, compilations and XLA memory go in
    `report.compiled`, a failure is a `compile-failed` finding naming the shape. Returns the
    compiled steps (`jax.stages.Compiled`, None where it failed), in `elements`' order."""
    steps = []
    for element in elements:
        batch = global_batch(element, replicas)
        shape = shape_text(batch[WORD_IDS].shape)
        traces, start = trainer.compilations(), time.perf_counter()
        entry = {"name": STEP, "shape": shape, "stage": STAGE, "ok": True}
        compiled = None
        try:
            compiled = trainer.compile_train_step(batch)
        except Exception as e:  # reported as a finding
            entry["ok"] = False
            report_failure(
                report,
                "compile-failed",
                f"jax.jit could not compile the {STEP} for {shape}",
                e,
                f"{STEP} {shape}",
            )
        else:
            entry["memory_bytes"] = xla_memory(compiled)
        entry["compilations"] = trainer.compilations() - traces
        entry["seconds"] = round(time.perf_counter() - start, 2)
        report.compiled.append(entry)
        steps.append(compiled)
    ok = [c for c in report.compiled if c["name"] == STEP]
    report.stats["JAX compilations"] = (
        f"{sum(c['compilations'] for c in ok)} for {len(ok)} bucket(s) (jax.jit, ahead of time)"
    )
    return steps
