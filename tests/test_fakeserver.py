"""Tests for the fake OpenAI-compatible server, driven through the real openai clients."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from fakeserver import (
    FakeServer,
    Reply,
    latency_responder,
    schema_instance,
    schema_responder,
    sequence,
)
from pydantic import BaseModel, Field

MESSAGES = [{"role": "user", "content": "rate this text please"}]


class Verdict(StrEnum):
    """An enum that pydantic puts under ``$defs``."""

    good = "good"
    bad = "bad"


class Criterion(BaseModel):
    """A nested model, also emitted under ``$defs`` and referenced with ``$ref``."""

    name: str = Field(min_length=3, max_length=12)
    score: int = Field(ge=1, le=5)
    weight: float = Field(gt=0, lt=1)


class Judgement(BaseModel):
    """A judge-like output schema exercising the features the orchestrator relies on."""

    verdict: Verdict
    label: Literal["A", "B", "tie"]
    overall: int = Field(ge=0, le=10)
    criteria: list[Criterion] = Field(min_length=2, max_length=4)
    tags: list[str] = Field(max_length=3)
    best: Criterion
    note: str | None = None
    confident: bool


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A started fake server, stopped after the test."""
    with FakeServer() as fake:
        yield fake


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    """Run a test once with ``openai.OpenAI`` and once with ``openai.AsyncOpenAI``."""
    return request.param


async def chat(kind: str, server: FakeServer, timeout: float = 10.0, **kwargs: Any) -> Any:
    """Make one chat-completion call with the sync or async openai client, without retries."""
    kwargs.setdefault("model", "fake-model")
    kwargs.setdefault("messages", MESSAGES)
    if kind == "sync":
        with openai.OpenAI(
            base_url=server.base_url, api_key="x", max_retries=0, timeout=timeout
        ) as client:
            return client.chat.completions.create(**kwargs)
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", max_retries=0, timeout=timeout
    ) as aclient:
        return await aclient.chat.completions.create(**kwargs)


async def test_schema_responder_output_validates(kind: str, server: FakeServer) -> None:
    """A pydantic schema with $defs, enums, ranges and bounded lists gets a valid instance."""
    schema = Judgement.model_json_schema()
    assert "$defs" in schema  # the point of the test: references must be resolved
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "Judgement", "schema": schema, "strict": True},
    }
    result = await chat(kind, server, response_format=response_format)
    content = result.choices[0].message.content
    instance = json.loads(content)
    jsonschema.validate(instance, schema)
    judgement = Judgement.model_validate_json(content)
    assert judgement.verdict is Verdict.good
    assert judgement.label == "A"
    assert judgement.overall == 0
    assert len(judgement.criteria) == 2
    assert len(judgement.tags) == 1
    assert judgement.best.score == 1 and 0 < judgement.best.weight < 1
    assert 3 <= len(judgement.best.name) <= 12
    assert server.requests[-1]["response_format"]["json_schema"]["schema"] == schema


async def test_plain_request_gets_ok(kind: str, server: FakeServer) -> None:
    """Without a response_format the default responder answers "ok" with rough usage."""
    result = await chat(kind, server)
    assert result.choices[0].message.content == "ok"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == "fake-model"
    assert result.usage.prompt_tokens == 4
    assert result.usage.completion_tokens == 1


async def test_status_500_raises_internal_server_error(kind: str, server: FakeServer) -> None:
    """A scripted 500 reaches the caller as openai.InternalServerError."""
    server.responder = lambda body: Reply(content="boom", status=500)
    with pytest.raises(openai.InternalServerError) as info:
        await chat(kind, server)
    assert info.value.status_code == 500
    assert "boom" in str(info.value)


async def test_other_statuses_map_to_openai_errors(kind: str, server: FakeServer) -> None:
    """Error bodies are OpenAI-shaped, so the client picks the matching exception class."""
    server.responder = sequence(Reply(status=429), Reply(status=400, content="bad prompt"))
    with pytest.raises(openai.RateLimitError):
        await chat(kind, server)
    with pytest.raises(openai.BadRequestError, match="bad prompt"):
        await chat(kind, server)


