"""Runs a module as `python -m` does, in a process where TensorFlow cannot be imported: what a
machine with JAX (a TPU VM, a GPU box without TensorFlow's wheel) but no TensorFlow sees.

    KERAS_BACKEND=jax python -m tests.without_tensorflow MODULE ARGS...

TensorFlow's packages (TF Text and tf_keras too) are marked absent the way Python's own tests
do it, `sys.modules[name] = None`: `import tensorflow` (and so any `tensorflow.*`) raises
ModuleNotFoundError, and `importlib.util.find_spec("tensorflow")` returns None, so libraries
that probe for TensorFlow (Keras, transformers) see it missing rather than broken.
"""

from __future__ import annotations

import runpy
import sys

BLOCKED = ("tensorflow", "tensorflow_text", "tf_keras")


def block_tensorflow() -> None:
    """Makes every later import of TensorFlow fail; TensorFlow must not be imported yet."""
    loaded = [name for name in sys.modules if name.split(".")[0] in BLOCKED]
    assert not loaded, f"TensorFlow was imported before the blocker: {loaded[:3]}"
    for name in BLOCKED:
        sys.modules[name] = None


if __name__ == "__main__":
    block_tensorflow()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
