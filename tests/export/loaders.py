"""The three ways TensorFlow loads a SavedModel, each running named signatures on given inputs:

- `run_loaded`: `tf.saved_model.load` (TF2: objects rebuilt from the object graph).
- `run_in_session`: the TF1 Session loader (`tf.compat.v1.saved_model.loader.load` in a fresh
  graph: the restore op, then each signature's tensors by the names its SignatureDef gives).
- `run_in_cxx`: `saved_model_runner.cc`, a C++ program linked against the TensorFlow wheel's own
  `libtensorflow_cc`: `tensorflow::LoadSavedModel` and `Session::Run`, the path
  `tensorflow_model_server` takes, with TensorFlow Text's op libraries loaded first.

A request is `{signature: {input name: array}}`; each loader answers `{signature: {output name:
array}}`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework.tensor_pb2 import TensorProto

RUNNER_SOURCE = Path(__file__).with_name("saved_model_runner.cc")


def text_op_libraries() -> list[str]:
    """TensorFlow Text's op libraries (`tensorflow_text/python/ops/*.so`), every one: what a
    TF Serving build with TF Text links in."""
    package = Path(importlib.util.find_spec("tensorflow_text").origin).parent
    return sorted(str(p) for p in (package / "python" / "ops").glob("*.so"))


def run_loaded(export: Path, requests: dict) -> dict:
    import tensorflow_text  # noqa: F401  (the tokenizers' ops)

    loaded = tf.saved_model.load(str(export))
    return {
        name: _numpy(loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()}))
        for name, inputs in requests.items()
    }


def run_in_session(export: Path, requests: dict) -> dict:
    import tensorflow_text  # noqa: F401

    outputs = {}
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(export))
        for name, inputs in requests.items():
            signature = meta_graph.signature_def[name]
            feeds = {signature.inputs[key].name: value for key, value in inputs.items()}
            fetches = {key: tensor.name for key, tensor in signature.outputs.items()}
            outputs[name] = session.run(fetches, feeds)
    return outputs


def run_in_cxx(runner: Path, export: Path, requests: dict, folder: Path) -> dict:
    """The outputs `runner` (`build_runner`) writes for `requests`, exchanged as serialized
    TensorProtos under `folder`."""
    request_dir, out_dir = folder / "request", folder / "out"
    for name, inputs in requests.items():
        (request_dir / name).mkdir(parents=True)
        for key, value in inputs.items():
            proto = tf.make_tensor_proto(value)
            (request_dir / name / f"{key}.pb").write_bytes(proto.SerializeToString())
    done = subprocess.run(
        [str(runner), str(export), str(request_dir), str(out_dir), *text_op_libraries()],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"saved_model_runner failed:\n{done.stderr[-3000:]}"
    return {
        name: {
            file.stem: tf.make_ndarray(TensorProto.FromString(file.read_bytes()))
            for file in (out_dir / name).glob("*.pb")
        }
        for name in requests
    }


def build_runner(cache: Path) -> Path:
    """`saved_model_runner.cc` compiled against the installed TensorFlow wheel, kept in `cache`
    under a name that hashes the source, TensorFlow's version and the flags (compiling takes
    15-30 s). A missing compiler or header fails the test: CI has both."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.fail(
            "g++ is not on PATH: the C++ SavedModel loader test compiles "
            f"{RUNNER_SOURCE.name} against TensorFlow's libtensorflow_cc. Install g++."
        )
    header = Path(tf.sysconfig.get_include()) / "tensorflow" / "cc" / "saved_model" / "loader.h"
    if not header.is_file():
        pytest.fail(f"{header} is missing: this TensorFlow wheel ships no C++ headers.")
    library = Path(tf.sysconfig.get_lib())
    command = [
        compiler,
        "-O1",
        "-w",  # TensorFlow's headers warn by the hundred
        *tf.sysconfig.get_compile_flags(),
        str(RUNNER_SOURCE),
        # Kept although nothing in the program names it: libtensorflow_cc registers the
        # session factory ("No session factory registered" without it).
        "-Wl,--no-as-needed",
        "-l:libtensorflow_cc.so.2",
        *tf.sysconfig.get_link_flags(),
        f"-Wl,-rpath,{library}",
    ]
    key = hashlib.sha256(
        "\0".join([RUNNER_SOURCE.read_text(), tf.__version__, *command]).encode()
    ).hexdigest()[:16]
    binary = cache / f"saved_model_runner-{key}"
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    done = subprocess.run(
        [*command, "-o", str(partial)], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        pytest.fail(f"compiling {RUNNER_SOURCE.name} failed:\n{done.stderr[-3000:]}")
    os.replace(partial, binary)  # whole or not at all, for concurrent sessions
    return binary


def assert_same_outputs(got: dict, expected: dict, atol: float = 1e-5) -> None:
    """Every signature's every output: strings equal, numbers within `atol`."""
    assert got.keys() == expected.keys()
    for name, outputs in expected.items():
        assert set(got[name]) == set(outputs), name
        for key, value in outputs.items():
            value, answer = np.asarray(value), np.asarray(got[name][key])
            assert answer.shape == value.shape, (name, key)
            if value.dtype.kind in "OSU":
                np.testing.assert_array_equal(answer.astype(bytes), value.astype(bytes))
            else:
                np.testing.assert_allclose(answer, value, rtol=0, atol=atol, err_msg=key)


def _numpy(outputs: dict) -> dict:
    return {key: value.numpy() for key, value in outputs.items()}