async def test_responder_exception_becomes_500(kind: str, server: FakeServer) -> None:
    """A bug in a responder shows up as a 500 with its message and in server.errors."""

    def broken(body: dict) -> Reply:
        raise RuntimeError("responder exploded")

    server.responder = broken
    with pytest.raises(openai.InternalServerError, match="responder exploded"):
        await chat(kind, server)
    assert len(server.errors) == 1 and isinstance(server.errors[0], RuntimeError)


async def test_delay_beyond_client_timeout_raises(kind: str, server: FakeServer) -> None:
    """A reply slower than the client timeout raises APITimeoutError promptly."""
    server.responder = lambda body: Reply(content="late", delay=3.0)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        await chat(kind, server, timeout=0.3)
    assert time.monotonic() - started < 2.5


async def test_slow_reply_within_timeout_arrives(kind: str, server: FakeServer) -> None:
    """A delay shorter than the timeout only slows the reply down."""
    server.responder = lambda body: Reply(content="slow", delay=0.2)
    started = time.monotonic()
    result = await chat(kind, server, timeout=5.0)
    assert result.choices[0].message.content == "slow"
    assert time.monotonic() - started >= 0.2


async def test_raw_body_not_json_makes_client_raise(kind: str, server: FakeServer) -> None:
    """Verbatim non-JSON bytes make the client fail instead of returning garbage."""
    server.responder = lambda body: Reply(raw_body=b"not json")
    # The openai client surfaces an undecodable 200 body as json.JSONDecodeError (a ValueError).
    with pytest.raises((ValueError, openai.APIError)):
        await chat(kind, server)


async def test_n_samples_return_one_choice_each(kind: str, server: FakeServer) -> None:
    """samples become one choice each, for n>1 self-consistency sampling."""
    server.responder = lambda body: Reply(samples=["7", "8", "6"])
    result = await chat(kind, server, n=3)
    assert [c.message.content for c in result.choices] == ["7", "8", "6"]
    assert [c.index for c in result.choices] == [0, 1, 2]
    assert server.requests[-1]["n"] == 3


async def test_n_without_samples_repeats_content(kind: str, server: FakeServer) -> None:
    """Without samples, content is repeated for each of the n requested choices."""
    server.responder = lambda body: Reply(content="same")
    result = await chat(kind, server, n=3)
    assert [c.message.content for c in result.choices] == ["same"] * 3


async def test_finish_reason_length_passes_through(kind: str, server: FakeServer) -> None:
    """Truncation is simulated with finish_reason="length" and partial content."""
    server.responder = lambda body: Reply(content='{"score": ', finish_reason="length")
    result = await chat(kind, server)
    assert result.choices[0].finish_reason == "length"
    assert result.choices[0].message.content == '{"score": '


async def test_logprobs_pass_through(kind: str, server: FakeServer) -> None:
    """Scripted logprobs and usage reach the client unchanged on choice 0."""
    logprobs = [
        {
            "token": "7",
            "logprob": -0.1,
            "bytes": None,
            "top_logprobs": [
                {"token": "7", "logprob": -0.1, "bytes": None},
                {"token": "8", "logprob": -2.5, "bytes": None},
            ],
        }
    ]
    server.responder = lambda body: Reply(content="7", logprobs=logprobs, usage=(11, 1))
    result = await chat(kind, server, logprobs=True, top_logprobs=2)
    content = result.choices[0].logprobs.content
    assert content[0].token == "7" and content[0].logprob == pytest.approx(-0.1)
    assert [t.token for t in content[0].top_logprobs] == ["7", "8"]
    assert content[0].top_logprobs[1].logprob == pytest.approx(-2.5)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (11, 1)
    assert server.requests[-1]["top_logprobs"] == 2


async def test_models_endpoint(kind: str, server: FakeServer) -> None:
    """GET /v1/models lists the configured model."""
    if kind == "sync":
        with openai.OpenAI(base_url=server.base_url, api_key="x") as client:
            models = client.models.list()
    else:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x") as aclient:
            models = await aclient.models.list()
    assert [m.id for m in models.data] == ["fake-model"]


