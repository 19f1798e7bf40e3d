"""The LLM client: structured output, transport retries, validation re-asks, cache.

Every try is kept as an `Attempt` so the trace shows exactly how a value was obtained.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar

import httpx
import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .cache import ResponseCache, cache_key
from .errors import ServerUnavailable
from .outage import DEFAULT_SERVER_WAIT, ServerGone, ServerWatch
from .schemas import json_schema
from .spec import Sampling
from .stats import RunStats
from .trace import Attempt

DEFAULT_RETRIES = 2
DEFAULT_MAX_TOKENS = 512
MAX_TOKENS_GROWTH = 4  # a truncated reply is re-asked with up to 4x the node's max_tokens
CANARY_TOKEN = "canary-7f3a9"
MAX_OUTAGES_PER_TRY = 3  # outages one try may wait out before it counts as failed
PROBE_TIMEOUT = 5.0  # seconds a liveness probe (GET /models) may take
MIN_RETRY_AFTER = 1.0  # seconds: the shortest wait a Retry-After gets

StructuredMode = Literal["server", "prompt"]
T = TypeVar("T")


class LLMCallError(Exception):
    """A call that exhausted its budget; carries every attempt for the trace."""

    def __init__(self, message: str, attempts: list[Attempt]) -> None:
        self.attempts = attempts
        super().__init__(message)


class ServerError(ServerUnavailable):
    """The server cannot be used at all (unreachable, refuses the model…)."""


class MalformedReply(Exception):
    """HTTP 200 whose body is not a usable completion (e.g. no choices); retried like a 5xx."""


class DeadlineExceeded(Exception):
    """No complete reply within the request's deadline (`--timeout`): connect, wait and the
    whole body together, so a server that drips its reply cannot hold a call forever."""


# What a proxy (nginx, a load balancer, a router in front of vLLM replicas) answers while
# the server behind it restarts: an outage if the model list fails too.
PROXY_ERRORS = frozenset({502, 503, 504})


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header as seconds from now: delta-seconds or an HTTP date; None when
    absent or unreadable (the usual backoff applies then)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _secs(seconds: float) -> str:
    return f"{round(seconds, 1):g}"


def _retry_after(exc: BaseException) -> float | None:
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (429, 503):
        return None
    return retry_after_seconds(exc.response.headers.get("retry-after"))


@dataclass
class Endpoint:
    """One server + model pair, with its own in-flight limit."""

    base_url: str
    model: str
    client: openai.AsyncOpenAI
    limit: asyncio.Semaphore
    structured: StructuredMode = "server"
    server_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallResult:
    """The validated samples of one node call."""

    values: list[dict[str, Any]]
    raw: list[str]
    attempts: list[Attempt]
    cached: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0


@dataclass
class _Choice:
    content: str
    finish_reason: str | None
    logprobs: list[dict[str, Any]] | None


class RetryAfterTooLong(Exception):
    """The server asked to be retried later than the run is willing to wait."""


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return _is_connection_failure(exc) or isinstance(
        exc, openai.APIResponseValidationError | json.JSONDecodeError | MalformedReply
    )


def _is_connection_failure(exc: BaseException) -> bool:
    """No HTTP answer at all: refused, reset, cut off mid-body or timed out."""
    return isinstance(exc, openai.APIConnectionError | httpx.TransportError | DeadlineExceeded)


def _may_be_outage(exc: BaseException) -> bool:
    """No answer, or a proxy's error page: the liveness probe decides if the server is down."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in PROXY_ERRORS
    return _is_connection_failure(exc)


