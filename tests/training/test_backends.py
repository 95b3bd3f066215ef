"""The backend seam (`training/backends.py`, `inference/backends.py`): the backend is chosen
once from `--backend`, and nothing else in bertfit asks which backend it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertfit.config import BACKENDS, RunConfig, TrainConfig
from bertfit.errors import ConfigError
from bertfit.inference.backends import INFERENCE_BACKENDS, inference_backend
from bertfit.training.backends import BACKENDS as TRAINING_BACKENDS
from bertfit.training.backends import backend_of

PACKAGE = Path(__file__).resolve().parents[2] / "bertfit"
SEAM = {PACKAGE / "training" / "backends.py", PACKAGE / "inference" / "backends.py"}
# a comparison with a backend's name: `backend == JAX_BACKEND`, `args.backend != "jax"`, ...
BRANCH = re.compile(r"backend\s*[!=]=|[!=]=\s*\w*(JAX|TENSORFLOW)_BACKEND\b")


def test_every_backend_has_a_training_and_an_inference_side():
    assert set(TRAINING_BACKENDS) == set(INFERENCE_BACKENDS) == set(BACKENDS)
    for name in BACKENDS:
        config = RunConfig(train=TrainConfig(backend=name))
        assert backend_of(config).name == inference_backend(name).name == name


def test_no_module_outside_the_seam_branches_on_the_backend():
    branching = [
        f"{file.relative_to(PACKAGE.parent)}:{number}"
        for file in sorted(PACKAGE.rglob("*.py"))
        if file not in SEAM
        for number, line in enumerate(file.read_text().splitlines(), start=1)
        if BRANCH.search(line)
    ]
    assert branching == []


def test_an_unknown_backend_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match="expected one of tensorflow, jax"):
        backend_of(RunConfig(train=TrainConfig(backend="torch")))
    with pytest.raises(ConfigError, match="expected one of tensorflow, jax"):
        inference_backend("torch")


def test_jax_inference_refuses_an_export_or_the_onnx_engine(tmp_path):
    jax = inference_backend("jax")
    with pytest.raises(ConfigError, match="--engine onnx runs an export"):
        jax.check(tmp_path, "onnx")
    with pytest.raises(ConfigError, match="is not one. An export is a TensorFlow SavedModel"):
        jax.check(tmp_path, "tensorflow")
    inference_backend("tensorflow").check(tmp_path, "onnx")  # any run or export
