"""Server faults that are not refused connections: a proxy answering 502/503 on every route,
rate limits with Retry-After, and a reply that trickles in (issue: runs you can trust).

Each played on a real socket by the fake server; each failed before the fix (examples
failed with `HTTP 502`, rate-limited examples failed after four short backoffs, and a
trickled reply held a request far past `--timeout`).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import (
    is_canary,
    judge_graph,
    results,
    run_graph,
    trace_records,
    write_graph,
    write_rows,
)

pytestmark = pytest.mark.reliability


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})


def rows(tmp_path: Path, count: int) -> Path:
    return write_rows(
        tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(count)]
    )


def manifest(out: Path) -> dict:
    import json

    return json.loads((out / "manifest.json").read_text())


def test_proxy_answering_502_on_every_route_is_waited_out(graph: Path, tmp_path: Path, figure):
    """Case 4: what nginx in front of a restarting vLLM does for 12 s."""
    data = rows(tmp_path, 30)
    lock = threading.Lock()
    seen = {"chat": 0}

    with FakeServer() as server:

        def respond(body: dict) -> Reply:
            with lock:
                if not is_canary(body):
                    seen["chat"] += 1
                    if seen["chat"] == 5:
                        server.fail_every_route(502, 12.0)
                        return Reply(status=502)
            return schema_responder(body)

        server.responder = respond
        started = time.monotonic()
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url, concurrency=4)
        took = time.monotonic() - started
    lines = results(tmp_path / "run")
    failed = [line for line in lines.values() if line["status"] != "ok"]
    assert failed == [], failed[:2]
    outages = manifest(tmp_path / "run")["outages"]
    assert outages and outages[0]["recovered"] is True and outages[0]["seconds"] >= 5
    assert outcome.manifest["status"] == "complete"
    figure(
        "proxy answers 502 on every route",
        "every route (models too) 502 for 12 s after the 5th request; 30 rows, 4 in flight",
        runs=1,
        lost=0,
        recover_s=took,
        note=f"0 failed; outage of {outages[0]['seconds']:.1f} s recorded in the manifest",
    )


def test_503_on_chat_only_is_an_ordinary_retry(graph: Path, tmp_path: Path):
    """The model list answers, so the server is up: a 503 on one call is retried as usual,
    with no outage recorded."""
    data = rows(tmp_path, 3)
    calls = {"n": 0}

    def respond(body: dict) -> Reply:
        if not is_canary(body):
            calls["n"] += 1
            if calls["n"] == 1:
                return Reply(status=503)
        return schema_responder(body)

    with FakeServer(respond) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, concurrency=1)
    assert all(line["status"] == "ok" for line in results(tmp_path / "run").values())
    assert manifest(tmp_path / "run")["outages"] == []


def test_rate_limit_with_retry_after_is_honoured(graph: Path, tmp_path: Path, figure):
    """Case 5: a 10 s rate-limit window answering 429 with Retry-After: 4. The old backoff
    (0.5, 1, 2, 4 s) gave up inside the window."""
    data = rows(tmp_path, 20)
    window_ends = [0.0]

    def respond(body: dict) -> Reply:
        if not is_canary(body) and time.monotonic() < window_ends[0]:
            return Reply(status=429, headers={"Retry-After": "4"})
        return schema_responder(body)

    with FakeServer(respond) as server:
        window_ends[0] = time.monotonic() + 10.0
        started = time.monotonic()
        run_graph(graph, data, tmp_path / "run", server.base_url, concurrency=8)
        took = time.monotonic() - started
    lines = results(tmp_path / "run")
    assert [line for line in lines.values() if line["status"] != "ok"] == []
    waits = [
        a["error"]
        for rec in trace_records(tmp_path / "run" / "traces.sqlite")
        for a in rec["attempts"]
        if a["kind"] == "transport" and "Retry-After" in (a["error"] or "")
    ]
    assert waits and all("waited 4" in w for w in waits)
    figure(
        "rate limit with Retry-After",
        "429 with Retry-After: 4 on every chat request for 10 s; 20 rows, 8 in flight",
        runs=1,
        lost=0,
        recover_s=took,
        note=f"0 failed; {len(waits)} tries waited as the server asked",
    )


def test_retry_after_longer_than_server_wait_is_not_waited(graph: Path, tmp_path: Path):
    data = rows(tmp_path, 1)

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        return Reply(status=429, headers={"Retry-After": "3600"})

    with FakeServer(respond) as server:
        started = time.monotonic()
        run_graph(graph, data, tmp_path / "run", server.base_url, server_wait=2.0)
        took = time.monotonic() - started
    line = results(tmp_path / "run")["e0"]
    assert line["status"] == "failed" and "HTTP 429" in line["error"]
    assert "Retry-After 3600 s is longer than --server-wait" in line["error"]
    assert took < 60


def test_retry_after_zero_does_not_hammer_the_server(graph: Path, tmp_path: Path):
    """`Retry-After: 0` (or a date already past) on every try: each wait is at least a
    second and all of them together stay within --server-wait. Before, the call asked
    again at once, without end (here the server gives in after 30 requests)."""
    data = rows(tmp_path, 1)
    asked = {"n": 0}

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        asked["n"] += 1
        if asked["n"] > 30:
            return schema_responder(body)
        return Reply(status=429, headers={"Retry-After": "0"})

    with FakeServer(respond) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url, server_wait=3.0)
    line = results(tmp_path / "run")["e0"]
    assert asked["n"] <= 5, f"{asked['n']} requests for one try"
    assert line["status"] == "failed" and "HTTP 429" in line["error"]
    assert "still asked to wait" in line["error"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10", 10.0), ("0", 0.0), ("  7 ", 7.0), ("soon", None), ("-3", None), ("", None)],
)
def test_retry_after_in_seconds(value: str, expected: float | None):
    from orchestrator.providers.openai_compat import retry_after_seconds

    assert retry_after_seconds(value) == expected


def test_retry_after_as_http_date():
    from orchestrator.providers.openai_compat import retry_after_seconds

    when = datetime.now(UTC) + timedelta(seconds=30)
    seconds = retry_after_seconds(format_datetime(when, usegmt=True))
    assert seconds is not None and 27 <= seconds <= 31
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(past) == 0.0


def test_timeout_is_a_deadline_for_the_whole_reply(graph: Path, tmp_path: Path, figure):
    """Case 6: a server that drips its reply one byte every 0.5 s. With --timeout 2 each try
    must end after about 2 s; before, the timeout was per read and one try took minutes."""
    data = rows(tmp_path, 1)

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        return Reply(content='{"score": 5}', trickle=0.5)

    with FakeServer(respond) as server:
        started = time.monotonic()
        run_graph(graph, data, tmp_path / "run", server.base_url, timeout=2.0)
        took = time.monotonic() - started
    line = results(tmp_path / "run")["e0"]
    assert line["status"] == "failed"
    assert "no complete reply within 2 s" in line["error"]
    # Five tries of ~2 s plus backoff; one trickled body alone takes over 100 s.
    assert took < 60
    figure(
        "reply trickles one byte every 0.5 s",
        "--timeout 2; the body of ~250 bytes would take over 2 minutes",
        runs=1,
        lost=0,
        recover_s=took,
        note="each try stopped at the 2 s deadline; the example failed naming it",
    )


def test_a_server_that_stalls_at_start_is_refused_within_timeout_and_server_wait(
    graph: Path, tmp_path: Path
):
    """A server that accepts connections and never answers, on any route, is refused at
    start within --timeout + --server-wait and a few seconds: before, the model list alone
    took three tries of a fixed 15 s (47 s here), whatever the flags said."""
    from orchestrator.errors import ServerError

    data = rows(tmp_path, 1)
    with FakeServer() as server:
        server.hanging.set()
        started = time.monotonic()
        # --timeout 3 is below the model list's floor of 5 s, so the list waits the floor.
        with pytest.raises(ServerError, match=rf"{server.base_url}.*within 5 s \(--timeout"):
            run_graph(graph, data, tmp_path / "run", server.base_url, timeout=3, server_wait=8)
        took = time.monotonic() - started
    assert took < 3 + 8 + 6, f"refused after {took:.1f} s"
