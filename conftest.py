"""Doctests in bertfit/ (`pytest --doctest-modules bertfit`, part of `make test`) run in a
temporary directory: examples that write files (e.g. `write_text_atomic`) leave nothing here."""

import pytest

from bertfit.tf_startup import start_tensorflow

start_tensorflow()  # as the CLI does: no TensorFlow start-up lines in the test output

# The session's garbage collected before an xdist worker reports its end (tests/session_end.py).
pytest_plugins = ["tests.session_end"]


@pytest.fixture(autouse=True)
def _doctests_in_a_temporary_directory(request, tmp_path, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(tmp_path)


# Scripts the tests run in subprocesses: importing them (as --doctest-modules would) runs them.
collect_ignore = [
    "tests/distributed/keras_fit.py",
    "tests/cli_errors.py",
    "tests/training/killed_train.py",
    "tests/distributed/windowed_replicas.py",
]
