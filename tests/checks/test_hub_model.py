"""`bertfit.check(model=...)` on a user's tf_keras model around TF Hub's `hub.KerasLayer`: an
encoder with zero trainable variables (the classic silent failure) is an error. tf_keras runs in
a child process (it and Keras 3 do not share a process well)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.tiny import write_tiny_savedmodel

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf, tensorflow_hub as hub
    import bertfit
    path, trainable = sys.argv[1], sys.argv[2] == "trainable"
    names = ("input_word_ids", "input_mask", "input_type_ids")
    inputs = {n: tf.keras.layers.Input((16,), dtype=tf.int32, name=n) for n in names}
    if trainable:
        layer = hub.KerasLayer(path, trainable=True)
        pooled = layer(inputs)["pooled_output"]
    else:
        layer = hub.KerasLayer(path, signature="serving_default",
                               signature_outputs_as_dict=True)
        pooled = layer(inputs)["pooled_output"]
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2)(pooled))
    ids = np.full((8, 16), 5, np.int32)
    ids[:, 0] = 2
    features = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                "input_type_ids": np.zeros_like(ids)}
    ds = tf.data.Dataset.from_tensor_slices((features, np.arange(8) % 2)).batch(
        8, drop_remainder=True)
    report = bertfit.check(dataset=ds, model=model, compile=False)
    print(json.dumps({"codes": report.codes, "exit": report.exit_code(),
                      "trainable": len(layer.trainable_weights)}))
""")


@pytest.mark.parametrize("kind", ["signature-only", "trainable"])
def test_check_flags_a_hub_keras_layer_that_trains_nothing(tmp_path, kind):
    write_tiny_savedmodel(tmp_path / "sm", signature_only=kind == "signature-only")
    env = {
        **os.environ,
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tmp_path / "sm"),
            "trainable" if kind == "trainable" else "frozen",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if kind == "signature-only":
        assert result["trainable"] == 0
        assert "grad-signature-only" in result["codes"] and result["exit"] == 2
    else:
        assert result["trainable"] > 0
        assert not {"grad-signature-only", "grad-frozen-encoder"} & set(result["codes"])
