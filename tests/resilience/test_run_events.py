"""Run events: an outage, a limit change and a lost worker are each one typed record that
the manifest, the log and the progress bar's subscription all see, in the same words."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, latency_responder, vllm_metrics
from helpers import judge_graph, run_graph, wait_for_lines, write_graph, write_rows
from rich.console import Console

import orchestrator as orc
from orchestrator import events as ev
from orchestrator.engine.flush import FLUSH_SECONDS, RunProgress, drive
from orchestrator.errors import WorkerLost
from orchestrator.providers.openai_compat import OpenAITransport
from orchestrator.servers.registry import ServerRegistry
from orchestrator.session import session as session_module
from orchestrator.store.records import Counts
from orchestrator.ui.progress import ProgressDisplay

pytestmark = pytest.mark.reliability

DOWN_FOR = 2.0  # seconds the server is away: long enough for calls to find it down


def make_run(tmp_path: Path, count: int) -> tuple[Path, Path]:
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate <<{{ text }}>>"})
    rows = [{"id": f"e{i}", "text": f"t-{i}"} for i in range(count)]
    return graph, write_rows(tmp_path / "rows.jsonl", rows)


@pytest.fixture
def subscribed(monkeypatch: pytest.MonkeyPatch) -> list[ev.RunEvent]:
    """The events a subscriber of the run's sink receives: subscribed where the progress
    bar subscribes (the session hands its sink to `drive`)."""
    seen: list[ev.RunEvent] = []
    real_drive = session_module.drive

    async def drive(work: Any, flush: Any, run: RunProgress, *args: Any) -> None:
        assert run.events is not None, "the session hands its sink of events to the bar"
        run.events.subscribe(seen.append)
        await real_drive(work, flush, run, *args)

    monkeypatch.setattr(session_module, "drive", drive)
    return seen


def in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["run"] = run()
        except BaseException as exc:  # asserted by the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def test_an_outage_is_the_same_records_in_the_manifest_the_log_and_the_bar(
    tmp_path: Path, subscribed: list[ev.RunEvent], caplog: pytest.LogCaptureFixture
) -> None:
    graph, data = make_run(tmp_path, 40)
    out = tmp_path / "run"
    server = FakeServer(latency_responder(0.1)).start()
    port, url = server.port, server.base_url
    caplog.set_level(logging.WARNING, logger="orchestrator")
    thread, outcome = in_thread(lambda: run_graph(graph, data, out, server.base_url, concurrency=2))
    try:
        wait_for_lines(out / "results.jsonl", 5)
        server.stop()
        time.sleep(DOWN_FOR)
        server.start(port=port)
        thread.join(timeout=120)
    finally:
        server.stop()
    assert "error" not in outcome, outcome.get("error")
    manifest = outcome["run"].manifest
    assert manifest["status"] == "complete"

    outage = [e for e in subscribed if isinstance(e, ev.OutageStarted | ev.OutageEnded)]
    assert [type(e) for e in outage] == [ev.ServerDown, ev.ServerBack]
    down, back = outage
    assert down.url == back.url == url and down.at <= back.at
    assert isinstance(back, ev.ServerBack) and back.seconds >= DOWN_FOR / 2

    # The manifest: its outages derived from the records, its events the records listed.
    assert manifest["outages"] == [
        {"base_url": url, "seconds": round(back.seconds, 2), "recovered": True}
    ]
    listed = [e for e in manifest["events"] if e["event"] in ("server down", "server back")]
    assert [e["text"] for e in listed] == [down.describe(), back.describe()]
    assert listed[1]["facts"]["seconds"] == back.seconds and listed[1]["level"] == "WARNING"

    # The log: each record's line once, from the module where it happened (as before).
    said = [(r.name, r.getMessage()) for r in caplog.records]
    for event in (down, back):
        assert said.count(("orchestrator.servers.outage", event.describe())) == 1
    assert "waiting up to" in down.describe() and "is back after" in back.describe()


async def test_a_limit_change_under_auto_concurrency_is_a_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeServer() as fake:
        fake.metrics = vllm_metrics
        url = fake.base_url
        registry = ServerRegistry(OpenAITransport(), concurrency="auto")
        seen: list[ev.RunEvent] = []
        registry.events.subscribe(seen.append)
        registry.endpoint(fake.base_url, fake.model)
        caplog.set_level(logging.DEBUG, logger="orchestrator.servers.replicas")
        try:
            await registry.start_tuning()
            await registry.tuner.stop()  # the ticks are the test's
            (replica,) = registry._replicas.values()
            replica.limit.saturated = True  # every slot was taken since the last look
            await registry.tuner.tick(replica)
        finally:
            await registry.close()
    changes = [e for e in seen if isinstance(e, ev.LimitChanged)]
    assert [(e.url, e.reason) for e in changes] == [
        (url, "start (vLLM metrics)"),
        (url, "room"),
    ]
    assert changes[1].limit > changes[0].limit == replica.report().limits[0].limit
    # The manifest's per-server limits and the records agree.
    assert [(c.limit, c.reason, c.t) for c in replica.report().limits] == [
        (e.limit, e.reason, e.t) for e in changes
    ]
    said = [r.getMessage() for r in caplog.records if r.name == "orchestrator.servers.replicas"]
    assert said == [e.describe() for e in changes]


def worker_pids(out: Path, count: int) -> list[int]:
    """The worker processes the running run lists in its manifest."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            listed = json.loads((out / "manifest.json").read_text()).get("workers") or []
        except (FileNotFoundError, json.JSONDecodeError):
            listed = []
        if len(listed) == count:
            return [int(worker["pid"]) for worker in listed]
        time.sleep(0.05)
    raise AssertionError(f"{count} workers never listed in the manifest")


