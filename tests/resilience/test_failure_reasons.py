"""A run with failures says why: reasons grouped by message, counts, one example id each."""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, write_graph, write_rows
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.session.failures import FailureGroup, failure_groups
from orchestrator.store.records import ResultLine


def test_groups_count_the_latest_line_of_each_example() -> None:
    lines = [
        ResultLine(id="a", status="failed", error="node 'judge': bad JSON"),
        ResultLine(id="b", status="failed", error="node 'judge': bad JSON"),
        ResultLine(id="c", status="failed", error="row 3: no 'text'"),
        # `a` succeeded when the run was resumed: it no longer counts as failed.
        ResultLine(id="a", status="ok"),
        ResultLine(id="d", status="failed", error="node 'judge': bad JSON"),
    ]
    assert failure_groups(lines) == [
        FailureGroup("node 'judge': bad JSON", 2, "b"),
        FailureGroup("row 3: no 'text'", 1, "c"),
    ]


def test_cli_prints_reasons_of_failed_examples(tmp_path: Path) -> None:
    graph = write_graph(tmp_path, judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": f"r{i}", "text": "bad" if i % 3 == 0 else "fine"} for i in range(6)]
    rows.append({"id": "r6"})  # no `text`: fails as a bad row, not as a bad reply
    data = write_rows(tmp_path / "rows.jsonl", rows)

    def respond(body: dict) -> Reply:
        # Every try of a "bad" example, re-asks included, gets a reply that is not JSON.
        asked = " ".join(str(m["content"]) for m in body["messages"])
        if not is_canary(body) and "Rate: bad" in asked:
            return Reply(content="not json at all")
        return schema_responder(body)

    with FakeServer(respond) as server:
        result = CliRunner().invoke(
            app,
            [
                "run",
                str(graph),
                "--data",
                str(data),
                "--out",
                str(tmp_path / "run"),
                "--base-url",
                server.base_url,
                "--no-cache",
            ],
        )
    assert result.exit_code == 2, result.output
    lines = [json.loads(x) for x in (tmp_path / "run/results.jsonl").read_text().splitlines()]
    failed = [line for line in lines if line["status"] == "failed"]
    assert len(failed) == 3
    assert "failed examples (3), by reason:" in result.output
    reply_error = next(line["error"] for line in failed if line["id"] == "r0")
    row_error = next(line["error"] for line in failed if line["id"] == "r6")
    assert reply_error != row_error
    # Most common reason first, with its count and the first example that hit it.
    first, second = (
        x.strip() for x in result.output.split("by reason:")[1].strip().splitlines()[:2]
    )
    assert (
        first.startswith("2 × ")
        and ("(e.g. r0)" in first or "(e.g. r3)" in first)
        and reply_error[:40] in first
    )
    assert second.startswith("1 × ") and "(e.g. r6)" in second
    example = "r0" if "(e.g. r0)" in first else "r3"
    assert f"orchestrator trace {tmp_path / 'run'} --example {example}" in result.output
