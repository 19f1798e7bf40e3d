"""`orchestrator status RUN_DIR` (issue 26): what a run is doing now, from the folder alone —
examples finished, examples in progress and for how long, attempts that timed out."""

from __future__ import annotations

import re
from pathlib import Path

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, run_graph, write_graph, write_rows
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
    assert "examples in progress (a node finished, the example not): 1" in text, text
    assert "  b: 1 node runs done, for " in text, text
    timed_out = re.search(r"attempts timed out: (\d+)", text)
    assert timed_out is not None and int(timed_out.group(1)) >= 1, text
    assert "slow · judge · attempt 1: timed out: no complete" in text, text


def test_status_of_a_folder_that_is_no_run_is_an_error(tmp_path: Path) -> None:
    shown = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert shown.exit_code == 1
    assert "no manifest.json" in shown.output
