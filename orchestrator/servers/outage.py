"""Riding out a server that goes away mid-run: wait for it, or stop the run cleanly.

A request that gets no HTTP answer (refused, reset, timed out) asks the server's watch
whether the server is down. One probe tells a lost request (the server answers: the call
spends one of its retries) from an outage (it does not: every call waits here, without
spending retries, until the server is back or the run's patience runs out). A server whose
process this command started and that has exited is not waited for: it cannot come back,
so the run stops at once with what its log says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..errors import ServerExited, ServerGone
from ..events import (
    ReplicaJoined,
    ReplicaLeft,
    RunEvents,
    ServerBack,
    ServerDown,
    ServerGaveUp,
    ServerProcessExited,
)

Probe = Callable[[], Awaitable[bool]]
# Why the server's process can never answer again (it exited), or None while it runs; known
# only for a server this command started itself.
ExitCheck = Callable[[], str | None]
log = logging.getLogger(__name__)

DEFAULT_SERVER_WAIT = 600.0  # seconds: long enough for a GPU server to restart and load
FIRST_WAIT = 0.5  # seconds before the first re-probe; doubles up to MAX_WAIT
MAX_WAIT = 2.0  # so a server that comes back is noticed within this many seconds


@dataclass
class Outage:
    """One stretch of time the server did not answer its probe."""

    started: float
    ended: float | None = None
    recovered: bool = False

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started


@dataclass
class ServerWatch:
    """Shared by every request to one server URL; at most one caller probes at a time."""

    url: str
    probe: Probe
    patience: float
    outages: list[Outage] = field(default_factory=list)
    # The run's sink: each outage opens and closes with an event there (log, manifest, bar).
    events: RunEvents = field(default_factory=RunEvents)
    exited: ExitCheck | None = None
    _last_ok: float = float("-inf")
    _gone: ServerGone | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def after_failure(self, failed_at: float) -> Outage | None:
        """Called when a request got no answer at `failed_at` (time.monotonic()).

        None: the server answers, so that request was lost on its own (count it as a
        retry). An Outage: the server was down and is back now (retry without counting).
        Raises ServerGone once the server has been down for longer than `patience`.
        """
        async with self._lock:
            if self._gone is not None:
                raise self._gone
            self._raise_if_exited()
            if self._last_ok >= failed_at:
                # Someone probed since our failure and the server answered; if an outage
                # ended in between, ours was part of it.
                last = self.outages[-1] if self.outages else None
                if last is not None and last.recovered and (last.ended or 0) >= failed_at:
                    return last
                return None
            if await self.probe():
                self._last_ok = time.monotonic()
                return None
            return await self._wait_until_back()

    async def answers(self, failed_at: float) -> bool:
        """Whether the server answers after a request to it failed at `failed_at`, without
        waiting for it: one probe, shared by every caller that failed before it."""
        async with self._lock:
            if self._last_ok >= failed_at:
                return True
            if await self.probe():
                self._last_ok = time.monotonic()
                return True
            return False

    def _raise_if_exited(self) -> None:
        why = self.exited() if self.exited is not None else None
        if why is not None:
            waited = 0.0
            if self.outages and self.outages[-1].ended is None:  # the wait it ends
                outage = self.outages[-1]
                outage.ended = time.monotonic()
                waited = outage.seconds
            self.events.emit(ServerProcessExited(url=self.url, why=why, seconds=waited), log)
            self._gone = ServerExited(why)
            raise self._gone

    def went_down(self, left: int, of: int) -> Outage:
        """Open an outage record for a replica that others stand in for (`left` of `of`
        replicas remain in rotation)."""
        outage = Outage(time.monotonic())
        self.outages.append(outage)
        self.events.emit(ReplicaLeft(url=self.url, left=left, of=of), log)
        return outage

    def came_back(self, outage: Outage) -> None:
        """Close `outage`: the replica answered its probe again and is back in rotation."""
        outage.ended = self._last_ok = time.monotonic()
        outage.recovered = True
        self.events.emit(ReplicaJoined(url=self.url, seconds=outage.seconds), log)

    async def _probe_within(self, left: float) -> bool:
        """One probe, given up as failed once the patience is spent: a probe of a server
        that takes connections and never answers would otherwise overrun it by its own
        timeout."""
        if left <= 0:
            return False
        try:
            async with asyncio.timeout(left):
                return await self.probe()
        except TimeoutError:
            return False

    async def _wait_until_back(self) -> Outage:
        outage = Outage(time.monotonic())
        self.outages.append(outage)
        self.events.emit(ServerDown(url=self.url, patience=self.patience), log)
        delay = FIRST_WAIT
        while True:
            left = self.patience - outage.seconds
            if left <= 0:
                outage.ended = time.monotonic()
                gave_up = ServerGaveUp(url=self.url, seconds=outage.seconds, patience=self.patience)
                self.events.emit(gave_up, log)
                self._gone = ServerGone(gave_up.describe())
                raise self._gone
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_WAIT)
            self._raise_if_exited()
            if await self._probe_within(self.patience - outage.seconds):
                break
        outage.ended = self._last_ok = time.monotonic()
        outage.recovered = True
        self.events.emit(ServerBack(url=self.url, seconds=outage.seconds), log)
        return outage
