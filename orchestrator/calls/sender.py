"""One request as a node call sends it: under the endpoint's in-flight limit, within the
deadline, with the retry policy's budget; the reply's samples, tokens and latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import MalformedReply, ProviderCapabilityError
from ..providers import ChatResponse, Choice, Provider, Tokenizer, check_reply_size, sending
from ..servers import Replica, ReplicaSet
from ..store import Attempt, Counts, note_try
from .request import chat_request
from .retry import RetryPolicy

if TYPE_CHECKING:
    from ..servers import Endpoint


class CallRoute:
    """One call's way through a replica set: each try holds a slot of the replica the set
    grants it (`async with route as replica:`), and a failure is judged against the replica
    that try went to."""

    __slots__ = ("replica", "replicas")

    def __init__(self, replicas: ReplicaSet) -> None:
        self.replicas = replicas
        self.replica: Replica | None = None

    async def __aenter__(self) -> Replica:
        self.replica = replica = await self.replicas.acquire()
        return replica

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.replica is not None
        self.replica.limit.release()

    @property
    def url(self) -> str | None:
        return self.replica.url if self.replica is not None else None

    async def after_failure(self, failed_at: float) -> str | None:
        assert self.replica is not None, "a try failed before it was sent"
        return await self.replicas.after_failure(self.replica, failed_at)


class _Sent:
    """One try's request, counted once in the run's stats: when the provider says it left
    for the server (`mark_sent`), or when the try ends."""

    __slots__ = ("done", "stats")

    def __init__(self, stats: Counts) -> None:
        self.stats = stats
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self.stats.requests += 1


class ProviderHooks:
    """The retry policy's hooks for one provider: its judgement of a fault, named with the
    run's secrets redacted, and retries counted in the run's stats."""

    __slots__ = ("provider", "redact", "stats")

    def __init__(self, provider: Provider, stats: Counts, redact: Callable[[str], str]) -> None:
        self.provider = provider
        self.stats = stats
        self.redact = redact

    def is_transient(self, exc: BaseException) -> bool:
        return self.provider.is_transient(exc)

    def may_be_outage(self, exc: BaseException) -> bool:
        return self.provider.may_be_outage(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        return self.provider.retry_after(exc)

    def describe(self, exc: BaseException) -> str:
        return self.redact(self.provider.describe(exc))

    def count_retry(self) -> None:
        self.stats.retries += 1


class Sender:
    """Sends requests through each endpoint's provider with a retry policy; counts requests
    and tokens."""

    def __init__(
        self,
        transport: Provider,
        retry: RetryPolicy,
        stats: Counts,
        redact: Callable[[str], str],
    ) -> None:
        self.transport = transport
        self.retry = retry
        self.stats = stats
        self.redact = redact
        self.hooks = ProviderHooks(transport, stats, redact)
        self._hooks: dict[int, ProviderHooks] = {id(transport): self.hooks}

    def hooks_for(self, ep: Endpoint) -> ProviderHooks:
        """The retry hooks of the endpoint's provider (the client's own when it names none)."""
        provider = ep.provider
        if provider is None:
            return self.hooks
        hooks = self._hooks.get(id(provider))
        if hooks is None:
            hooks = self._hooks[id(provider)] = ProviderHooks(provider, self.stats, self.redact)
        return hooks

    # -- requests ---------------------------------------------------------------------

    async def chat(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        n: int,
        schema: dict[str, Any] | None,
        attempts: list[Attempt] | None = None,
    ) -> tuple[list[Choice], tuple[int, int], float]:
        """One chat completion with transport retries; every failed try is appended to
        `attempts`. Tries lost to a server outage are waited out and not counted."""
        if ep.starts:
            await _started(ep)
        request = chat_request(ep.model, messages, params, n, schema, ep.structured)
        started = time.perf_counter()
        retry, stats, connections = self.retry, self.stats, ep.connections
        route = CallRoute(ep.replicas)

        async def post_once() -> ChatResponse:
            nonlocal started
            async with route as replica:
                sent = _Sent(stats)
                note_try(replica.url, attempts)  # for `orchestrator status`: sent now, there
                started = time.perf_counter()
                try:
                    # The connection's timeout bounds each read; the deadline bounds the
                    # whole reply (about 3 µs a call).
                    try:
                        async with asyncio.timeout(retry.timeout):
                            with sending(sent):
                                response = await connections[replica].chat(request)
                    except TimeoutError:
                        raise retry.deadline_exceeded() from None
                except BaseException as exc:
                    # A try cancelled (the run stopped) was a request only if the provider
                    # saw it leave; one that ended in an error or a deferral was tried.
                    if not isinstance(exc, asyncio.CancelledError):
                        sent()
                    if isinstance(exc, Exception):
                        replica.failed += 1
                    raise
                sent()
                replica.latency_sum += time.perf_counter() - started
                replica.latency_count += 1
                replica.served += 1
            if len(response.choices) != n:
                raise MalformedReply(
                    f"asked for {n} sample(s), the reply has {len(response.choices)}"
                )
            # Here, not in the transport: every transport's replies are held to it.
            check_reply_size(response, request.max_tokens)
            return response

        response = await retry.run(post_once, route, attempts, self.hooks_for(ep))
        latency = time.perf_counter() - started
        served_by = route.url
        tokens = (response.prompt_tokens, response.completion_tokens)
        stats.prompt_tokens += tokens[0]
        stats.completion_tokens += tokens[1]
        if response.fingerprint:
            ep.server_info.setdefault("system_fingerprint", response.fingerprint)
        choices = [
            Choice(self.redact(c.content), c.finish_reason, c.logprobs, served_by)
            for c in response.choices
        ]
        return choices, tokens, latency

    async def tokenizer(
        self,
        ep: Endpoint,
        route_name: str,
        ask: Callable[[Tokenizer], Awaitable[dict[str, Any]]],
        attempts: list[Attempt] | None = None,
    ) -> dict[str, Any]:
        """`ask` of a replica's Tokenizer (vLLM's /tokenize, /detokenize), sent as a node
        call is: the endpoint's key, its in-flight limit, the deadline, transport retries,
        Retry-After and a server outage waited out, each failed try appended to `attempts`.
        ProviderCapabilityError when the provider has no tokenizer; TokenizerUnavailable
        when the server has none."""
        if not all(isinstance(c, Tokenizer) for c in ep.connections.values()):
            raise ProviderCapabilityError(
                f"{route_name} needs a tokenizer, and the provider of {ep.base_url} has none"
            )
        if ep.starts:
            await _started(ep)
        retry = self.retry
        route = CallRoute(ep.replicas)

        async def post_once() -> dict[str, Any]:
            async with route as replica:
                tokenizer: Any = ep.connections[replica]
                try:
                    async with asyncio.timeout(retry.timeout):
                        reply = await ask(tokenizer)
                except TimeoutError:
                    raise retry.deadline_exceeded(f"reply from {route_name}") from None
            if not isinstance(reply, dict):
                raise MalformedReply(f"{route_name} answered {type(reply).__name__}, not an object")
            return reply

        return await retry.run(post_once, route, attempts, self.hooks_for(ep))


async def _started(ep: Endpoint) -> None:
    """Wait for the endpoint's servers that start on first use (a request that has to reach
    them is what starts them): before a slot is taken or the deadline runs."""
    for server in ep.starts:
        await server.ready()
