"""The servers of a run: one endpoint per (servers, model, key), where the servers are one
URL or several replicas of one model; one connection pool per (URL, key); one in-flight
limit, outage watch and load per URL; and the API keys that nothing a server says may carry
into the trace, results, manifest or logs."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ServerError
from ..events import RunEvents
from ..providers import (
    Connection,
    LoadGauge,
    Provider,
    ServedModel,
    StructuredMode,
    no_metrics,
    provider_identity,
)
from ..store import OutageEntry, ReplicaEntry
from .deferred import DeferredServer, StartOnFirstUse
from .limiter import Limiter
from .outage import DEFAULT_SERVER_WAIT, ServerWatch
from .replicas import Admission, Replica, ReplicaSet
from .tuner import Concurrency, LimitTuner


@dataclass
class Endpoint:
    """One model on one logical server (a URL, or several replicas serving the model)."""

    base_url: str  # the logical server as shown: its URL, or its replicas' URLs joined by " | "
    model: str
    replicas: ReplicaSet
    connections: dict[Replica, Connection]  # each replica's pool, opened with this key
    structured: StructuredMode = "server"
    server_info: dict[str, Any] = field(default_factory=dict)
    # What serves the model (`served_identity`, a --server-id, else the address): part of
    # every cache key, so replies of other weights under the same name are never reused.
    identity: str = ""
    check_joins: bool = False  # a replica back in rotation must report `identity` too
    provider: Provider | None = None  # what it is reached through (None: the client's own)
    # Its servers that start on the first request that reaches them (calls/deferred.py):
    # every request awaits them first. Empty for a server that is simply there.
    starts: tuple[DeferredServer, ...] = ()

    @property
    def urls(self) -> list[str]:
        """Every replica's URL, in the order given."""
        return self.replicas.urls


