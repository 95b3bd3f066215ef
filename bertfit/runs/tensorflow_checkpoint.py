"""The checkpoints of an earlier bertfit: TensorFlow's (`tf.train.Checkpoint` files, `ckpt-N.index`
and `ckpt-N.data-*`), read where TensorFlow is installed so that such a run still evaluates,
predicts, exports, serves and resumes; never written. `bertfit.runs.checkpoint_files` finds
them and imports this module only to read one.

Their variables have the names of today's checkpoints as `tf.train.Checkpoint` object paths: each
"/" was saved as "." and TensorFlow escapes "." as "..", under `/.ATTRIBUTES/VARIABLE_VALUE`; the
`TrainingState` is the string variable `training_state`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bertfit.errors import MissingDependencyError
from bertfit.tf_build import install_commands

_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
_STATE = "training_state" + _VALUE  # a tf.string variable of the TrainingState's JSON


def tensorflow_key(name: str) -> str:
    """The key of the variable `name` in an earlier bertfit's checkpoint.

    Examples:
    >>> tensorflow_key("model/head/kernel")
    'model..head..kernel/.ATTRIBUTES/VARIABLE_VALUE'
    """
    return name.replace("/", ".").replace(".", "..") + _VALUE


def read_tensorflow_checkpoint(
    prefix: str, names: Iterable[str]
) -> tuple[dict[str, np.ndarray], str | None]:
    """`checkpoint_files.read_checkpoint` for the checkpoint at `prefix` (`.../ckpt-7`).

    Raises:
        MissingDependencyError: TensorFlow is not installed here.
    """
    try:
        import tensorflow as tf
    except ImportError:
        raise MissingDependencyError(
            f"{prefix} is a TensorFlow checkpoint of an earlier bertfit, and TensorFlow is not "
            f"installed here: install it ({install_commands('cpu')}) to read the run, or resume "
            "it where TensorFlow is (its next checkpoint is read anywhere)."
        ) from None
    reader = tf.train.load_checkpoint(prefix)
    held = reader.get_variable_to_shape_map()
    arrays = {
        name: reader.get_tensor(key) for name in names if (key := tensorflow_key(name)) in held
    }
    state = reader.get_tensor(_STATE).decode("utf-8") if _STATE in held else None
    return arrays, state
