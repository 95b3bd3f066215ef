"""The model without TensorFlow: on Keras' JAX backend, in a process where TensorFlow cannot be
imported (a TPU VM, a GPU machine without TensorFlow's wheel), every module of `bertfit.model`
imports, and a LoRA'd classifier computes its outputs and its gradients. TensorFlow's kernels
(`tf_kernels`, `tf_remat`, `replica_jit`) stay behind `model/backend.py`, imported only on the
TensorFlow backend."""

from __future__ import annotations

import json

import pytest

from tests.jax_process import run_in_jax


@pytest.mark.slow
def test_the_model_imports_trains_and_predicts_where_tensorflow_cannot_be_imported():
    out = run_in_jax(["tests.without_tensorflow", "tests.model.tf_free_model"])
    report = json.loads(out.strip().splitlines()[-1])

    assert report["loaded"] == []  # neither TensorFlow nor anything that pulled it in
    assert {"encoder", "classifier", "chunked", "losses", "lora", "backend"} <= set(
        report["modules"]
    )
    assert sorted(report["families"]) == ["bert", "modernbert"]
    for family, seen in report["families"].items():
        assert seen["finite"] and seen["loss"] > 0, family
        untouched = set(seen["trained"]) - set(seen["nonzero_gradients"])
        # LoRA's B starts at 0, so only the A matrices have a zero first gradient
        assert untouched and all(path.endswith("lora_kernel_a") for path in untouched), family
        assert any("classifier" in path for path in seen["nonzero_gradients"]), family


def test_a_process_that_imports_tensorflow_fails_under_the_blocker():
    """The blocker itself: what it guards against is caught, not silently let through."""
    with pytest.raises(AssertionError, match="import of tensorflow halted"):
        run_in_jax(["tests.without_tensorflow", "bertfit.model.tf_kernels"])
