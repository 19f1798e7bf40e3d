"""The call layers without a socket: runs through the in-process FakeTransport, a swapped
RetryPolicy, the cache decorator, and the structured caller's re-asks."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_graph

import orchestrator as orc
from orchestrator.calls.client import LLMClient
from orchestrator.errors import FakeTransientError, LLMCallError
from orchestrator.graph.schemas import build_model
from orchestrator.graph.spec import FieldSpec, Sampling
from orchestrator.providers.fake import FAKE_BASE_URL, FakeRequest
from orchestrator.store.cache import ResponseCache
from orchestrator.store.records import Counts

PROMPTS = {"judge.jinja": "Rate this text.\n<<{{ text }}>>"}
ROWS = [{"id": f"e{i}", "text": f"t{i}"} for i in range(5)]
# Retries at once: the tests are about which tries happen, not how long they wait.
QUICK = {"backoff_first": 0.0, "jitter": 0.0}


@pytest.fixture
def graph() -> orc.Graph:
    return orc.Graph.from_dict(judge_graph(retries=2), PROMPTS)


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any attempt to resolve a name or connect a socket fails the test (and is listed)."""
    tried: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        tried.append(repr(args[:2]))
        raise AssertionError(f"a socket was used: {args[:2]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried


def score_by_row(request: FakeRequest) -> str:
    """The row's number (+1) as its score, so each result can be told apart."""
    text = request.messages[0]["content"]
    return json.dumps({"score": int(text.split("<<t")[1][0]) + 1})


def test_a_run_through_the_fake_transport_uses_no_socket(graph: orc.Graph, no_sockets: list):
    fake = orc.FakeTransport(score_by_row)
    result = orc.run(graph, ROWS, transport=fake, out=None)
    assert no_sockets == []
    assert [(line.id, line.status) for line in result.results] == [(r["id"], "ok") for r in ROWS]
    assert [line.outputs["score"] for line in result.results] == [1, 2, 3, 4, 5]
    # The canary ran through the fake too, and passed: structured output is "server".
    assert [r.is_canary for r in fake.requests] == [True] + [False] * len(ROWS)
    assert result.manifest.counts.requests == len(ROWS) + 1
    assert result.manifest.parameters["transport"] == "FakeTransport"
    server = next(iter(result.manifest.servers.values()))
    assert server["base_url"] == FAKE_BASE_URL and server["structured_output"] == "server"
    schema = fake.node_requests[0].schema
    assert schema is not None and schema["properties"]["score"]["maximum"] == 10


def test_the_default_answer_is_schema_valid_json(graph: orc.Graph):
    fake = orc.FakeTransport()
    result = orc.run(graph, ROWS[:2], transport=fake, structured="server")
    assert [line.status for line in result.results] == ["ok", "ok"]
    assert all(1 <= line.outputs["score"] <= 10 for line in result.results)
    assert len(fake.requests) == 2  # structured="server": no canary


def test_zero_retries_fail_a_transient_fault_and_more_retries_ride_it_out(graph: orc.Graph):
    strict = orc.FakeTransport(faults=["transient"])
    failed = orc.run(
        graph, ROWS[:1], transport=strict, structured="server", retry=orc.RetryPolicy(retries=0)
    )
    line = failed.results[0]
    assert line.status == "failed"
    assert "request failed after 1 try" in (line.error or "")
    assert "FakeTransientError" in (line.error or "")
    assert len(strict.requests) == 1 and failed.manifest.counts.retries == 0

    patient = orc.FakeTransport(faults=["transient", "transient"])
    passed = orc.run(
        graph,
        ROWS[:1],
        transport=patient,
        structured="server",
        retry=orc.RetryPolicy(retries=2, **QUICK),
    )
    assert passed.results[0].status == "ok"
    assert len(patient.requests) == 3 and passed.manifest.counts.retries == 2


def test_retry_after_is_waited_without_spending_a_retry(graph: orc.Graph):
    asked = {"n": 0}

    def busy_once(request: FakeRequest) -> str:
        asked["n"] += 1
        if asked["n"] == 1:
            raise FakeTransientError("busy", retry_after=0.0)  # waited as 1 s at least
        return json.dumps({"score": 4})

    fake = orc.FakeTransport(busy_once)
    result = orc.run(
        graph, ROWS[:1], transport=fake, structured="server", retry=orc.RetryPolicy(retries=0)
    )
    assert result.results[0].status == "ok" and result.results[0].outputs["score"] == 4
    assert len(fake.requests) == 2 and result.manifest.counts.retries == 0


async def test_cache_decorator_serves_the_second_identical_call(tmp_path: Path):
    fake = orc.FakeTransport()
    stats = Counts()
    cache = ResponseCache(tmp_path / "cache.sqlite")
    client = LLMClient(cache=cache, stats=stats, transport=fake)
    model = build_model("Judge", {"score": FieldSpec(type="integer", min=1, max=10)})
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    messages = [{"role": "user", "content": "rate this"}]
    try:
        first = await client.call(ep, messages, model, Sampling(temperature=0.0))
        second = await client.call(ep, messages, model, Sampling(temperature=0.0))
        other = await client.call(ep, messages, model, Sampling(temperature=0.5))
    finally:
        await client.close()
        cache.close()
    assert len(fake.requests) == 2  # the first call and the one with other sampling
    assert first.cached is False and [a.kind for a in first.attempts] == ["ok"]
    assert second.cached is True and [a.kind for a in second.attempts] == ["cache"]
    assert second.values == first.values and second.raw == first.raw
    assert other.cached is False
    assert stats.cache_hits == 1 and stats.requests == 2


def test_cache_across_runs_is_counted_at_the_transport(graph: orc.Graph, tmp_path: Path):
    fake = orc.FakeTransport(score_by_row)
    cache = tmp_path / "cache.sqlite"
    first = orc.run(graph, ROWS, transport=fake, cache=cache, structured="server")
    again = orc.run(graph, ROWS, transport=fake, cache=cache, structured="server")
    assert len(fake.requests) == len(ROWS)  # the second run asked nothing
    assert again.manifest.counts.cache_hits == len(ROWS)
    assert [line.outputs for line in again.results] == [line.outputs for line in first.results]


def test_malformed_reply_is_reasked_with_the_error_in_the_next_messages(graph: orc.Graph):
    fake = orc.FakeTransport(score_by_row, faults=["malformed"])
    result = orc.run(graph, ROWS[:1], transport=fake, structured="server")
    assert result.results[0].status == "ok" and result.results[0].outputs["score"] == 1
    first, reask = fake.requests
    assert len(reask.messages) == len(first.messages) + 2
    assert reask.messages[:-2] == first.messages
    assert reask.messages[-2] == {"role": "assistant", "content": "{not json"}
    feedback = reask.messages[-1]
    assert feedback["role"] == "user"
    assert feedback["content"].startswith("That reply was rejected: invalid JSON output")
    assert "Reply again with only the corrected JSON object." in feedback["content"]
    assert result.manifest.counts.retries == 1


def test_out_of_range_value_is_fed_back_and_truncation_grows_max_tokens(graph: orc.Graph):
    replies = iter(['{"score": 11}', '{"score": 9}'])
    fake = orc.FakeTransport(lambda request: next(replies))
    result = orc.run(graph, ROWS[:1], transport=fake, structured="server")
    assert result.results[0].outputs["score"] == 9
    assert "less than or equal to 10" in fake.requests[1].messages[-1]["content"]

    cut = orc.FakeTransport(score_by_row, faults=["truncated", "truncated"])
    grown = orc.run(graph, ROWS[:1], transport=cut, structured="server")
    assert grown.results[0].status == "ok"
    # judge_graph's max_tokens 60, doubled per cut-off reply; the conversation unchanged.
    assert [r.params["max_tokens"] for r in cut.requests] == [60, 120, 240]
    assert all(r.messages == cut.requests[0].messages for r in cut.requests)


async def test_exhausted_reasks_raise_with_every_attempt():
    fake = orc.FakeTransport(lambda request: "no json here")
    client = LLMClient(cache=None, stats=Counts(), transport=fake)
    model = build_model("Judge", {"score": FieldSpec(type="integer", min=1, max=10)})
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    with pytest.raises(LLMCallError, match="no valid reply after 2 attempts") as caught:
        await client.call(ep, [{"role": "user", "content": "x"}], model, Sampling(retries=1))
    await client.close()
    assert [a.kind for a in caught.value.attempts] == ["invalid", "invalid"]
    assert len(fake.requests) == 2


async def test_n_samples_and_tokenize_through_the_fake():
    fake = orc.FakeTransport(
        lambda request: orc.FakeAnswer([json.dumps({"score": s}) for s in (3, 1, 2)])
    )
    client = LLMClient(cache=None, stats=Counts(), transport=fake)
    model = build_model("Judge", {"score": FieldSpec(type="integer", min=1, max=10)})
    ep = client.endpoint(FAKE_BASE_URL, "fake-model")
    result = await client.call(ep, [{"role": "user", "content": "x"}], model, Sampling(n=3))
    tokens = await client.tokenize(ep, "two words")
    await client.close()
    assert [v["score"] for v in result.values] == [3, 1, 2]
    assert fake.requests[0].params["n"] == 3
    assert tokens["count"] == 2 and fake.posts[0][0] == "in-process://fake/tokenize"


def test_concurrent_calls_share_one_fake_and_count_every_request(graph: orc.Graph):
    rows = [{"id": f"r{i}", "text": f"t{i % 10}"} for i in range(40)]
    fake = orc.FakeTransport(score_by_row, latency=0.001)
    result = orc.run(graph, rows, transport=fake, structured="server", concurrency=8)
    assert result.manifest.counts.examples_ok == 40
    assert len(fake.requests) == 40 == result.manifest.counts.requests
