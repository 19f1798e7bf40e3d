"""A run's progress as a person watches it: a bar redrawn in place on a terminal, a plain
line logged every few seconds anywhere else. `ProgressDisplay` is the engine's
`RunObserver`: it reads the run's counters and subscribes to its typed events, and is
redrawn on the engine's flush tick (no thread of its own)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..engine import RunProgress
from ..events import RunEvent

__all__ = ["Console", "ProgressDisplay", "console_progress", "run_progress"]

log = logging.getLogger(__name__)

EVENT_SHOWN_SECONDS = 30.0  # how long the bar shows a server's or worker's latest warning
PROGRESS_LINE_SECONDS = 2.0  # off a terminal, how often a progress line is logged


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

    The lines go through logging (INFO on `orchestrator.ui.progress`), not a console: a
    user tailing a log file expects them in the same stream, order and format as the run's
    other messages (warnings, server outages, the embedded server's phases), timestamped by
    whatever handler the application set, with no cursor moves or colour codes; the CLI
    sends the `orchestrator` logger to stderr, a library user chooses with the log level.
    """

    def __init__(self, run: RunProgress) -> None:
        self.run = run
        self.started = time.monotonic()
        self.last = self.started  # the first line after PROGRESS_LINE_SECONDS of work
        self.last_requests = run.stats.requests

    def text(self, now: float) -> str:
        """The line as it stands at `now` (monotonic seconds)."""
        stats, total = self.run.stats, self.run.total
        done = stats.finished()
        rate = (stats.requests - self.last_requests) / max(now - self.last, 1e-6)
        parts = [
            f"progress: {done} of {total if total is not None else '?'} examples",
            f"failed {stats.examples_failed}",
            *([f"abstained {stats.examples_abstained}"] if stats.examples_abstained else []),
        ]
        if self.run.in_flight is not None:
            parts.append(f"in flight {self.run.in_flight()}")
        parts.append(f"{rate:.1f} req/s")
        # Shares are identical requests answered by one call in flight: not cache hits.
        parts += [f"cache hits {stats.cache_hits}", f"shared in flight {stats.shared}"]
        if self.run.limits is not None:
            parts.append(self.run.limits())
        parts.append(f"{now - self.started:.0f} s")
        return " · ".join(parts)

    def __call__(self) -> None:
        """Log a line when PROGRESS_LINE_SECONDS have passed since the last one."""
        now = time.monotonic()
        if now - self.last < PROGRESS_LINE_SECONDS:
            return
        log.info("%s", self.text(now))
        self.last, self.last_requests = now, self.run.stats.requests


class ProgressBar:
    """Examples done of total, with requests, cache hits, retries, tokens/s, the servers'
    in-flight limits and the latest warning among the run's events, on a console."""

    def __init__(self, console: Console, run: RunProgress) -> None:
        self.run = run
        self.progress = Progress(
            TextColumn("[bold]examples"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            auto_refresh=False,
        )
        self.task = self.progress.add_task("run", total=run.total, detail="")
        self.latest = LatestWarning()
        self.unsubscribe: Callable[[], None] | None = (
            run.events.subscribe(self.latest) if run.events is not None else None
        )
        self.progress.start()

    def detail(self) -> str:
        """The figures after the bar."""
        stats, limits = self.run.stats, self.run.limits
        return (
            f"ok {stats.examples_ok} · failed {stats.examples_failed} · "
            + (f"abstained {n} · " if (n := stats.examples_abstained) else "")
            + f"req {stats.requests} · hits {stats.cache_hits} · shared {stats.shared} · "
            f"retries {stats.retries} · "
            f"{stats.tokens_per_second():.0f} tok/s"
            + (f" · {limits()}" if limits is not None else "")
            + (f" · {said}" if (said := self.latest.text()) else "")
        )

    def __call__(self) -> None:
        self.progress.update(self.task, completed=self.run.stats.finished(), detail=self.detail())
        self.progress.refresh()

    def stop(self) -> None:
        if self.unsubscribe is not None:
            self.unsubscribe()
        self.progress.stop()


class ProgressDisplay:
    """A run's progress (the engine's `RunObserver`): with a console, a bar on it; where
    that console does not redraw in place (no console, or one writing to a file), a
    progress line logged every PROGRESS_LINE_SECONDS."""

    def __init__(self, console: Console | None) -> None:
        self.console = console
        self.bar: ProgressBar | None = None
        self.lines: ProgressLines | None = None

    def start(self, run: RunProgress) -> None:
        console = self.console
        # A bar is redrawn in place only where a terminal (or a notebook) shows it that way:
        # anywhere else the run logs progress lines (a bar on a file is drawn once, at the end).
        live = console is not None and (console.is_terminal or console.is_jupyter)
        self.lines = None if live else ProgressLines(run)
        self.bar = ProgressBar(console, run) if console is not None else None

    def tick(self) -> None:
        if self.lines is not None:
            self.lines()
        if self.bar is not None:
            self.bar()

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_progress(progress: bool) -> ProgressDisplay:
    """What `orc.run(progress=...)` shows: with `progress`, a bar on stderr (on a terminal;
    elsewhere it is drawn once at the end); progress lines wherever no bar is redrawn."""
    return ProgressDisplay(Console(stderr=True) if progress else None)


def console_progress(console: Console | None, progress: bool) -> ProgressDisplay:
    """What the deprecated `execute(RunConfig)` shows: a bar on `console` (stdout's by
    default) when it is a terminal and `progress` asks for it, progress lines otherwise."""
    console = console or Console()
    return ProgressDisplay(console if progress and console.is_terminal else None)