def server_urls(base_url: str | Sequence[str]) -> tuple[str, ...]:
    """One URL or several (replicas), as a tuple without repeats, in the order given."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    unique = tuple(dict.fromkeys(u for u in urls if u))
    if not unique:
        raise ServerError("no server URL given: pass --base-url (it may be repeated)")
    return unique


def weights_text(url: str, identity: str) -> str:
    """An identity as a message shows it: an address stands for weights nobody named."""
    if identity == url:
        return "weights it does not name (no `root` in its /v1/models)"
    return identity


class ServerRegistry:
    """Endpoints, pools, replicas, limits and secrets, shared by every node of a run."""

    def __init__(
        self,
        transport: Provider,
        *,
        concurrency: Concurrency = None,
        timeout: float = 120.0,
        server_wait: float = DEFAULT_SERVER_WAIT,
        affinity: bool = True,
        events: RunEvents | None = None,
    ) -> None:
        self.transport = transport
        # The run's sink of events: every server's outages and limit changes go there.
        self.events = events if events is not None else RunEvents()
        self.tuner = LimitTuner(concurrency)
        self.timeout = timeout
        self.server_wait = server_wait
        self.affinity = affinity
        self._replicas: dict[str, Replica] = {}
        self._sets: dict[tuple[str, ...], ReplicaSet] = {}
        self._endpoints: dict[tuple[tuple[str, ...], str, str, int], Endpoint] = {}
        # Replicas whose server starts on first use, until it has.
        self._not_started: dict[Replica, DeferredServer] = {}
        # Their tuning hooks, withdrawn at close: a server this run never started may be
        # started by the next run in this process, which must not tune this run's replicas.
        self._withdraw: list[Callable[[], None]] = []
        # One pool per (URL, key, provider): id(None) for the registry's own provider.
        self._pools: dict[tuple[str, str, int], Connection] = {}
        # API keys in use: a server may quote one back in an error, and nothing a server
        # says may carry a key into the trace, results, manifest or logs.
        self._secrets: set[str] = set()

    def endpoint(
        self,
        base_url: str | Sequence[str],
        model: str,
        api_key: str = "EMPTY",
        *,
        identity: str | None = None,
        check_joins: bool = False,
        provider: Provider | None = None,
    ) -> Endpoint:
        """The Endpoint for (servers, model, key); each URL has its own in-flight limit.
        `identity` is what serves the model (default: the address). With `check_joins`, a
        replica coming back into rotation must report that identity for the model too.
        `provider` reaches the servers (default: the registry's own)."""
        self.keep_secret(api_key)
        urls = server_urls(base_url)
        chosen = None if provider is self.transport else provider
        key = (urls, model, api_key, id(chosen))
        if key not in self._endpoints:
            pools = {url: self._pool(url, api_key, chosen) for url in urls}
            starts = self._waiting(urls, chosen)
            replicas = self._replica_set(urls, pools, starts)
            ep = self._endpoints[key] = Endpoint(
                replicas.name,
                model,
                replicas,
                {r: pools[r.url] for r in replicas.replicas},
                identity=identity or replicas.name,
                check_joins=check_joins,
                provider=chosen,
                starts=tuple(starts.values()),
            )
            if check_joins and len(urls) > 1:
                replicas.admissions.append(self._same_weights(ep, api_key))
        return self._endpoints[key]

    def _same_weights(self, ep: Endpoint, api_key: str) -> Admission:
        """The check a replica of `ep` passes before it rejoins the rotation: the weights it
        reports for the model are the endpoint's (None), or why it stays out."""

        async def check(url: str) -> str | None:
            served = await self.list_models(url, api_key, ep.provider)
            found = self.identity_at(url, served, ep.model, ep.provider)
            if found == ep.identity:
                return None
            return (
                f"the replica {url} answers again but serves {ep.model} from "
                f"{weights_text(url, found)}, not from {ep.identity} as the others do; it "
                "stays out of rotation for the rest of this run (if they are the same "
                "weights, name them as one with --server-id)"
            )

        return check

    def _pool(self, url: str, api_key: str, provider: Provider | None) -> Connection:
        key = (url, api_key, id(provider))
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = (provider or self.transport).connect(
                url, api_key, connections=self.tuner.connections(), timeout=self.timeout
            )
        return pool

    def waiting(self, url: str, provider: Provider | None = None) -> DeferredServer | None:
        """The server at `url` if it starts on first use and has not started yet."""
        reached = provider or self.transport
        return reached.waiting(url) if isinstance(reached, StartOnFirstUse) else None

    def _waiting(
        self, urls: tuple[str, ...], provider: Provider | None
    ) -> dict[str, DeferredServer]:
        found = {url: self.waiting(url, provider) for url in urls}
        return {url: server for url, server in found.items() if server is not None}

    def _replica_set(
        self,
        urls: tuple[str, ...],
        pools: dict[str, Connection],
        starts: dict[str, DeferredServer],
    ) -> ReplicaSet:
        for url in urls:
            if url not in self._replicas:
                pool = pools[url]
                replica = self._replicas[url] = Replica(
                    url,
                    Limiter(self.tuner.initial_limit()),
                    ServerWatch(
                        url,
                        pool.probe,
                        self.server_wait,
                        events=self.events,
                        exited=starts[url].exited if url in starts else None,
                    ),
                    pool.metrics if isinstance(pool, LoadGauge) else no_metrics,
                )
                if url in starts:
                    # Its load can be read only once it runs: its limit is settled then.
                    self._not_started[replica] = starts[url]
                    self._withdraw.append(starts[url].on_start(self._tuning_hook(replica)))
        if urls not in self._sets:
            self._sets[urls] = ReplicaSet(
                [self._replicas[u] for u in urls],
                self.server_wait,
                affinity=self.affinity,
            )
        return self._sets[urls]

    async def start_tuning(self) -> None:
        """Settle every server's in-flight limit (fixed, or tuned from its load from now
        on); called once the run's endpoints are known, before the first example. A
        server not started yet is settled once it has."""
        running = [r for r in self._replicas.values() if not self._waits(r)]
        await self.tuner.start(running)

    def _waits(self, replica: Replica) -> bool:
        server = self._not_started.get(replica)
        return server is not None and not server.started

    def _tuning_hook(self, replica: Replica) -> Callable[[], Awaitable[None]]:
        async def settle() -> None:
            await self.tuner.start([replica])

        return settle

    def max_in_flight(self) -> int:
        """Requests every server together may hold: fixed limits, and the ceiling a tuned
        limit may grow to (a server not started yet may be tuned once it is)."""
        ceiling = self.tuner.tuning.ceiling
        fixed = isinstance(self.tuner.concurrency, int)
        return sum(
            r.limit.limit if r.mode == "fixed" and (fixed or not self._waits(r)) else ceiling
            for r in self._replicas.values()
        )

    def replica_reports(self) -> list[ReplicaEntry]:
        """Each server's share of the work and its limit over time (for the manifest)."""
        return [r.report() for r in self._replicas.values()]

    def in_flight(self) -> int:
        """Requests holding a server's slot now, over every server (for progress lines)."""
        return sum(r.limit.active for r in self._replicas.values())

    def limits_text(self) -> str:
        """The in-flight limits now, for the progress bar: `limit 48` or `limits 48/40`; while
        a server starts on first use, that it does (a start takes minutes, and a bar showing
        nothing in flight for them looks stuck)."""
        now = time.perf_counter()
        for server in set(self._not_started.values()):
            if server.starting_since is not None:
                return f"starting the server at {server.url} ({now - server.starting_since:.0f} s)"
        limits = [r.limit.limit for r in self._replicas.values() if r.up]
        if not limits:
            return "no server answers"
        return f"limit{'s' if len(limits) > 1 else ''} {'/'.join(map(str, limits))}"

    def keep_secret(self, api_key: str) -> None:
        if api_key and api_key != "EMPTY":
            self._secrets.add(api_key)

    def redact(self, text: str) -> str:
        """`text` with every API key of this run replaced by a placeholder."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[api key]")
        return text

    def outages(self) -> list[OutageEntry]:
        """Every stretch a server did not answer during the run (for the manifest), from
        the run's events."""
        return [OutageEntry.model_validate(outage) for outage in self.events.outages()]

    def identity_at(
        self,
        url: str,
        served: Sequence[ServedModel],
        model: str,
        provider: Provider | None = None,
    ) -> str:
        """What serves `model` at `url`, as the provider (default: the registry's own)
        reports it from the model list."""
        return provider_identity(provider or self.transport, url, served, model)

    async def list_models(
        self, base_url: str, api_key: str = "EMPTY", provider: Provider | None = None
    ) -> list[ServedModel]:
        """The models the server serves, as the provider (default: the registry's own)
        lists them; ServerError with a next step if it is unreachable."""
        self.keep_secret(api_key)
        provider = provider or self.transport
        try:
            listed = await provider.list_models(base_url, api_key)
            # A transport written before the model list carried roots gives plain names.
            return [ServedModel(m) if isinstance(m, str) else m for m in listed]
        except ServerError as exc:  # the provider's own word on why: no hint to add
            raise ServerError(self.redact(str(exc))) from exc
        except Exception as exc:
            described = self.redact(provider.describe(exc))
            raise ServerError(
                f"cannot list models at {base_url} ({described}). Is the server running? "
                "Start the embedded one with `orchestrator serve`, or pass --base-url."
            ) from exc

    async def close(self) -> None:
        for withdraw in self._withdraw:
            withdraw()
        self._withdraw.clear()
        await self.tuner.stop()
        for replicas in self._sets.values():
            await replicas.close()
        for pool in self._pools.values():
            await pool.close()
