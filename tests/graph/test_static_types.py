"""What `validate` knows of a value's type before a call: a `when` that reads a non-boolean
field as true/false, fields read off each element of a list of samples, of foreach values
or of `results`, and answer maps whose keys are not the judge's enum (issue 26)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import write_graph

from orchestrator import GraphError, compile_graph
from orchestrator.errors import Problem

GATE = {
    "kind": "llm",
    "prompt": "judge.jinja",
    "output": {
        "on_topic": {"type": "string", "enum": ["yes", "no"]},
        "relevant": "boolean",
        "score": "integer",
        "note": "string",
        "tags": {"type": "list", "items": "string"},
        "points": {"type": "list", "items": {"type": "object", "fields": {"title": "string"}}},
    },
}
JUDGE = {"kind": "llm", "prompt": "judge.jinja", "output": {"reason": "string", "score": "integer"}}
TEMPLATES = {"judge.jinja": "Judge {{ text }}"}


def graph_with(**nodes: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "t",
        "inputs": ["text"],
        "nodes": {"gate": GATE, **nodes},
        "outputs": {"score": "gate.score"},
    }


def compile_problems(tmp_path: Path, graph: dict[str, Any]) -> list[Problem]:
    path = write_graph(tmp_path, graph, TEMPLATES)
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    return info.value.problems


def compiles(tmp_path: Path, graph: dict[str, Any]) -> None:
    compile_graph(write_graph(tmp_path, graph, TEMPLATES))


# --- when needs a boolean ------------------------------------------------------------------


def test_when_on_an_enum_string_is_refused_with_the_comparison(tmp_path: Path) -> None:
    found = compile_problems(tmp_path, graph_with(judge={**JUDGE, "when": "gate.on_topic"}))
    assert len(found) == 1
    p = found[0]
    assert (p.node, p.field) == ("judge", "when")
    assert "'gate.on_topic' is a string field ('yes', 'no')" in p.message
    assert "when: \"gate.on_topic == 'yes'\"" in p.message
    assert p.file.endswith("graph.yaml") or p.file


@pytest.mark.parametrize(
    ("when", "fix"),
    [
        ("gate.score", "gate.score > 0"),
        ("not gate.on_topic", "gate.on_topic == 'yes'"),
        ("gate.relevant and gate.note", "gate.note != ''"),
        ("gate.tags", "gate.tags | length > 0"),
    ],
)
def test_when_on_other_non_booleans_is_refused(tmp_path: Path, when: str, fix: str) -> None:
    (p,) = compile_problems(tmp_path, graph_with(judge={**JUDGE, "when": when}))
    assert (p.node, p.field) == ("judge", "when")
    assert fix in p.message


@pytest.mark.parametrize(
    "when",
    [
        "gate.relevant",
        "not gate.relevant",
        "gate.on_topic == 'yes'",
        "gate.relevant and gate.score > 2",
        "gate.relevant or not gate.relevant",
        "gate.tags | length > 0",
        "gate is not none",
        "text",  # an input: its type is not known before the rows are read
    ],
)
def test_when_on_booleans_and_comparisons_is_accepted(tmp_path: Path, when: str) -> None:
    compiles(tmp_path, graph_with(judge={**JUDGE, "when": when}))


def test_when_on_a_foreach_element_field_is_typed_too(tmp_path: Path) -> None:
    each = {**JUDGE, "foreach": "gate.points", "as": "point", "when": "point.title"}
    (p,) = compile_problems(tmp_path, graph_with(each=each))
    assert (p.node, p.field) == ("each", "when")
    assert "point.title != ''" in p.message
    compiles(tmp_path, graph_with(each={**each, "when": "point.title != ''"}))


# --- fields read through lists ----------------------------------------------------------------


def test_field_of_n_samples_is_checked(tmp_path: Path) -> None:
    sampled = {**JUDGE, "n": 3, "temperature": 0.7}
    mean = {
        "kind": "compute",
        "function": "mean",
        "args": {"values": "sampled | map(attribute='scor') | list"},
    }
    (p,) = compile_problems(tmp_path, graph_with(sampled=sampled, avg=mean))
    assert (p.node, p.field) == ("avg", "args.values")
    assert "n samples" in p.message and "did you mean 'score'?" in p.message
    good = {**mean, "args": {"values": "sampled | map(attribute='score') | list"}}
    compiles(tmp_path, graph_with(sampled=sampled, avg=good))


def test_field_of_foreach_values_and_list_items_is_checked(tmp_path: Path) -> None:
    each = {**JUDGE, "foreach": "gate.points", "as": "point"}
    graph = graph_with(each=each)
    graph["outputs"] = {
        "reasons": "each | map(attribute='reasn') | list",
        "titles": "gate.points | selectattr('titel') | list",
    }
    found = {p.field: p for p in compile_problems(tmp_path, graph)}
    assert "did you mean 'reason'?" in found["outputs.reasons"].message
    assert "did you mean 'title'?" in found["outputs.titles"].message


def test_results_fields_in_an_aggregate_are_checked(tmp_path: Path) -> None:
    graph = graph_with()
    graph["aggregates"] = {
        "mean_score": {
            "function": "mean",
            "args": {"values": "results | map(attribute='scores') | list"},
        }
    }
    (p,) = compile_problems(tmp_path, graph)
    assert p.field == "aggregates.mean_score.args.values"
    assert "did you mean 'score'?" in p.message
    graph["aggregates"]["mean_score"]["args"]["values"] = "results | map(attribute='score') | list"
    compiles(tmp_path, graph)


# --- answer maps ------------------------------------------------------------------------------

PAIRWISE: dict[str, Any] = {
    "name": "pw",
    "inputs": ["id", "a", "b", "text"],
    "nodes": {
        "comparisons": {
            "kind": "compute",
            "function": "pairs",
            "args": {"candidates": "{'x': a, 'y': b}", "orders": "'both'"},
        },
        "judge": {
            "kind": "llm",
            "foreach": "comparisons",
            "as": "cmp",
            "prompt": "judge.jinja",
            "output": {"choice": {"type": "string", "enum": ["Output (a)", "Output (b)"]}},
        },
        "votes": {
            "kind": "compute",
            "function": "map_votes",
            "args": {
                "comparisons": "comparisons",
                "judgments": "judge",
                "field": "'choice'",
                "positions": "{'Output (A)': 'first', 'Output (b)': 'second'}",
            },
        },
    },
    "outputs": {"votes": "votes"},
}


def test_answer_map_keys_must_be_the_judges_enum(tmp_path: Path) -> None:
    found = compile_problems(tmp_path, PAIRWISE)
    assert {(p.node, p.field) for p in found} == {("votes", "args.positions")}
    messages = " | ".join(p.message for p in found)
    assert "'Output (A)' is not an answer" in messages
    assert "did you mean 'Output (a)'?" in messages
    assert "no key for the answer(s) Output (a)" in messages


def test_answer_map_matching_the_enum_compiles(tmp_path: Path) -> None:
    votes = PAIRWISE["nodes"]["votes"]
    fixed = {**votes["args"], "positions": "{'Output (a)': 'first', 'Output (b)': 'second'}"}
    graph = {**PAIRWISE, "nodes": {**PAIRWISE["nodes"], "votes": {**votes, "args": fixed}}}
    compiles(tmp_path, graph)


def test_answer_map_field_must_exist(tmp_path: Path) -> None:
    votes = PAIRWISE["nodes"]["votes"]
    fixed = {**votes["args"], "field": "'choise'"}
    graph = {**PAIRWISE, "nodes": {**PAIRWISE["nodes"], "votes": {**votes, "args": fixed}}}
    (p,) = compile_problems(tmp_path, graph)
    assert (p.node, p.field) == ("votes", "args.field")
    assert "did you mean 'choice'?" in p.message
