"""Riding out a server that goes away mid-run: wait for it, or stop the run cleanly.

A request that gets no HTTP answer (refused, reset, timed out) asks the server's watch
whether the server is down. One probe tells a lost request (the server answers: the call
spends one of its retries) from an outage (it does not: every call waits here, without
spending retries, until the server is back or the run's patience runs out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..errors import ServerGone

Probe = Callable[[], Awaitable[bool]]
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

    def went_down(self, what: str) -> Outage:
        """Open an outage record for a server that others stand in for (`what` is said)."""
        outage = Outage(time.monotonic())
        self.outages.append(outage)
        log.warning("%s does not answer; %s.", self.url, what)
        return outage

    def came_back(self, outage: Outage, what: str) -> None:
        """Close `outage`: the server answered its probe again."""
        outage.ended = self._last_ok = time.monotonic()
        outage.recovered = True
        log.warning("%s answers again after %.1f s; %s.", self.url, outage.seconds, what)

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
        log.warning(
            "%s does not answer; waiting up to %.0f s for it to come back (--server-wait).",
            self.url,
            self.patience,
        )
        delay = FIRST_WAIT
        while True:
            left = self.patience - outage.seconds
            if left <= 0:
                outage.ended = time.monotonic()
                self._gone = ServerGone(
                    f"{self.url} did not answer for {outage.seconds:.0f} s (--server-wait "
                    f"{self.patience:.0f})"
                )
                raise self._gone
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_WAIT)
            if await self._probe_within(self.patience - outage.seconds):
                break
        outage.ended = self._last_ok = time.monotonic()
        outage.recovered = True
        log.warning("%s is back after %.1f s; going on.", self.url, outage.seconds)
        return outage