def _describe(exc: BaseException) -> str:
    """One line naming the fault, as it goes into the trace and a failed example's error."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    if isinstance(exc, openai.APIConnectionError):
        # The SDK's own text ("Connection error.") hides the fault; its cause names it. Its
        # aiohttp transport reports refused and reset connections as ConnectTimeout, so the
        # cause, not the class, tells a slow reply from a failed connection.
        cause = exc.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        if cause is None or "ReadTimeout" in type(cause).__name__:
            return f"timed out waiting for the reply ({detail})"
        return f"connection failed ({detail})"
    if isinstance(exc, json.JSONDecodeError):
        return f"reply body is not JSON ({exc})"
    if isinstance(exc, DeadlineExceeded | RetryAfterTooLong):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _extract_json(text: str) -> str:
    """For prompt-only mode: the JSON object inside a reply that may carry prose/fences."""
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        return fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


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


def make_http_client(connections: int, timeout: float) -> openai.DefaultAioHttpClient:
    """The SDK on aiohttp, with a keep-alive slot for every request in flight.

    The SDK's default httpx pool scans all its connections on every request and keeps only
    100 alive; at 64 requests in flight that cost a third of our throughput against a fast
    server (bench/engine_overhead.py).
    """
    limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
        max_connections=max(connections, 100), max_keepalive_connections=connections
    )
    return openai.DefaultAioHttpClient(limits=limits, timeout=timeout)


def request_params(sampling: Sampling) -> dict[str, Any]:
    """The sampling values a node call sends (and records in the trace and cache key)."""
    return {
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_tokens or DEFAULT_MAX_TOKENS,
        "top_p": sampling.top_p,
        "seed": sampling.seed,
        "logprobs": sampling.logprobs,
    }


def request_body(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    n: int,
    schema: dict[str, Any] | None,
) -> dict[str, Any]:
    """The chat-completion body of one request; `schema` is enforced by the server when given.

    Also what a replay of a traced call re-sends (bench/vllm_saturation.py).
    """
    body: dict[str, Any] = {"model": model, "messages": messages, "n": n}
    for name in ("temperature", "max_tokens", "top_p", "seed"):
        if params.get(name) is not None:
            body[name] = params[name]
    if params.get("logprobs"):
        body["logprobs"] = True
        body["top_logprobs"] = params["logprobs"]
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": True},
        }
    return body


def with_schema_instruction(
    messages: list[dict[str, Any]], schema: dict[str, Any]
) -> list[dict[str, Any]]:
    """Prompt-only mode: the schema instruction appended to the last user turn (many chat
    templates accept a system message only at the start)."""
    last = messages[-1]
    text = last["content"] + "\n\n" + schema_instruction(schema)
    return [*messages[:-1], {**last, "content": text}]


def schema_instruction(schema: dict[str, Any]) -> str:
    """What prompt-only mode adds to the conversation, since the server will not enforce it."""
    return (
        "Answer with a single JSON object and nothing else. It must validate against this "
        "JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
    )


class LLMClient:
    """Shared by every node of a run: endpoints, cache, counters."""

    def __init__(
        self,
        *,
        cache: ResponseCache | None,
        stats: RunStats,
        concurrency: int = 64,
        timeout: float = 120.0,
        transport_retries: int = 4,
        refresh: bool = False,
        backoff_max: float = 20.0,
        server_wait: float = DEFAULT_SERVER_WAIT,
        say: Callable[[str], None] = print,
    ) -> None:
        self.cache = cache
        self.stats = stats
        self.concurrency = concurrency
        self.timeout = timeout
        self.transport_retries = transport_retries
        self.refresh = refresh
        self.backoff_max = backoff_max
        self.server_wait = server_wait
        self.say = say
        self._watches: dict[str, ServerWatch] = {}
        self._endpoints: dict[tuple[str, str, str], Endpoint] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}
        # API keys in use: a server may quote one back in an error, and nothing a server
        # says may carry a key into the trace, results, manifest or logs.
        self._secrets: set[str] = set()

    def endpoint(self, base_url: str, model: str, api_key: str = "EMPTY") -> Endpoint:
        """The Endpoint for (base_url, model, key); the in-flight limit is per server URL."""
        self._keep_secret(api_key)
        key = (base_url, model, api_key)
        if key not in self._endpoints:
            if base_url not in self._limits:
                self._limits[base_url] = asyncio.Semaphore(self.concurrency)
            if (base_url, api_key) not in self._clients:
                # Retries are ours (tenacity, recorded in the trace), not the SDK's.
                self._clients[base_url, api_key] = openai.AsyncOpenAI(
                    base_url=base_url,
                    api_key=api_key,
                    timeout=self.timeout,
                    max_retries=0,
                    http_client=make_http_client(self.concurrency, self.timeout),
                )
            if base_url not in self._watches:
                self._watches[base_url] = ServerWatch(
                    base_url,
                    self._prober(self._clients[base_url, api_key]),
                    self.server_wait,
                    self.say,
                )
            self._endpoints[key] = Endpoint(
                base_url, model, self._clients[base_url, api_key], self._limits[base_url]
            )
        return self._endpoints[key]

    def _keep_secret(self, api_key: str) -> None:
        if api_key and api_key != "EMPTY":
            self._secrets.add(api_key)

    def redact(self, text: str) -> str:
        """`text` with every API key of this client replaced by a placeholder."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[api key]")
        return text

    def _describe(self, exc: BaseException) -> str:
        return self.redact(_describe(exc))

    def outages(self) -> list[dict[str, Any]]:
        """Every stretch a server did not answer during the run (for the manifest)."""
        return [
            {"base_url": url, "seconds": round(o.seconds, 2), "recovered": o.recovered}
            for url, watch in self._watches.items()
            for o in watch.outages
        ]

    @staticmethod
    def _prober(client: openai.AsyncOpenAI) -> Callable[[], Awaitable[bool]]:
        """A liveness check: does the server list its models within PROBE_TIMEOUT?"""
        quick = client.with_options(timeout=PROBE_TIMEOUT)

        async def probe() -> bool:
            try:
                await quick.models.list()
            except (openai.APIError, httpx.HTTPError, OSError):
                return False
            return True

        return probe

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()

    # -- server discovery -------------------------------------------------------------

    async def list_models(self, base_url: str, api_key: str = "EMPTY") -> list[str]:
        """Model ids the server serves; ServerError with a next step if it is unreachable."""
        self._keep_secret(api_key)
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=15, max_retries=2)
        try:
            page = await client.models.list()
            return [m.id for m in page.data]
        except openai.APIError as exc:
            raise ServerError(
                f"cannot list models at {base_url} ({self._describe(exc)}). Is the server running? "
                "Start the embedded one with `orchestrator serve`, or pass --base-url."
            ) from exc
        finally:
            await client.close()

    async def canary(self, ep: Endpoint, tries: int = 3) -> bool:
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
                choices, _, _ = await self._request(
                    ep, messages, {"max_tokens": 40, "temperature": 0.0}, 1, schema
                )
            except Exception as exc:
                raise ServerError(
                    f"the first request to {ep.base_url} ({ep.model}) failed after "
                    f"{self.transport_retries + 1} tries: {self._describe(exc)}"
                ) from exc
            try:
                data = json.loads(choices[0].content)
            except (json.JSONDecodeError, TypeError):
                continue
            if data == {"token": CANARY_TOKEN, "count": 3}:
                return True
        return False

    # -- one request ------------------------------------------------------------------

    async def _request(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        n: int,
        schema: dict[str, Any] | None,
        attempts: list[Attempt] | None = None,
    ) -> tuple[list[_Choice], tuple[int, int], float]:
        """One chat completion with transport retries; every failed try is appended to
        `attempts`. Tries lost to a server outage are waited out and not counted."""
        body = request_body(
            ep.model, messages, params, n, schema if ep.structured == "server" else None
        )
        started = time.perf_counter()

        async def post_once() -> ChatCompletion:
            nonlocal started
            async with ep.limit:
                self.stats.requests += 1
                started = time.perf_counter()
                # `post` sends the body as built: `chat.completions.create` would first walk
                # every message and the whole JSON schema to "transform" plain dicts, about
                # a fifth of the client's CPU time at high request rates. The SDK's timeout
                # bounds each read; the deadline bounds the whole reply (about 3 µs a call).
                try:
                    async with asyncio.timeout(self.timeout):
                        response = await ep.client.post(
                            "/chat/completions", body=body, cast_to=ChatCompletion
                        )
                except TimeoutError:
                    raise self._deadline_exceeded() from None
            if len(response.choices or []) != n:
                raise MalformedReply(
                    f"asked for {n} sample(s), the reply has {len(response.choices or [])}"
                )
            return response

        response = await self._with_retries(ep, post_once, attempts)
        latency = time.perf_counter() - started
        usage = response.usage
        tokens = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
        self.stats.prompt_tokens += tokens[0]
        self.stats.completion_tokens += tokens[1]
        if getattr(response, "system_fingerprint", None):
            ep.server_info.setdefault("system_fingerprint", response.system_fingerprint)
        choices = [
            _Choice(self.redact(c.message.content or ""), c.finish_reason, _logprobs(c))
            for c in sorted(response.choices, key=lambda c: c.index)
        ]
        return choices, tokens, latency

    def _deadline_exceeded(self, what: str = "reply") -> DeadlineExceeded:
        return DeadlineExceeded(
            f"timed out: no complete {what} within {self.timeout:g} s (--timeout, a deadline "
            "for the whole request: connecting, waiting and reading the body)"
        )

    async def _with_retries(
        self, ep: Endpoint, post: Callable[[], Awaitable[T]], attempts: list[Attempt] | None
    ) -> T:
        """`post` with the transport budget: transient failures are sent again after a
        backoff, each failed try appended to `attempts`; waits for an outage or a
        Retry-After do not spend the budget."""
        try:
            # Most requests succeed at once, so tenacity (~60 µs of bookkeeping per attempt)
            # is only brought in after a failure.
            return await self._send(ep, post, attempts)
        except Exception as exc:
            if not _is_transient(exc):
                raise
            first: Exception | None = exc
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.transport_retries + 1),
            # Exponential from 0.5 s plus up to 0.5 s of jitter, built from parts every
            # tenacity since 8.2 has (wait_exponential_jitter's `multiplier` came in 9.2).
            wait=wait_exponential(multiplier=0.5, max=self.backoff_max) + wait_random(0, 0.5),
            retry=retry_if_exception(_is_transient),
            before_sleep=lambda _: self._count_retry(),
            reraise=True,
        ):
            with attempt:
                if first is not None:
                    # Replayed as tenacity's attempt 1: same schedule, same records.
                    failed, first = first, None
                    raise failed from None
                return await self._send(ep, post, attempts)
        raise AssertionError("unreachable: tenacity returns the value or re-raises")

    async def _send(
        self, ep: Endpoint, post: Callable[[], Awaitable[T]], attempts: list[Attempt] | None
    ) -> T:
        """One counted try: a request lost to a server outage is sent again once the server
        is back (a few times at most, so a flapping server cannot loop us), and one the
        server asks us to repeat later (Retry-After) is repeated then, as long as the waits
        stay within the run's server wait."""
        watch = self._watches[ep.base_url]
        outages_left = MAX_OUTAGES_PER_TRY
        waited = 0.0
        while True:
            try:
                return await post()
            except Exception as exc:
                described = self._describe(exc)
                if attempts is not None:
                    attempts.append(
                        Attempt(number=len(attempts) + 1, kind="transport", error=described)
                    )
                asked = _retry_after(exc)
                if asked is not None:
                    # "0" or a date already past would have us ask again at once, for as
                    # long as the server keeps saying it: each wait is a second at least.
                    pause = max(asked, MIN_RETRY_AFTER)
                    if pause > self.server_wait:
                        raise RetryAfterTooLong(
                            f"{described}; the server's Retry-After {_secs(asked)} s is longer "
                            f"than --server-wait ({self.server_wait:g} s) allows; raise "
                            "--server-wait to wait for it"
                        ) from exc
                    if waited + pause > self.server_wait:
                        raise RetryAfterTooLong(
                            f"{described}; still asked to wait (Retry-After) after waiting "
                            f"{_secs(waited)} s as the server asked, and --server-wait is "
                            f"{self.server_wait:g} s; raise it to wait longer"
                        ) from exc
                    waited += pause
                    if attempts:
                        attempts[-1].error = (
                            f"{described}; waited {_secs(pause)} s as the server asked "
                            f"(Retry-After{'' if pause == asked else f' {_secs(asked)} s'})"
                        )
                    await asyncio.sleep(pause)
                    continue
                if not _may_be_outage(exc) or outages_left == 0:
                    raise
                outage = await watch.after_failure(time.monotonic())
                if outage is None:
                    raise
                outages_left -= 1
                if attempts:
                    waited_out = f"waited {outage.seconds:.1f} s for it"
                    attempts[-1].error = f"{described}; the server was down, {waited_out}"

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
        `attempts`. Raises openai.APIStatusError for an answer that is not a success (e.g.
        404: this server has no such route)."""
        url = ep.base_url.rstrip("/").removesuffix("/v1") + path

        async def post_once() -> dict[str, Any]:
            async with ep.limit:
                try:
                    async with asyncio.timeout(self.timeout):
                        reply = await ep.client.post(url, body=body, cast_to=object)
                except TimeoutError:
                    raise self._deadline_exceeded(f"reply from {path}") from None
            if not isinstance(reply, dict):
                raise MalformedReply(f"{path} answered {type(reply).__name__}, not an object")
            return reply

        return await self._with_retries(ep, post_once, attempts)

    def _count_retry(self) -> None:
        self.stats.retries += 1

    # -- a node call ------------------------------------------------------------------

    async def call(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        model: type[BaseModel],
        sampling: Sampling,
    ) -> CallResult:
        """n validated samples for one rendered prompt; LLMCallError when the budget runs out."""
        n = int(sampling.n or 1)
        retries = DEFAULT_RETRIES if sampling.retries is None else int(sampling.retries)
        schema = json_schema(model)
        if ep.structured == "prompt":
            messages = with_schema_instruction(messages, schema)
        params = request_params(sampling)
        keys = [cache_key(ep.model, messages, params, schema, i) for i in range(n)]
        result = CallResult([{}] * n, [""] * n, [], cached=True)
        values: list[dict[str, Any] | None] = [None] * n
        if self.cache is not None and not self.refresh:
            for i, key in enumerate(keys):
                hit = self.cache.get(key)
                if hit is not None:
                    parsed = self._validate(model, _Choice(**hit["choice"]), ep.structured)
                    if isinstance(parsed, dict):
                        values[i] = parsed
                        result.raw[i] = hit["choice"]["content"]
                        result.attempts.append(
                            Attempt(
                                number=len(result.attempts) + 1,
                                kind="cache",
                                raw=hit["choice"]["content"],
                                cached=True,
                            )
                        )
                        self.stats.cache_hits += 1
        pending = [i for i in range(n) if values[i] is None]
        if pending:
            result.cached = False
            started = time.perf_counter()
            try:
                choices, tokens, _ = await self._request(
                    ep, messages, params, len(pending), schema, result.attempts
                )
            except (LLMCallError, ServerGone):
                raise
            except Exception as exc:
                tries = sum(a.kind == "transport" for a in result.attempts)
                raise LLMCallError(
                    f"request failed after {tries} tr{'y' if tries == 1 else 'ies'}: "
                    f"{self._describe(exc)}",
                    result.attempts,
                ) from exc
            result.prompt_tokens += tokens[0]
            result.completion_tokens += tokens[1]
            # Samples that came back invalid are repaired one by one, concurrently.
            repairs = [
                self._settle(ep, messages, params, retries, model, schema, choice, result, keys[i])
                for i, choice in zip(pending, choices, strict=True)
            ]
            if len(repairs) == 1:  # the usual case; a task per call costs more than the rest
                settled: list[Any] = [await repairs[0]]
            else:
                settled = await asyncio.gather(*repairs, return_exceptions=True)
            errors = [s for s in settled if isinstance(s, BaseException)]
            if errors:
                raise LLMCallError(str(errors[0]), result.attempts)
            for i, (value, raw) in zip(pending, settled, strict=True):
                values[i] = value
                result.raw[i] = raw
            result.latency = time.perf_counter() - started
        result.values = [v for v in values if v is not None]
        return result

    async def _settle(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        retries: int,
        model: type[BaseModel],
        schema: dict[str, Any],
        choice: _Choice,
        result: CallResult,
        key: str,
    ) -> tuple[dict[str, Any], str]:
        """Validate one sample; re-ask with the error fed back until valid or out of budget."""
        base_max = params["max_tokens"]
        conversation = list(messages)
        asked = dict(params, temperature=params.get("temperature"))
        for round_ in range(retries + 1):
            parsed = self._validate(model, choice, ep.structured)
            if isinstance(parsed, dict):
                result.attempts.append(
                    Attempt(
                        number=len(result.attempts) + 1,
                        kind="ok",
                        raw=choice.content,
                        finish_reason=choice.finish_reason,
                    )
                )
                if self.cache is not None:
                    self.cache.put(key, {"choice": choice.__dict__})
                return parsed, choice.content
            kind = "truncated" if choice.finish_reason == "length" else "invalid"
            result.attempts.append(
                Attempt(
                    number=len(result.attempts) + 1,
                    kind=kind,
                    error=parsed,
                    raw=choice.content,
                    finish_reason=choice.finish_reason,
                )
            )
            if round_ == retries:
                break
            self.stats.retries += 1
            if kind == "truncated":
                # Feeding back a cut-off reply helps nothing; give the answer more room.
                asked["max_tokens"] = min(asked["max_tokens"] * 2, base_max * MAX_TOKENS_GROWTH)
                reask = conversation
            else:
                reask = [
                    *conversation,
                    {"role": "assistant", "content": choice.content},
                    {
                        "role": "user",
                        "content": (
                            "That reply was rejected: " + parsed + "\nReply again with only the "
                            "corrected JSON object."
                        ),
                    },
                ]
            try:
                choices, tokens, _ = await self._request(
                    ep, reask, asked, 1, schema, result.attempts
                )
            except ServerGone:
                raise
            except Exception as exc:
                message = f"re-ask failed: {self._describe(exc)}"
                raise LLMCallError(message, result.attempts) from exc
            result.prompt_tokens += tokens[0]
            result.completion_tokens += tokens[1]
            choice = choices[0]
        last = result.attempts[-1]
        raise LLMCallError(
            f"no valid reply after {retries + 1} attempts; last error: {last.error}",
            result.attempts,
        )

    @staticmethod
    def _validate(model: type[BaseModel], choice: _Choice, mode: StructuredMode) -> dict | str:
        """The validated value, or the error text that goes back to the model."""
        if choice.finish_reason == "length":
            return "the reply was cut off at max_tokens (finish_reason=length)"
        text = choice.content if mode == "server" else _extract_json(choice.content)
        try:
            value = model.model_validate_json(text).model_dump(mode="json")
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:8]
            )
            return f"invalid JSON output — {problems}"
        if choice.logprobs is not None:
            value["_logprobs"] = choice.logprobs
        return value
