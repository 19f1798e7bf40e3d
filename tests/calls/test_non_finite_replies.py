"""A judge reply of NaN, Infinity or 1e400 for a number field is an invalid reply, re-asked
like any other (issue 35, item 9): stored as `null` with status ok it would drop out of the
means in silence."""

from __future__ import annotations

from typing import Any

import pytest

import orchestrator as orc
from orchestrator.graph.schemas import build_model
from orchestrator.graph.spec import FieldSpec

SPEC = {
    "name": "numbers",
    "inputs": ["text"],
    "nodes": {
        "judge": {
            "kind": "llm",
            "prompt": "judge.jinja",
            "output": {
                "score": "number",
                "parts": {"type": "list", "items": "number"},
            },
        }
    },
    "outputs": {"score": "judge.score", "parts": "judge.parts"},
}


@pytest.mark.parametrize(
    "bad",
    [
        '{"score": NaN, "parts": [1]}',
        '{"score": Infinity, "parts": [1]}',
        '{"score": -Infinity, "parts": [1]}',
        '{"score": 1e400, "parts": [1]}',
        '{"score": "NaN", "parts": [1]}',
        '{"score": "inf", "parts": [1]}',
        '{"score": 2, "parts": [1, NaN]}',
    ],
)
def test_a_non_finite_number_is_re_asked_not_stored_as_null(bad: str) -> None:
    graph = orc.graph_from_dict(SPEC, {"judge.jinja": "Rate {{ text }}"})
    replies = iter([bad, '{"score": 0.5, "parts": [1.5]}'])

    def respond(request: Any) -> str:
        return next(replies)

    fake = orc.FakeTransport(respond)
    result = orc.run(graph, [{"id": "a", "text": "x"}], transport=fake, structured="server")
    (line,) = result.results
    assert line.status == "ok"
    assert line.outputs == {"score": 0.5, "parts": [1.5]}
    assert len(fake.requests) == 2  # the bad reply was re-asked once
    assert result.summary.means == {"score": 0.5}
    assert result.manifest.counts.retries == 1


def test_the_schema_sent_is_unchanged() -> None:
    """Refusing non-finite numbers is a validation rule of ours: the JSON schema the server
    gets (and so every cache key and run key) stays as it was."""
    model = build_model("out", {"x": FieldSpec(type="number", min=0)})
    assert model.model_json_schema()["properties"]["x"] == {
        "minimum": 0,
        "title": "X",
        "type": "number",
    }
