"""Several servers for one model: a request takes the first slot that frees on any live
replica (the least loaded one, relative to its in-flight limit, when several are free), a
replica that stops answering leaves the rotation until its probe succeeds again, and the
calls it failed are sent to another one. When no replica answers, calls wait for one for as
long as the run's patience allows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from ..events import LimitChanged, ReplicaRefused
from ..store import LimitChange, ReplicaEntry, ReplicaOutage
from .limiter import Limiter
from .outage import FIRST_WAIT, MAX_WAIT, Outage, ServerGone, ServerWatch

LimitMode = Literal["fixed", "vllm metrics", "latency"]

# A check a replica passes before it rejoins the rotation (given its URL): None, or why it
# stays out. It raises when the replica does not answer it (probed again later).
Admission = Callable[[str], Awaitable[str | None]]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Replica:
    """One server URL: its in-flight limit, outage watch and load, shared by every endpoint
    (model, key) served there."""

    url: str
    limit: Limiter
    watch: ServerWatch
    metrics: Callable[[], Awaitable[str | None]]  # its /metrics text, None without one
    mode: LimitMode = "fixed"
    served: int = 0
    failed: int = 0
    up: bool = True
    latency_sum: float = 0.0  # replies since the last controller tick (latency controller)
    latency_count: int = 0
    limits: list[LimitChange] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def outstanding(self) -> int:
        """Its load: requests holding one of its slots, and any queued on its own limiter (a
        set of this URL alone waits there; a set of several replicas waits on the set)."""
        return self.limit.active + self.limit.waiting

    def set_limit(self, limit: int, reason: str) -> None:
        """Resize the in-flight limit and keep the change for the manifest."""
        if limit != self.limit.limit or not self.limits:
            self.limit.set_limit(limit)
            t = round(time.monotonic() - self.started, 1)
            self.limits.append(LimitChange(t=t, limit=limit, reason=reason))
            self.watch.events.emit(LimitChanged(url=self.url, limit=limit, reason=reason, t=t), log)

    def report(self) -> ReplicaEntry:
        """What the manifest says of this replica (store/records.py)."""
        return ReplicaEntry(
            base_url=self.url,
            requests=self.served,
            failed=self.failed,
            limit_mode=self.mode,
            limit=self.limit.limit,
            limits=self.limits,
            outages=[
                ReplicaOutage(seconds=round(o.seconds, 2), recovered=o.recovered)
                for o in self.watch.outages
            ],
        )


class Affinity:
    """The replica that served an example's last call: its later calls go there too while
    it is not much busier than the rest, so the server's prefix cache holds its text."""

    __slots__ = ("replica",)

    def __init__(self) -> None:
        self.replica: Replica | None = None


# Set once per example (the engine's task for it); its node tasks inherit the same holder.
EXAMPLE_AFFINITY: ContextVar[Affinity | None] = ContextVar("example_affinity", default=None)


def start_example() -> None:
    """Called at the start of each example's task: its calls share one affinity."""
    EXAMPLE_AFFINITY.set(Affinity())


# A request of a set waiting for a slot, with its example's affinity (None: no preference).
# Its future is granted the replica whose slot it now holds, or None: no replica of the set
# is live any more, so it waits for one (within the patience) before asking again.
_Waiter: TypeAlias = tuple[asyncio.Future[Replica | None], Affinity | None]


