"""Providers (issue 25): a typed ChatRequest each provider encodes in its own wire format,
capability gaps raised as the library's own errors (never an SDK's), what a provider
serves reported through it, and built-in providers chosen by name per run and per node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from fakeserver import FakeServer, schema_responder
from helpers import is_canary, judge_graph, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.calls.client import LLMClient
from orchestrator.calls.compute_runtime import Runtime
from orchestrator.cli import app
from orchestrator.compute.truncate import truncate_to_tokens
from orchestrator.errors import (
    ConfigurationError,
    GraphError,
    ProviderCapabilityError,
    TokenizerUnavailable,
)
from orchestrator.providers.base import (
    ChatRequest,
    ChatResponse,
    ServedModel,
)
from orchestrator.providers.fake import FAKE_BASE_URL, FakeConnection, FakeTransport
from orchestrator.providers.openai_compat import OpenAITransport, chat_body
from orchestrator.providers.registry import BUILT_IN, make_provider
from orchestrator.store.records import Counts

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}
SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}}


# -- the request and its OpenAI encoding ---------------------------------------------------


def test_the_openai_body_of_a_request_is_todays_body_byte_for_byte() -> None:
    messages = [{"role": "user", "content": "Rate: café"}]
    request = ChatRequest("judge", messages, 3, 0.5, 60, 0.9, 7, 2, SCHEMA, structured="server")
    expected = (
        b'{"model":"judge","messages":[{"role":"user","content":"Rate: caf\xc3\xa9"}],"n":3,'
        b'"temperature":0.5,"max_tokens":60,"top_p":0.9,"seed":7,"logprobs":true,'
        b'"top_logprobs":2,"response_format":{"type":"json_schema","json_schema":'
        b'{"name":"output","schema":{"type":"object","properties":{"score":'
        b'{"type":"integer"}}},"strict":true}}}'
    )
    assert orjson.dumps(chat_body(request)) == expected


def test_prompt_mode_and_unset_sampling_leave_their_keys_out() -> None:
    request = ChatRequest("judge", [{"role": "user", "content": "x"}], schema=SCHEMA)
    request.structured = "prompt"
    assert chat_body(request) == {
        "model": "judge",
        "messages": [{"role": "user", "content": "x"}],
        "n": 1,
    }


async def test_the_fake_sees_the_body_the_calls_layer_asked_for() -> None:
    fake = orc.FakeTransport()
    client = LLMClient(cache=None, stats=Counts(), transport=fake)
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    messages = [{"role": "user", "content": "x"}]
    await client.sender.chat(ep, messages, {"max_tokens": 9, "seed": 1}, 1, SCHEMA)
    await client.close()
    (sent,) = fake.requests
    assert sent.body == chat_body(
        ChatRequest("fake-model", messages, 1, max_tokens=9, seed=1, schema=SCHEMA)
    )


# -- capabilities ------------------------------------------------------------------------


class PlainConnection:
    """A connection that can chat and nothing more: no Tokenizer, no LoadGauge."""

    def __init__(self, inner: FakeConnection) -> None:
        self.inner = inner

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.chat(request)

    async def probe(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class PlainProvider(FakeTransport):
    """A provider whose connections have no capabilities, and which names what it serves."""

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> PlainConnection:  # type: ignore[override]
        return PlainConnection(FakeConnection(self, base_url))

    def identity(self, url: str, served: list[ServedModel], model: str) -> str:
        return f"plain weights of {model}"


async def test_a_provider_without_a_tokenizer_raises_the_librarys_error() -> None:
    client = LLMClient(cache=None, stats=Counts(), transport=PlainProvider())
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    with pytest.raises(ProviderCapabilityError, match="tokenizer") as caught:
        await client.tokenize(ep, "two words")
    await client.close()
    assert isinstance(caught.value, ConfigurationError)


async def test_truncation_counts_words_when_the_provider_has_no_tokenizer() -> None:
    client = LLMClient(cache=None, stats=Counts(), transport=PlainProvider())
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    runtime = Runtime(client, {"judge": ep}, {})
    result = await truncate_to_tokens("one two three four", 2, runtime=runtime)
    await client.close()
    assert result["method"] == "words" and result["text"] == "one two"
    assert "tokenizer" in result["note"]


async def test_a_server_without_detokenize_is_the_librarys_error_not_the_sdks() -> None:
    with FakeServer() as server:  # has /tokenize, no /detokenize (404)
        client = LLMClient(cache=None, stats=Counts())
        ep = client.endpoint(server.base_url, "fake-model")
        tokens = await client.tokenize(ep, "two words")
        with pytest.raises(TokenizerUnavailable, match="/detokenize") as caught:
            await client.detokenize(ep, tokens["tokens"])
        await client.close()
    assert tokens["count"] == 2
    assert not isinstance(caught.value, openai.APIError)
    assert isinstance(caught.value, ProviderCapabilityError)


def test_a_provider_without_a_load_gauge_runs_with_auto_concurrency(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": "t"}])
    result = orc.run(graph, data, transport=PlainProvider(), concurrency="auto")
    assert result.manifest.counts.examples_ok == 1


# -- identity ----------------------------------------------------------------------------


def test_what_a_provider_says_it_serves_is_the_servers_identity(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": "t"}])
    result = orc.run(graph, data, transport=PlainProvider())
    (server,) = result.manifest.model_dump()["servers"].values()
    assert server["identity"] == "plain weights of fake-model"


# -- providers by name -------------------------------------------------------------------


def test_the_built_in_providers_by_name() -> None:
    assert set(BUILT_IN) == {"openai"}
    assert isinstance(make_provider("openai"), OpenAITransport)
    with pytest.raises(ConfigurationError, match=r"unknown provider 'vertex'.*openai"):
        make_provider("vertex")


def test_an_unknown_provider_for_the_run_is_a_configuration_error(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": "t"}])
    with pytest.raises(ConfigurationError, match="unknown provider 'nope'"):
        orc.run(graph, data, base_url="http://127.0.0.1:9/v1", provider="nope")
    with pytest.raises(ConfigurationError, match="one of them"):
        orc.run(graph, data, transport=orc.FakeTransport(), provider="openai")


def test_the_cli_names_the_runs_provider(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": "t"}])

    def run(provider: str, out: str) -> Any:
        args = ["run", str(graph), "--data", str(data), "--base-url", server.base_url]
        args += ["--provider", provider, "--out", str(tmp_path / out)]
        return CliRunner().invoke(app, args)

    with FakeServer() as server:
        ok = run("openai", "run")
        bad = run("nope", "run2")
    assert ok.exit_code == 0, ok.output
    assert bad.exit_code != 0 and "unknown provider 'nope'" in bad.output


def test_a_graph_may_name_only_a_built_in_provider(tmp_path: Path) -> None:
    spec = judge_graph()
    spec["nodes"]["judge"]["provider"] = "my_module:Provider"
    graph = write_graph(tmp_path / "g", spec, PROMPTS)
    with pytest.raises(GraphError) as caught:
        orc.load_graph(graph)
    (problem,) = caught.value.problems
    assert problem.node == "judge" and problem.field == "provider"
    assert "unknown provider 'my_module:Provider'" in problem.message
    assert str(graph) in str(problem.file)


def two_judges(base_url: str) -> dict[str, Any]:
    """`near` talks to the run's provider, `far` through the openai provider to base_url."""
    spec = judge_graph()
    near = spec["nodes"].pop("judge")
    spec["nodes"] = {
        "near": near,
        "far": {**near, "provider": "openai", "base_url": base_url},
    }
    spec["outputs"] = {"near": "near.score", "far": "far.score"}
    return spec


