"""One request as a node call sends it: under the endpoint's in-flight limit, within the
deadline, with the retry policy's budget; the reply's samples, tokens and latency."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openai.types.chat import ChatCompletion

from ..stats import RunStats
from ..trace import Attempt
from .errors import MalformedReply
from .request import request_body
from .retry import RetryPolicy
from .transport import Transport

if TYPE_CHECKING:
    from .registry import Endpoint


@dataclass(slots=True)
class Choice:
    """One sample of a reply, as validated, cached and traced."""

    content: str
    finish_reason: str | None
    logprobs: list[dict[str, Any]] | None


def _logprobs(choice: Any) -> list[dict[str, Any]] | None:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "top": {c.token: c.logprob for c in (t.top_logprobs or [])},
        }
        for t in content
    ]


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

        async def post_once() -> ChatCompletion:
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
            if len(response.choices or []) != n:
                raise MalformedReply(
                    f"asked for {n} sample(s), the reply has {len(response.choices or [])}"
                )
            return response

        response = await retry.run(post_once, ep.watch, attempts, self)
        latency = time.perf_counter() - started
        usage = response.usage
        tokens = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
        stats.prompt_tokens += tokens[0]
        stats.completion_tokens += tokens[1]
        if getattr(response, "system_fingerprint", None):
            ep.server_info.setdefault("system_fingerprint", response.system_fingerprint)
        choices = [
            Choice(self.redact(c.message.content or ""), c.finish_reason, _logprobs(c))
            for c in sorted(response.choices, key=lambda c: c.index)
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
