"""An in-flight limit that can be resized while requests wait on it (asyncio.Semaphore
cannot), so a controller can tune a server's concurrency mid-run; several limiters can be
waited on together through `try_acquire` and `listeners`."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from types import TracebackType


class Limiter:
    """At most `limit` holders at once; waiters are served first come, first served.

    Lowering the limit never cancels a request already in flight: the excess drains as
    those requests finish. Used as `async with limiter:`, or by an owner of several
    limiters (a replica set) through `try_acquire` and `listeners`.
    """

    __slots__ = ("_limit", "_waiters", "active", "listeners", "saturated")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an in-flight limit must be at least 1, got {limit}")
        self._limit = limit
        self.active = 0
        # Every slot was taken at some point since a controller last looked (and reset it):
        # the limit, not the supply of ready requests, is what held the run back.
        self.saturated = False
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Called (no arguments) whenever a slot is free that no waiter of this limiter wants:
        # a release, a raised limit, `wake`. Each may take slots with `try_acquire`.
        self.listeners: list[Callable[[], None]] = []

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def has_room(self) -> bool:
        """A slot is free and nobody waits for it here: `try_acquire` would succeed."""
        return self.active < self._limit and not self._waiters

    def set_limit(self, limit: int) -> None:
        """Resize; a raise lets waiters (and listeners) in at once."""
        self._limit = max(1, int(limit))
        self._wake()

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody waits here; never waits."""
        if self.active < self._limit and not self._waiters:
            self.active += 1
            if self.active == self._limit:
                self.saturated = True
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return  # the usual case: no await, no future
        self.saturated = True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Granted a slot in the same tick it was cancelled: hand the slot on.
                self.active -= 1
                self._wake()
            elif waiter in self._waiters:
                # Not yet passed over: a release in the same tick may already have popped
                # this cancelled waiter (and skipped it), so it is not always still queued.
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.active -= 1
        self._wake()

    def wake(self) -> None:
        """Offer any free slot again, e.g. once the server behind this limit is back."""
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.active < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)
        listeners = self.listeners
        if listeners and self.active < self._limit:
            if len(listeners) > 1:
                # Take turns, so one owner with a long queue cannot keep the others out.
                listeners.append(listeners.pop(0))
            for listener in listeners:
                if self.active >= self._limit:
                    break
                listener()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
