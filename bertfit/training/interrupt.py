"""SIGTERM (how TPU VMs and Kubernetes preempt) and Ctrl-C stop a long job at a safe point
instead of killing it midway: training at the next step boundary, after a checkpoint;
`predict --data -` after the rows it has predicted, written whole (`until_stopped`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator

TRAINING_NOTE = "saving a checkpoint after the current step, then stopping"


class _Stopped(BaseException):
    """Raised by the signal handler into a wait of `until_stopped` (a BaseException, as
    KeyboardInterrupt: no `except Exception` on the way swallows it)."""


class StopRequests:
    """While active, SIGTERM and SIGINT only note that a stop was asked for, printing
    `note` (None: nothing); the trainer looks at `signal` between host calls, `until_stopped`
    ends an iteration. The same signal a second time stops at once.

    Examples:
    >>> with StopRequests() as stop:
    ...     stop.signal is None
    True
    """

    def __init__(self, note: str | None = TRAINING_NOTE):
        self.signal: int | None = None
        self.note = note
        self._previous: dict = {}
        self._waiting = False  # in `until_stopped`'s wait for the next item

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def until_stopped(self, items: Iterable) -> Iterator:
        """The items of `items` until a stop is asked for. Asked while the next item is
        awaited (a read of standard input that may never return), it ends the iteration at
        once, and `items` with it; asked while the caller holds an item, once the caller is
        done with it."""
        items = iter(items)
        try:
            while self.signal is None:
                self._waiting = True
                item = next(items, _END)
                self._waiting = False
                if item is _END:
                    return
                yield item
        except _Stopped:
            return
        finally:
            self._waiting = False

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.signal = signum
        if self.note is not None:
            print(
                f"\n{signal.Signals(signum).name}: {self.note} (send it again to stop at once)",
                file=sys.stderr,
                flush=True,
            )
        if self._waiting:
            raise _Stopped


_END = object()
