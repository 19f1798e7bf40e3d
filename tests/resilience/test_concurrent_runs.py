"""Two runs at once on one response cache and one server (issue 9, part 4).

Both runs are `orchestrator run` processes started together with the same `--cache`, so
their batched cache writes (one transaction every 0.5 s each) contend for SQLite's single
writer lock while both also read. The graph, data and server latency are those of
tests/resilience/test_kill_resume.py (three LLM calls per example, 0.1–0.3 s per reply), which keeps
both processes writing through most of their runs instead of one finishing first.
A third case holds a write transaction on the cache from another process while a run
starts: the run must wait for it (busy_timeout is 30 s) rather than fail. Past that
timeout, in-process cases: a write that gives up must leave the cache and the trace
usable, and must not end the run.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer
from helpers import requests_per_call, run_graph, trace_records

# The workload and the CLI runner are shared with the kill-and-resume tests.
from test_kill_resume import (
    NODES,
    Cli,
    Workload,
    integrity,
    llm_latency,
    lost_rows,
    make_workload,
    node_requests,
    result_ids,
    start_cli,
    wait_until,
)

from orchestrator.errors import StorageError
from orchestrator.store import cache as cache_module
from orchestrator.store.cache import ResponseCache
from orchestrator.store.trace import NodeRecord, TraceStore

pytestmark = pytest.mark.reliability

CONCURRENCY = 8
LOCKED = "database is locked"


def cache_rows(cache: Path) -> list[tuple[str, bytes]]:
    """Every (key, value) of the response cache, read from outside any run."""
    db = sqlite3.connect(cache)
    try:
        return db.execute("SELECT key, value FROM responses").fetchall()
    finally:
        db.close()


def check_cache(cache: Path, distinct_calls: int, extra: int = 0) -> int:
    """The cache is intact and holds one parsable reply per distinct call (plus `extra`
    rows written by the test itself); returns its row count."""
    assert integrity(cache) == "ok"
    rows = cache_rows(cache)
    for key, value in rows:
        reply = json.loads(value)  # each value is a whole JSON document, never torn
        if key != "holder":
            # Only validated replies are cached: the answer is itself a JSON object.
            assert isinstance(json.loads(reply["choice"]["content"]), dict)
    assert len(rows) == distinct_calls + extra
    return len(rows)


def result_lines(out: Path) -> dict[str, dict[str, object]]:
    """A run's result lines by id."""
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def finish(cli: Cli, work: Workload, out: Path) -> int:
    """Wait for a run; it must succeed with every row ok once. Returns rows lost."""
    code = cli.wait()
    said = cli.output()
    assert code == 0, said
    assert LOCKED not in said
    assert integrity(out / "traces.sqlite") == "ok"
    ids = result_ids(out)  # also asserts every line is ok
    return lost_rows(ids, work.ids)


@pytest.mark.parametrize(
    ("rows_a", "rows_b"),
    [(range(0, 30), range(0, 30)), (range(0, 30), range(15, 45))],
    ids=["same-data", "overlapping-data"],
)
def test_two_runs_at_once_share_one_cache(
    tmp_path: Path, rows_a: range, rows_b: range, figure: Callable[..., None]
) -> None:
    """Two processes, one cache file, one server: both finish, the cache stays consistent."""
    cache = tmp_path / "cache.sqlite"
    work_a = make_workload(tmp_path / "a", rows_a)
    work_b = make_workload(tmp_path / "b", rows_b)
    out_a, out_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    with FakeServer(llm_latency) as server:
        run_a = start_cli(work_a, out_a, server.base_url, cache, CONCURRENCY)
        run_b = start_cli(work_b, out_b, server.base_url, cache, CONCURRENCY)
        lost = finish(run_a, work_a, out_a) + finish(run_b, work_b, out_b)
        per_call = requests_per_call(server.requests)
        requests = node_requests(server)
    assert lost == 0
    # Where the two runs overlap, they agree line for line (whoever asked, whoever cached).
    lines_a, lines_b = result_lines(out_a), result_lines(out_b)
    shared = set(lines_a) & set(lines_b)
    assert shared == set(work_a.ids) & set(work_b.ids)
    assert all(lines_a[i] == lines_b[i] for i in shared)
    distinct = len(NODES) * len(set(work_a.ids) | set(work_b.ids))
    assert len(per_call) == distinct  # every call of either run, and no other, was asked
    rows = check_cache(cache, distinct)
    same = rows_a == rows_b
    figure(
        "two runs at once on one cache (" + ("same data" if same else "overlapping data") + ")",
        "two `orchestrator run` processes started together: same --cache and server, "
        + (
            f"same graph and {len(rows_a)} rows into two folders"
            if same
            else f"rows {rows_a.start}–{rows_a.stop - 1} and {rows_b.start}–{rows_b.stop - 1}"
        ),
        runs=2,
        lost=lost,
        max_requests=max(per_call.values()),
        note=(
            f"{requests} requests for {distinct} distinct calls (a call both runs miss at "
            f"the same time is asked by both); cache {rows} rows, integrity ok"
        ),
    )


