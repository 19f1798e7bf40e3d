"""What `validate` (or the run's start, for dataset inputs) knows of a declared type and uses
(issue 35, item 14): a comparison that can never be true, a function argument of the wrong
type, and a read of a node that `when` may skip, each named by node and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import Problem

GATE = {
    "kind": "llm",
    "prompt": "gate.jinja",
    "output": {
        "on_topic": {"type": "string", "enum": ["yes", "no"]},
        "relevant": "boolean",
        "score": "integer",
        "note": "string",
        "points": {"type": "list", "items": {"type": "object", "fields": {"title": "string"}}},
    },
}
JUDGE = {"kind": "llm", "prompt": "judge.jinja", "output": {"score": "integer"}}
TEMPLATES = {"gate.jinja": "Gate {{ text }}", "judge.jinja": "Judge {{ text }}"}


def graph(outputs: dict[str, str] | None = None, **nodes: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "inputs": ["text"],
        "nodes": {"gate": GATE, **nodes},
        "outputs": outputs or {"score": "gate.score"},
    }


def problems(spec: dict[str, Any], templates: dict[str, str] | None = None) -> list[Problem]:
    with pytest.raises(orc.GraphError) as refused:
        orc.graph_from_dict(spec, {**TEMPLATES, **(templates or {})})
    return refused.value.problems


def compiles(spec: dict[str, Any], templates: dict[str, str] | None = None) -> None:
    orc.graph_from_dict(spec, {**TEMPLATES, **(templates or {})})


# --- a comparison that can never be true ----------------------------------------------------


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("gate.on_topic == false", "'gate.on_topic' is a string field ('yes', 'no')"),
        ("gate.on_topic != 1", "'gate.on_topic' is a string field ('yes', 'no')"),
        ("true == gate.on_topic", "'gate.on_topic' is a string field ('yes', 'no')"),
        ("gate.on_topic == 'Yes'", "'Yes' is not one of its values"),
        ("gate.score == '3'", "'gate.score' is an integer field"),
        ("gate.relevant == 'true'", "'gate.relevant' is a boolean field"),
        ("gate.note == 0", "'gate.note' is a string field"),
    ],
)
def test_a_comparison_with_a_literal_of_another_type_is_refused(when: str, says: str) -> None:
    (p,) = problems(graph(judge={**JUDGE, "when": when}))
    assert (p.node, p.field) == ("judge", "when")
    assert says in p.message
    assert "never" in p.message


def test_the_same_in_an_output_a_template_and_a_foreach_element() -> None:
    each = {**GATE, "foreach": "gate.points", "as": "point", "when": "point.title == 5"}
    spec = graph(
        {"score": "gate.score", "on": "gate.on_topic == true"},
        judge=JUDGE,
        each=each,
    )
    templates = {"judge.jinja": "{% if gate.on_topic == false %}off{% endif %} {{ text }}"}
    found = {(p.node, p.field): p.message for p in problems(spec, templates)}
    assert set(found) == {(None, "outputs.on"), ("judge", "prompt"), ("each", "when")}
    assert "'point.title' is a string field" in found[("each", "when")]


@pytest.mark.parametrize(
    "when",
    [
        "gate.on_topic == 'yes'",
        "gate.on_topic != 'no'",
        "gate.score == 3",
        "gate.score == 3.0",
        "gate.relevant == true",
        "gate.relevant == 1",  # true == 1 in Jinja as in Python
        "gate.note == none",
        "gate.on_topic in ['yes']",
        "text == 5",  # an input: its type is the rows'
    ],
)
def test_comparisons_that_can_hold_compile(when: str) -> None:
    compiles(graph(judge={**JUDGE, "when": when}))


# --- a function argument of another type than the field it reads ---------------------------


def test_rouge_on_an_integer_field_is_refused_at_validate() -> None:
    rouge = {"kind": "compute", "function": "rouge", "args": {"reference": "text"}}
    spec = graph(
        judge=JUDGE, overlap={**rouge, "args": {**rouge["args"], "candidate": "gate.score"}}
    )
    (p,) = problems(spec)
    assert (p.node, p.field) == ("overlap", "args.candidate")
    assert "'gate.score' is an integer field" in p.message and "'rouge'" in p.message
    assert "| string" in p.message
    ok = {**rouge, "args": {**rouge["args"], "candidate": "gate.score | string"}}
    compiles(graph(judge=JUDGE, overlap=ok))
    compiles(
        graph(judge=JUDGE, overlap={**rouge, "args": {**rouge["args"], "candidate": "gate.note"}})
    )


def test_rouge_on_a_numeric_dataset_input_is_refused_before_any_request(tmp_path: Path) -> None:
    """An input's type is known only from its rows: the run refuses it at its start, before
    any request, when every one of the first rows holds a number there."""
    spec = {
        "name": "overlap",
        "inputs": ["answer", "text"],
        "nodes": {
            "judge": {"kind": "llm", "prompt": "judge.jinja", "output": {"reply": "string"}},
            "overlap": {
                "kind": "compute",
                "function": "rouge",
                "args": {"reference": "answer", "candidate": "judge.reply"},
            },
        },
        "outputs": {"rouge": "overlap"},
    }
    path = write_graph(tmp_path / "g", spec, TEMPLATES)
    rows = [{"id": f"r{i}", "answer": 40 + i, "text": "t"} for i in range(5)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    fake = orc.FakeTransport()
    with pytest.raises(orc.GraphError) as refused:
        orc.run(path, data, transport=fake, out=out)
    (p,) = refused.value.problems
    assert (p.node, p.field) == ("overlap", "args.reference")
    assert "input 'answer'" in p.message and "40 (int)" in p.message and "'rouge'" in p.message
    assert fake.requests == []
    mixed = write_rows(
        tmp_path / "mixed.jsonl", [*rows, {"id": "s", "answer": "forty", "text": "t"}]
    )
    result = orc.run(path, mixed, transport=orc.FakeTransport())  # a mix is left to each row
    assert [line.status for line in result.results].count("failed") == 5


# --- a read of a node that `when` may skip ---------------------------------------------------


def cascade(template: str, **judge: Any) -> dict[str, Any]:
    verifier = {
        "kind": "llm",
        "prompt": "verifier.jinja",
        "when": "gate.relevant",
        "output": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
    }
    spec = graph(judge={**JUDGE, "prompt": "final.jinja", **judge}, verifier=verifier)
    return spec | {"_templates": {"verifier.jinja": "Verify {{ text }}", "final.jinja": template}}


def compile_cascade(template: str, **judge: Any) -> list[Problem]:
    spec = cascade(template, **judge)
    templates = spec.pop("_templates")
    try:
        orc.graph_from_dict(spec, {**TEMPLATES, **templates})
    except orc.GraphError as refused:
        return refused.problems
    return []


def test_a_template_reading_a_gated_node_is_told_it_may_be_skipped() -> None:
    (p,) = compile_cascade("Final {{ text }} {{ verifier.verdict }}")
    assert (p.node, p.field) == ("judge", "prompt")
    assert "'verifier.verdict'" in p.message
    assert "skipped on rows where its when 'gate.relevant' is false" in p.message
    assert "{% if verifier %}" in p.message
    assert "not provided" not in p.message


@pytest.mark.parametrize(
    ("template", "judge"),
    [
        ("{% if verifier %}{{ verifier.verdict }}{% endif %}", {}),
        ("{% if verifier is not none %}{{ verifier.verdict }}{% else %}-{% endif %}", {}),
        ("{{ verifier.verdict if verifier else 'none' }}", {}),
        ("{{ verifier and verifier.verdict }}", {}),
        ("{{ not verifier or verifier.verdict == 'yes' }}", {}),
        ("{{ verifier.verdict | default('-') }}", {}),
        ("{% if gate.relevant %}{{ verifier.verdict }}{% endif %}", {}),
        ("{{ verifier.verdict }}", {"when": "gate.relevant"}),
        ("{{ verifier.verdict }}", {"when": "verifier is not none"}),
    ],
)
def test_guarded_reads_of_a_gated_node_compile(template: str, judge: dict[str, Any]) -> None:
    assert compile_cascade(template, **judge) == []


def test_the_guarded_cascade_runs() -> None:
    spec = cascade("Final {% if verifier %}{{ verifier.verdict }}{% else %}-{% endif %}")
    templates = spec.pop("_templates")
    compiled = orc.graph_from_dict(spec, {**TEMPLATES, **templates})

    def respond(request: Any) -> str:
        text = str(request.messages[-1]["content"])
        if text.startswith("Gate"):
            relevant = "bike" in text
            return json.dumps(
                {"on_topic": "yes", "relevant": relevant, "score": 1, "note": "", "points": []}
            )
        if text.startswith("Verify"):
            return json.dumps({"verdict": "yes"})
        return json.dumps({"score": 2})

    rows = [{"id": "a", "text": "bike"}, {"id": "b", "text": "pizza"}]
    result = orc.run(compiled, rows, transport=orc.FakeTransport(respond))
    assert [line.status for line in result.results] == ["ok", "ok"]


def test_an_aggregate_naming_a_node_is_told_to_read_results() -> None:
    spec = graph()
    spec["aggregates"] = {"n": {"function": "mean", "args": {"values": "gate.score"}}}
    (p,) = problems(spec)
    assert p.field == "aggregates.n.args.values"
    assert "'gate' is a node" in p.message and "results" in p.message
    assert "not provided" not in p.message


def test_validate_on_the_command_line_names_node_and_field(tmp_path: Path) -> None:
    path = write_graph(
        tmp_path, graph(judge={**JUDGE, "when": "gate.on_topic == false"}), TEMPLATES
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert "judge" in result.output and "when" in result.output
    assert "Traceback" not in result.output
