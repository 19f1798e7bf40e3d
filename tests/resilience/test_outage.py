"""A server that dies mid-run: waited for when it comes back, a clean stop when it does not
(crashed or wedged), and the same command then resumes without losing or repeating work."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, latency_responder
from helpers import (
    is_canary,
    judge_graph,
    requests_per_call,
    results,
    run_graph,
    start_cli_run,
    trace_records,
    wait_for_lines,
    write_graph,
    write_rows,
)

from orchestrator.servers.outage import ServerGone, ServerWatch

pytestmark = pytest.mark.reliability

DOWN_FOR = 10.0  # seconds the server stays away in the "comes back" case (the figure)
REPLY_SECONDS = 0.1  # every reply takes this long, so the run is still going when we strike

GRAPH = judge_graph()


def make_run(tmp_path: Path, count: int) -> tuple[Path, Path, list[str]]:
    graph = write_graph(tmp_path / "g", GRAPH, {"judge.jinja": "Rate <<{{ text }}>>"})
    ids = [f"e{i}" for i in range(count)]
    data = write_rows(tmp_path / "rows.jsonl", [{"id": i, "text": f"t-{i}"} for i in ids])
    return graph, data, ids


def result_ids(out: Path) -> list[str]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"] for line in lines]


def traced_examples(out: Path) -> set[str]:
    return {
        rec["example_id"] for rec in trace_records(out / "traces.sqlite") if rec["status"] == "ok"
    }


def test_server_back_after_ten_seconds_run_waits_and_completes(tmp_path: Path, figure):
    graph, data, ids = make_run(tmp_path, 60)
    out = tmp_path / "run"
    server = FakeServer(latency_responder(REPLY_SECONDS)).start()
    port = server.port
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["run"] = run_graph(graph, data, out, server.base_url, concurrency=2)
        except BaseException as exc:  # reported by the main thread's assertions
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    try:
        wait_for_lines(out / "results.jsonl", 10)
        server.stop()
        time.sleep(DOWN_FOR)
        asked_before = len(server.requests)
        server.start(port=port)
        restarted = time.monotonic()
        # Time from the restart to the run's next request: how soon it noticed.
        while len(server.requests) == asked_before and time.monotonic() - restarted < 60:
            time.sleep(0.01)
        noticed = time.monotonic() - restarted
        worker.join(timeout=120)
    finally:
        server.stop()
    assert "error" not in outcome, outcome.get("error")
    manifest = outcome["run"].manifest
    assert manifest["status"] == "complete"
    assert sorted(result_ids(out)) == sorted(ids)  # every example once, none lost
    assert all(line["status"] == "ok" for line in results(out).values())
    [outage] = manifest["outages"]
    assert outage["recovered"] and outage["seconds"] > DOWN_FOR / 2
    waited = [
        a
        for rec in trace_records(out / "traces.sqlite")
        for a in rec["attempts"]
        if "the server was down" in (a["error"] or "")
    ]
    assert waited, "the tries lost to the outage are in the trace"
    worst = max(requests_per_call(server.requests).values())
    assert worst <= 2  # a try lost to the outage is repeated once, not counted as a retry
    figure(
        "server dies, back after 10 s",
        "FakeServer stopped after 10 of 60 results, restarted on the same port 10 s later",
        runs=1,
        lost=len(ids) - len(set(result_ids(out))),
        max_requests=worst,
        recover_s=noticed,
        note=f"outage seen by the client: {outage['seconds']:.1f} s; 0 examples failed",
    )


def resume_and_check(
    graph: Path, data: Path, out: Path, server: FakeServer, ids: list[str], before: set[str]
) -> int:
    """Re-run the same command; every example ends once and only the rest is asked."""
    sent_before = len(server.requests)
    proc = start_cli_run(graph, data, out, server.base_url, "--concurrency", "2")
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    assert sorted(result_ids(out)) == sorted(ids)
    asked = {
        text.split("<<")[1].split(">>")[0]
        for text in requests_per_call(server.requests[sent_before:])
    }
    assert asked == {f"t-{i}" for i in ids} - {f"t-{i}" for i in before}
    return sum(1 for b in server.requests[sent_before:] if not is_canary(b))


@pytest.mark.parametrize("how", ["crashed", "wedged"])
def test_server_that_stays_away_stops_the_run_cleanly_then_resume(tmp_path: Path, how: str, figure):
    """Crashed: the port refuses connections. Wedged: it accepts and never answers, not
    even the liveness probe."""
    graph, data, ids = make_run(tmp_path, 60)
    out = tmp_path / "run"
    server = FakeServer(latency_responder(REPLY_SECONDS)).start()
    port = server.port
    try:
        proc = start_cli_run(
            graph,
            data,
            out,
            server.base_url,
            "--concurrency",
            "2",
            "--timeout",
            "1",
            "--server-wait",
            "3",
        )
        wait_for_lines(out / "results.jsonl", 10, proc)
        struck = time.monotonic()
        if how == "crashed":
            server.stop()
        else:
            server.hanging.set()
        output, _ = proc.communicate(timeout=120)
        stopped_after = time.monotonic() - struck
        assert proc.returncode == 3, output
        assert "Traceback" not in output
        flat = " ".join(output.split())
        assert "did not answer" in flat and "re-run the same command to resume" in flat
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "server gone"
        assert manifest["outages"] and not manifest["outages"][-1]["recovered"]
        kept = result_ids(out)
        assert len(kept) == len(set(kept)) >= 10
        assert all(line["status"] == "ok" for line in results(out).values())
        assert set(kept) <= traced_examples(out)  # no result line without its trace

        if how == "crashed":
            server.start(port=port)
        else:
            server.hanging.clear()
        asked = resume_and_check(graph, data, out, server, ids, set(kept))
    finally:
        server.stop()
    figure(
        f"server {how} and stays away",
        (
            "FakeServer stopped after 10 results"
            if how == "crashed"
            else "every route (models too) accepts and never answers, after 10 results"
        )
        + "; --server-wait 3",
        runs=2,
        lost=len(ids) - len(set(result_ids(out))),
        max_requests=max(requests_per_call(server.requests).values()),
        recover_s=stopped_after,
        note=f"exit 3, {len(kept)} kept; the re-run asked only the other {asked}",
    )


def scripted_probe(answers: list[bool]):
    """A probe that gives `answers` in order (the last one forever) and counts its calls."""
    calls = {"n": 0}

    async def probe() -> bool:
        calls["n"] += 1
        return answers[min(calls["n"], len(answers)) - 1]

    return probe, calls


async def test_watch_counts_a_lost_request_when_the_server_answers_its_probe():
    probe, calls = scripted_probe([True])
    watch = ServerWatch("http://s/v1", probe, patience=5)
    assert await watch.after_failure(time.monotonic()) is None
    assert calls["n"] == 1 and watch.outages == []


async def test_watch_waits_once_for_many_callers_then_lets_them_all_retry(
    caplog: pytest.LogCaptureFixture,
):
    probe, calls = scripted_probe([False, False, True])
    watch = ServerWatch("http://s/v1", probe, patience=30)
    failed_at = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="orchestrator.servers.outage"):
        outages = await asyncio.gather(*(watch.after_failure(failed_at) for _ in range(20)))
    said = [r.getMessage() for r in caplog.records if r.name == "orchestrator.servers.outage"]
    assert len(watch.outages) == 1 and all(o is watch.outages[0] for o in outages)
    assert watch.outages[0].recovered
    assert calls["n"] == 3  # one probe per wait, not one per waiting request
    assert len(said) == 2 and "back after" in said[1]


async def test_a_probe_that_hangs_does_not_stretch_the_patience():
    """A server that takes connections and never answers keeps each probe waiting for its
    own timeout: the wait gives up when its patience is spent, not a probe timeout later."""
    calls = {"n": 0}

    async def probe() -> bool:
        calls["n"] += 1
        if calls["n"] > 1:
            await asyncio.sleep(10)  # the probe's own timeout, far past the patience
        return False

    watch = ServerWatch("http://s/v1", probe, patience=1)
    started = time.monotonic()
    with pytest.raises(ServerGone):
        await watch.after_failure(started)
    assert time.monotonic() - started < 3


async def test_watch_gives_up_after_its_patience_for_every_caller():
    probe, _ = scripted_probe([False])
    watch = ServerWatch("http://s/v1", probe, patience=0.6)
    failed_at = time.monotonic()
    tries = [watch.after_failure(failed_at) for _ in range(3)]
    outcomes = await asyncio.gather(*tries, return_exceptions=True)
    assert all(isinstance(o, ServerGone) for o in outcomes)
    assert not watch.outages[0].recovered
    with pytest.raises(ServerGone, match="did not answer"):
        await watch.after_failure(time.monotonic())  # later calls stop at once
