"""Node runs in flight (issue 26): noted in memory as they start and as each try is sent,
written by the trace's flusher only when they changed, gone when the run closes its trace,
cleared by the next writer after a kill; and the lock says whether a writer is alive."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson

from orchestrator.store.flight import CURRENT, note_try
from orchestrator.store.lock import LOCK, holder_alive
from orchestrator.store.reader import TraceReader
from orchestrator.store.records import Attempt
from orchestrator.store.trace import TraceRecorder, TraceStore


def _in_flight(path: Path) -> list[tuple[str, str, int, int, str | None]]:
    with TraceReader.open(path) as reader:
        return [(f.run_id, f.example_id, f.item, f.attempt, f.replica) for f in reader.in_flight()]


def test_a_node_run_in_flight_is_written_by_the_next_flush_with_its_try(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    store = TraceStore(path, "r1", "h", "k")
    flight = store.flights.begin("e1", "judge", 2, "http://a/v1 | http://b/v1")
    store.flush()
    assert _in_flight(path) == [("r1", "e1", 2, 0, None)]  # not sent yet
    attempts: list[Attempt] = []
    token = CURRENT.set(flight)
    try:
        note_try("http://b/v1", attempts)
        attempts.append(
            Attempt(number=1, kind="transport", error="timed out: no complete reply within 2 s")
        )
        note_try("http://a/v1", attempts)
    finally:
        CURRENT.reset(token)
    store.flush()
    with TraceReader.open(path) as reader:
        (row,) = reader.in_flight()
    assert (row.node, row.attempt, row.replica) == ("judge", 2, "http://a/v1")
    assert row.server == "http://a/v1 | http://b/v1"
    assert row.attempt_started is not None and row.attempt_started >= row.started
    assert [(a.number, a.kind, a.error) for a in row.failed] == [
        (1, "transport", "timed out: no complete reply within 2 s")
    ]
    store.flights.end(flight)
    store.flush()
    assert _in_flight(path) == []
    store.flights.begin("e2", "judge", -1, None)
    store.close()  # however the run ended, nothing of it is in flight once it closed
    assert _in_flight(path) == []


def test_a_try_outside_a_node_run_is_not_noted() -> None:
    note_try("http://a/v1", [])  # a canary or a model listing: no node run is current
    assert CURRENT.get() is None


def test_a_flush_with_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "traces.sqlite", "r1", "h", "k")
    store.flights.begin("e1", "judge", -1, None)
    store.flush()
    written = store._db.total_changes
    store.flush()
    store.flush()
    assert store._db.total_changes == written
    store.close()


def test_what_a_killed_run_left_in_flight_is_cleared_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "traces.sqlite"
    killed = TraceStore(path, "r1", "h", "k")
    killed.flights.begin("e1", "judge", -1, None)
    killed.flush()
    killed._db.close()  # as a kill leaves it: no close, its last set still in the file
    assert _in_flight(path) == [("r1", "e1", -1, 0, None)]
    TraceStore(path, "r2", "h", "k").close()
    assert _in_flight(path) == []


def test_the_lock_says_whether_its_holder_is_alive(tmp_path: Path) -> None:
    lock = tmp_path / LOCK
    assert holder_alive(tmp_path) is False  # no lock file: no run ever held it
    lock.write_bytes(b"")
    assert holder_alive(tmp_path) is False  # released
    host = socket.gethostname()
    lock.write_bytes(orjson.dumps({"pid": os.getpid(), "host": host, "started": 1.0}))
    assert holder_alive(tmp_path) is True
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_bytes(orjson.dumps({"pid": gone.pid, "host": host, "started": 1.0}))
    assert holder_alive(tmp_path) is False  # killed: its text stayed, its process did not
    lock.write_bytes(orjson.dumps({"pid": 1, "host": f"not-{host}", "started": 1.0}))
    assert holder_alive(tmp_path) is None  # another host's process cannot be asked


def test_a_workers_node_runs_in_flight_travel_with_its_batches(tmp_path: Path) -> None:
    """A worker's recorder hands its set over with its rows when it changed; the owner writes
    every worker's latest set with its own, and a batch with an unchanged set keeps it."""
    path = tmp_path / "traces.sqlite"
    owner = TraceStore(path, "r1", "h", "k")
    one, two = TraceRecorder("r1", "h", "k"), TraceRecorder("r1", "h", "k")
    first = one.flights.begin("e1", "judge", -1, "http://a/v1")
    two.flights.begin("e2", "judge", -1, "http://a/v1")
    owner.add(one.take())
    owner.add(two.take())
    owner.flush()
    assert sorted(row[1] for row in _in_flight(path)) == ["e1", "e2"]
    unchanged = one.take()
    assert unchanged.in_flight is None  # nothing new: nothing sent, nothing replaced
    owner.add(unchanged)
    owner.flush()
    assert sorted(row[1] for row in _in_flight(path)) == ["e1", "e2"]
    one.flights.end(first)
    owner.add(one.take())
    owner.flush()
    assert [row[1] for row in _in_flight(path)] == ["e2"]
    owner.close()
    assert _in_flight(path) == []
