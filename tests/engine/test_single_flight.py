"""No duplicate work (issue 17): identical requests in flight at once are sent once, and
the cache keeps the first reply stored for a question, so a re-run reproduces it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, write_graph

import orchestrator as orc
from orchestrator.store.cache import ResponseCache


def test_every_row_twice_sends_each_distinct_request_once(tmp_path: Path) -> None:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    texts = [f"text {i}" for i in range(10)]
    rows = [{"id": f"{copy}-{i}", "text": t} for copy in "ab" for i, t in enumerate(texts)]

    def slow(body: dict[str, Any]) -> Reply:
        reply = schema_responder(body)
        reply.delay = 0.0 if is_canary(body) else 0.2  # both copies are in flight at once
        return reply

    with FakeServer(slow) as server:
        result = orc.run(
            graph, rows, base_url=server.base_url, cache=tmp_path / "c.sqlite", concurrency=64
        )
        asked = [b for b in server.requests if not is_canary(b)]
    assert len(result.ok) == 20
    assert len(asked) == 10  # each distinct prompt once
    assert result.manifest.counts.requests == 11  # and the structured-output canary
    # The copies took the replies in flight: shares, not hits of a reply cached earlier.
    assert result.manifest.counts.shared == 10
    assert result.manifest.counts.cache_hits == 0
    by_id = {line.id: line.outputs for line in result.results}
    assert all(by_id[f"a-{i}"] == by_id[f"b-{i}"] for i in range(10))


def test_without_a_cache_nothing_is_shared(tmp_path: Path) -> None:
    """--no-cache asks every question: the user said not to reuse replies."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": "same"} for i in range(4)]
    with FakeServer() as server:
        orc.run(graph, rows, base_url=server.base_url, cache=False)
        asked = [b for b in server.requests if not is_canary(b)]
    assert len(asked) == 4


def test_the_first_stored_reply_stays(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    first, second = ResponseCache(path), ResponseCache(path)
    first.put("k", {"choice": {"content": "first"}})
    second.put("k", {"choice": {"content": "second"}})
    first.flush()
    second.flush()  # a concurrent run that asked the same question later
    assert ResponseCache(path).get("k") == {"choice": {"content": "first"}}
    # Within one process too, and --refresh replaces on purpose.
    one = ResponseCache(tmp_path / "d.sqlite")
    one.put("k", {"choice": {"content": "a"}})
    one.put("k", {"choice": {"content": "b"}})
    assert one.get("k") == {"choice": {"content": "a"}}
    refreshing = ResponseCache(path, replace=True)
    refreshing.put("k", {"choice": {"content": "fresh"}})
    refreshing.flush()
    assert ResponseCache(path).get("k") == {"choice": {"content": "fresh"}}


def test_refresh_still_shares_within_the_run(tmp_path: Path) -> None:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": "same"} for i in range(4)]

    def slow(body: dict[str, Any]) -> Reply:
        reply = schema_responder(body)
        reply.delay = 0.0 if is_canary(body) else 0.2
        return reply

    with FakeServer(slow) as server:
        cache = tmp_path / "c.sqlite"
        orc.run(graph, rows[:1], base_url=server.base_url, cache=cache)
        before = len([b for b in server.requests if not is_canary(b)])
        orc.run(graph, rows, base_url=server.base_url, cache=cache, refresh=True)
        after = len([b for b in server.requests if not is_canary(b)])
    assert before == 1
    assert after - before == 1  # the old reply is not read; the four share one new request


def test_a_failed_leader_lets_the_followers_ask(tmp_path: Path) -> None:
    """Sharing a failure would fail examples that might have succeeded: they ask again."""
    graph = write_graph(tmp_path, judge_graph(retries=0), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": "same"} for i in range(3)]
    calls = {"n": 0}

    def first_fails(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(content="not json", delay=0.2)
        return schema_responder(body)

    with FakeServer(first_fails) as server:
        result = orc.run(graph, rows, base_url=server.base_url, cache=tmp_path / "c.sqlite")
    assert len(result.failed) == 1 and len(result.ok) == 2
    assert calls["n"] == 2  # the failure, then one new request shared by the other two


def test_a_rerun_counts_cache_hits_and_no_shares(tmp_path: Path) -> None:
    """The second run finds each reply the first stored: those are cache hits."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"{copy}-{i}", "text": f"text {i}"} for copy in "ab" for i in range(3)]
    cache = tmp_path / "c.sqlite"

    def slow(body: dict[str, Any]) -> Reply:
        reply = schema_responder(body)
        reply.delay = 0.0 if is_canary(body) else 0.2
        return reply

    with FakeServer(slow) as server:
        first = orc.run(graph, rows, base_url=server.base_url, cache=cache)
        again = orc.run(graph, rows, base_url=server.base_url, cache=cache)
    assert (first.manifest.counts.shared, first.manifest.counts.cache_hits) == (3, 0)
    assert (again.manifest.counts.shared, again.manifest.counts.cache_hits) == (0, 6)
