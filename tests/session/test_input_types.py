"""Input types read off the first rows before any request: a `foreach` over an input that
holds a text (not a list) is refused once, naming the node and the input (issue 26)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, schema_responder
from helpers import results, run_graph, write_graph, write_rows

from orchestrator import GraphError

GRAPH: dict[str, Any] = {
    "name": "per_item",
    "inputs": ["text"],
    "defaults": {"temperature": 0.0, "max_tokens": 50},
    "nodes": {
        "check": {
            "kind": "llm",
            "prompt": "check.jinja",
            "foreach": "text",
            "as": "part",
            "output": {"ok": "boolean"},
        }
    },
    "outputs": {"checks": "check"},
}
TEMPLATES = {"check.jinja": "Check {{ part }}"}


def test_foreach_over_a_text_input_is_refused_before_any_request(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", GRAPH, TEMPLATES)
    data = write_rows(
        tmp_path / "rows.jsonl", [{"id": "a", "text": "one claim"}, {"id": "b", "text": "two"}]
    )
    with FakeServer(schema_responder) as server:
        with pytest.raises(GraphError) as info:
            run_graph(graph, data, tmp_path / "run", server.base_url)
        assert server.requests == []
    (problem,) = info.value.problems
    assert (problem.node, problem.field) == ("check", "foreach")
    assert "input 'text' is a string in the first 2 row(s)" in problem.message
    assert not (tmp_path / "run").exists()


def test_foreach_over_a_list_input_runs(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", GRAPH, TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": ["x", "y"]}])
    with FakeServer(schema_responder) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    checks = results(tmp_path / "run")["a"]["checks"]
    assert len(checks) == 2 and all(set(check) == {"ok"} for check in checks)


def test_a_mix_of_lists_and_texts_is_left_to_each_row(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", GRAPH, TEMPLATES)
    data = write_rows(
        tmp_path / "rows.jsonl", [{"id": "a", "text": ["x"]}, {"id": "b", "text": "y"}]
    )
    with FakeServer(schema_responder) as server:
        run_graph(graph, data, tmp_path / "run", server.base_url)
    lines = results(tmp_path / "run")
    assert lines["a"]["status"] == "ok"
    assert lines["b"]["status"] == "failed"
