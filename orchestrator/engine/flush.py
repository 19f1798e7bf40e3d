"""Driving a run: finished work written on a steady tick (replies, then traces, then result
lines), an optional progress bar drawn on the same tick, and fewer GC passes while it runs."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..events import RunEvent, RunEvents
from ..store.cache import BUSY_SECONDS, ResponseCache
from ..store.protocol import RunStore
from ..store.records import Counts
from ..store.trace import TraceStore

log = logging.getLogger(__name__)

EVENT_SHOWN_SECONDS = 30.0  # how long the bar shows a server's or worker's latest warning
FLUSH_SECONDS = 0.5  # how often finished work is written out (and the progress bar redrawn)
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


class LatestWarning:
    """A progress bar's subscriber to the run's events: the last one worth a warning (a
    server down or back, a worker lost), shown for EVENT_SHOWN_SECONDS after it happened."""

    def __init__(self) -> None:
        self.event: RunEvent | None = None

    def __call__(self, event: RunEvent) -> None:
        if event.log_level() >= logging.WARNING:
            self.event = event

    def text(self) -> str:
        event = self.event
        if event is None or time.time() - event.at > EVENT_SHOWN_SECONDS:
            return ""
        return event.describe()


async def drive(
    work: Awaitable[None],
    flush: Callable[[], None],
    stats: Counts,
    total: int | None,
    console: Console | None,
    limits: Callable[[], str] | None = None,
    events: RunEvents | None = None,
) -> None:
    """Await `work`, flushing every FLUSH_SECONDS; with a console, a progress bar of examples,
    requests, cache hits, retries, tokens/s, the servers' in-flight `limits` and the latest
    warning among the run's `events` (drawn on the same tick, no extra thread)."""
    columns = (
        TextColumn("[bold]examples"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    runner = asyncio.ensure_future(work)
    progress = Progress(*columns, console=console, auto_refresh=False) if console else None
    task = progress.add_task("run", total=total, detail="") if progress else None
    latest = LatestWarning()
    unsubscribe = events.subscribe(latest) if events is not None and progress else None

    def tick() -> None:
        flush()
        if progress is None or task is None:
            return
        done = stats.examples_ok + stats.examples_failed + stats.examples_resumed
        progress.update(
            task,
            completed=done,
            detail=(
                f"ok {stats.examples_ok} · failed {stats.examples_failed} · "
                f"req {stats.requests} · hits {stats.cache_hits} · retries {stats.retries} · "
                f"{stats.tokens_per_second():.0f} tok/s"
                + (f" · {limits()}" if limits is not None else "")
                + (f" · {said}" if (said := latest.text()) else "")
            ),
        )
        progress.refresh()

    if progress is not None:
        progress.start()
    try:
        while not runner.done():
            await asyncio.wait({runner}, timeout=FLUSH_SECONDS)
            tick()
    finally:
        if unsubscribe is not None:
            unsubscribe()
        if progress is not None:
            progress.stop()
        if not runner.done():
            runner.cancel()
    await runner
