"""The LLM client of a run: one façade over the call layers in `orchestrator.calls`
(servers, providers, retry policy, cache, structured output), so engine, session and
servers see a single object.

Every try is kept as an `Attempt` so the trace shows exactly how a value was obtained.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

# Callers imported LLMCallError from here before errors.py was its home: kept for them.
from ..errors import LLMCallError as LLMCallError
from ..errors import ServerError
from ..events import RunEvents
from ..graph import Sampling
from ..providers import DEFAULT_PROVIDER, Provider, ServedModel, make_provider
from ..servers import DEFAULT_SERVER_WAIT, Concurrency, Endpoint, ServerRegistry
from ..store import Attempt, Counts, OutageEntry, ResponseCache
from .cached import CachedCaller
from .retry import RetryPolicy
from .sender import Sender
from .structured import CallResult, StructuredCaller

CANARY_TOKEN = "canary-7f3a9"  # a value no model would guess
LIST_DEADLINE_FLOOR = 5.0  # seconds the start's model list may take, whatever --timeout says


class CallFn(Protocol):
    """A node call: n validated samples of one prompt, from sample index `first_sample`
    (`strict`: a reply is read only when it is the JSON object alone)."""

    def __call__(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        model: type[BaseModel],
        sampling: Sampling,
        *,
        first_sample: int = 0,
        strict: bool = False,
    ) -> Awaitable[CallResult]: ...


class LLMClient:
    """Shared by every node of a run: endpoints, cache, counters. `transport` (the run's
    provider) and `retry` replace the default provider ("openai") and retry policy (built
    from `transport_retries`, `backoff_max`, `server_wait` and `timeout`)."""

    def __init__(
        self,
        *,
        cache: ResponseCache | None,
        stats: Counts,
        concurrency: Concurrency = None,
        timeout: float = 120.0,
        transport_retries: int = 4,
        refresh: bool = False,
        backoff_max: float = 20.0,
        server_wait: float = DEFAULT_SERVER_WAIT,
        transport: Provider | None = None,
        retry: RetryPolicy | None = None,
        affinity: bool = True,
    ) -> None:
        self.cache = cache
        self.stats = stats
        self.retry = retry or RetryPolicy(
            retries=transport_retries,
            backoff_max=backoff_max,
            server_wait=server_wait,
            timeout=timeout,
        )
        self.transport: Provider = transport or make_provider(DEFAULT_PROVIDER)
        self.servers = ServerRegistry(
            self.transport,
            concurrency=concurrency,
            timeout=timeout,
            server_wait=self.retry.server_wait,
            affinity=affinity,
        )
        self._named: dict[str, Provider] = {}  # built-in providers a graph node names
        self.sender = Sender(self.transport, self.retry, stats, self.servers.redact)
        structured = StructuredCaller(self.sender, stats)
        self._caller: StructuredCaller | CachedCaller = (
            structured if cache is None else CachedCaller(structured, cache, stats, refresh)
        )

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
        """The Endpoint for (servers, model, key): one URL, or several replicas of the model;
        the in-flight limit is per server URL. `identity`: what serves the model (part of
        the cache key; default the address); `check_joins`: a replica coming back must
        report it too; `provider`: what reaches it (default: the client's own)."""
        return self.servers.endpoint(
            base_url,
            model,
            api_key,
            identity=identity,
            check_joins=check_joins,
            provider=provider,
        )

    def provider(self, name: str | None) -> Provider:
        """The built-in provider `name` (one instance per client), or the client's own for
        None; ConfigurationError for a name that is not built in."""
        if name is None:
            return self.transport
        found = self._named.get(name)
        if found is None:
            found = self._named[name] = make_provider(name)
        return found

    def redact(self, text: str) -> str:
        """`text` with every API key of this client replaced by a placeholder."""
        return self.servers.redact(text)

    @property
    def events(self) -> RunEvents:
        """The run's sink of events (outages, replicas, limits) this client emits into."""
        return self.servers.events

    def outages(self) -> list[OutageEntry]:
        """Every stretch a server did not answer during the run (for the manifest)."""
        return self.servers.outages()

    async def close(self) -> None:
        await self.servers.close()

    async def list_models(
        self, base_url: str, api_key: str = "EMPTY", provider: Provider | None = None
    ) -> list[ServedModel]:
        """The models the server serves; ServerError with a next step if it is unreachable
        or does not answer within the run's --timeout."""
        # The SDK's own list call takes up to three tries of 15 s: against a server that
        # accepts connections and never answers, a start with --timeout 3 took 47 s to fail.
        # The floor: this first request also builds the SDK's client, and on a loaded machine
        # (CI: three test workers beside a vLLM server) a local fake server's list took over
        # 1 s, so a run with --timeout 1 was refused at start by a server that was up.
        timeout = max(self.retry.timeout, LIST_DEADLINE_FLOOR)
        try:
            async with asyncio.timeout(timeout):
                return await self.servers.list_models(base_url, api_key, provider)
        except TimeoutError:
            raise ServerError(
                f"cannot list models at {base_url}: no answer within {timeout:g} s (--timeout,"
                f" at least {LIST_DEADLINE_FLOOR:g} s for the model list)."
                " Is the server running and not overloaded? Start the embedded one with "
                "`orchestrator serve`, or pass --base-url."
            ) from None

    async def canary(self, ep: Endpoint, tries: int = 3) -> bool:
        """Prove the server enforces a JSON schema, with a value no model would guess."""
        return await canary(self.sender, ep, tries)

    async def tokenize(
        self, ep: Endpoint, text: str, attempts: list[Attempt] | None = None
    ) -> dict[str, Any]:
        """The served model's tokens of `text` (vLLM's /tokenize: {"tokens", "count", …}),
        asked as a node call is sent: key, in-flight limit, deadline, retries and outages
        as for a call. ProviderCapabilityError (TokenizerUnavailable: the server has none)
        when it cannot be asked."""
        model = ep.model
        return await self.sender.tokenizer(
            ep, "/tokenize", lambda t: t.tokenize(model, text), attempts
        )

    async def detokenize(
        self, ep: Endpoint, tokens: list[int], attempts: list[Attempt] | None = None
    ) -> dict[str, Any]:
        """The text of token ids (vLLM's /detokenize: {"prompt": text}), asked as
        `tokenize` is."""
        model = ep.model
        return await self.sender.tokenizer(
            ep, "/detokenize", lambda t: t.detokenize(model, tokens), attempts
        )

    @property
    def call(self) -> CallFn:
        """`call(ep, messages, model, sampling, first_sample=0, strict=False)`: n validated
        samples for one rendered prompt; LLMCallError when the budget runs out. The
        caller's own method, so a node call awaits no extra layer here."""
        return self._caller.call


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
                f"{sender.retry.retries + 1} tries: {sender.hooks_for(ep).describe(exc)}"
            ) from exc
        try:
            data = json.loads(choices[0].content)
        except (json.JSONDecodeError, TypeError):
            continue
        if data == {"token": CANARY_TOKEN, "count": 3}:
            return True
    return False
