"""`bertfit check --backend jax` (`checks/jax_step.py`): the same data and memory findings as on
TensorFlow, the JAX run's own step compiled once per bucket ahead of time, then two steps taken
through the run's own loop.

Keras reads its backend once per process, so the JAX check runs in a process of its own; this
one is TensorFlow's and checks the same input for comparison.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checks.findings import ERROR, Report
from bertfit.checks.jax_step import STEP, STEPS_TAKEN, check_two_steps, compile_buckets
from bertfit.cli import main
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, WORD_IDS
from tests.jax_process import run_in_jax
from tests.tiny import sentiment_rows, train_args, write_csv

# what only the step part of each backend reports
STEP_STATS = ("XLA compilation", "JAX compilations", STEPS_TAKEN)


def _check_in_jax(args: list[str]) -> dict:
    out = run_in_jax(["bertfit.cli", *args])
    return json.loads(out[out.index("{") :])


@pytest.mark.slow  # a JAX process: two compilations of the tiny step, ~30 s on 2 busy cores
def test_check_jax_compiles_each_bucket_once_with_tensorflows_data_findings(
    tmp_path, trainable_hf_dir, capsys
):
    rows = sentiment_rows(32)
    rows[5] = ("good " * 40, "neg")  # longer than --max-seq-length 16: data-truncated
    train = write_csv(tmp_path / "train.csv", rows)
    # mean pooling: the unused pooler is frozen, an argument of the step apart from its state
    args = train_args(
        trainable_hf_dir, train, None, command="check", buckets="8,16", json=True, pooling="mean"
    )

    assert main([*args, "--no-compile"]) == 0
    tensorflow = json.loads(capsys.readouterr().out)
    jax = _check_in_jax([*args, "--backend", "jax"])

    assert [f["code"] for f in jax["findings"]] == ["data-truncated"]
    # less the variables without a gradient, which JAX cannot tell (`NOT_CHECKED`)
    assert [f["code"] for f in tensorflow["findings"]] == ["data-truncated", "grad-pooler-unused"]
    assert jax["findings"] == tensorflow["findings"][:1]
    assert jax["memory"] == tensorflow["memory"]  # the plan: arithmetic on the same model
    same = {k: v for k, v in jax["stats"].items() if k not in STEP_STATS}
    assert same == {k: v for k, v in tensorflow["stats"].items() if k not in STEP_STATS}
    compiled = jax["compiled"]
    assert [(c["name"], c["shape"], c["ok"]) for c in compiled] == [
        (STEP, "[8, 8]", True),
        (STEP, "[8, 16]", True),
    ]
    assert [c["compilations"] for c in compiled] == [1, 1]
    assert all(c["memory_bytes"] > 0 for c in compiled)  # XLA's memory_analysis() on a CPU
    assert jax["stats"]["JAX compilations"].startswith("2 for 2 bucket(s)")
    # the first bucket's step run twice, the second call on the state the first donated
    assert jax["stats"][STEPS_TAKEN].startswith("2 on the first batch: loss ")
    assert jax["not_checked"][0].startswith("not checked on JAX: variables without a gradient")


class _UncompilableTrainer:
    """A JaxTrainer whose step XLA refuses for one shape: the error JAX raises there."""

    def __init__(self):
        self.traces = 0

    def compilations(self) -> int:
        return self.traces

    def compile_train_step(self, batch):
        self.traces += 1
        raise TypeError(f"dot_general requires contracting dimensions, got {batch[WORD_IDS]}")


def test_a_bucket_jax_cannot_compile_is_a_finding_naming_its_shape():
    element = {
        WORD_IDS: tf.zeros([4, 16], tf.int32),
        LABEL: tf.zeros([4], tf.int32),
        INDEX: tf.range(4),
        GLOBAL_EXAMPLES: tf.constant(8.0),
    }
    report = Report()
    compile_buckets(report, _UncompilableTrainer(), [element], replicas=2)
    (finding,) = report.findings
    assert finding.code == "compile-failed" and finding.severity == ERROR
    assert finding.message.startswith("jax.jit could not compile the jax train step for [8, 16]")
    assert finding.where == "jax train step [8, 16]"
    assert report.compiled[0]["ok"] is False and report.compiled[0]["compilations"] == 1


class _SecondStepFails:
    """A JaxTrainer whose second host call fails as a step fed a donated buffer does."""

    def __init__(self):
        self.calls = []

    def train_steps(self, iterator, steps, step):
        self.calls.append((len(list(iterator)), steps, step))
        if len(self.calls) == 2:
            raise ValueError("INVALID_ARGUMENT: Buffer has been deleted or donated.")
        return np.array([[0.7, 1.0]])


def test_two_steps_are_two_host_calls_and_a_failure_is_a_finding():
    element = {WORD_IDS: tf.zeros([4, 8], tf.int32), GLOBAL_EXAMPLES: tf.constant(4.0)}
    report, trainer = Report(), _SecondStepFails()
    check_two_steps(report, trainer, element, replicas=1, where="m", compiled="the step")
    assert trainer.calls == [(1, 1, "the step")] * 2  # a run's first two: one step a call
    (finding,) = report.findings
    assert finding.code == "grad-step-failed" and finding.severity == ERROR
    assert finding.message.startswith("two training steps on one batch failed: ")
    assert "donated" in finding.message and STEPS_TAKEN not in report.stats
