"""A run's checkpoint files (`bertfit.runs.checkpoint_files`, restored by `bertfit.runs.weights`):
every dtype a run saves comes back exactly from a plain safetensors file; every weight of each
family's model is in a run's checkpoint and comes back on a resume; a save killed half-way
leaves a whole checkpoint current; a checkpoint of another model is refused; an earlier
bertfit's TensorFlow checkpoints still restore, resume and predict; and where TensorFlow cannot
be imported, JAX saves and restores the same files, which TensorFlow then reads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import keras
import ml_dtypes
import numpy as np
import pytest
from safetensors import deserialize, safe_open

from bertfit.errors import CheckpointError, MissingDependencyError
from bertfit.runs.checkpoint_files import (
    STATE,
    checkpoint_step,
    latest_checkpoint,
    read_checkpoint,
    remove_leftovers,
    save_checkpoint,
)
from bertfit.runs.weights import (
    checkpoint_variables,
    restore_model,
    restore_variables,
    variable_values,
)
from bertfit.training.checkpointing import RunCheckpoints, TrainingState
from tests.jax_process import run_in_jax
from tests.model.test_backends import CONFIGS, build
from tests.runs.tf_free_checkpoints import scramble, trainer

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)
ARRAYS = {  # name -> (what a run saves, safetensors' dtype code)
    "model/encoder/kernel": (RNG.normal(size=(3, 4)).astype(np.float32), "F32"),
    "model/encoder/query/kernel": (RNG.integers(-127, 128, (4, 2)).astype(np.int8), "I8"),
    "model/encoder/query/kernel_scale": (RNG.random(2).astype(np.float32), "F32"),
    "model/encoder/bf16": (RNG.normal(size=(2, 3)).astype(ml_dtypes.bfloat16), "BF16"),
    "optimizer/0/iteration": (np.array(12, np.int64), "I64"),  # TensorFlow's step counter
    "optimizer/1/iteration": (np.array(12, np.int32), "I32"),  # JAX's
    "rng/0": (np.array([3, 5], np.int64), "I64"),  # TensorFlow's seed state
    "rng/1": (np.array([3, 5], np.uint32), "U32"),  # JAX's
}
ARRAYS_ONLY = [(name, array) for name, (array, _) in ARRAYS.items()]


def test_every_dtype_a_run_saves_comes_back_exactly_from_a_plain_safetensors_file(tmp_path):
    arrays = dict(ARRAYS_ONLY)
    state = TrainingState(epoch=1, step=2, global_step=12).to_json()
    path = save_checkpoint(tmp_path, 12, arrays, state)
    assert Path(path).name == "ckpt-12.safetensors" and checkpoint_step(path) == 12

    read, read_state = read_checkpoint(path, [*arrays, "model/not/saved"])
    assert read_state == state and read.keys() == arrays.keys()
    for name, array in arrays.items():
        assert (read[name].dtype, read[name].shape) == (array.dtype, array.shape), name
        np.testing.assert_array_equal(read[name], array)
    # safetensors' own parser: its dtype codes (BF16 as BF16), the state in the header
    parsed = dict(deserialize(Path(path).read_bytes()))
    assert {name: info["dtype"] for name, info in parsed.items()} == {
        name: code for name, (_, code) in ARRAYS.items()
    }
    with safe_open(path, framework="np") as file:
        assert file.metadata() == {STATE: state}

    # through Keras variables of each dtype, as a run restores and saves them
    variables = {name: keras.Variable(np.zeros_like(a), dtype=a.dtype) for name, a in ARRAYS_ONLY}
    assert restore_variables(variables, path) == state
    for name, value in variable_values(variables).items():
        assert value.dtype == arrays[name].dtype, name
        np.testing.assert_array_equal(value, arrays[name])


@pytest.mark.parametrize("family", list(CONFIGS))
def test_every_familys_checkpoint_holds_each_weight_once_and_a_resume_restores_it(family, tmp_path):
    """A run's `latest` of each family's model (encoder, head, window pooling) and its
    optimizer: every weight is in it under one name (one left out would silently restart at
    its initial value on a resume), and a resume brings every value back exactly."""
    model = build(family)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    variables = checkpoint_variables(model, optimizer)
    names = {id(v): name for name, v in variables.items()}
    assert len(names) == len(variables), "a variable saved under two names"
    assert [v.path for v in model.weights if id(v) not in names] == []

    scramble(variables, seed=1)
    saved = variable_values(variables)
    checkpoints = RunCheckpoints(model, optimizer, tmp_path / "latest", tmp_path / "best")
    state = TrainingState(epoch=1, step=3, global_step=3)
    checkpoints.save_latest(state)
    scramble(variables, seed=2)
    assert checkpoints.restore_latest() == state
    _assert_same(variable_values(variables), saved)


# A save in a process of its own, SIGKILLed at `os.<point>` or `checkpoint_files.<point>`.
KILLED_SAVE = """
import os, signal, sys
import numpy as np
from bertfit.runs import checkpoint_files
point, folder = sys.argv[1:]
owner = checkpoint_files if hasattr(checkpoint_files, point) else os
setattr(owner, point, lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL))
checkpoint_files.save_checkpoint(folder, 2, {"w": np.full(3, 2.0, np.float32)})
"""


@pytest.mark.parametrize(
    "killed_at, current, left",
    [
        ("replace", 1, ".ckpt-2.safetensors.{pid}.tmp"),  # written and synced, not renamed
        ("_remove_checkpoints", 2, "ckpt-1.safetensors"),  # renamed, the previous not removed
    ],
)
def test_a_save_killed_half_way_leaves_a_whole_checkpoint_current(
    tmp_path, killed_at, current, left
):
    save_checkpoint(tmp_path, 1, {"w": np.full(3, 1.0, np.float32)})
    (tmp_path / "adapter_config.json").write_text("{}")  # not a checkpoint: kept
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, killed_at, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, err
    assert (tmp_path / left.format(pid=process.pid)).is_file()

    path = latest_checkpoint(tmp_path)
    assert checkpoint_step(path) == current
    assert read_checkpoint(path, ["w"])[0]["w"].tolist() == [float(current)] * 3
    remove_leftovers(tmp_path)  # as the resumed run does
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "adapter_config.json",
        f"ckpt-{current}.safetensors",
    ]


def test_a_checkpoint_of_another_model_or_a_damaged_one_is_refused_restoring_nothing(tmp_path):
    path = save_checkpoint(tmp_path, 1, {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})
    a, b = keras.Variable(np.zeros(2, np.float32)), keras.Variable(np.zeros(4, np.float32))
    with pytest.raises(CheckpointError, match=r"holds b of shape \(3,\), and the model's is \(4,"):
        restore_variables({"a": a, "b": b}, path)
    with pytest.raises(CheckpointError, match=r"holds no c \(1 of the 2 variables"):
        restore_variables({"a": a, "c": b}, path)
    assert not keras.ops.convert_to_numpy(a).any()  # not restored by halves

    damaged = tmp_path / "ckpt-2.safetensors"
    damaged.write_bytes(Path(path).read_bytes()[:-4])
    with pytest.raises(CheckpointError, match="ckpt-2.safetensors: cannot read the checkpoint"):
        restore_variables({"a": a}, str(damaged))


def write_tensorflow_checkpoint(directory: Path, step: int, arrays: dict, state=None) -> str:
    """A checkpoint as an earlier bertfit wrote them: `tf.train.Checkpoint`'s, each variable a
    child named as today with "." for "/", the `TrainingState` a string variable, saved by a
    `CheckpointManager` keeping one."""
    import tensorflow as tf

    children = {name.replace("/", "."): tf.Variable(value) for name, value in arrays.items()}
    if state is not None:
        children["training_state"] = tf.Variable(state)
    checkpoint = tf.train.Checkpoint(**children)
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1).save(step)


def _assert_same(values: dict, expected: dict) -> None:
    assert values.keys() == expected.keys()
    for name, value in values.items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)


@pytest.mark.slow  # TensorFlow's saver, and a tiny model: 2-3 s
def test_an_earlier_bertfits_checkpoints_restore_resume_and_give_way_to_the_next_save(tmp_path):
    model, optimizer = trainer("bf16")  # with dropout: RNG states
    variables = checkpoint_variables(model, optimizer)
    scramble(variables, seed=1)
    saved = variable_values(variables)
    weights = {name: value for name, value in saved.items() if name.startswith("model/")}
    state = TrainingState(epoch=1, step=2, global_step=7)
    write_tensorflow_checkpoint(tmp_path / "latest", 7, saved, state.to_json())
    write_tensorflow_checkpoint(tmp_path / "best", 5, weights)
    best = latest_checkpoint(tmp_path / "best")  # named by its `checkpoint` file
    assert Path(best).name == "ckpt-5"

    scramble(variables, seed=2)
    restore_model(model, best)  # evaluate, predict, export, serve
    _assert_same(variable_values(checkpoint_variables(model)), weights)
    scramble(variables, seed=2)
    checkpoints = RunCheckpoints(model, optimizer, tmp_path / "latest", tmp_path / "best")
    remove_leftovers(tmp_path / "latest")  # as a resume does first: it is current, kept
    assert checkpoints.restore_latest() == state
    _assert_same(variable_values(variables), saved)

    checkpoints.save_latest(TrainingState(epoch=1, step=3, global_step=8))
    assert [p.name for p in (tmp_path / "latest").iterdir()] == ["ckpt-8.safetensors"]


def test_an_earlier_bertfits_checkpoint_is_found_without_tensorflow_and_read_with_it(
    tmp_path, monkeypatch
):
    prefix = write_tensorflow_checkpoint(tmp_path, 3, {"model/w": np.ones(2, np.float32)})
    assert latest_checkpoint(tmp_path) == prefix
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # a machine without it
    with pytest.raises(MissingDependencyError, match=r"ckpt-3 is a TensorFlow checkpoint .*pip"):
        read_checkpoint(prefix, ["model/w"])


@pytest.mark.slow
def test_a_run_trained_by_an_earlier_bertfit_predicts_as_it_did(trained_run, tmp_path):
    from bertfit.inference.predictor import Classifier

    run = Path(trained_run[1].run_dir)
    earlier = Path(shutil.copytree(run, tmp_path / "run"))
    for folder in ("best", "latest"):  # rewritten as an earlier bertfit wrote them
        (path,) = (earlier / "checkpoints" / folder).iterdir()
        with safe_open(path, framework="np") as file:
            arrays = {name: file.get_tensor(name) for name in file.keys()}
            state = file.metadata()[STATE]
        path.unlink()
        write_tensorflow_checkpoint(path.parent, checkpoint_step(path), arrays, state)

    texts = ["a good film", "the plot was very boring", "fun !"]
    np.testing.assert_allclose(
        Classifier.from_run(earlier).predict_proba(texts),
        Classifier.from_run(run).predict_proba(texts),
        atol=1e-6,
    )


@pytest.mark.slow
def test_jax_saves_and_restores_checkpoints_without_tensorflow_and_tensorflow_reads_them(
    tmp_path,
):
    out = run_in_jax(["tests.without_tensorflow", "tests.runs.tf_free_checkpoints", tmp_path])
    report = json.loads(out.strip().splitlines()[-1])

    assert report.pop("loaded") == []  # TensorFlow was neither needed nor imported
    # JAX's step counter is int32, its seed states uint32; the base int8 or bfloat16
    assert report["int8"]["dtypes"] == ["float32", "int32", "int8", "uint32"]
    assert report["bf16"]["dtypes"] == ["bfloat16", "float32", "int32", "uint32"]
    for base, seen in report.items():
        assert seen["state_restored"] and seen["rng_states"] > 0, base
        assert seen["different"] == [], base  # every variable came back exactly
        assert seen["files"] == [
            f"{base}/{folder}/ckpt-9.safetensors" for folder in ("adapter", "best", "latest")
        ]

    # on TensorFlow, the JAX run resumes from the same file, its dtypes cast exactly (the int8
    # base's would too, after Keras' quantization, which takes seconds on TensorFlow)
    model, optimizer = trainer("bf16")
    latest, best = tmp_path / "bf16" / "latest", tmp_path / "bf16" / "best"
    assert RunCheckpoints(model, optimizer, latest, best).restore_latest().global_step == 9
    with safe_open(latest_checkpoint(latest), framework="np") as file:
        saved = {name: file.get_tensor(name) for name in file.keys()}
    _assert_same(variable_values(checkpoint_variables(model, optimizer)), saved)
