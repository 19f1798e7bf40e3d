"""The run's own side of a scaled-out run: it reads the rows, hands them to workers as they
have room, and writes what comes back — result lines and trace rows — through the run's
store, so there is one run folder, one writer and one lock whatever the number of workers.

A worker that dies costs only the examples it had in flight: everything it reported is
already written, and the others are let finish theirs before the run stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Protocol

from ..data import Row
from ..engine import GroupOutcome, GroupRuns
from ..events import RunEvents
from ..events import WorkerLost as WorkerLostEvent  # the record; WorkerLost is the error
from ..servers import ServerGone
from ..store import Counts, RunStore, TraceStore, WorkerEntry
from .messages import RowChunk, WorkerFailed, WorkerLost, WorkerReport

log = logging.getLogger(__name__)

CHUNK_ROWS = 32  # rows per hand-over at most: a message per 32 examples, not one per example
_COUNTERS = [f.name for f in fields(Counts) if f.name != "started"]


class WorkerLink(Protocol):
    """One worker as the run's owner reaches it (a process's pipe, a Ray actor handle)."""

    name: str

    async def push(self, chunk: RowChunk) -> None: ...

    async def pull(self) -> WorkerReport:
        """The worker's next report; WorkerLost when it is gone."""
        ...

    async def close(self, cancel: bool) -> None:
        """No more rows; with `cancel`, give up those in flight. Never raises."""
        ...

    def describe(self) -> str: ...


