"""Batched writes: what a run keeps when it is killed, and what the trace and cache store."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import (
    is_canary,
    judge_graph,
    results,
    run_graph,
    start_cli_run,
    trace_records,
    user_text,
    wait_for_lines,
    write_graph,
    write_rows,
)

from orchestrator.store.cache import ResponseCache, cache_key
from orchestrator.store.trace import NodeRecord, TraceStore

GRAPH = judge_graph(max_tokens=100)


def slow_after(fast: int, delay: float):
    """Answer the first `fast` judge calls at once and the rest after `delay` seconds."""
    seen = {"n": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        seen["n"] += 1
        wait = 0.0 if seen["n"] <= fast else delay
        return Reply(content=json.dumps({"score": 5}), delay=wait)

    return respond


def trace_examples(folder: Path) -> set[str]:
    with sqlite3.connect(folder / "traces.sqlite") as db:
        return {row[0] for row in db.execute("SELECT example_id FROM node_runs")}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_run_keeps_every_written_line_with_its_trace(tmp_path: Path, sig: signal.Signals):
    graph = write_graph(tmp_path / "g", GRAPH, {"judge.jinja": "Rate <<{{ text }}>>"})
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(12)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    with FakeServer(slow_after(fast=6, delay=30)) as server:
        proc = start_cli_run(graph, data, out, server.base_url, "--concurrency", "4")
        wait_for_lines(out / "results.jsonl", 6, proc)
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
        written = results(out)
        # The order of writes (trace before result line) holds whatever the signal.
        assert set(written) <= trace_examples(out)
        assert len(written) == 6
        if sig == signal.SIGTERM:
            assert code == 130
            assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
        server.responder = slow_after(fast=100, delay=0)
        before = len([b for b in server.requests if not is_canary(b)])
        run_graph(graph, data, out, server.base_url)
        again = [user_text(b) for b in server.requests[before:] if not is_canary(b)]
    assert len(results(out)) == 12
    # Only what was not written is asked again.
    asked = {text.split("<<")[1].split(">>")[0] for text in again}
    assert asked == {f"t{i}" for i in range(12)} - {f"t{e[1:]}" for e in written}


def test_trace_keeps_request_params_and_each_schema_once(tmp_path: Path):
    graph = write_graph(tmp_path / "g", GRAPH, {"judge.jinja": "Rate <<{{ text }}>>"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": f"t{i}"} for i in range(5)])
    with FakeServer(slow_after(fast=100, delay=0)) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
        sent = next(b for b in server.requests if not is_canary(b))
    records = trace_records(tmp_path / "run" / "traces.sqlite")
    assert len(records) == 5
    for rec in records:
        assert rec["request"]["params"]["max_tokens"] == 100
        assert rec["request"]["params"]["temperature"] == 0.0
        assert rec["request"]["structured"] == "server"
        assert rec["schema"] == sent["response_format"]["json_schema"]["schema"]
    with sqlite3.connect(tmp_path / "run" / "traces.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM schemas").fetchone()[0] == 1


def test_trace_from_before_the_request_columns_still_opens(tmp_path: Path):
    path = tmp_path / "traces.sqlite"
    TraceStore(path, "old", "h", "key").close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE node_runs DROP COLUMN request")
        db.execute("ALTER TABLE node_runs DROP COLUMN schema_hash")
        db.execute("ALTER TABLE node_runs DROP COLUMN run_key")
    store = TraceStore(path, "new", "h", "key")
    store.record(NodeRecord(example_id="e1", node="judge", value={"score": 3}))
    store.close()
    reopened = TraceStore(path, "again", "h", "key")
    assert reopened.finished_value("e1", "judge") == (True, {"score": 3})
    reopened.close()


def test_cache_serves_queued_replies_and_shares_them_once_flushed(tmp_path: Path):
    first = ResponseCache(tmp_path / "c.sqlite")
    second = ResponseCache(tmp_path / "c.sqlite")
    first.put("k", {"choice": {"content": "x"}})
    assert first.get("k") == {"choice": {"content": "x"}}
    assert second.get("k") is None  # not yet written
    first.flush()
    assert second.get("k") == {"choice": {"content": "x"}}
    first.close()
    second.close()


def test_cache_key_tells_apart_schemas_that_differ_only_in_property_order():
    reason_first = {"type": "object", "properties": {"reason": {}, "score": {}}}
    score_first = {"type": "object", "properties": {"score": {}, "reason": {}}}
    messages = [{"role": "user", "content": "rate"}]
    params = {"temperature": 0.0}
    first = cache_key("m", messages, params, reason_first, 0, server="s")
    assert first != cache_key("m", messages, params, score_first, 0, server="s")
    assert first == cache_key("m", messages, dict(params), dict(reason_first), 0, server="s")
