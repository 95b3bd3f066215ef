"""A pytest plugin (the root conftest.py loads it): the session's garbage is collected before a
pytest-xdist worker reports that it finished.

The controller does not wait for a worker after that report: it tells the worker to end, and
execnet gives a worker that is still executing 5 s before it sends itself a SIGINT. A long
session leaves much of TensorFlow's garbage (models and functions in reference cycles, whose
finalizers call into TensorFlow) for a full collection, which Python runs once the oldest
generation's garbage reaches a quarter of its objects, or pytest at unconfigure; one that falls
after the report and takes over 5 s is interrupted, and a green `make test` ended with a
`KeyboardInterrupt` traceback from TensorFlow's cleanup. Collected here, in a plain
`pytest_sessionfinish` (xdist sends its report after these), it runs while the controller
waits. tests/test_session_end.py replays it with a finalizer of 6 s.
"""

from __future__ import annotations

import gc


def pytest_sessionfinish(session) -> None:
    gc.collect()
