"""The servers of a run: one endpoint per (server, model, key), one connection pool per
(server, key), one in-flight limit and one outage watch per server, and the API keys that
nothing a server says may carry into the trace, results, manifest or logs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..outage import DEFAULT_SERVER_WAIT, ServerWatch
from .errors import ServerError
from .sender import Sender
from .transport import Connection, Transport

StructuredMode = Literal["server", "prompt"]
CANARY_TOKEN = "canary-7f3a9"


@dataclass
class Endpoint:
    """One server + model pair, with its server's in-flight limit and outage watch."""

    base_url: str
    model: str
    client: Connection
    limit: asyncio.Semaphore
    watch: ServerWatch
    structured: StructuredMode = "server"
    server_info: dict[str, Any] = field(default_factory=dict)


class ServerRegistry:
    """Endpoints, pools, limits, watches and secrets, shared by every node of a run."""

    def __init__(
        self,
        transport: Transport,
        *,
        concurrency: int = 64,
        timeout: float = 120.0,
        server_wait: float = DEFAULT_SERVER_WAIT,
        say: Callable[[str], None] = print,
    ) -> None:
        self.transport = transport
        self.concurrency = concurrency
        self.timeout = timeout
        self.server_wait = server_wait
        self.say = say
        self._watches: dict[str, ServerWatch] = {}
        self._endpoints: dict[tuple[str, str, str], Endpoint] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._pools: dict[tuple[str, str], Connection] = {}
        # API keys in use: a server may quote one back in an error, and nothing a server
        # says may carry a key into the trace, results, manifest or logs.
        self._secrets: set[str] = set()

    def endpoint(self, base_url: str, model: str, api_key: str = "EMPTY") -> Endpoint:
        """The Endpoint for (base_url, model, key); the in-flight limit is per server URL."""
        self.keep_secret(api_key)
        key = (base_url, model, api_key)
        if key not in self._endpoints:
            if base_url not in self._limits:
                self._limits[base_url] = asyncio.Semaphore(self.concurrency)
            pool = self._pools.get((base_url, api_key))
            if pool is None:
                pool = self._pools[base_url, api_key] = self.transport.connect(
                    base_url, api_key, connections=self.concurrency, timeout=self.timeout
                )
            if base_url not in self._watches:
                self._watches[base_url] = ServerWatch(
                    base_url, pool.probe, self.server_wait, self.say
                )
            self._endpoints[key] = Endpoint(
                base_url, model, pool, self._limits[base_url], self._watches[base_url]
            )
        return self._endpoints[key]

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
            for url, watch in self._watches.items()
            for o in watch.outages
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
