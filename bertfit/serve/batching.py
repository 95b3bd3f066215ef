"""Dynamic batching: requests that arrive within a few milliseconds share one model call."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence


class DynamicBatcher:
    """Collects rows from concurrent requests into batches of at most `max_batch` rows,
    waiting at most `max_wait` seconds after the first, and runs up to `batches_at_once` batches
    at once, each in a worker thread (TF Serving's num_batch_threads).

    When a batch fails, its requests run again one by one, so that a request the model cannot
    take fails alone and the others still get their results. A request whose caller went away
    (a gRPC deadline passed, a REST timeout, a disconnect) is dropped before its batch runs.

    Args:
        run_batch: rows → one result per row; runs in a worker thread (TensorFlow releases
            the GIL, so the event loop keeps accepting requests meanwhile).
        max_batch: most rows per call (a larger request runs alone, whole).
        max_wait: seconds the first row of a batch waits for company.
        batches_at_once: batches running at once: with 2, the next batch forms and starts
            while one runs, so the model does not idle while answered clients send again.
    """

    def __init__(
        self,
        run_batch: Callable[[list], Sequence],
        max_batch: int,
        max_wait: float,
        batches_at_once: int = 1,
    ):
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.batches_at_once = batches_at_once
        self.batches = 0  # model calls made (failed ones too), for /healthz and tests
        self._queue: asyncio.Queue = asyncio.Queue()
        self._worker = self._new_worker()
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        # Set by `ModelCore`: TF Serving's batching metrics (`bertfit.serve.metrics`).
        self.metrics = None
        self.pool_name = ""
        self._queued_at: dict[asyncio.Future, float] = {}
        self.busy = 0  # requests submitted or run alone, not yet answered (an unload waits)

    def start(self) -> None:
        """Starts batching in the running event loop (again after `stop`, in a new loop too)."""
        self._queue = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.batches_at_once)
        if self._worker is None:
            self._worker = self._new_worker()
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def _new_worker(self) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(
            self.batches_at_once, thread_name_prefix="bertfit"
        )

    async def stop(self) -> None:
        if self._task is not None:
            # asyncio.wait_for (Python 3.10, 3.11) swallows a cancellation that arrives as its
            # queue.get() completes: cancel until the task has ended.
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.1)
        for running in list(self._running):
            running.cancel()
        if self._worker is not None:
            self._worker.shutdown(wait=False)
            self._worker = None

    async def submit(self, rows: list) -> list:
        """The results of `rows`, in order, once their batch ran."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self.metrics is not None:
            self.metrics.input_batch_size.add(len(rows))
        self.busy += 1
        try:
            self._queued_at[future] = loop.time()
            await self._queue.put((rows, future))
            return await future
        finally:
            self.busy -= 1
            self._queued_at.pop(future, None)

    async def run_alone(self, function: Callable):
        """Runs `function()` in a worker thread (beside a running batch when `batches_at_once`
        > 1: the model is called from two threads, as TF Serving's batch threads call it)."""
        self.busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, function)
        finally:
            self.busy -= 1

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        left_over = None  # the request that did not fit the last batch: it opens the next
        while True:
            await self._slots.acquire()
            pending = [left_over or await self._queue.get()]
            left_over, size = None, len(pending[0][0])
            deadline = self._deadline(loop, pending[0][1])
            while size < self.max_batch:
                queued = await self._next_request(loop, deadline)
                if queued is None:
                    break
                if size + len(queued[0]) > self.max_batch:
                    left_over = queued
                    break
                pending.append(queued)
                size += len(queued[0])
            self._start(loop, pending)

    def _start(self, loop, pending: list) -> None:
        """Runs `pending`'s batch in a task of its own, which frees its slot when it ends."""
        task = loop.create_task(self._run(loop, pending))
        self._running.add(task)

        def ended(task: asyncio.Task) -> None:
            self._running.discard(task)
            self._slots.release()

        task.add_done_callback(ended)

    async def _next_request(self, loop, deadline: float) -> tuple | None:
        """The next queued request (rows, future): at once if one is queued, else the first to
        arrive by `deadline`; None if none did."""
        if not self._queue.empty():  # wait_for(…, 0) would time out even on a full queue
            return self._queue.get_nowait()
        try:
            return await asyncio.wait_for(self._queue.get(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            return None

    def _deadline(self, loop, first: asyncio.Future) -> float:
        """When the batch that `first` opens runs: `max_wait` after `first` arrived (TF
        Serving's batch timeout), so rows that queued while the model ran go at once."""
        return self._queued_at.get(first, loop.time()) + self.max_wait

    async def _run(self, loop, pending: list) -> None:
        pending = [(rows, future) for rows, future in pending if not future.done()]
        if not pending:
            return
        if self.metrics is not None:
            for _, future in pending:
                waited = (loop.time() - self._queued_at.get(future, loop.time())) * 1e6
                self.metrics.queuing_latency.add(waited, thread_pool_name=self.pool_name)
        rows = [row for request_rows, _ in pending for row in request_rows]
        try:
            results = await self._call(loop, rows)
        except Exception as error:  # retried below, or the request's own error
            if len(pending) == 1:
                _settle(pending[0][1], exception=error)
            else:
                for request_rows, future in pending:
                    await self._run(loop, [(request_rows, future)])
            return
        start = 0
        for request_rows, future in pending:
            _settle(future, results[start : start + len(request_rows)])
            start += len(request_rows)

    async def _call(self, loop, rows: list) -> Sequence:
        self.batches += 1
        if self.metrics is not None:
            self.metrics.processed_batch_size.add(len(rows))
        results = await loop.run_in_executor(self._worker, self.run_batch, rows)
        if len(results) != len(rows):
            raise RuntimeError(f"the model returned {len(results)} results for {len(rows)} rows")
        return results


def _settle(future: asyncio.Future, result=None, exception: BaseException | None = None) -> None:
    """Completes `future` unless its request went away (the client disconnected)."""
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
