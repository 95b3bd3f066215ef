"""tests/session_end.py: a pytest-xdist worker's last garbage is collected while the controller
still waits, so its finalizers are not cut short by execnet's SIGINT 5 s after the controller
moves on (a green `make test` ended with a KeyboardInterrupt traceback from TensorFlow's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Garbage in the oldest generation at the session's end whose finalizer takes 6 s, as a long
# session's TensorFlow objects can; the finalizer writes how it ended.
SLOW_GARBAGE = """
import gc, pathlib, time

LOG = pathlib.Path(__file__).with_name("finalizer.log")


class SlowToFree:
    def __init__(self):
        self.me = self

    def __del__(self):
        try:
            time.sleep(6)
        except BaseException as e:
            LOG.write_text(f"interrupted: {e!r}")
            raise
        LOG.write_text("done")


kept = [SlowToFree()]


def test_leaves_old_cyclic_garbage():
    gc.collect()  # promoted to the oldest generation, as a long run's objects are
    kept.clear()  # now garbage, for the next full collection
"""


@pytest.mark.slow  # a pytest-xdist session with a 6 s finalizer: ~9 s
def test_an_xdist_workers_last_finalizers_run_to_their_end(tmp_path):
    (tmp_path / "test_slow_garbage.py").write_text(SLOW_GARBAGE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1"]
        + ["-p", "tests.session_end", str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "finalizer.log").read_text() == "done"
