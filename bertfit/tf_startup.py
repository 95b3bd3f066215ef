"""TensorFlow's start-up, kept off the terminal.

Loading TensorFlow prints C++ log lines (oneDNN notes, CUDA probing, and on every CPU-only
machine `E0000 ... failed call to cuInit: ... CUDA error`) that read like failures. The CLI loads
TensorFlow and enumerates its devices with standard error's file descriptor pointed at
/dev/null, and raises TensorFlow's C++ log threshold to errors-only-fatal; BERTFIT_VERBOSE_TF=1
keeps all of it. Python exceptions are not affected: they are raised after the descriptor is
restored.
"""

from __future__ import annotations

import contextlib
import os
import sys

VERBOSE_VARIABLE = "BERTFIT_VERBOSE_TF"


def verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def stderr_silenced():
    """Points file descriptor 2 at /dev/null for the block (C++ writes included)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def load_tensorflow_quietly() -> None:
    """Imports TensorFlow (and tensorflow-text) and initialises its devices without their log
    lines, unless BERTFIT_VERBOSE_TF is set."""
    if verbose():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with stderr_silenced():
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers its ops; logs on load too)

        tf.config.list_physical_devices()  # probes CUDA now, while silenced
