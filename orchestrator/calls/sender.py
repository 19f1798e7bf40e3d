"""One request as a node call sends it: under the endpoint's in-flight limit, within the
deadline, with the retry policy's budget; the reply's samples, tokens and latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..stats import RunStats
from ..trace import Attempt
from .errors import MalformedReply
from .reply import Choice, Reply
from .request import request_body
from .retry import RetryPolicy
from .transport import Transport

if TYPE_CHECKING:
    from .registry import Endpoint


class Sender:
    """Sends requests through a transport with a retry policy; counts requests and tokens."""

    def __init__(
        self,
        transport: Transport,
        retry: RetryPolicy,
        stats: RunStats,
        redact: Callable[[str], str],
    ) -> None:
        self.transport = transport
        self.retry = retry
        self.stats = stats
        self.redact = redact

    # -- RetryHooks: the transport's judgement, secrets redacted, retries counted -----------

    def is_transient(self, exc: BaseException) -> bool:
        return self.transport.is_transient(exc)

    def may_be_outage(self, exc: BaseException) -> bool:
        return self.transport.may_be_outage(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        return self.transport.retry_after(exc)

    def describe(self, exc: BaseException) -> str:
        return self.redact(self.transport.describe(exc))

    def count_retry(self) -> None:
        self.stats.retries += 1

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
        body = request_body(
            ep.model, messages, params, n, schema if ep.structured == "server" else None
        )
        started = time.perf_counter()
        retry, stats, connection = self.retry, self.stats, ep.client

        async def post_once() -> Reply:
            nonlocal started
            async with ep.limit:
                stats.requests += 1
                started = time.perf_counter()
                # The connection's timeout bounds each read; the deadline bounds the whole
                # reply (about 3 µs a call).
                try:
                    async with asyncio.timeout(retry.timeout):
                        response = await connection.chat(body)
                except TimeoutError:
                    raise retry.deadline_exceeded() from None
            if len(response.choices) != n:
                raise MalformedReply(
                    f"asked for {n} sample(s), the reply has {len(response.choices)}"
                )
            return response

        response = await retry.run(post_once, ep.watch, attempts, self)
        latency = time.perf_counter() - started
        tokens = (response.prompt_tokens, response.completion_tokens)
        stats.prompt_tokens += tokens[0]
        stats.completion_tokens += tokens[1]
        if response.fingerprint:
            ep.server_info.setdefault("system_fingerprint", response.fingerprint)
        choices = [
            Choice(self.redact(c.content), c.finish_reason, c.logprobs) for c in response.choices
        ]
        return choices, tokens, latency

    async def server_json(
        self,
        ep: Endpoint,
        path: str,
        body: dict[str, Any],
        attempts: list[Attempt] | None = None,
    ) -> dict[str, Any]:
        """POST to the server's own API beside /v1 (vLLM's /tokenize, /detokenize) as a node
        call is sent: the endpoint's key, its in-flight limit, the deadline, transport
        retries, Retry-After and a server outage waited out, each failed try appended to
        `attempts`. Raises the transport's error for an answer that is not a success (e.g.
        404: this server has no such route)."""
        url = ep.base_url.rstrip("/").removesuffix("/v1") + path
        retry = self.retry

        async def post_once() -> dict[str, Any]:
            async with ep.limit:
                try:
                    async with asyncio.timeout(retry.timeout):
                        reply = await ep.client.post_json(url, body)
                except TimeoutError:
                    raise retry.deadline_exceeded(f"reply from {path}") from None
            if not isinstance(reply, dict):
                raise MalformedReply(f"{path} answered {type(reply).__name__}, not an object")
            return reply

        return await retry.run(post_once, ep.watch, attempts, self)
