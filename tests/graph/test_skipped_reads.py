"""An output that reads a field of a node with `when` fails every row that skips the node
(its value is then null); `validate` refuses it and gives the null-safe form."""

from __future__ import annotations

import json
from typing import Any

import pytest

import orchestrator as orc

TEMPLATES = {"gate.jinja": "On topic? {{ text }}", "judge.jinja": "Score {{ text }}"}


def cascade(score: str) -> dict[str, Any]:
    return {
        "name": "cascade",
        "inputs": ["text"],
        "nodes": {
            "gate": {
                "kind": "llm",
                "prompt": "gate.jinja",
                "output": {"on_topic": {"type": "string", "enum": ["yes", "no"]}},
            },
            "judge": {
                "kind": "llm",
                "when": "gate.on_topic == 'yes'",
                "prompt": "judge.jinja",
                "output": {"score": {"type": "integer", "min": 1, "max": 5}},
            },
        },
        "outputs": {"score": score},
    }


def test_a_bare_field_of_a_skippable_node_is_refused_with_the_fix() -> None:
    with pytest.raises(orc.GraphError) as refused:
        orc.graph_from_dict(cascade("judge.score"), TEMPLATES)
    (problem,) = refused.value.problems
    assert problem.field == "outputs.score"
    assert "when 'gate.on_topic == 'yes''" in str(problem)
    assert '"judge.score if judge is not none else none"' in str(problem)


def test_the_null_safe_form_runs_and_gives_null_where_skipped() -> None:
    graph = orc.graph_from_dict(cascade("judge.score if judge is not none else none"), TEMPLATES)

    def respond(request: Any) -> str:
        text = str(request.messages[-1]["content"])
        if text.startswith("On topic?"):
            return json.dumps({"on_topic": "yes" if "bike" in text else "no"})
        return json.dumps({"score": 4})

    rows = [{"id": "a", "text": "bike lanes"}, {"id": "b", "text": "pizza"}]
    result = orc.run(graph, rows, transport=orc.FakeTransport(respond))
    by_id = {line.id: line for line in result.results}
    assert all(line.status == "ok" for line in by_id.values())
    assert by_id["a"].outputs["score"] == 4 and by_id["b"].outputs["score"] is None
