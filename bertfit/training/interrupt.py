"""SIGTERM (how TPU VMs and Kubernetes preempt) and Ctrl-C stop training at the next step
boundary, after a checkpoint, instead of killing it mid-step."""

from __future__ import annotations

import os
import signal
import sys
import threading


class StopRequests:
    """While active, SIGTERM and SIGINT only note that a stop was asked for; the trainer looks
    at `signal` between host calls. The same signal a second time stops at once.

    Examples:
    >>> with StopRequests() as stop:
    ...     stop.signal is None
    True
    """

    def __init__(self):
        self.signal: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.signal = signum
        print(
            f"\n{signal.Signals(signum).name}: saving a checkpoint after the current step, then "
            "stopping (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
