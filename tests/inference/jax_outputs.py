"""What `--backend jax` gives for a run, from a process whose Keras runs on JAX, for a test in a
TensorFlow process to compare with TensorFlow's (`assert_same_as_tensorflow`).

    KERAS_BACKEND=jax python -m tests.inference.jax_outputs [--cli] RUN DATA OUT [RUN DATA OUT ...]

Each OUT (JSON) gets the metrics and rows of one `JaxClassifier` that evaluated and predicted
its RUN's DATA (`bertfit.inference.run`), with the times its predict step was traced and the
JAX devices it split the batches over; with `--cli`, also the rows that `bertfit predict
--backend jax` wrote (its own classifier: seconds more). Several runs share the process's
start (seconds).
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
    cli = arguments[:1] == ["--cli"]
    arguments = arguments[1:] if cli else arguments
    for start in range(0, len(arguments), 3):
        run, data, out = arguments[start : start + 3]
        written = Path(out).with_suffix(".jsonl") if cli else None
        Path(out).write_text(json.dumps(jax_outputs(run, data, written)))


def jax_outputs(run: str, data: str, written: Path | None) -> dict:
    """What `main` writes for one run; `written`: where `bertfit predict` writes, or None."""
    import jax

    from bertfit.cli import main as bertfit
    from bertfit.inference.jax_classifier import JaxClassifier
    from bertfit.inference.run import evaluate, predict

    result = {}
    if written is not None:
        args = ["--backend", "jax", "--run", run, "--data", data, "--quiet"]
        assert bertfit(["predict", *args, "--output", str(written)]) == 0
        result["cli_rows"] = [json.loads(line) for line in written.read_text().splitlines()]
    classifier = JaxClassifier(run)
    return {
        **result,
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
    from bertfit.inference.predictor import load_classifier
    from bertfit.inference.run import evaluate, predict

    tensorflow = load_classifier(run)
    metrics = evaluate(tensorflow, data, quiet=True)
    want = dict(_numbers({k: v for k, v in metrics.items() if k not in TIMINGS}))
    got = dict(_numbers({k: v for k, v in jax["metrics"].items() if k not in TIMINGS}))
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name] == _approx(value), f"{name}: {got[name]} on JAX, {value} on TensorFlow"
    rows = predict(tensorflow, data, quiet=True)
    probabilities = _probabilities(rows)
    assert ((probabilities > 0.02) & (probabilities < 0.98)).mean() > 0.5
    for found in [jax["rows"], *([jax["cli_rows"]] if "cli_rows" in jax else [])]:
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
