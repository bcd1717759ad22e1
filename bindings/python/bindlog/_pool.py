"""The writer threads of an AsyncStore (private).

A deliberately small pool, leaner than concurrent.futures: a job is a
(doorbell, future, function, arguments) tuple on a SimpleQueue; a thread
runs the function and drops the result at the loop's doorbell, which wakes
the loop only when it was empty.  A group commit returns many writes at
once: their threads then wake the loop once, not once each, and no
intermediate future is made.  That matters here: a write costs the
loop's task a round trip through this pool, and the shorter the trip, the
sooner the task's next write is back in the library to share the next
group commit.

Threads start on demand, up to `size`, whenever more jobs are waiting or
running than there are threads; they are daemon threads (a program that
exits without closing its store does not hang; the library's commits are
atomic, so a write cut short by the exit is simply not there).
"""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, List, Optional, Set, Tuple, TypeVar

R = TypeVar("R")


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: nobody is left to tell
        pass


def _settle(fut: "asyncio.Future[Any]", result: Any, exc: Optional[BaseException]) -> None:
    if fut.done():  # the awaiting task was cancelled meanwhile
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class _Doorbell:
    """Results on their way to one loop: threads add them, and the first
    one added to an empty doorbell schedules the loop to settle them all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._items: List[Tuple["asyncio.Future[Any]", Any, Optional[BaseException]]] = []

    def ring(self, fut: "asyncio.Future[Any]", result: Any, exc: Optional[BaseException]) -> None:
        self.ring_all([(fut, result, exc)])

    def ring_all(self, items: List[Tuple["asyncio.Future[Any]", Any, Optional[BaseException]]]) -> None:
        with self._lock:
            first = not self._items
            self._items.extend(items)
        if first and items:
            _post(self.loop, self._settle_all)

    def _settle_all(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for fut, result, exc in items:
            _settle(fut, result, exc)


class _Job:
    """A job: settles one future with fn's result, or (submit_each) a
    list of futures with the list of (result, exception) that fn returns
    for them.  `done` is set by the thread that ran it."""

    __slots__ = ("bell", "fut", "fn", "args", "done")

    def __init__(self, bell: _Doorbell, fut: Any, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        self.bell = bell
        self.fut = fut
        self.fn = fn
        self.args = args
        self.done = False


class WriterPool:
    """Up to `size` threads running blocking calls for asyncio tasks.

    No count that the loop's thread changes: a KeyboardInterrupt there
    (the only thread a signal handler interrupts) could leave one wrong and
    drain() waiting forever.  Jobs are tracked in a set instead, each
    marked done by the thread that ran it; a job the interrupt kept out of
    the set is not waited for by drain(), and Store.close() still waits
    for its call (Store._token)."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._q: "queue.SimpleQueue[Optional[_Job]]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._jobs: "Set[_Job]" = set()  # queued or running (or done, not yet dropped)
        self._stopped = False
        self._bell: Optional[_Doorbell] = None

    def submit(self, fn: Callable[..., R], *args: Any) -> "asyncio.Future[R]":
        """Run fn(*args) on a pool thread; the future (of the running loop)
        gets its result or exception.  A job whose future is cancelled
        before a thread takes it up is dropped."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[R]" = loop.create_future()
        self._put(loop, fut, fn, args)
        return fut

    def submit_each(self, futs: "List[asyncio.Future[Any]]", fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(live, *args) on a pool thread, one job for several futures
        of the running loop: `live` lists the indexes of those not cancelled
        when a thread takes the job up (none: the job is dropped), and fn
        returns a (result, exception) pair for each, in that order."""
        self._put(asyncio.get_running_loop(), futs, fn, args)

    def _put(self, loop: asyncio.AbstractEventLoop, fut: Any, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        bell = self._bell
        if bell is None or bell.loop is not loop:
            bell = self._bell = _Doorbell(loop)
        job = _Job(bell, fut, fn, args)
        with self._lock:
            if self._stopped:
                raise RuntimeError("the writer pool is shut down")
            # a thread first, then the job: a job is never queued with no
            # thread to run it, whatever interrupts this block
            if len(self._jobs) >= len(self._threads) and len(self._threads) < self.size:
                t = threading.Thread(
                    target=self._run, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            self._q.put(job)
            self._jobs.add(job)

    def _run(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            fut = job.fut
            if isinstance(fut, list):
                self._run_each(job.bell, fut, job.fn, job.args)
            elif not fut.cancelled():
                try:
                    result, exc = job.fn(*job.args), None
                except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                    result, exc = None, e
                job.bell.ring(fut, result, exc)
                del result, exc
            job.done = True
            with self._lock:
                self._jobs.discard(job)

    @staticmethod
    def _run_each(bell: _Doorbell, futs: "List[asyncio.Future[Any]]", fn: Callable[..., Any],
                  args: Tuple[Any, ...]) -> None:
        live = [i for i, f in enumerate(futs) if not f.cancelled()]
        if not live:
            return
        try:
            outs = fn(live, *args)
        except BaseException as e:  # noqa: BLE001 - handed to every awaiting task
            outs = [(None, e)] * len(live)
        bell.ring_all([(futs[i], r, e) for i, (r, e) in zip(live, outs)])

    async def drain(self) -> None:
        """Wait (without blocking the loop) until every job submitted so far
        has run, and until the tasks awaiting their results have had them."""
        loop = asyncio.get_running_loop()
        delay = 0.0005
        while True:
            with self._lock:
                busy = any(not j.done for j in self._jobs)
            if not busy:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.01)
        # Jobs that finished before this call (fast writes) may have left
        # their results at the doorbell, its settling not yet run by the
        # loop: settle them here, then yield once so that their tasks run.
        bell = self._bell
        if bell is not None and bell.loop is loop:
            bell._settle_all()
        await asyncio.sleep(0)

    def shutdown(self) -> None:
        """Refuse new jobs and let the threads end once the queue is empty."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            n = len(self._threads)
        for _ in range(n):
            self._q.put(None)
