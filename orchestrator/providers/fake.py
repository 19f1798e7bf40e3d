"""An in-process provider for tests and dry runs ("fake", given as `transport=`): no
sockets, no server. It sees each request as an OpenAI-compatible server would (the body
`chat_body` encodes), so tests can read exactly what a live run would send. It answers from a
function of the request, or with schema-valid JSON by default, counts what it was sent, and
can be told to fail requests transiently, answer malformed JSON or cut replies off."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import DeadlineExceeded, FakeTransientError, MalformedReply, RetryAfterTooLong
from .base import ChatRequest, ChatResponse, Choice, ServedModel, mark_sent
from .wire import chat_body

Fault = Literal["transient", "malformed", "truncated"]
FAKE_MODEL = "fake-model"
# What a run with a fake transport and no base_url is said to talk to (no one listens).
FAKE_BASE_URL = "in-process://fake/v1"


@dataclass
class FakeRequest:
    """One chat request the fake transport was sent: the OpenAI body as a live run sends it."""

    base_url: str
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body["messages"])

    @property
    def params(self) -> dict[str, Any]:
        """The sampling values sent (temperature, max_tokens, top_p, seed, n, logprobs…)."""
        return {k: v for k, v in self.body.items() if k not in ("model", "messages")}

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema the server is asked to enforce, None in prompt-only mode."""
        fmt = self.body.get("response_format") or {}
        return (fmt.get("json_schema") or {}).get("schema")

    @property
    def is_canary(self) -> bool:
        """The structured-output check a run makes before its first example."""
        return set((self.schema or {}).get("properties", {})) == {"token", "count"}


@dataclass
class FakeAnswer:
    """A reply in full: one content per sample (or one for all), and how it ended."""

    content: str | list[str]
    finish_reason: str = "stop"
    usage: tuple[int, int] = (10, 10)


Respond = Callable[[FakeRequest], "str | list[str] | FakeAnswer"]


