"""The loop that tunes each replica's in-flight limit about once a second: from vLLM's
/metrics where the server publishes them, from reply latency where it does not, or not at
all for a fixed `--concurrency N`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

from ..events import TunedByLatency
from .autolimit import LatencyController, MetricsController, ServerLoad, Tuning, parse_vllm_metrics
from .replicas import Replica

log = logging.getLogger(__name__)

Concurrency = int | Literal["auto"] | None  # None: auto against vLLM, else DEFAULT_CONCURRENCY
DEFAULT_CONCURRENCY = 64  # the fixed limit per server that does not publish vLLM's metrics
TICK = 1.0  # seconds between two looks at a server's load
SCRAPE_TIMEOUT = 2.0  # seconds a /metrics read may take before the tick is skipped
# The first scrape decides the mode for the whole run, so it may take longer: on a loaded
# 2-core machine a fake vLLM's first /metrics took over 2 s, and the run was tuned by latency
# (or kept a fixed 64) against a server that publishes its load.
FIRST_SCRAPE_TIMEOUT = 10.0
SCRAPE_FAILURES = 5  # unreadable scrapes in a row before a replica is tuned by latency


def parse_concurrency(value: str | int | None) -> Concurrency:
    """`--concurrency`: a positive integer, or `auto`; None keeps the default."""
    if value is None:
        return None
    if value == "auto":
        return "auto"
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"--concurrency takes a positive integer or 'auto', got {value!r}")
    return number


class LimitTuner:
    """Decides each replica's limit mode from its first scrape, then adjusts every tuned
    replica's limit each tick; the changes are kept on the replica for the manifest."""

    def __init__(self, concurrency: Concurrency, tuning: Tuning | None = None) -> None:
        self.concurrency = concurrency
        self.tuning = tuning or Tuning()
        self._controllers: dict[Replica, MetricsController | LatencyController] = {}
        self._failures: dict[Replica, int] = {}
        self._task: asyncio.Task[None] | None = None

    def initial_limit(self) -> int:
        """The limit a replica starts with, before its first scrape (a client that never
        starts tuning keeps it)."""
        if isinstance(self.concurrency, int):
            return self.concurrency
        return self.tuning.start if self.concurrency == "auto" else DEFAULT_CONCURRENCY

    def connections(self) -> int:
        """Keep-alive connections a replica's pool needs: as many as its limit can reach."""
        return self.concurrency if isinstance(self.concurrency, int) else self.tuning.ceiling

    async def start(self, replicas: list[Replica]) -> None:
        """Choose every replica's mode (one scrape each, concurrently), then tune on a tick."""
        await asyncio.gather(*(self._choose(r) for r in replicas if r not in self._controllers))
        if self._controllers and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _choose(self, replica: Replica) -> None:
        if isinstance(self.concurrency, int):
            replica.mode = "fixed"
            replica.set_limit(self.concurrency, "--concurrency")
            return
        load = await self._scrape(replica, FIRST_SCRAPE_TIMEOUT)
        if load is not None:
            replica.mode = "vllm metrics"
            self._controllers[replica] = MetricsController(self.tuning)
            replica.set_limit(self.tuning.start, "start (vLLM metrics)")
        elif self.concurrency == "auto":
            replica.mode = "latency"
            self._controllers[replica] = LatencyController(self.tuning)
            replica.set_limit(self.tuning.start, "start (no vLLM metrics: by latency)")
            replica.watch.events.emit(TunedByLatency(url=replica.url), log)
        else:
            replica.mode = "fixed"
            replica.set_limit(DEFAULT_CONCURRENCY, "default (no vLLM metrics)")

    async def _scrape(self, replica: Replica, timeout: float = SCRAPE_TIMEOUT) -> ServerLoad | None:
        try:
            async with asyncio.timeout(timeout):
                text = await replica.metrics()
        except TimeoutError:
            return None
        return parse_vllm_metrics(text) if text else None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            await asyncio.gather(*(self.tick(r) for r in list(self._controllers) if r.up))

    async def tick(self, replica: Replica) -> None:
        """One look at `replica`'s load and one decision on its limit."""
        controller = self._controllers[replica]
        busy = replica.limit.saturated
        replica.limit.saturated = replica.limit.active >= replica.limit.limit
        if isinstance(controller, MetricsController):
            load = await self._scrape(replica)
            if load is None:
                self._failures[replica] = failures = self._failures.get(replica, 0) + 1
                if failures >= SCRAPE_FAILURES:
                    replica.watch.events.emit(
                        TunedByLatency(url=replica.url, failures=failures), log
                    )
                    replica.mode = "latency"
                    self._controllers[replica] = LatencyController(self.tuning)
                return  # the limit holds until the server's load is known again
            self._failures[replica] = 0
            decision = controller.decide(replica.limit.limit, load, busy)
        else:
            latency = None
            if replica.latency_count:
                latency = replica.latency_sum / replica.latency_count
            replica.latency_sum, replica.latency_count = 0.0, 0
            decision = controller.decide(replica.limit.limit, latency, busy)
        replica.set_limit(decision.limit, decision.reason)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
