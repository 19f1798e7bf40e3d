"""Aggregates run in isolation: one that fails costs no LLM call again (issue 16, item 1)."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import yaml
from fakeserver import FakeServer, schema_responder
from helpers import judge_graph, write_graph, write_rows
from typer.testing import CliRunner

from orchestrator.cli import app


def _graph(values: str) -> dict[str, Any]:
    graph = judge_graph()
    graph["aggregates"] = {
        "best": {"function": "maximum", "args": {"values": values}},
        "typical": {
            "function": "median",
            "args": {"values": "results | map(attribute='score') | list"},
        },
    }
    return graph


def _run(tmp_path: Path, graph: Path, base_url: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "run",
            str(graph),
            "--data",
            str(tmp_path / "rows.jsonl"),
            "--out",
            str(tmp_path / "run"),
            "--base-url",
            base_url,
            "--no-cache",
        ],
    )


def test_failing_aggregate_is_recorded_and_fixed_without_a_request(tmp_path: Path) -> None:
    templates = {"judge.jinja": "Rate: {{ text }}"}
    # Ids are no numbers: the aggregate fails only after every example ran (a field name
    # that no output provides, `scor`, is refused by validate now: tests/graph/
    # test_static_types.py).
    broken = write_graph(tmp_path, _graph("results | map(attribute='id') | list"), templates)
    write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": f"t{i}"} for i in range(4)])
    with FakeServer(schema_responder) as server:
        result = _run(tmp_path, broken, server.base_url)
        sent = len(server.requests)
    assert result.exit_code == 4, result.output
    assert "aggregate best failed" in result.output
    assert "orchestrator summarize" in result.output
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["failed"] is True and "maximum" in summary["best"]["error"]
    scores = [json.loads(x)["score"] for x in (run / "results.jsonl").read_text().splitlines()]
    assert len(scores) == 4
    assert summary["typical"] == statistics.median(scores)  # the other aggregate still ran
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"

    fixed_dir = tmp_path / "fixed"
    fixed_dir.mkdir()
    fixed = write_graph(fixed_dir, _graph("results | map(attribute='score') | list"), templates)
    # No server at all now: recomputing cannot send a request.
    again = CliRunner().invoke(app, ["summarize", str(run), "--graph", str(fixed)])
    assert again.exit_code == 0, again.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"] == max(scores)
    assert summary["aggregates_from"]["graph"] == str(fixed)
    assert summary["counts"]["examples_ok"] == 4
    assert sent >= 4


def test_summarize_refuses_a_graph_whose_nodes_changed(tmp_path: Path) -> None:
    templates = {"judge.jinja": "Rate: {{ text }}"}
    graph = write_graph(tmp_path, _graph("results | map(attribute='score') | list"), templates)
    write_rows(tmp_path / "rows.jsonl", [{"id": "r0", "text": "t"}])
    with FakeServer(schema_responder) as server:
        assert _run(tmp_path, graph, server.base_url).exit_code == 0
    before = (tmp_path / "run/summary.json").read_text()
    other = copy.deepcopy(yaml.safe_load(graph.read_text()))
    other["nodes"]["judge"]["output"]["score"]["max"] = 5
    changed_dir = tmp_path / "changed"
    changed_dir.mkdir()
    changed = write_graph(changed_dir, other, templates)
    refused = CliRunner().invoke(app, ["summarize", str(tmp_path / "run"), "--graph", str(changed)])
    assert refused.exit_code == 1
    assert "nodes changed" in refused.output
    assert (tmp_path / "run/summary.json").read_text() == before