def schema_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A deterministic value that validates against `schema` (the subset output schemas
    use: objects, arrays, enums, consts, bounded numbers and strings, $ref, anyOf)."""
    root = schema if root is None else root
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return schema_instance(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(sub, root) for name, sub in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 0)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        item = schema.get("items", {})
        return [schema_instance(item, root) for _ in range(count)]
    if kind in ("integer", "number"):
        value = schema.get("minimum")
        if value is None and "exclusiveMinimum" in schema:
            value = schema["exclusiveMinimum"] + 1
        if value is None:
            value = min(0, schema.get("maximum", 0))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = "x" * max(int(schema.get("minLength", 1)), 1)
    return text[: schema["maxLength"]] if "maxLength" in schema else text


def schema_answer(request: FakeRequest) -> str:
    """The default answer: schema-valid JSON, or "ok" when no schema was sent."""
    schema = request.schema
    return "ok" if schema is None else json.dumps(schema_instance(schema))


class FakeTransport:
    """A `Transport` that answers in-process. `respond` maps a node's request to its content
    (or a FakeAnswer); `canary` answers the run's structured-output check (by default as a
    server that enforces the schema); `faults[i]` is applied to the i-th node request;
    `latency` is slept before each answer; `metrics` scripts a URL's /metrics text (none by
    default); `root` and `max_model_len` are what its model list reports as serving the
    models, as vLLM does (default: each model's own name, as `vllm serve NAME` reports).
    `requests` keeps every chat request."""

    def __init__(
        self,
        respond: Respond | None = None,
        *,
        models: Sequence[str] = (FAKE_MODEL,),
        faults: Sequence[Fault | None] = (),
        latency: float = 0.0,
        canary: Respond = schema_answer,
        metrics: Callable[[str], str | None] | None = None,
        root: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.respond: Respond = respond or schema_answer
        self.root = root
        self.max_model_len = max_model_len
        self.canary = canary
        self.models = list(models)
        self.faults = list(faults)
        self.latency = latency
        # The /metrics text of a base_url, for tests of the concurrency controller.
        self.metrics = metrics
        self.requests: list[FakeRequest] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self._node_requests = 0

    @property
    def node_requests(self) -> list[FakeRequest]:
        """The chat requests a run's nodes sent (the canary left out)."""
        return [r for r in self.requests if not r.is_canary]

    # -- Transport ------------------------------------------------------------------------

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> FakeConnection:
        return FakeConnection(self, base_url)

    async def list_models(self, base_url: str, api_key: str) -> list[ServedModel]:
        return [ServedModel(m, self.root or m, self.max_model_len) for m in self.models]

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(
            exc, FakeTransientError | MalformedReply | DeadlineExceeded | json.JSONDecodeError
        )

    def may_be_outage(self, exc: BaseException) -> bool:
        return False

    def retry_after(self, exc: BaseException) -> float | None:
        return exc.retry_after if isinstance(exc, FakeTransientError) else None

    def describe(self, exc: BaseException) -> str:
        if isinstance(exc, DeadlineExceeded | RetryAfterTooLong):
            return str(exc)
        return f"{type(exc).__name__}: {exc}"

    def metrics_text(self, base_url: str) -> str | None:
        return None if self.metrics is None else self.metrics(base_url)

    # -- answering ------------------------------------------------------------------------

    async def answer(self, base_url: str, body: dict[str, Any]) -> ChatResponse:
        request = FakeRequest(base_url, body)
        self.requests.append(request)
        mark_sent()  # it has arrived: a run stopped while it waits for the answer sent it
        fault: Fault | None = None
        if not request.is_canary:
            if self._node_requests < len(self.faults):
                fault = self.faults[self._node_requests]
            self._node_requests += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        if fault == "transient":
            raise FakeTransientError(f"fake transient fault on request {len(self.requests)}")
        answer = (self.canary if request.is_canary else self.respond)(request)
        if not isinstance(answer, FakeAnswer):
            answer = FakeAnswer(answer)
        n = int(body.get("n") or 1)
        contents = answer.content if isinstance(answer.content, list) else [answer.content] * n
        finish = answer.finish_reason
        if fault == "malformed":
            contents = ["{not json" for _ in contents]
        elif fault == "truncated":
            contents, finish = [c[: len(c) // 2] for c in contents], "length"
        return ChatResponse(
            [Choice(text, finish, None) for text in contents],
            *answer.usage,
            fingerprint="fake-transport",
        )


@dataclass
class FakeConnection:
    """The fake transport's connection to one base_url."""

    transport: FakeTransport
    base_url: str
    closed: bool = field(default=False)

    def chat(self, request: ChatRequest) -> Awaitable[ChatResponse]:
        return self.transport.answer(self.base_url, chat_body(request))

    def _post(self, path: str, body: dict[str, Any]) -> None:
        """Kept in `posts` as vLLM would be asked: the URL beside /v1, the JSON body."""
        root = self.base_url.rstrip("/").removesuffix("/v1")
        self.transport.posts.append((root + path, body))

    async def tokenize(self, model: str, text: str) -> dict[str, Any]:
        """vLLM's /tokenize, mimicked: one stable token id per word."""
        self._post("/tokenize", {"prompt": text, "add_special_tokens": False, "model": model})
        tokens = [zlib.crc32(word.encode()) % 32000 for word in text.split()]
        return {"tokens": tokens, "count": len(tokens), "max_model_len": 4096}

    async def detokenize(self, model: str, tokens: list[int]) -> dict[str, Any]:
        """vLLM's /detokenize, mimicked: a word per token id."""
        self._post("/detokenize", {"tokens": tokens, "model": model})
        return {"prompt": " ".join(f"t{t}" for t in tokens)}

    async def probe(self) -> bool:
        return True

    async def metrics(self) -> str | None:
        """What the transport's `metrics_text` scripts for this URL (None: no /metrics)."""
        return self.transport.metrics_text(self.base_url)

    async def close(self) -> None:
        self.closed = True
