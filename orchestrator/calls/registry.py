"""The servers of a run: one endpoint per (servers, model, key), where the servers are one
URL or several replicas of one model; one connection pool per (URL, key); one in-flight
limit, outage watch and load per URL; and the API keys that nothing a server says may carry
into the trace, results, manifest or logs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..outage import DEFAULT_SERVER_WAIT, ServerWatch
from .errors import ServerError
from .limiter import Limiter
from .replicas import Replica, ReplicaReport, ReplicaSet
from .sender import Sender
from .transport import Connection, Transport
from .tuner import Concurrency, LimitTuner

StructuredMode = Literal["server", "prompt"]
CANARY_TOKEN = "canary-7f3a9"


@dataclass
class Endpoint:
    """One model on one logical server (a URL, or several replicas serving the model)."""

    base_url: str  # the logical server as shown: its URL, or its replicas' URLs joined by " | "
    model: str
    replicas: ReplicaSet
    connections: dict[Replica, Connection]  # each replica's pool, opened with this key
    structured: StructuredMode = "server"
    server_info: dict[str, Any] = field(default_factory=dict)

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


class ServerRegistry:
    """Endpoints, pools, replicas, limits and secrets, shared by every node of a run."""

    def __init__(
        self,
        transport: Transport,
        *,
        concurrency: Concurrency = None,
        timeout: float = 120.0,
        server_wait: float = DEFAULT_SERVER_WAIT,
        say: Callable[[str], None] = print,
        affinity: bool = True,
    ) -> None:
        self.transport = transport
        self.tuner = LimitTuner(concurrency)
        self.timeout = timeout
        self.server_wait = server_wait
        self.say = say
        self.affinity = affinity
        self._replicas: dict[str, Replica] = {}
        self._sets: dict[tuple[str, ...], ReplicaSet] = {}
        self._endpoints: dict[tuple[tuple[str, ...], str, str], Endpoint] = {}
        self._pools: dict[tuple[str, str], Connection] = {}
        # API keys in use: a server may quote one back in an error, and nothing a server
        # says may carry a key into the trace, results, manifest or logs.
        self._secrets: set[str] = set()

    def endpoint(
        self, base_url: str | Sequence[str], model: str, api_key: str = "EMPTY"
    ) -> Endpoint:
        """The Endpoint for (servers, model, key); each URL has its own in-flight limit."""
        self.keep_secret(api_key)
        urls = server_urls(base_url)
        key = (urls, model, api_key)
        if key not in self._endpoints:
            pools = {url: self._pool(url, api_key) for url in urls}
            replicas = self._replica_set(urls, pools)
            self._endpoints[key] = Endpoint(
                replicas.name,
                model,
                replicas,
                {r: pools[r.url] for r in replicas.replicas},
            )
        return self._endpoints[key]

    def _pool(self, url: str, api_key: str) -> Connection:
        pool = self._pools.get((url, api_key))
        if pool is None:
            pool = self._pools[url, api_key] = self.transport.connect(
                url, api_key, connections=self.tuner.connections(), timeout=self.timeout
            )
        return pool

    def _replica_set(self, urls: tuple[str, ...], pools: dict[str, Connection]) -> ReplicaSet:
        for url in urls:
            if url not in self._replicas:
                pool = pools[url]
                self._replicas[url] = Replica(
                    url,
                    Limiter(self.tuner.initial_limit()),
                    ServerWatch(url, pool.probe, self.server_wait, self.say),
                    pool.metrics,
                )
        if urls not in self._sets:
            self._sets[urls] = ReplicaSet(
                [self._replicas[u] for u in urls],
                self.server_wait,
                self.say,
                affinity=self.affinity,
            )
        return self._sets[urls]

    async def start_tuning(self) -> None:
        """Settle every server's in-flight limit (fixed, or tuned from its load from now
        on); called once the run's endpoints are known, before the first example."""
        await self.tuner.start(list(self._replicas.values()))

    def max_in_flight(self) -> int:
        """Requests every server together may hold: fixed limits, and the ceiling a tuned
        limit may grow to."""
        ceiling = self.tuner.tuning.ceiling
        return sum(r.limit.limit if r.mode == "fixed" else ceiling for r in self._replicas.values())

    def replica_reports(self) -> list[ReplicaReport]:
        """Each server's share of the work and its limit over time (for the manifest)."""
        return [r.report() for r in self._replicas.values()]

    def limits_text(self) -> str:
        """The in-flight limits now, for the progress bar: `limit 48` or `limits 48/40`."""
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

    def outages(self) -> list[dict[str, Any]]:
        """Every stretch a server did not answer during the run (for the manifest)."""
        return [
            {"base_url": url, "seconds": round(o.seconds, 2), "recovered": o.recovered}
            for url, replica in self._replicas.items()
            for o in replica.watch.outages
        ]

    async def list_models(self, base_url: str, api_key: str = "EMPTY") -> list[str]:
        """Model ids the server serves; ServerError with a next step if it is unreachable."""
        self.keep_secret(api_key)
        try:
            return await self.transport.list_models(base_url, api_key)
        except Exception as exc:
            described = self.redact(self.transport.describe(exc))
            raise ServerError(
                f"cannot list models at {base_url} ({described}). Is the server running? "
                "Start the embedded one with `orchestrator serve`, or pass --base-url."
            ) from exc

    async def close(self) -> None:
        await self.tuner.stop()
        for replicas in self._sets.values():
            await replicas.close()
        for pool in self._pools.values():
            await pool.close()


async def canary(sender: Sender, ep: Endpoint, tries: int = 3) -> bool:
    """Prove the server enforces a JSON schema, with a value no model would guess.

    One good reply proves enforcement; only `tries` bad replies in a row count as
    "ignored" (one noisy reply is not proof).
    """
    schema = {
        "type": "object",
        "properties": {
            "token": {"type": "string", "enum": [CANARY_TOKEN]},
            "count": {"type": "integer", "minimum": 3, "maximum": 3},
        },
        "required": ["token", "count"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "Write one short sentence about the sea."}]
    for _ in range(tries):
        try:
            choices, _, _ = await sender.chat(
                ep, messages, {"max_tokens": 40, "temperature": 0.0}, 1, schema
            )
        except Exception as exc:
            raise ServerError(
                f"the first request to {ep.base_url} ({ep.model}) failed after "
                f"{sender.retry.retries + 1} tries: {sender.describe(exc)}"
            ) from exc
        try:
            data = json.loads(choices[0].content)
        except (json.JSONDecodeError, TypeError):
            continue
        if data == {"token": CANARY_TOKEN, "count": 3}:
            return True
    return False