def test_one_run_mixes_providers_across_endpoints(tmp_path: Path) -> None:
    fake = orc.FakeTransport()
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(3)])
    with FakeServer(schema_responder) as server:
        graph = write_graph(tmp_path / "g", two_judges(server.base_url), PROMPTS)
        result = orc.run(
            graph, data, transport=fake, allow_servers=[server.base_url], model="fake-model"
        )
        over_http = [b for b in server.requests if not is_canary(b)]
    assert result.manifest.counts.examples_ok == 3
    assert len(fake.node_requests) == 3 and len(over_http) == 3
    assert {json.loads(json.dumps(b))["model"] for b in over_http} == {"fake-model"}


def test_a_graph_naming_a_provider_is_still_refused_a_server_you_did_not_allow(
    tmp_path: Path,
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": "t"}])
    with FakeServer(schema_responder) as server:
        graph = write_graph(tmp_path / "g", two_judges(server.base_url), PROMPTS)
        with pytest.raises(ConfigurationError, match="allow-server"):
            orc.run(graph, data, transport=orc.FakeTransport())
        assert server.requests == []


def test_workers_reach_a_nodes_server_through_the_provider_it_names(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)])
    with FakeServer(schema_responder) as server:
        graph = write_graph(tmp_path / "g", two_judges(server.base_url), PROMPTS)
        result = orc.run(
            graph,
            data,
            transport=orc.FakeTransport(),
            allow_servers=[server.base_url],
            model="fake-model",
            workers=2,
        )
        over_http = [b for b in server.requests if not is_canary(b)]
    assert result.manifest.counts.examples_ok == 4
    assert len(over_http) == 4  # `far` in each worker went over HTTP, not to the fake


def test_the_runs_provider_by_name_travels_to_workers(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), PROMPTS)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(4)])
    with FakeServer(schema_responder) as server:
        result = orc.run(graph, data, base_url=server.base_url, provider="openai", workers=2)
        over_http = [b for b in server.requests if not is_canary(b)]
    assert result.manifest.counts.examples_ok == 4 and len(over_http) == 4