class Coordinator:
    """Hands rows to workers as they have room and writes back what they report."""

    def __init__(
        self,
        links: list[WorkerLink],
        store: RunStore,
        trace: TraceStore,
        stats: Counts,
        window: int,
        started: Callable[[list[WorkerEntry]], None] | None = None,
        events: RunEvents | None = None,
        groups: GroupRuns | None = None,
    ) -> None:
        self.links = links
        # The owner's once_per groups: settled here before their rows go out, so that no
        # worker asks one and each is asked once however its rows are spread.
        self.groups = groups if groups is not None and groups.orders else None
        self.groups_sent: dict[str, set[str]] = {link.name: set() for link in links}
        # The run's sink: the workers' events join it, and a lost worker is one.
        self.events = events if events is not None else RunEvents()
        self.started = started
        self.store, self.trace, self.stats = store, trace, stats
        # Examples each worker may hold: twice its engine's window, so it has rows to start
        # while its report of finished ones travels back and new rows come.
        self.window = 2 * window
        # A quarter of that per hand-over, so a small run is spread over every worker too
        # rather than filling the first one's room.
        self.chunk = max(1, min(CHUNK_ROWS, self.window // 4))
        self.base = Counts(**{name: getattr(stats, name) for name in _COUNTERS})
        # What the run's counters held after the last sum: the owner's own requests (its
        # once_per groups) since then are the difference, added to `base`.
        self.summed = Counts(**{name: getattr(stats, name) for name in _COUNTERS})
        self.reported: dict[str, Counts] = {}
        self.in_flight: dict[str, Counter[str]] = {link.name: Counter() for link in links}
        self.live = {link.name for link in links}
        self.cache_errors: list[str] = []
        self.workers: dict[str, WorkerEntry] = {}
        self.error: Exception | None = None
        self._room = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()

    async def run(self, rows: Iterable[Row]) -> None:
        """Every row not finished before, through the workers; raises what stopped them."""
        followers = [asyncio.create_task(self._follow(link)) for link in self.links]
        try:
            await self._dispatch(rows)
            for link in self.links:
                await link.close(cancel=False)
            await asyncio.gather(*followers)
        except BaseException:
            # Interrupted (Ctrl-C, a kill): in-flight rows are given up, finished work is
            # still taken in, briefly, so the folder keeps it.
            for link in self.links:
                await link.close(cancel=True)
            await asyncio.wait(followers, timeout=10)
            raise
        finally:
            for follower in followers:
                follower.cancel()
            if self.groups is not None:
                self.groups.cancel()  # a group no row will wait on any more
        if self.error is not None:
            raise self.error

    # -- rows out ---------------------------------------------------------------------

    async def _dispatch(self, rows: Iterable[Row]) -> None:
        chunk: list[Row] = []
        for row in rows:
            if self.error is not None:
                return
            if row.id in self.store.done and row.error is None:
                self.stats.examples_resumed += 1  # the owner's own count: `_count` keeps it
                continue
            chunk.append(row)
            if len(chunk) >= self.chunk:
                await self._settle_and_send(chunk)
                chunk = []
        if chunk and self.error is None:
            await self._settle_and_send(chunk)

    async def _settle_and_send(self, rows: list[Row]) -> None:
        if self.groups is not None:
            await self.groups.settle(rows)
            self._count()  # the owner's requests for them, in the live counters
        await self._send(rows)

    async def _send(self, rows: list[Row]) -> None:
        while rows and self.error is None:
            link, room = self._roomiest()
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            part, rows = rows[:room], rows[room:]
            resume = {
                row.id: found for row in part if (found := self.trace.finished_values(row.id))
            }
            self.in_flight[link.name].update(row.id for row in part)
            await link.push(RowChunk(part, resume, self._new_groups(link, part)))

    def _new_groups(self, link: WorkerLink, rows: list[Row]) -> dict[str, GroupOutcome]:
        """The settled groups of `rows` this worker has not been handed yet."""
        if self.groups is None:
            return {}
        sent = self.groups_sent[link.name]
        new: dict[str, GroupOutcome] = {}
        for row in rows:
            if row.error is None:
                new.update(
                    (key, outcome)
                    for key, outcome in self.groups.outcomes(row).items()
                    if key not in sent
                )
        sent.update(new)
        return new

    def _roomiest(self) -> tuple[WorkerLink, int]:
        """The live worker with the most room, and how many rows it can take."""
        live = [link for link in self.links if link.name in self.live]
        if not live:  # each worker that ended early also set the run's error
            raise WorkerFailed("every worker of the run has stopped; see the errors above.")
        best = min(live, key=lambda link: self.in_flight[link.name].total())
        return best, self.window - self.in_flight[best.name].total()

    # -- reports in -------------------------------------------------------------------

    async def _follow(self, link: WorkerLink) -> None:
        """Take in the worker's reports until its last; a lost worker stops the run."""
        while True:
            try:
                report = await link.pull()
            except WorkerLost as exc:
                self._lose(link, exc)
                return
            self._take(link, report)
            if report.failure is not None:
                failure = report.failure
                kind = ServerGone if failure.kind == "server gone" else WorkerFailed
                self._stop(kind(failure.message), cancel=True)
            if report.final:
                self.live.discard(link.name)
                self._room.set()
                return

    def _take(self, link: WorkerLink, report: WorkerReport) -> None:
        if link.name not in self.workers:
            self.workers[link.name] = WorkerEntry(
                worker=link.name, pid=report.pid, host=report.host
            )
            if self.started is not None:
                self.started(list(self.workers.values()))
        # Trace rows before result lines (the store's flush keeps that order on disk).
        if report.trace.runs:
            self.trace.add(report.trace)
        if report.lines:
            self.store.write_lines(report.lines)
            self.in_flight[link.name].subtract(report.ids)
            self.in_flight[link.name] += Counter()  # drop ids at zero
            self._room.set()
        self.reported[link.name] = report.stats
        self.workers[link.name].examples = report.stats.ended()
        self._count()
        if report.events:
            self.events.adopt(report.events, link.name)
        if report.final and report.cache_error:
            self.cache_errors.append(report.cache_error)

    def _count(self) -> None:
        """The run's counters: its own plus every worker's latest totals."""
        for name in _COUNTERS:
            own = getattr(self.stats, name) - getattr(self.summed, name)
            total = getattr(self.base, name) + own
            setattr(self.base, name, total)
            total += sum(getattr(stats, name) for stats in self.reported.values())
            setattr(self.stats, name, total)
            setattr(self.summed, name, total)

    def _lose(self, link: WorkerLink, exc: WorkerLost) -> None:
        self.live.discard(link.name)
        lost = self.in_flight[link.name].total()
        done = self.stats.ended()
        self.events.emit(WorkerLostEvent(worker=link.name, cause=str(exc), in_flight=lost), log)
        self._stop(
            WorkerLost(
                f"{exc}; its {lost} examples in flight are lost, the {done} finished by this "
                f"run are saved in {self.store.describe()}: re-run the same command to "
                "resume (finished examples are skipped)."
            ),
            cancel=False,  # the others finish what they hold: less to redo
        )

    def _stop(self, error: Exception, cancel: bool) -> None:
        if self.error is None:
            self.error = error
        self._room.set()
        for link in self.links:
            if link.name in self.live:
                task = asyncio.get_running_loop().create_task(link.close(cancel))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
