"""`once: true` nodes: asked once per run whatever the number of rows (with workers too),
their value read by every row, recorded in the trace and reused on resume, a failure
stopping the run before any row, and `validate` refusing one that reads a row."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, results, run_graph, trace_records, user_text, write_graph, write_rows

import orchestrator as orc
from orchestrator import GraphError
from orchestrator.graph.once import ONCE_EXAMPLE

JUDGE_OUT = {"reason": "string", "score": {"type": "integer", "min": 1, "max": 10}}
# G-Eval's shape: the evaluation steps written once per dataset, every row's judge reads them.
GRAPH: dict[str, Any] = {
    "name": "geval_once",
    "inputs": ["text"],
    "params": {"criterion": "coherence"},
    "defaults": {"temperature": 0.0, "max_tokens": 100},
    "nodes": {
        "steps": {
            "kind": "llm",
            "once": True,
            "prompt": "steps.jinja",
            "output": {"steps": "string"},
        },
        "judge": {"kind": "llm", "prompt": "judge.jinja", "output": JUDGE_OUT},
    },
    "outputs": {"score": "judge.score", "steps": "steps.steps"},
}
TEMPLATES = {
    "steps.jinja": "Write the evaluation steps for {{ params.criterion }}.",
    "judge.jinja": "Follow these steps: [{{ steps.steps }}]\n<<{{ text }}>>",
}
ROWS = 6


def responder(fail_steps: bool = False, fail_row: str | None = None):
    """The steps node answers "S1; S2" (or a 400), the judge scores each row by its text."""

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        text = user_text(body)
        if "evaluation steps" in text:
            return Reply(status=400) if fail_steps else Reply(json.dumps({"steps": "S1; S2"}))
        if fail_row is not None and f"<<{fail_row}>>" in text:
            return Reply(status=400)
        score = int(text.split("<<t")[1].split(">>")[0]) + 1
        return Reply(content=json.dumps({"reason": "ok", "score": score}))

    return respond


def asked(server: FakeServer, what: str) -> list[dict[str, Any]]:
    return [b for b in server.requests if not is_canary(b) and what in user_text(b)]


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", GRAPH, TEMPLATES)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rows = [{"id": f"e{i}", "text": f"t{i}"} for i in range(ROWS)]
    return write_rows(tmp_path / "rows.jsonl", rows)


def _expected() -> dict[str, dict[str, Any]]:
    return {
        f"e{i}": {"id": f"e{i}", "status": "ok", "score": i + 1, "steps": "S1; S2"}
        for i in range(ROWS)
    }


def test_once_node_is_asked_once_and_every_row_reads_it(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer(responder()) as server:
        ran = run_graph(graph, data, out, server.base_url, use_cache=False)
    assert len(asked(server, "evaluation steps")) == 1
    judged = asked(server, "Follow these steps")
    assert len(judged) == ROWS
    assert all("[S1; S2]" in user_text(b) for b in judged)
    assert results(out) == _expected()
    assert ran.manifest["status"] == "complete"
    once = trace_records(out / "traces.sqlite", ONCE_EXAMPLE, "steps")
    assert [(r["status"], r["value"]) for r in once] == [("ok", {"steps": "S1; S2"})]


def test_two_workers_give_the_same_results_and_ask_once(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer(responder()) as server:
        ran = run_graph(graph, data, out, server.base_url, use_cache=False, workers=2)
    assert ran.manifest["status"] == "complete"
    assert len(asked(server, "evaluation steps")) == 1
    assert len(asked(server, "Follow these steps")) == ROWS
    assert results(out) == _expected()
    assert len(trace_records(out / "traces.sqlite", ONCE_EXAMPLE, "steps")) == 1


def test_resume_takes_the_once_value_from_the_trace(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with FakeServer(responder(fail_row="t2")) as server:
        run_graph(graph, data, out, server.base_url, use_cache=False)
        assert results(out)["e2"]["status"] == "failed"
        before = len(server.requests)
        server.responder = responder()
        ran = run_graph(graph, data, out, server.base_url, use_cache=False)
        again = [b for b in server.requests[before:] if not is_canary(b)]
    assert [("<<t2>>" in user_text(b)) for b in again] == [True]
    assert ran.manifest["status"] == "complete"
    assert results(out) == _expected()


def test_a_failing_once_node_stops_the_run_before_any_row(graph: Path, data: Path, tmp_path: Path):
    out = tmp_path / "run"
    with (
        FakeServer(responder(fail_steps=True)) as server,
        pytest.raises(orc.OrchestratorError, match="steps"),
    ):
        orc.run(graph, data, out=out, base_url=server.base_url, cache=False)
    assert asked(server, "evaluation steps")
    assert not asked(server, "Follow these steps")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "error" and "'steps'" in manifest["error"]
    assert not (out / "results.jsonl").exists() or not results(out)


def test_validate_refuses_a_once_node_reading_a_row(tmp_path: Path):
    spec = json.loads(json.dumps(GRAPH))
    spec["nodes"]["steps"]["prompt"] = "bad.jinja"
    spec["nodes"]["later"] = {
        "kind": "compute",
        "once": True,
        "function": "mean",
        "args": {"values": "[judge.score]"},
    }
    path = write_graph(tmp_path / "g", spec, {**TEMPLATES, "bad.jinja": "Steps for {{ text }}"})
    with pytest.raises(GraphError) as caught:
        orc.load_graph(path)
    found = {(p.node, p.field): p.message for p in caught.value.problems}
    assert "row input 'text'" in found["steps", "prompt"]
    assert "per-row node 'judge'" in found["later", "args.values"]
    assert all(p.file == str(path) for p in caught.value.problems)


def test_once_nodes_may_read_params_and_other_once_nodes(tmp_path: Path):
    spec = json.loads(json.dumps(GRAPH))
    spec["nodes"]["count"] = {
        "kind": "compute",
        "once": True,
        "function": "identity",
        "args": {"value": "steps.steps"},
    }
    spec["outputs"]["count"] = "count"
    path = write_graph(tmp_path / "g", spec, TEMPLATES)
    graph = orc.load_graph(path)
    assert graph.nodes["count"].deps == {"steps"}


DOC = Path(__file__).parent.parent.parent / "docs" / "graph-format.md"


def test_the_docs_example_runs_with_its_steps_asked_once(tmp_path: Path):
    """The `once` example of docs/graph-format.md, its templates as its comments give them,
    run over three rows: one steps request, three judge requests."""
    block = re.search(r"### `once`.*?```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert block, "the once example moved; keep this test pointing at it"
    spec = yaml.safe_load(block.group(1))
    templates = dict(re.findall(r'prompt: (\S+)\s+# "(.*)"', block.group(1)))
    assert set(templates) == {"steps.jinja", "judge.jinja"}
    graph = write_graph(tmp_path / "g", spec, templates)
    rows = write_rows(tmp_path / "rows.jsonl", [{"id": f"r{i}", "text": f"t{i}"} for i in range(3)])

    def respond(body: dict[str, Any]) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        if "evaluation steps for coherence" in user_text(body):
            return Reply(json.dumps({"steps": "read it twice"}))
        return Reply(json.dumps({"score": 4}))

    with FakeServer(respond) as server:
        ran = run_graph(graph, rows, tmp_path / "run", server.base_url, use_cache=False)
    assert len(asked(server, "evaluation steps")) == 1
    assert len(asked(server, "Follow these steps: read it twice")) == 3
    assert ran.manifest["status"] == "complete"
    assert {v["steps"] for v in results(tmp_path / "run").values()} == {"read it twice"}