def test_run_waits_for_another_process_holding_the_cache_write_lock(
    tmp_path: Path, figure: Callable[..., None]
) -> None:
    """A run whose cache is write-locked by another process waits, then finishes.

    The other process here is the test itself: a plain sqlite3 connection that opens a
    write transaction (as `orchestrator cache clear` or a second run's flush would) and
    keeps it until the run has stopped making progress — its first flush is waiting on the
    lock — then commits. The run must neither fail nor lose a reply.
    """
    cache = tmp_path / "cache.sqlite"
    ResponseCache(cache).close()  # the file and table, as any earlier run leaves them
    holder = sqlite3.connect(cache, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(
        "INSERT INTO responses (key, value, created) VALUES ('holder', ?, ?)",
        (json.dumps({"note": "written by the lock holder"}), time.time()),
    )
    work = make_workload(tmp_path, range(24))
    out = tmp_path / "run"
    try:
        with FakeServer(llm_latency) as server:
            run = start_cli(work, out, server.base_url, cache, CONCURRENCY)
            locked_at = time.monotonic()
            wait_until(lambda: node_requests(server) > 0, "the first request", run)
            stalled = stall_detector(lambda: node_requests(server), quiet=1.0)
            wait_until(stalled, "the run to wait on the lock", run)
            sent_while_locked = node_requests(server)
            holder.execute("COMMIT")
            released = time.monotonic()
            # Recovered once the run's own replies reach the cache (its flush got through).
            wait_until(lambda: len(cache_rows(cache)) > 1, "the run's first cache write", run)
            recover_s = time.monotonic() - released
            lost = finish(run, work, out)
            per_call = requests_per_call(server.requests)
    finally:
        holder.close()
    assert lost == 0
    distinct = len(NODES) * len(work.ids)
    assert sent_while_locked < distinct  # the lock really held the run up
    assert len(per_call) == distinct
    check_cache(cache, distinct, extra=1)
    figure(
        "cache write-locked by another process",
        "another connection holds BEGIN IMMEDIATE on the cache until the run stalls on it",
        runs=1,
        lost=lost,
        max_requests=max(per_call.values()),
        recover_s=recover_s,
        note=(
            f"lock held {released - locked_at:.1f} s; {sent_while_locked}/{distinct} requests "
            "sent before the run waited on it; no error (busy_timeout 30 s)"
        ),
    )


def test_a_new_cache_file_opened_while_another_connection_writes_waits(tmp_path: Path) -> None:
    """Opening a cache file that is not yet in WAL mode while another connection writes to
    it waits for that write, as busy_timeout promises, instead of failing at once.

    SQLite answers a journal-mode change that could deadlock with "database is locked"
    without calling the busy handler. Two runs started together on a new cache file hit
    it: one failed with "database is locked" in tests/resilience/test_concurrent_runs.py's same-data
    case, in a full-suite run. Here the other writer is pinned down so it happens every
    time: a plain connection creates the file and holds a write for 0.3 s.
    """
    path = tmp_path / "cache.sqlite"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE other (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other VALUES (1)")
    release = threading.Timer(0.3, writer.execute, ("COMMIT",))
    release.start()
    try:
        cache = ResponseCache(path)
    finally:
        release.join()
        writer.close()
    cache.put("k", {"choice": {"content": "{}"}})
    cache.close()
    assert cache_rows(path) == [("k", b'{"choice":{"content":"{}"}}')]
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


@pytest.mark.parametrize("kind", ["cache", "trace"])
def test_a_write_that_times_out_on_the_lock_loses_nothing(tmp_path: Path, kind: str) -> None:
    """A flush that gives up on a held lock ("database is locked") keeps what was queued
    and leaves the connection usable: once the lock is free, the next flush writes it.

    A run waits up to 30 s for the lock (busy_timeout); the wait is shortened here, on
    the store's own connection, because this test is about what follows the time-out.
    Without a rollback, the failed write left its transaction open, and every later flush
    failed with "cannot start a transaction within a transaction", so the run could never
    write a reply (or trace row) again.
    """
    path = tmp_path / f"{kind}.sqlite"
    store: ResponseCache | TraceStore
    if kind == "cache":
        store = ResponseCache(path)
        store.put("k", {"choice": {"content": "{}"}})
    else:
        store = TraceStore(path, "run", "graph")
        store.record(NodeRecord(example_id="e1", node="judge", value={"score": 3}))
    store._db.execute("PRAGMA busy_timeout=50")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    # The trace says which file it could not write (StorageError, the lock as its cause).
    refused = sqlite3.OperationalError if kind == "cache" else StorageError
    with pytest.raises(refused, match="locked") as caught:
        store.flush()
    if kind == "trace":
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    holder.execute("COMMIT")
    holder.close()
    store.flush()
    if isinstance(store, ResponseCache):
        assert store.get("k") == {"choice": {"content": "{}"}}
        assert len(cache_rows(path)) == 1  # on disk, not only queued
    else:
        on_disk = [(r["example_id"], r["value"]) for r in trace_records(path)]
        assert on_disk == [("e1", {"score": 3})]
    store.close()
    assert integrity(path) == "ok"


def test_a_cache_locked_past_the_timeout_does_not_end_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache only saves requests; the trace is what resume reads. A cache that another
    process keeps locked for longer than busy_timeout must not cost the run anything but
    the cache writes: every example finishes and is written with its trace.

    The 30 s busy_timeout is shortened to 0.2 s on the run's own cache connection so the
    case costs a second, not half a minute; the holder keeps the lock for the whole run.
    """

    made: list[Path] = []

    class ImpatientCache(ResponseCache):
        def __init__(self, path: Path, **kwargs: Any) -> None:
            super().__init__(path, **kwargs)
            self._db.execute("PRAGMA busy_timeout=200")
            made.append(path)

    # Where a run opens its cache (engine/runtime.py calls store.cache.open_cache).
    monkeypatch.setattr(cache_module, "ResponseCache", ImpatientCache)
    cache = tmp_path / "cache.sqlite"
    ResponseCache(cache).close()
    holder = sqlite3.connect(cache, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    work = make_workload(tmp_path, range(12))
    out = tmp_path / "run"
    try:
        with FakeServer(llm_latency) as server:
            outcome = run_graph(
                work.graph, work.data, out, server.base_url, cache=cache, concurrency=8
            )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert made == [cache]  # the run's own connection was the impatient one
    assert outcome.manifest["status"] == "complete"
    assert "database is locked" in outcome.manifest["cache_error"]  # and the user is told
    assert sorted(result_ids(out)) == sorted(work.ids)
    db = sqlite3.connect(out / "traces.sqlite")
    try:
        traced = db.execute("SELECT COUNT(*) FROM node_runs WHERE status='ok'").fetchone()[0]
    finally:
        db.close()
    assert traced == len(NODES) * len(work.ids)


def stall_detector(count: Callable[[], int], quiet: float) -> Callable[[], bool]:
    """A condition that holds once `count()` has not changed for `quiet` seconds."""
    state = {"value": count(), "since": time.monotonic()}

    def stalled() -> bool:
        now, value = time.monotonic(), count()
        if value != state["value"]:
            state["value"], state["since"] = value, now
        return now - state["since"] >= quiet

    return stalled
