"""What "LLM requests" counts (issue 35, item 14): a request is counted once it is on its
way to the server, so a run stopped while its requests still wait for a connection counts
only those the server got."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from fakeserver import FakeServer, latency_responder
from helpers import judge_graph, write_graph

import orchestrator as orc
from orchestrator.store.reader import RunReader

ROWS = [{"id": f"r{i}", "text": f"text {i}"} for i in range(200)]


def _chat_posts(server: FakeServer) -> int:
    return sum(path.startswith("/v1/chat/completions") for path in server.paths)


def _settled(server: FakeServer) -> int:
    """The chat requests the server received, once no more arrive."""
    seen, deadline = -1, time.monotonic() + 5
    while seen != _chat_posts(server) and time.monotonic() < deadline:
        seen = _chat_posts(server)
        time.sleep(0.2)
    return seen


def test_a_run_stopped_early_counts_the_requests_the_server_got(tmp_path: Path) -> None:
    """64 requests take their slots at once; the run is stopped while most of them still wait
    for a connection. The count was every slot taken (65 reported, 2 received); now it is
    what the server received.

    The server stops accepting connections as the run's last request before the judge's
    (`/version`) arrives, and its backlog holds one: a pooled connection and the two the
    kernel queues carry a request, the rest wait in their connect whatever the host's speed.
    (Racing the requests to the stop failed on a fast host: all 65 had left.)"""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    out = tmp_path / "run"

    def close_the_door(path: str) -> None:
        if path == "/version":
            server.accepting.clear()

    async def stopped_early(server: FakeServer) -> None:
        run = asyncio.ensure_future(
            orc.arun(graph, ROWS, base_url=server.base_url, out=out, concurrency=64)
        )
        # The judge's requests have started once one arrives on a pooled connection (if
        # none is pooled, the wait ends at its bound); half a second more for the rest to
        # take their slots and connect.
        deadline = time.monotonic() + 10
        while _chat_posts(server) < 2 and time.monotonic() < deadline and not run.done():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run

    # No judge's request is answered before the stop.
    with FakeServer(latency_responder(2.0), backlog=1) as server:
        server.on_request = close_the_door
        asyncio.run(stopped_early(server))
        server.accepting.set()  # the connections the kernel queued are read now
        received = _settled(server)
    manifest = RunReader(out).manifest
    assert manifest.status == "interrupted"
    # Some of the judge's requests reached the server, most never left.
    assert 2 <= received < 60
    assert manifest.counts.requests == received


def test_every_request_of_a_finished_run_is_counted(tmp_path: Path) -> None:
    """The count a run that ends normally reports is still every request sent."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    with FakeServer() as server:
        result = orc.run(graph, ROWS[:30], base_url=server.base_url, concurrency=8)
        assert result.manifest.counts.requests == _chat_posts(server) == 31  # and the canary
    fake = orc.FakeTransport()
    assert orc.run(graph, ROWS[:30], transport=fake).manifest.counts.requests == 31
    assert len(fake.requests) == 31


def test_an_sdk_without_the_transport_we_mark_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marked session reaches into the SDK's aiohttp transport; were it to move, a run
    must still go on (its cancelled tries then counted when they end), not fail."""
    from orchestrator.providers import openai_compat

    def moved(limits: object) -> object:
        raise AttributeError("'AiohttpTransport' object has no attribute 'client'")

    monkeypatch.setattr(openai_compat, "_aiohttp_transport", moved)
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    with FakeServer() as server:
        done = orc.run(graph, ROWS[:3], base_url=server.base_url)
    assert len(done.ok) == 3 and done.manifest.counts.requests == _chat_posts(server)
