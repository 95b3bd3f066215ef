"""What `--backend jax` gives for a run, from a process whose Keras runs on JAX, for a test in a
TensorFlow process to compare with TensorFlow's (`assert_same_as_tensorflow`).

    KERAS_BACKEND=jax python -m tests.inference.jax_outputs RUN DATA OUT [RUN DATA OUT ...]

Each OUT (JSON) gets the rows `bertfit predict --backend jax` wrote of its RUN on DATA, then
the metrics and rows of one `JaxClassifier` that evaluated and predicted DATA
(`bertfit.inference.run`), with the times its predict step was traced and the JAX devices it
split the batches over. Several runs share the process's start (seconds).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

TIMINGS = ("wall_seconds", "examples_per_second")  # the only metrics that differ by design


def main() -> None:
    arguments = sys.argv[1:]
    for start in range(0, len(arguments), 3):
        run, data, out = arguments[start : start + 3]
        Path(out).write_text(json.dumps(jax_outputs(run, data, Path(out).with_suffix(".jsonl"))))


def jax_outputs(run: str, data: str, written: Path) -> dict:
    import jax

    from bertfit.cli import main as bertfit
    from bertfit.inference.run import evaluate, predict
    from bertfit.jax_inference import JaxClassifier

    args = ["--backend", "jax", "--run", run, "--data", data, "--quiet"]
    assert bertfit(["predict", *args, "--output", str(written)]) == 0
    classifier = JaxClassifier(run)
    return {
        "cli_rows": [json.loads(line) for line in written.read_text().splitlines()],
        "metrics": evaluate(classifier, data, quiet=True),
        "rows": predict(classifier, data, quiet=True),
        "trace_counts": classifier.trace_counts(),
        "devices": jax.local_device_count(),
    }


def calibrated_copy(run: str | Path, copy: Path, temperature: float = 3.0) -> str:
    """A copy of `run` at `copy`, calibrated at `temperature` (its labels.json, as
    calibration writes it): the tiny runs' probabilities are near 0 and 1, where logits read
    wrongly (or not divided by the temperature) would still give them; divided by 3 they are
    not."""
    shutil.copytree(run, copy)
    labels = copy / "labels.json"
    task = json.loads(labels.read_text())
    labels.write_text(json.dumps({**task, "temperatures": [temperature]}))
    return str(copy)


def assert_same_as_tensorflow(jax: dict, run: str, data: str) -> None:
    """`jax` (what `main` wrote) holds TensorFlow's metrics of `run` on `data` within 1e-5
    (timings aside), and its rows TensorFlow's labels and probabilities within 1e-5; most of
    them far from 0 and 1 (see `calibrated_copy`)."""
    from bertfit.inference.run import evaluate, predict

    metrics = {k: v for k, v in evaluate(run, data, quiet=True).items() if k not in TIMINGS}
    want = dict(_numbers(metrics))
    got = dict(_numbers({k: v for k, v in jax["metrics"].items() if k not in TIMINGS}))
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name] == _approx(value), f"{name}: {got[name]} on JAX, {value} on TensorFlow"
    rows = predict(run, data, quiet=True)
    probabilities = _probabilities(rows)
    assert ((probabilities > 0.02) & (probabilities < 0.98)).mean() > 0.5
    for found in (jax["cli_rows"], jax["rows"]):
        assert [r["label"] for r in found] == [r["label"] for r in rows]
        np.testing.assert_allclose(_probabilities(found), probabilities, atol=1e-5)


def _numbers(value, name: str = ""):
    """(path, number) for every number in nested dicts and lists."""
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _numbers(value[key], f"{name}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{name}/{i}")
    else:
        yield name, value


def _approx(value):
    import pytest

    return pytest.approx(value, abs=1e-5)


def _probabilities(rows: list[dict]) -> np.ndarray:
    return np.array(
        [[row["probabilities"][k] for k in sorted(row["probabilities"])] for row in rows]
    )


if __name__ == "__main__":
    main()
