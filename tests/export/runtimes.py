"""Clients of the exports that have only their runtime: a subprocess that imports the LiteRT
interpreter or ONNX Runtime (+ tokenizers), never TensorFlow, Keras or bertfit, and says so (it
asserts it on `sys.modules`); for a SavedModel, TensorFlow and tensorflow-text alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

NOT_LOADED = """
def assert_runtime_only():
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "bertfit",
                                                                    "tensorflow_text", "tf_keras"))
    assert not loaded, f"the client loaded {loaded}"
"""

# The recipe of bertfit/export/litert.py's docstring: TensorFlow Text's kernels from its C
# libraries, registered by name; no TensorFlow Python module.
LITERT_CLIENT = (
    """
import ctypes, importlib.util, json, os, sys
import numpy as np
from ai_edge_litert.interpreter import InterpreterWithCustomOps
"""
    + NOT_LOADED
    + """
def package_dir(name):
    return importlib.util.find_spec(name).submodule_search_locations[0]

for library in (os.path.join(package_dir("tensorflow"), "libtensorflow_framework.so.2"),
                os.path.join(package_dir("tensorflow_text"), "core", "pybinds",
                             "libpybinds_library_common.so")):
    ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
export, texts_file, out_file = sys.argv[1:4]
meta = json.load(open(os.path.join(export, "bertfit.json")))
interpreter = InterpreterWithCustomOps(
    model_path=os.path.join(export, "model.tflite"), custom_op_registerers=meta["custom_ops"])
classify = interpreter.get_signature_runner()
texts = json.load(open(texts_file))
out = classify(text=np.array(texts, dtype=object))[meta["output"]]
assert_runtime_only()
np.save(out_file, out)
"""
)

ONNX_CLIENT = (
    """
import json, os, sys
import numpy as np
import onnxruntime, tokenizers
"""
    + NOT_LOADED
    + """
export, texts_file, out_file = sys.argv[1:4]
meta = json.load(open(os.path.join(export, "bertfit.json")))
tokenizer = tokenizers.Tokenizer.from_file(os.path.join(export, meta["tokenizer"]))
session = onnxruntime.InferenceSession(os.path.join(export, "model.onnx"))
texts = json.load(open(texts_file))
encoded = tokenizer.encode_batch(texts)
feed = {"input_word_ids": np.array([e.ids for e in encoded], np.int64),
        "input_mask": np.array([e.attention_mask for e in encoded], np.int64),
        "input_type_ids": np.array([e.type_ids for e in encoded], np.int64)}
out, = session.run([meta["output"]], feed)
assert_runtime_only()
np.save(out_file, out)
"""
)


# What a client with only TensorFlow does: no bertfit, no Keras model code.
TF_CLIENT = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the tokenizer's ops)
assert "bertfit" not in sys.modules
export, texts = sys.argv[1], json.loads(open(sys.argv[2]).read())
serve = tf.saved_model.load(export).signatures["serving_default"]
out = serve(text=tf.constant(texts))
assert "bertfit" not in sys.modules
np.save(sys.argv[3], out["probabilities"].numpy())
print(json.dumps([label.decode() for label in out["label"].numpy()]))
"""


def _run(script: str, export: Path, texts: list[str], tmp_path: Path) -> str:
    """`script` run on `export` and `texts` in its own process, in `tmp_path`: its stdout; it
    saves its output to out.npy there."""
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(export), str(tmp_path / "texts.json"), "out.npy"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def assert_tokenizer_json_packs_as(tokenizer, in_graph, max_seq_length: int, texts) -> None:
    """`tokenizer` (a `tokenizers.Tokenizer`, as an ONNX export's tokenizer.json) gives the
    inputs the `in_graph` tokenizer packs of `texts`, alone and paired with themselves
    reversed, truncated to `max_seq_length` and padded to the longest row."""
    pairs = list(reversed(texts))
    for first, second in ((texts, None), (texts, pairs)):
        expected = in_graph(first, second, max_seq_length=max_seq_length, padding="longest")
        rows = first if second is None else list(zip(first, second, strict=True))
        encoded = tokenizer.encode_batch(rows)
        got = {
            "input_word_ids": [e.ids for e in encoded],
            "input_mask": [e.attention_mask for e in encoded],
            "input_type_ids": [e.type_ids for e in encoded],
        }
        for name, ids in got.items():
            assert ids == expected[name].numpy().tolist(), (name, second is not None)


def run_client(script: str, export: Path, texts: list[str], tmp_path: Path) -> np.ndarray:
    """The portable export's output for `texts`, computed by `script` in its own process."""
    _run(script, export, texts, tmp_path)
    return np.load(tmp_path / "out.npy")


def run_tf_client(export: Path, texts: list[str], tmp_path: Path) -> tuple[np.ndarray, list[str]]:
    """The SavedModel's probabilities and labels for `texts`, from a process with only
    TensorFlow."""
    stdout = _run(TF_CLIENT, export, texts, tmp_path)
    return np.load(tmp_path / "out.npy"), json.loads(stdout.strip().splitlines()[-1])


def drift(expected: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(the share of rows whose label agrees, the largest probability difference)."""
    agree = float(np.mean(expected.argmax(axis=1) == got.argmax(axis=1)))
    return agree, float(np.max(np.abs(expected - got)))
