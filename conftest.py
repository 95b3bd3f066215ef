"""Doctests in bertfit/ (`pytest --doctest-modules bertfit`, part of `make test`) run in a
temporary directory: examples that write files (e.g. `write_text_atomic`) leave nothing here."""

import gc

import pytest

from tests.xla_flags import use_quick_xla

use_quick_xla()  # before TensorFlow or JAX starts: tests/xla_flags.py says why

from bertfit.tf_startup import start_tensorflow  # noqa: E402

start_tensorflow()  # as the CLI does: no TensorFlow start-up lines in the test output

# The session's garbage collected before an xdist worker reports its end (tests/session_end.py).
pytest_plugins = ["tests.session_end"]


@pytest.fixture(autouse=True)
def _doctests_in_a_temporary_directory(request, tmp_path, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True, scope="module")
def _earlier_modules_objects_frozen():
    """What is alive as a test module starts (TensorFlow, torch, session fixtures) is moved out
    of the collector's reach (`gc.freeze`). A full collection walks every tracked object, and
    Keras runs one for each variable a layer deletes: in a worker that had run a few hundred
    tests (millions of objects), the int8 and LoRA tests took 100-300 s instead of 10-30."""
    gc.collect()  # the previous module's garbage first: only live objects are frozen
    gc.freeze()
    yield


# Scripts the tests run in subprocesses: importing them (as --doctest-modules would) runs them.
collect_ignore = [
    "tests/distributed/keras_fit.py",
    "tests/cli_errors.py",
    "tests/training/killed_train.py",
    "tests/distributed/windowed_replicas.py",
]
