"""A declared field named like a dict method (`items`, `keys`, `values`, `get`, …) is the
field when read as `node.field`, in expressions and templates alike, as `validate` reads it.

Jinja looks an attribute up before an item, so `checklist.items` used to be dict.items: the
graph passed `validate` (which checks the declared field) and then every row failed with
"foreach `checklist.items` gave builtin_function_or_method, not a list".
"""

from __future__ import annotations

import json
from typing import Any

import orchestrator as orc
from orchestrator.graph.templates import Expression, make_environment

CHECKLIST = {"items": ["Is it short?", "Is it polite?"], "keys": 2, "get": "field"}


def evaluate(source: str, context: dict[str, Any]) -> Any:
    return Expression(make_environment(None), source)(context)


def test_a_field_named_like_a_dict_method_is_the_field_in_expressions() -> None:
    context = {"checklist": CHECKLIST}
    assert evaluate("checklist.items", context) == CHECKLIST["items"]
    assert evaluate("checklist.items | length", context) == 2
    assert evaluate("checklist.keys + 1", context) == 3
    assert evaluate("checklist.get", context) == "field"
    # A mapping without such a key keeps its methods.
    assert evaluate("scores.items() | list", {"scores": {"a": 1}}) == [("a", 1)]
    assert evaluate("scores.get('a')", {"scores": {"a": 1}}) == 1


def test_a_field_named_like_a_dict_method_is_the_field_in_templates() -> None:
    env = make_environment(None, {"t.jinja": "{% for q in checklist.items %}[{{ q }}]{% endfor %}"})
    assert env.get_template("t.jinja").render(checklist=CHECKLIST) == (
        "[Is it short?][Is it polite?]"
    )


def test_foreach_over_an_items_field_runs() -> None:
    graph = orc.graph_from_dict(
        {
            "name": "checklist",
            "inputs": ["text"],
            "nodes": {
                "checklist": {
                    "kind": "llm",
                    "prompt": "write.jinja",
                    "output": {"items": {"type": "list", "items": "string", "min_items": 1}},
                },
                "check": {
                    "kind": "llm",
                    "foreach": "checklist.items",
                    "as": "question",
                    "prompt": "check.jinja",
                    "output": {"answer": {"type": "string", "enum": ["yes", "no"]}},
                },
            },
            "outputs": {"answers": "check | map(attribute='answer') | list"},
        },
        {"write.jinja": "Checklist for {{ text }}", "check.jinja": "{{ question }} {{ text }}"},
    )

    def respond(request: Any) -> str:
        text = str(request.messages[-1]["content"])
        if text.startswith("Checklist"):
            return json.dumps({"items": ["one?", "two?"]})
        return json.dumps({"answer": "yes" if text.startswith("one?") else "no"})

    result = orc.run(graph, [{"id": "r1", "text": "hello"}], transport=orc.FakeTransport(respond))
    (line,) = result.results
    assert line.status == "ok", line.error
    assert line.outputs["answers"] == ["yes", "no"]


def test_reading_keys_first_opens_no_way_to_python_internals() -> None:
    """Reading a mapping's key before its attribute must not reach Python internals: a
    dunder name stays refused, whether or not the row carries such a key."""
    import pytest

    from orchestrator.errors import UnsafeTemplateError

    row = {"__class__": "just text", "__init__": 3, "a": 1}
    for source in ("row.__class__", "row.__init__.__globals__", "''.__class__.__mro__"):
        with pytest.raises(UnsafeTemplateError, match="Python internal"):
            evaluate(source, {"row": row})
    assert evaluate("row.a + 1", {"row": row}) == 2
