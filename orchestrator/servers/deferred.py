"""A server started on the first request that has to reach it (issue 26 item 7): a run whose
every reply is in the cache, or whose nodes never ask, starts none.

`StartOnFirstUse` wraps the run's provider. Until the server is started it answers for it
what is known without it: the model list (and so the identity in the cache key and run key)
and whether it enforces a JSON schema (so no canary is sent). The endpoint of a node on
such a server carries its `DeferredServer`; the sender awaits `ready()` before a request
takes a slot or starts its deadline, so the start's minutes are not a request's time, and
many requests racing the first miss start it once. Once it is up, each hook registered
with `on_start` runs (the in-flight limit is tuned from the server's load from then on).
A hook belongs to the run that registered it: that run withdraws it when it ends, so a later
run on the same server (the demo's second graph) never runs a finished run's hook on its
closed connections.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence

from ..errors import ServerGone
from ..providers import (
    Connection,
    Provider,
    ServedModel,
    StructuredMode,
    provider_identity,
)

log = logging.getLogger(__name__)

StartHook = Callable[[], Awaitable[None]]


class DeferredServer:
    """One server at `url` that `start` (blocking; it returns once the server answers)
    brings up when first needed. `served` is the model list it will report and
    `structured` what it does with a JSON schema, both known before it starts; `exited`
    says why its process ended, if it has."""

    def __init__(
        self,
        url: str,
        served: Sequence[ServedModel],
        start: Callable[[], object],
        *,
        structured: StructuredMode = "server",
        exited: Callable[[], str | None] | None = None,
    ) -> None:
        self.url = url
        # Once started, why its process exited (None while it runs): a run stops at once on
        # a server that cannot come back instead of waiting --server-wait for it.
        self.exited = exited
        self.served = list(served)
        self.structured: StructuredMode = structured
        self._start = start
        # A lock of threads, not of one event loop: the CLI's demo runs two graphs, each in
        # its own loop, against the one server.
        self._lock = threading.Lock()
        self._failure: ServerGone | None = None
        self._hooks: list[StartHook] = []
        self.started = False
        # When the start ran (time.perf_counter()): a node that waited for it does not count
        # the minutes of a server's start as its own latency.
        self.start_window: tuple[float, float] | None = None
        self.starting_since: float | None = None  # while a start is under way (progress)
        # Set when the run stops while the start is under way: a start that watches it gives
        # up within a second instead of keeping Ctrl-C waiting for minutes.
        self.abandoned = threading.Event()
        self._waiting = 0  # requests awaiting the start; only the event loop's threads count

    def on_start(self, hook: StartHook) -> Callable[[], None]:
        """Run `hook` in the event loop once the server is up; the function returned
        withdraws it (the registering run calls it when it ends)."""
        self._hooks.append(hook)

        def withdraw() -> None:
            if hook in self._hooks:
                self._hooks.remove(hook)

        return withdraw

    async def ready(self) -> None:
        """Return once the server is up, starting it if no one has; ServerGone (the run
        stops, finished work is kept) when it could not be started."""
        if not self.started:
            self._waiting += 1
            try:
                await asyncio.to_thread(self._start_once)
            except asyncio.CancelledError:
                # Only when every waiter is gone (the run stopping): one row's task being
                # cancelled must not take the server from the others.
                if self._waiting == 1:
                    self.abandoned.set()
                raise
            finally:
                self._waiting -= 1
        hooks, self._hooks = self._hooks, []  # the first caller back runs them, once
        for hook in hooks:
            await hook()

    def _start_once(self) -> None:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self.started:
                return
            log.info("A request needs the server: starting it at %s", self.url)
            began = time.perf_counter()
            self.starting_since = began
            try:
                self._start()
            except Exception as exc:
                # Every request waiting for it, and every later one, gets the same answer.
                self._failure = ServerGone(f"the server at {self.url} could not be started: {exc}")
                raise self._failure from exc
            finally:
                self.starting_since = None
            self.start_window = (began, time.perf_counter())
            self.started = True


def start_seconds_within(servers: Sequence[DeferredServer], since: float, until: float) -> float:
    """How much of [since, until] (time.perf_counter()) went on starting `servers`."""
    overlap = 0.0
    for server in servers:
        if server.start_window is not None:
            began, ended = server.start_window
            overlap += max(0.0, min(until, ended) - max(since, began))
    return overlap


class StartOnFirstUse:
    """`inner` (the run's provider) with `servers` started on first use: until one is up,
    its model list is the one it will report, and nothing is sent to it."""

    def __init__(self, inner: Provider, servers: Sequence[DeferredServer]) -> None:
        self.inner = inner
        self.servers = {server.url: server for server in servers}

    def waiting(self, url: str) -> DeferredServer | None:
        """The server at `url` if it is one of these and not started yet."""
        server = self.servers.get(url)
        return server if server is not None and not server.started else None

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> Connection:
        # A pool opens its connections on the first request, so it can be made now.
        return self.inner.connect(base_url, api_key, connections=connections, timeout=timeout)

    async def list_models(self, base_url: str, api_key: str) -> list[ServedModel]:
        waiting = self.waiting(base_url)
        if waiting is not None:
            return list(waiting.served)
        return await self.inner.list_models(base_url, api_key)

    def identity(self, url: str, served: list[ServedModel], model: str) -> str:
        return provider_identity(self.inner, url, served, model)

    def is_transient(self, exc: BaseException) -> bool:
        return self.inner.is_transient(exc)

    def may_be_outage(self, exc: BaseException) -> bool:
        return self.inner.may_be_outage(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        return self.inner.retry_after(exc)

    def describe(self, exc: BaseException) -> str:
        return self.inner.describe(exc)
