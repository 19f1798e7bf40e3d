"""Driving a run: finished work written on a steady tick (replies, then traces, then result
lines), whoever shows the run's progress told on the same tick (`RunObserver`: the engine
draws nothing), and fewer GC passes while it runs."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from ..events import RunEvents
from ..store import BUSY_SECONDS, Counts, ResponseCache, RunStore, TraceStore

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5  # how often finished work is written out (and the progress redrawn)
RETRY_LOCK_WAIT = 0.2  # seconds a flush waits for a cache lock once a wait has timed out


@contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Run the young-generation collector less often while a run is in flight.

    Every request allocates thousands of short-lived objects; at Python's default threshold
    (700) the collector's passes over the run's live objects cost ~15% of throughput against
    a fast server (bench/engine_overhead.py). Restored when the run ends.
    """
    before = gc.get_threshold()
    gc.set_threshold(20_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class CacheFlusher:
    """Writes the replies the cache has queued. The cache only saves requests (resume reads
    the trace): a cache another process keeps locked costs its writes, not the run; the
    replies stay queued and are tried again at the next flush."""

    def __init__(self, cache: ResponseCache | None) -> None:
        self.cache = cache
        self.error: str | None = None

    def __call__(self) -> None:
        if self.cache is None:
            return
        try:
            self.cache.flush()
        except sqlite3.OperationalError as exc:
            if self.error is None:
                log.warning(
                    "cannot write the response cache %s (%s); the run goes on and retries "
                    "at every flush.",
                    self.cache.path,
                    exc,
                )
                # The wait blocks the event loop: after one long wait, try briefly.
                self.cache.lock_wait(RETRY_LOCK_WAIT)
            self.error = str(exc)
        else:
            if self.error is not None:
                self.cache.lock_wait(BUSY_SECONDS)
            self.error = None


class Flusher:
    """Writes what has finished: replies, then traces, then result lines, so every result
    line on disk has its trace, and a kill loses at most one flush interval of work."""

    def __init__(
        self,
        cache: ResponseCache | None,
        trace: TraceStore,
        store: RunStore,
    ) -> None:
        self.cache = CacheFlusher(cache)
        self.trace, self.store = trace, store

    @property
    def cache_error(self) -> str | None:
        return self.cache.error

    def __call__(self) -> None:
        self.cache()
        self.trace.flush()
        self.store.flush()


@dataclass(frozen=True)
class RunProgress:
    """What a progress display may read of a run in flight: its live counters, the examples
    it will take (None: unknown), the servers' in-flight limits now (`limit 48`), the
    requests held now, and the run's events (to subscribe to)."""

    stats: Counts
    total: int | None
    limits: Callable[[], str] | None = None
    in_flight: Callable[[], int] | None = None
    events: RunEvents | None = None


class RunObserver(Protocol):
    """Whoever shows a run's progress (the terminal's, `orchestrator.ui`): the engine knows
    no more of it than these three calls, so it draws nothing itself."""

    def start(self, run: RunProgress) -> None:
        """The run's work has begun: what to read from now on."""

    def tick(self) -> None:
        """Finished work was just flushed (every FLUSH_SECONDS): redraw."""

    def stop(self) -> None:
        """The work ended, however it did: the last redraw, every subscription dropped."""


class Observers:
    """Several observers told as one, in order (the progress display, a live exporter); one
    that fails does not keep the others from being told."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = observers

    def start(self, run: RunProgress) -> None:
        self._each(lambda observer: observer.start(run))

    def tick(self) -> None:
        self._each(lambda observer: observer.tick())

    def stop(self) -> None:
        self._each(lambda observer: observer.stop())

    def _each(self, call: Callable[[RunObserver], None]) -> None:
        failed: BaseException | None = None
        for observer in self.observers:
            try:
                call(observer)
            except Exception as exc:  # the first is raised once every one was told
                failed = failed or exc
        if failed is not None:
            raise failed


async def drive(
    work: Awaitable[None],
    flush: Callable[[], None],
    run: RunProgress,
    observer: RunObserver | None = None,
) -> None:
    """Await `work`, flushing every FLUSH_SECONDS and telling the `observer` (a progress
    display) after each flush, on the same tick: no thread of its own draws."""
    runner = asyncio.ensure_future(work)
    if observer is not None:
        observer.start(run)
    try:
        while not runner.done():
            await asyncio.wait({runner}, timeout=FLUSH_SECONDS)
            flush()
            if observer is not None:
                observer.tick()
    finally:
        if observer is not None:
            observer.stop()
        if not runner.done():
            runner.cancel()
    await runner
