"""Dynamic batching: requests that arrive within a few milliseconds share one model call."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence


class DynamicBatcher:
    """Collects rows from concurrent requests into batches of at most `max_batch` rows,
    waiting at most `max_wait` seconds after the first, and runs each batch in one thread.

    Args:
        run_batch: rows → one result per row; runs in the worker thread (TensorFlow releases
            the GIL, so the event loop keeps accepting requests meanwhile).
        max_batch: most rows per call (a larger request runs alone, whole).
        max_wait: seconds the first row of a batch waits for company.
    """

    def __init__(
        self, run_batch: Callable[[list], Sequence], max_batch: int = 64, max_wait: float = 0.005
    ):
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.batches = 0  # model calls made, for /healthz and tests
        self._queue: asyncio.Queue = asyncio.Queue()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bertfit")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._worker.shutdown(wait=False)

    async def submit(self, rows: list) -> list:
        """The results of `rows`, in order, once their batch ran."""
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((rows, future))
        return await future

    async def run_alone(self, function: Callable):
        """Runs `function()` in the worker thread, between batches."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, function)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            pending = [await self._queue.get()]
            size = len(pending[0][0])
            deadline = loop.time() + self.max_wait
            while size < self.max_batch:
                try:
                    rows, future = await asyncio.wait_for(
                        self._queue.get(), max(0.0, deadline - loop.time())
                    )
                except asyncio.TimeoutError:
                    break
                if size + len(rows) > self.max_batch:
                    await self._run(loop, pending)
                    pending, size, deadline = [], 0, loop.time() + self.max_wait
                pending.append((rows, future))
                size += len(rows)
            await self._run(loop, pending)

    async def _run(self, loop, pending: list) -> None:
        rows = [row for request_rows, _ in pending for row in request_rows]
        try:
            results = await loop.run_in_executor(self._worker, self.run_batch, rows)
            self.batches += 1
        except Exception as error:  # noqa: BLE001 - each waiting request gets the error
            for _, future in pending:
                if not future.done():
                    future.set_exception(error)
            return
        start = 0
        for request_rows, future in pending:
            if not future.done():
                future.set_result(results[start : start + len(request_rows)])
            start += len(request_rows)
