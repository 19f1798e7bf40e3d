"""A faulty server: every fault ends in `ok` or a `failed` line naming node and fault,
retries stay bounded, and every request the server saw is an attempt in the trace."""

from __future__ import annotations

import json
import random
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import (
    is_canary,
    judge_graph,
    requests_per_call,
    results,
    run_graph,
    trace_records,
    write_graph,
    write_rows,
)

from orchestrator.calls.structured import DEFAULT_RETRIES

pytestmark = pytest.mark.reliability

TIMEOUT = 1.0  # seconds per request in these runs, so a "timeout" fault costs little
TRANSPORT_TRIES = 5  # LLMClient's default: 4 transport retries after the first try
# One node call: up to DEFAULT_RETRIES re-asks after the first reply, each reply after up
# to TRANSPORT_TRIES tries.
MAX_REQUESTS_PER_CALL = (DEFAULT_RETRIES + 1) * TRANSPORT_TRIES

GRAPH = judge_graph()

GOOD = json.dumps({"score": 7})
EMPTY_CHOICES = json.dumps(
    {"id": "x", "object": "chat.completion", "created": 0, "model": "fake-model", "choices": []}
).encode()

# Each fault: how the server plays it, the words a failed example's error must carry, and
# how the reliability table describes it.
FAULTS: dict[str, tuple[Reply, str, str]] = {
    "malformed JSON": (
        Reply(content='{"score": seven'),
        "invalid JSON output",
        "200 with content that is not valid JSON",
    ),
    "HTTP 500": (Reply(status=500, content="engine crashed"), "HTTP 500", "HTTP 500"),
    "timeout": (
        Reply(content=GOOD, delay=TIMEOUT * 3),
        "timed out",
        f"reply after {TIMEOUT * 3:.0f} s, run timeout {TIMEOUT:.0f} s",
    ),
    "connection reset": (Reply(reset=True), "connection failed", "TCP reset, no reply"),
    "truncated body": (
        Reply(content=GOOD, cut_at=25),
        "connection failed",
        "200 sending 25 bytes of the body it announced, then hanging up",
    ),
    "empty choices": (Reply(raw_body=EMPTY_CHOICES), "the reply has 0", "200 with `choices: []`"),
    "body not JSON": (
        Reply(raw_body=b"<html><body>upstream says hello</body></html>"),
        "the reply is not JSON",
        "200 whose body is an HTML page",
    ),
    "choices not a list": (
        Reply(raw_body=json.dumps({"choices": {"0": "x"}}).encode()),
        "no list of choices",
        "200 with `choices` an object",
    ),
}


def marked(text: str) -> str:
    """The example text inside a rendered prompt."""
    return text.split("<<", 1)[1].split(">>", 1)[0]