def test_a_killed_worker_is_a_record_in_the_manifest_the_log_and_the_bar(
    tmp_path: Path, subscribed: list[ev.RunEvent], caplog: pytest.LogCaptureFixture
) -> None:
    graph, data = make_run(tmp_path, 80)
    out = tmp_path / "run"
    caplog.set_level(logging.WARNING, logger="orchestrator")
    with FakeServer(latency_responder(0.2)) as server:
        thread, outcome = in_thread(
            lambda: orc.run(
                graph,
                data,
                out=out,
                base_url=server.base_url,
                cache=tmp_path / "cache.sqlite",
                concurrency=4,
                workers=2,
            )
        )
        victim = worker_pids(out, 2)[0]
        wait_for_lines(out / "results.jsonl", 3)
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=120)
    assert isinstance(outcome.get("error"), WorkerLost), outcome
    (lost,) = [e for e in subscribed if isinstance(e, ev.WorkerLost)]
    assert lost.worker.startswith("worker-") and f"pid {victim}" in lost.cause
    assert "killed by SIGKILL" in lost.describe()
    manifest = json.loads((out / "manifest.json").read_text())
    (listed,) = [e for e in manifest["events"] if e["event"] == "worker lost"]
    assert (listed["place"], listed["text"]) == (lost.worker, lost.describe())
    said = [(r.name, r.getMessage()) for r in caplog.records]
    assert said.count(("orchestrator.scale.coordinator", lost.describe())) == 1


def test_workers_events_pickle_and_each_workers_outages_stay_its_own() -> None:
    """Two workers watch one URL each on their own: their outages interleave in the run's
    sink yet pair up per worker, as the manifest listed them when they came as dicts."""
    url = "http://s/v1"
    first = ev.RunEvents()
    second = ev.RunEvents()
    first.emit(ev.ServerDown(url=url, patience=60, at=10.0))
    second.emit(ev.ServerDown(url=url, patience=60, at=11.0))
    second.emit(ev.ServerBack(url=url, seconds=1.5, at=12.5))
    first.emit(ev.ServerBack(url=url, seconds=3.0, at=13.0))
    run = ev.RunEvents()
    seen: list[ev.RunEvent] = []
    run.subscribe(seen.append)
    for name, sink in (("worker-1", first), ("worker-2", second)):
        run.adopt(pickle.loads(pickle.dumps(sink.take_new())), name)
    assert [e.worker for e in seen] == ["worker-1"] * 2 + ["worker-2"] * 2
    assert run.outages() == [
        {"base_url": url, "seconds": 3.0, "recovered": True},
        {"base_url": url, "seconds": 1.5, "recovered": True},
    ]
    assert first.take_new() == []  # what a report carried is not sent again


async def test_the_progress_bar_shows_the_latest_warning_beside_the_limits() -> None:
    """The bar subscribes to the run's sink: a server down shows on its next tick."""
    sink = ev.RunEvents()
    down = ev.ServerDown(url="http://s/v1", patience=60)
    shown = io.StringIO()
    console = Console(file=shown, width=400, force_terminal=False)

    async def work() -> None:
        sink.emit(down)
        await asyncio.sleep(2 * FLUSH_SECONDS)

    run = RunProgress(Counts(), 1, lambda: "limit 8", events=sink)
    await drive(work(), lambda: None, run, ProgressDisplay(console))
    assert down.describe() in shown.getvalue() and "limit 8" in shown.getvalue()
    assert sink._subscribers == []  # the bar's subscription ends with the run
