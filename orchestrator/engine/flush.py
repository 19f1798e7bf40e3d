"""Driving a run: finished work written on a steady tick (replies, then traces, then result
lines), a progress bar on a terminal or a plain progress line off one on the same tick, and
fewer GC passes while it runs."""

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
PROGRESS_LINE_SECONDS = 2.0  # off a terminal, how often a progress line is logged
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


class ProgressLines:
    """Off a terminal (a file, CI, a notebook's captured output, `nohup`), one plain line
    every PROGRESS_LINE_SECONDS: examples done of total, failed, requests in flight, the
    request rate and the servers' current in-flight limits.

    The lines go through logging (INFO on `orchestrator.engine.flush`), not a console: a
    user tailing a log file expects them in the same stream, order and format as the run's
    other messages (warnings, server outages, the embedded server's phases), timestamped by
    whatever handler the application set, with no cursor moves or colour codes; the CLI
    sends the `orchestrator` logger to stderr, a library user chooses with the log level.
    """

    def __init__(
        self,
        stats: Counts,
        total: int | None,
        limits: Callable[[], str] | None,
        in_flight: Callable[[], int] | None,
    ) -> None:
        self.stats, self.total, self.limits, self.in_flight = stats, total, limits, in_flight
        self.started = time.monotonic()
        self.last = self.started  # the first line after PROGRESS_LINE_SECONDS of work
        self.last_requests = stats.requests

    def text(self, now: float) -> str:
        """The line as it stands at `now` (monotonic seconds)."""
        stats = self.stats
        done = stats.finished()
        rate = (stats.requests - self.last_requests) / max(now - self.last, 1e-6)
        parts = [
            f"progress: {done} of {self.total if self.total is not None else '?'} examples",
            f"failed {stats.examples_failed}",
            *([f"abstained {stats.examples_abstained}"] if stats.examples_abstained else []),
        ]
        if self.in_flight is not None:
            parts.append(f"in flight {self.in_flight()}")
        parts.append(f"{rate:.1f} req/s")
        # Shares are identical requests answered by one call in flight: not cache hits.
        parts += [f"cache hits {stats.cache_hits}", f"shared in flight {stats.shared}"]
        if self.limits is not None:
            parts.append(self.limits())
        parts.append(f"{now - self.started:.0f} s")
        return " · ".join(parts)

    def __call__(self) -> None:
        """Log a line when PROGRESS_LINE_SECONDS have passed since the last one."""
        now = time.monotonic()
        if now - self.last < PROGRESS_LINE_SECONDS:
            return
        log.info("%s", self.text(now))
        self.last, self.last_requests = now, self.stats.requests


async def drive(
    work: Awaitable[None],
    flush: Callable[[], None],
    stats: Counts,
    total: int | None,
    console: Console | None,
    limits: Callable[[], str] | None = None,
    events: RunEvents | None = None,
    in_flight: Callable[[], int] | None = None,
) -> None:
    """Await `work`, flushing every FLUSH_SECONDS; with a console, a progress bar of examples,
    requests, cache hits, retries, tokens/s, the servers' in-flight `limits` and the latest
    warning among the run's `events` (drawn on the same tick, no extra thread); without a
    terminal, a plain progress line (ProgressLines) every PROGRESS_LINE_SECONDS."""
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
    # A bar is redrawn in place only where a terminal (or a notebook) shows it that way:
    # anywhere else (no console, or one writing to a file) the run logs progress lines.
    live = console is not None and (console.is_terminal or console.is_jupyter)
    lines = None if live else ProgressLines(stats, total, limits, in_flight)
    latest = LatestWarning()
    unsubscribe = events.subscribe(latest) if events is not None and progress else None

    def tick() -> None:
        flush()
        if lines is not None:
            lines()
        if progress is None or task is None:
            return
        done = stats.finished()
        progress.update(
            task,
            completed=done,
            detail=(
                f"ok {stats.examples_ok} · failed {stats.examples_failed} · "
                + (f"abstained {n} · " if (n := stats.examples_abstained) else "")
                + f"req {stats.requests} · hits {stats.cache_hits} · shared {stats.shared} · "
                f"retries {stats.retries} · "
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
