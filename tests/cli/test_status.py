"""`orchestrator status RUN_DIR` (issue 26): what a run is doing now, from the folder alone —
examples finished, node runs in flight (and, for a run that is not live, cut off), examples
in progress and for how long, attempts that timed out."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, run_graph, start_cli_run, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app


def test_status_lists_examples_in_progress_and_timed_out_attempts(tmp_path: Path) -> None:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [
        {"id": "a", "text": "fine"},
        {"id": "b", "text": "fine too"},
        {"id": "slow", "text": "SLOW"},
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)

    def respond(body: dict) -> Reply:
        if not is_canary(body) and any("SLOW" in str(m.get("content")) for m in body["messages"]):
            return Reply(content="{}", delay=3.0)
        return schema_responder(body)

    out = tmp_path / "run"
    quick = orc.RetryPolicy(retries=1, timeout=0.5, backoff_first=0.0, jitter=0.0)
    with FakeServer(respond) as server:
        run_graph(graph, data, out, server.base_url, retry=quick, use_cache=False)
    # As a kill leaves it: example b's node finished and traced, its result line not written.
    results = out / "results.jsonl"
    kept = [line for line in results.read_text().splitlines() if '"id": "b"' not in line]
    kept = [line for line in kept if '"id":"b"' not in line]
    results.write_text("".join(line + "\n" for line in kept))

    shown = CliRunner().invoke(app, ["status", str(out)])
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "examples finished: 2 (1 failed)" in text, text
    # The run ended: nothing of it is in flight, and nothing is said to be.
    assert "node runs unfinished (run not live): 0" in text, text
    assert "in flight now" not in text, text
    assert "examples in progress (a node finished, the example not): 1" in text, text
    assert "  b: 1 node runs done, for " in text, text
    timed_out = re.search(r"attempts timed out: (\d+)", text)
    assert timed_out is not None and int(timed_out.group(1)) >= 1, text
    assert "slow · judge · attempt 1: timed out: no complete" in text, text


def test_status_of_a_folder_that_is_no_run_is_an_error(tmp_path: Path) -> None:
    shown = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert shown.exit_code == 1
    assert "no manifest.json" in shown.output


def _status_until(
    out: Path, proc: subprocess.Popen[str], wanted: Callable[[str], bool], seconds: float = 90
) -> str:
    """`orchestrator status` of a run going on in `proc`, asked until its text is `wanted`."""
    deadline = time.monotonic() + seconds
    text = ""
    while time.monotonic() < deadline:
        if (out / "manifest.json").is_file():
            shown = CliRunner().invoke(app, ["status", str(out)])
            assert shown.exit_code == 0, shown.output
            text = shown.output
            if wanted(text):
                return text
        if proc.poll() is not None:
            raise AssertionError(
                f"the run ended first:\n{proc.stdout.read() if proc.stdout else ''}"
            )
        time.sleep(0.2)
    raise AssertionError(f"status never showed what was waited for; last:\n{text}")


def test_status_of_a_live_run_shows_what_is_in_flight_and_a_killed_one_nothing_live(
    tmp_path: Path,
) -> None:
    """A row whose request hangs: `status` while the run goes on lists its node run in flight
    (example, node, attempt, server, for how long), then, after the first try times out,
    the retry and the timeout; once the run is killed, nothing is said to be in flight."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": "a", "text": "fine"}, {"id": "hung", "text": "HANG"}]
    data = write_rows(tmp_path / "rows.jsonl", rows)

    def respond(body: dict) -> Reply:
        if not is_canary(body) and any("HANG" in str(m.get("content")) for m in body["messages"]):
            return Reply(content="{}", delay=60.0)
        return schema_responder(body)

    out = tmp_path / "run"
    with FakeServer(respond) as server:
        proc = start_cli_run(graph, data, out, server.base_url, "--no-cache", "--timeout", "2")
        try:
            first = _status_until(out, proc, lambda t: "hung · judge · attempt 1 at" in t)
            assert "node runs in flight now: 1" in first, first
            assert re.search(
                r"  hung · judge · attempt 1 at http://127\.0\.0\.1:\d+/v1, sent \d+ s ago; "
                r"node run started \d+ s ago",
                first,
            ), first
            # The first try times out (--timeout 2); the retry is in flight, the timeout shown.
            retried = _status_until(out, proc, lambda t: "hung · judge · attempt 2 at" in t)
            assert "1 failed tries" in retried, retried
            assert re.search(
                r"  hung · judge · attempt 1: timed out: no complete reply within 2 s .*"
                r"\(its node run in flight\)",
                retried,
            ), retried
            assert re.search(r"attempts timed out: [1-9]", retried), retried
        finally:
            proc.kill()
            proc.wait()
    killed = CliRunner().invoke(app, ["status", str(out)])
    assert killed.exit_code == 0, killed.output
    assert "node runs unfinished (run not live): 1" in killed.output, killed.output
    assert "in flight now" not in killed.output, killed.output
    assert "  hung · judge · attempt" in killed.output, killed.output


def test_status_shows_the_node_runs_a_worker_process_has_in_flight(tmp_path: Path) -> None:
    """With --workers the rows run in worker processes: their node runs in flight reach the
    trace with their reports, and a run stopped by SIGTERM leaves none behind."""
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": "a", "text": "fine"}, {"id": "hung", "text": "HANG"}]
    data = write_rows(tmp_path / "rows.jsonl", rows)

    def respond(body: dict) -> Reply:
        if not is_canary(body) and any("HANG" in str(m.get("content")) for m in body["messages"]):
            return Reply(content="{}", delay=60.0)
        return schema_responder(body)

    out = tmp_path / "run"
    with FakeServer(respond) as server:
        proc = start_cli_run(graph, data, out, server.base_url, "--no-cache", "--workers", "2")
        try:
            shown = _status_until(out, proc, lambda t: "hung · judge · attempt 1 at" in t)
            assert "node runs in flight now: 1" in shown, shown
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    stopped = CliRunner().invoke(app, ["status", str(out)])
    assert stopped.exit_code == 0, stopped.output
    assert "node runs unfinished (run not live): 0" in stopped.output, stopped.output


def test_a_node_run_in_flight_says_what_it_is_doing() -> None:
    """Sent (which try, where, since when), held before its first try, or a compute node."""
    from orchestrator.cli.inspect import _describe_flight
    from orchestrator.store.flight import InFlight

    base = {"run_id": "r", "example_id": "e1", "node": "judge", "started": 100.0}
    sent = InFlight(**base, server="http://a/v1", attempt=2, attempt_started=110.0)
    assert _describe_flight(sent, 115.0) == (
        "e1 · judge · attempt 2 at http://a/v1, sent 5 s ago; node run started 15 s ago"
    )
    held = InFlight(**base, item=3, server="http://a/v1")
    assert _describe_flight(held, 101.0) == (
        "e1 · judge[3] · not sent yet (waiting for a slot on http://a/v1); node run started 1 s ago"
    )
    assert "e1 · judge · running; " in _describe_flight(InFlight(**base), 100.0)