class ReplicaSet:
    """The replicas of one logical server (the URLs given for one node), in rotation.

    A request holds a slot of one replica while it is sent (`acquire`). With several
    replicas, requests that find no free slot wait in one queue for the whole set, first
    come first served, and take the first slot that frees on any live replica. A replica
    may belong to several sets (one Replica per URL): each of its freed slots is offered to
    every set that holds it, through its limiter's listeners.
    """

    def __init__(
        self,
        replicas: list[Replica],
        patience: float,
        *,
        affinity: bool = True,
    ) -> None:
        self.replicas = replicas
        self.patience = patience
        self.affinity = affinity and len(replicas) > 1
        self.single = replicas[0] if len(replicas) == 1 else None
        self.name = " | ".join(r.url for r in replicas)
        self._some_up = asyncio.Event()
        self._some_up.set()
        self._all_down_since: float | None = None
        self._gone: ServerGone | None = None
        self._recovering: dict[Replica, asyncio.Task[None]] = {}
        self._waiters: deque[_Waiter] = deque()
        # Checks of the endpoints on this set (one per model), run before a replica that
        # left the rotation (or never joined it) comes back: it must serve the same weights.
        self.admissions: list[Admission] = []
        if self.single is None:
            for replica in replicas:
                replica.limit.listeners.append(self._dispatch)

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    @property
    def waiting(self) -> int:
        """Requests queued for a slot on any replica of this set."""
        return len(self._waiters)

    async def acquire(self) -> Replica:
        """A replica whose slot the caller now holds (it gives it back with
        `replica.limit.release()`). With several, the first free slot of any live replica;
        while none is live, this waits for one, raising ServerGone past the patience."""
        single = self.single
        if single is not None:
            await single.limit.acquire()
            return single
        holder = EXAMPLE_AFFINITY.get() if self.affinity else None
        while True:
            if not self._waiters:  # earlier requests of this set go first
                replica = self._take(holder)
                if replica is not None:
                    return replica
            if not self._some_up.is_set():
                await self._wait_for_any()
                continue
            granted = await self._queue(holder)
            if granted is not None:
                return granted

    def _take(self, holder: Affinity | None) -> Replica | None:
        """Take a slot now, if a live replica has one free: on the least loaded (outstanding
        over limit), or on the example's own replica while it has at most a tenth of its
        limit (2 at least) more outstanding than that one. None when every slot is taken."""
        # A replica with room has no waiter of its own: its outstanding requests are its
        # active ones.
        best: Replica | None = None
        best_load = float("inf")
        for replica in self.replicas:
            slots = replica.limit
            if replica.up and slots.has_room:
                load = slots.active / slots.limit
                if load < best_load:
                    best, best_load = replica, load
        if best is None:
            return None
        if holder is not None:
            own = holder.replica
            if own is not None and own is not best and own.up and own.limit.has_room:
                slots = own.limit
                slack = max(2, slots.limit // 10)
                if slots.active - best_load * slots.limit <= slack:
                    best = own
            holder.replica = best
        taken = best.limit.try_acquire()
        assert taken, "a replica with room refused a slot"
        return best

    async def _queue(self, holder: Affinity | None) -> Replica | None:
        """Wait in the set's queue until `_dispatch` grants a slot (or says none is live)."""
        waiter: asyncio.Future[Replica | None] = asyncio.get_running_loop().create_future()
        entry: _Waiter = (waiter, holder)
        self._waiters.append(entry)
        # Usually nothing to grant (a queue means every live slot is taken), but a slot
        # that is free all the same must not wait for the next release to be offered.
        self._dispatch()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                granted = waiter.result()
                if granted is not None:
                    # Granted in the tick it was cancelled: the slot goes to the next one.
                    granted.limit.release()
            elif entry in self._waiters:
                # A dispatch in the same tick may already have dropped it (its future was
                # cancelled), so it is not always still queued.
                self._waiters.remove(entry)
            raise

    def _dispatch(self) -> None:
        """Grant queued requests, first come first served, the free slots of live replicas;
        called whenever one of its replicas may have room (a limiter listener)."""
        waiters = self._waiters
        while waiters:
            waiter, holder = waiters[0]
            if waiter.done():  # cancelled, its task not yet resumed: drop it here
                waiters.popleft()
                continue
            replica = self._take(holder)
            if replica is None:
                return
            waiters.popleft()
            waiter.set_result(replica)

    async def after_failure(self, replica: Replica, failed_at: float) -> str | None:
        """A request to `replica` got no answer at `failed_at`. None: the replica answers, so
        the request was lost on its own (a counted retry). Otherwise the note for the failed
        try: the replica is out of rotation and the request may go to another (uncounted);
        with no replica left, this waits for one, raising ServerGone past the patience."""
        if self.single is not None:
            outage: Outage | None = await replica.watch.after_failure(failed_at)
            if outage is None:
                return None
            return f"the server was down, waited {outage.seconds:.1f} s for it"
        if self._gone is not None:
            raise self._gone
        if replica.up:
            if await replica.watch.answers(failed_at):
                return None
            self._take_out(replica)
        waited = await self._wait_for_any()
        note = f"{replica.url} is out of rotation; sent to another replica"
        return note if waited < 0.05 else f"{note} after waiting {waited:.1f} s for one"

    def start_without(self, url: str) -> None:
        """Begin the run with the replica at `url` out of rotation (it did not answer at
        start); it is probed and comes back like one that died mid-run."""
        for replica in self.replicas:
            if replica.url == url:
                self._take_out(replica)

    def _take_out(self, replica: Replica) -> None:
        if not replica.up:
            return
        replica.up = False
        left = sum(r.up for r in self.replicas)
        outage = replica.watch.went_down(left, len(self.replicas))
        if left == 0:
            self._some_up.clear()
            self._all_down_since = time.monotonic()
            # A queued request would wait for a slot with no bound on the wait: it waits
            # for a replica to come back instead, within the patience, as a new one does.
            while self._waiters:
                waiter, _ = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
        self._recovering[replica] = asyncio.get_running_loop().create_task(
            self._recover(replica, outage)
        )

    async def _recover(self, replica: Replica, outage: Outage) -> None:
        """Probe a replica out of rotation until it answers, then put it back."""
        delay = FIRST_WAIT
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_WAIT)
            if not await replica.watch.probe():
                continue
            try:
                refusals = [await admit(replica.url) for admit in self.admissions]
            except Exception:  # it stopped answering again: probe on
                continue
            refused = [r for r in refusals if r is not None]
            if refused:
                # Other weights behind the same name: their replies must never mix with the
                # others', so it stays out for the rest of the run, not probed again.
                for reason in refused:
                    replica.watch.events.emit(ReplicaRefused(url=replica.url, reason=reason), log)
                self._recovering.pop(replica, None)
                return
            break
        replica.up = True
        replica.watch.came_back(outage)
        self._all_down_since = None
        self._some_up.set()
        self._recovering.pop(replica, None)
        # Its free slots go to requests already waiting, of this set and any other with it.
        replica.limit.wake()

    async def _wait_for_any(self) -> float:
        """Seconds waited until some replica answers (0 when one does now)."""
        if self._some_up.is_set():
            return 0.0
        started = time.monotonic()
        since = self._all_down_since or started
        left = self.patience - (started - since)
        try:
            async with asyncio.timeout(max(left, 0.0)):
                await self._some_up.wait()
        except TimeoutError:
            if self._gone is None:
                self._gone = ServerGone(
                    f"none of the {len(self.replicas)} replicas ({self.name}) answered for "
                    f"{time.monotonic() - since:.0f} s (--server-wait {self.patience:.0f})"
                )
            raise self._gone from None
        return time.monotonic() - started

    async def close(self) -> None:
        """Stop probing replicas out of rotation and listening to their limits (the run is
        over)."""
        if self.single is None:
            for replica in self.replicas:
                if self._dispatch in replica.limit.listeners:
                    replica.limit.listeners.remove(self._dispatch)
        for task in list(self._recovering.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._recovering.clear()
