"""bench/jax_step.py, the GPU/TPU bench of the JAX step, at toy sizes on this CPU, in a process
where TensorFlow cannot be imported (the GPU machine it is for has none): it times bertfit's
`JaxStep` and transformers' PyTorch step and writes its rows."""

from __future__ import annotations

import json
import math

import pytest

from bench.jax_step import device_slug, peak_tflops
from tests.jax_process import run_in_jax

TOY = ["--layers", "1", "--hidden", "32", "--heads", "2", "--intermediate", "64", "--vocab", "100"]


@pytest.mark.slow
def test_the_bench_times_bertfits_jax_step_and_torchs_without_tensorflow(tmp_path):
    name = tmp_path / "jax_step_cpu"
    args = ["--shapes", "minilm-l6", "--precisions", "bf16", "--steps", "2", "--warmup", "1"]
    out = run_in_jax(
        ["tests.without_tensorflow", "bench.jax_step", *args, *TOY, "--batch", "4", "--seq", "16"]
        + ["--name", name]
    )
    result = json.loads((tmp_path / "jax_step_cpu.json").read_text())

    assert result["versions"]["tensorflow_loaded"] is False
    assert result["device"]["jax_device"].startswith("cpu")
    assert len(result["load_average"]) == 3
    rows = {row["framework"]: row for row in result["rows"]}
    assert sorted(rows) == ["bertfit", "torch"]
    for row in rows.values():
        assert (row["shape"], row["precision"], row["layers"]) == ("minilm-l6", "bf16", 1)
        assert row["steps_per_s"] > 0 and row["compile_s"] > 0
        assert math.isfinite(row["loss"]) and 0.1 < row["loss"] < 5  # two classes: ~ln 2
        assert row["examples_per_s"] == pytest.approx(4 * row["steps_per_s"])
        assert row["mfu"] is None  # no known peak for a CPU
    assert rows["bertfit"]["tflop_per_step"] == rows["torch"]["tflop_per_step"] > 0
    assert len(result["table"]) == 2 + 2  # header, rule, a line per row, printed too
    assert out.strip().splitlines()[-4:] == result["table"]


def test_mfu_is_against_the_rows_precision_peak_and_files_are_named_by_device():
    assert peak_tflops("NVIDIA H200", "bf16", "tf32") == 989.4
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32", "tf32") == 494.7
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32", "highest") == 66.9
    assert peak_tflops("TPU v6 lite", "fp32", "tf32") is None
    assert peak_tflops("cpu", "bf16", "tf32") is None
    assert device_slug("NVIDIA H200") == "nvidia-h200"
