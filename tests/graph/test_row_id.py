"""Reading the row's `id` needs `id` in `inputs:`; `validate` says so where it refuses it."""

from __future__ import annotations

import pytest

import orchestrator as orc


def graph_reading_id(inputs: list[str]) -> dict[str, object]:
    return {
        "name": "labelled",
        "inputs": inputs,
        "nodes": {
            "judge": {
                "kind": "llm",
                "prompt": "judge.jinja",
                "output": {"score": {"type": "integer", "min": 1, "max": 5}},
            }
        },
        "outputs": {"score": "judge.score", "case": "id"},
    }


def test_reading_id_not_in_inputs_names_the_fix() -> None:
    with pytest.raises(orc.GraphError) as refused:
        orc.graph_from_dict(graph_reading_id(["text"]), {"judge.jinja": "{{ id }}: {{ text }}"})
    messages = [str(p) for p in refused.value.problems]
    assert len(messages) == 2, messages  # the template and the output
    for message in messages:
        assert "variable 'id'" in message
        assert "list `id` in `inputs:`" in message, message


def test_id_in_inputs_is_read() -> None:
    graph = orc.graph_from_dict(
        graph_reading_id(["id", "text"]), {"judge.jinja": "{{ id }}: {{ text }}"}
    )
    result = orc.run(graph, [{"id": "r7", "text": "hi"}], transport=orc.FakeTransport())
    (line,) = result.results
    assert line.status == "ok", line.error
    assert line.outputs["case"] == "r7"