def test_tokenize_counts_words(server: FakeServer) -> None:
    """vLLM's /tokenize at the server root counts whitespace-separated words."""
    root = server.base_url.removesuffix("/v1")
    body = {"model": "fake-model", "prompt": "one two  three\nfour"}
    response = httpx.post(f"{root}/tokenize", json=body)
    assert response.status_code == 200
    payload = response.json()
    assert payload["count"] == 4
    assert len(payload["tokens"]) == 4 and all(isinstance(t, int) for t in payload["tokens"])
    assert payload["max_model_len"] == 4096
    assert server.requests == []  # only chat completions are recorded


def test_requests_record_bodies_in_order(server: FakeServer) -> None:
    """Every request body is recorded in order; sequence() repeats its last reply."""
    server.responder = sequence(Reply(content="first"), lambda body: Reply(content="second"))
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        answers = [
            client.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": f"call {i}"}],
                temperature=0.5,
            )
            .choices[0]
            .message.content
            for i in range(4)
        ]
    assert answers == ["first", "second", "second", "second"]
    assert [r["messages"][0]["content"] for r in server.requests] == [f"call {i}" for i in range(4)]
    assert all(r["temperature"] == 0.5 for r in server.requests)


async def test_concurrent_async_requests_are_all_recorded(server: FakeServer) -> None:
    """Concurrent requests are served in parallel threads and all recorded."""
    lock = threading.Lock()
    state = {"active": 0, "most": 0}

    def overlapping(body: dict) -> Reply:
        with lock:
            state["active"] += 1
            state["most"] = max(state["most"], state["active"])
        time.sleep(0.2)
        with lock:
            state["active"] -= 1
        return Reply(content="done")

    server.responder = overlapping
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x") as aclient:
        results = await asyncio.gather(
            *(
                aclient.chat.completions.create(model="fake-model", messages=MESSAGES)
                for _ in range(20)
            )
        )
    assert [r.choices[0].message.content for r in results] == ["done"] * 20
    assert len(server.requests) == 20
    # Served in parallel threads, not one after another (no wall-clock assertion).
    assert state["most"] > 1


def test_sequence_is_thread_safe_and_repeats_last() -> None:
    """sequence() hands out each reply exactly once under concurrent calls."""
    responder = sequence(*(Reply(content=str(i)) for i in range(50)))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: responder({}).content, range(60)))
    assert sorted(got, key=int) == [str(i) for i in range(50)] + ["49"] * 10


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 3, "maximum": 9},
        {"type": "integer", "maximum": -4},
        {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 4},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {"type": "integer", "minimum": 1, "multipleOf": 5},
        {"type": "string", "minLength": 20},
        {"type": "string", "maxLength": 2},
        {"type": "string", "format": "date-time"},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 0},
        {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 3, "uniqueItems": True},
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 2}]},
        {"type": ["null", "boolean"]},
        {"const": "fixed"},
        {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {}}}]},
        {
            "type": "object",
            "properties": {"child": {"$ref": "#/$defs/Node"}},
            "required": ["child"],
            "$defs": {"Node": {"type": "object", "properties": {"v": {"const": 1}}}},
        },
    ],
)
def test_schema_instance_is_valid(schema: dict) -> None:
    """Each schema keyword the generator handles yields a valid instance."""
    instance = schema_instance(schema)
    jsonschema.validate(instance, schema)
    assert instance is not None


def test_schema_responder_without_schema_says_ok() -> None:
    """schema_responder falls back to "ok" and handles an empty schema."""
    assert schema_responder({"messages": MESSAGES}).content == "ok"
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}
    assert schema_responder(body).content == '"text"'


def test_command_line_serves_until_interrupted() -> None:
    """The script serves in the foreground and exits cleanly on Ctrl-C."""
    script = Path(__file__).with_name("fakeserver.py")
    with subprocess.Popen(
        [sys.executable, str(script), "--port", "0", "--latency", "0.05"],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", banner)
            assert match, banner
            with openai.OpenAI(base_url=match.group(1), api_key="x", max_retries=0) as client:
                result = client.chat.completions.create(model="fake-model", messages=MESSAGES)
            assert result.choices[0].message.content == "ok"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_latency_responder_delegates_after_waiting() -> None:
    """latency_responder hands the body to its inner responder and returns its reply."""
    seen: list[dict] = []

    def inner(body: dict) -> Reply:
        seen.append(body)
        return Reply(content="inner")

    reply = latency_responder(0.01, inner)({"messages": []})
    assert reply.content == "inner" and seen == [{"messages": []}]