def trace_attempts(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every attempt of each example's judge call, by example id."""
    return {rec["example_id"]: rec["attempts"] for rec in trace_records(out / "traces.sqlite")}


def sent_to_server(attempts: list[dict[str, Any]]) -> int:
    """Attempts that were requests (a cache hit sends nothing)."""
    return sum(a["kind"] != "cache" for a in attempts)


def check_trace_matches_server(out: Path, server: FakeServer) -> None:
    """Each request the server recorded is one attempt in the trace, call by call."""
    per_call = {marked(k): v for k, v in requests_per_call(server.requests).items()}
    attempts = trace_attempts(out)
    by_text = {f"t-{eid}": sent_to_server(a) for eid, a in attempts.items()}
    assert by_text == {text: per_call.get(text, 0) for text in by_text}


def test_each_fault_fails_only_its_example_with_a_reason_and_bounded_retries(
    tmp_path: Path, figure
):
    """One run where every example meets one fault on every request, next to healthy ones."""
    graph = write_graph(tmp_path / "g", GRAPH, {"judge.jinja": "Rate <<{{ text }}>>"})
    names = list(FAULTS)
    rows = [{"id": f"f{i}", "text": f"t-f{i}"} for i in range(len(names))]
    rows += [{"id": f"h{i}", "text": f"t-h{i}"} for i in range(4)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    fault_of = {f"t-f{i}": FAULTS[name][0] for i, name in enumerate(names)}

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return fault_of.get(marked(first), Reply(content=GOOD))

    out = tmp_path / "run"
    with FakeServer(respond) as server:
        outcome = run_graph(graph, data, out, server.base_url, timeout=TIMEOUT, concurrency=8)
        per_call = {marked(k): v for k, v in requests_per_call(server.requests).items()}
        check_trace_matches_server(out, server)

    got = results(out)
    assert len(got) == len(rows)
    assert outcome.manifest["status"] == "complete"
    for i in range(4):
        assert got[f"h{i}"] == {"id": f"h{i}", "status": "ok", "score": 7}
    attempts = trace_attempts(out)
    for i, name in enumerate(names):
        line = got[f"f{i}"]
        words = FAULTS[name][1]
        assert line["status"] == "failed", name
        assert line["error"].startswith("node 'judge': "), line["error"]
        assert words in line["error"], (name, line["error"])
        sent = per_call[f"t-f{i}"]
        # Transport faults spend the transport budget; a bad reply spends the re-ask budget.
        expected = DEFAULT_RETRIES + 1 if name == "malformed JSON" else TRANSPORT_TRIES
        assert sent == expected, (name, sent)
        assert all(words in (a["error"] or "") for a in attempts[f"f{i}"]), name
        figure(
            name,
            f"every request of one example: {FAULTS[name][2]}",
            runs=1,
            lost=len(rows) - len(got),
            max_requests=sent,
            note=f"example failed with: {textwrap.shorten(line['error'], 110)}",
        )


def mixed_faults(seed: int) -> tuple[Any, dict[str, int]]:
    """A server that fails requests at the issue's rates: 20% malformed JSON, 10% HTTP 500,
    5% timeouts, 5% resets, 3% cut-off bodies, 3% empty choices; the rest answer well."""
    rng = random.Random(seed)
    lock = threading.Lock()
    table = [
        (0.20, "malformed JSON"),
        (0.10, "HTTP 500"),
        (0.05, "timeout"),
        (0.05, "connection reset"),
        (0.03, "truncated body"),
        (0.03, "empty choices"),
    ]
    played: dict[str, int] = {name: 0 for _, name in table} | {"good": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        with lock:
            roll = rng.random()
        for rate, name in table:
            if roll < rate:
                with lock:
                    played[name] += 1
                return FAULTS[name][0]
            roll -= rate
        with lock:
            played["good"] += 1
        return Reply(content=GOOD)

    return respond, played


def test_mixed_fault_rates_finish_with_bounded_requests(tmp_path: Path, figure):
    graph = write_graph(tmp_path / "g", GRAPH, {"judge.jinja": "Rate <<{{ text }}>>"})
    rows = [{"id": f"e{i}", "text": f"t-e{i}"} for i in range(80)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    respond, played = mixed_faults(seed=9)
    out = tmp_path / "run"
    with FakeServer(respond) as server:
        outcome = run_graph(graph, data, out, server.base_url, timeout=TIMEOUT, concurrency=16)
        per_call = requests_per_call(server.requests)
        check_trace_matches_server(out, server)

    got = results(out)
    assert set(got) == {r["id"] for r in rows}
    assert outcome.manifest["status"] == "complete"
    statuses = [line["status"] for line in got.values()]
    assert set(statuses) <= {"ok", "failed"}
    for line in got.values():
        if line["status"] == "failed":
            assert line["error"].startswith("node 'judge': "), line["error"]
        else:
            assert line["score"] == 7
    # Every fault kind was played, and most examples still came through.
    assert all(played.values()), played
    assert statuses.count("ok") >= 0.8 * len(rows)
    worst = max(per_call.values())
    assert worst <= MAX_REQUESTS_PER_CALL
    total = sum(per_call.values())
    figure(
        "mixed faults at the issue's rates",
        "seeded per request: 20% malformed, 10% HTTP 500, 5% timeout, 5% reset, "
        "3% cut body, 3% empty choices",
        runs=1,
        lost=len(rows) - len(got),
        max_requests=worst,
        note=(
            f"{statuses.count('ok')}/{len(rows)} ok; {total} requests for {len(rows)} calls "
            f"({total / len(rows):.2f} per call)"
        ),
    )
