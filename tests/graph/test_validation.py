"""Every class of graph-file problem is caught before any request, and named precisely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import write_graph
from jinja2.exceptions import SecurityError
from typer.testing import CliRunner

from orchestrator import GraphError, compile_graph
from orchestrator.cli import app
from orchestrator.compute import register
from orchestrator.errors import Problem
from orchestrator.graph.templates import Expression, make_environment

JUDGE = {"kind": "llm", "prompt": "judge.jinja", "output": {"reason": "string", "score": "integer"}}
BASE: dict[str, Any] = {
    "name": "t",
    "inputs": ["text"],
    "nodes": {"judge": JUDGE},
    "outputs": {"score": "judge.score"},
}


def problems(tmp_path: Path, graph: dict[str, Any], templates: dict[str, str] | None = None):
    path = write_graph(tmp_path, graph, templates or {"judge.jinja": "Judge {{ text }}"})
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    return info.value.problems


def one(tmp_path: Path, graph: dict[str, Any], templates: dict[str, str] | None = None):
    found = problems(tmp_path, graph, templates)
    assert len(found) >= 1
    return found[0]


def test_valid_graph_compiles(tmp_path: Path) -> None:
    path = write_graph(tmp_path, BASE, {"judge.jinja": "Judge {{ text }}"})
    graph = compile_graph(path)
    assert graph.order == ["judge"]
    assert graph.nodes["judge"].is_llm


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("name: x\nnodes: [unclosed\n")
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    assert "line" in str(info.value) and str(path) in str(info.value)


def test_unknown_key_names_node_and_field(tmp_path: Path) -> None:
    graph = {**BASE, "nodes": {"judge": {**JUDGE, "temprature": 0.2}}}
    p = one(tmp_path, graph)
    assert p.node == "judge" and p.field == "temprature"


def test_cycle(tmp_path: Path) -> None:
    graph = {
        **BASE,
        "nodes": {
            "a": {"kind": "compute", "function": "identity", "args": {"value": "b"}},
            "b": {"kind": "compute", "function": "identity", "args": {"value": "a"}},
        },
        "outputs": {"x": "a"},
    }
    p = one(tmp_path, graph)
    assert "cycle" in p.message and p.node in ("a", "b")


def test_unknown_node_in_after(tmp_path: Path) -> None:
    graph = {**BASE, "nodes": {"judge": {**JUDGE, "after": ["ghost"]}}}
    p = one(tmp_path, graph)
    assert p.node == "judge" and p.field == "after" and "ghost" in p.message


def test_missing_template(tmp_path: Path) -> None:
    graph = {**BASE, "nodes": {"judge": {**JUDGE, "prompt": "nope.jinja"}}}
    p = one(tmp_path, graph)
    assert p.node == "judge" and p.field == "prompt" and "nope.jinja" in p.message


def test_template_syntax_error(tmp_path: Path) -> None:
    p = one(tmp_path, BASE, {"judge.jinja": "Judge {{ text "})
    assert p.node == "judge" and "line 1" in p.message


def test_template_variable_nothing_provides(tmp_path: Path) -> None:
    p = one(tmp_path, BASE, {"judge.jinja": "Judge {{ text }} against {{ refernce }}"})
    assert p.node == "judge" and "refernce" in p.message and p.field.startswith("prompt")


def test_attribute_the_schema_lacks(tmp_path: Path) -> None:
    graph = {
        **BASE,
        "outputs": {"score": "judge.score"},
        "nodes": {
            "judge": JUDGE,
            "twice": {
                "kind": "compute",
                "function": "identity",
                "args": {"value": "judge.scor * 2"},
            },
        },
    }
    p = one(tmp_path, graph)
    assert p.node == "twice" and "scor" in p.message and "score" in p.message


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"type": "integer", "min": 5, "max": 1}, "greater than max"),
        ({"type": "list"}, "needs `items`"),
        ({"type": "string", "enum": []}, "at least one value"),
        ({"type": "object"}, "needs `fields`"),
        ({"type": "string", "min": 1}, "integer and number"),
        ({"type": "text"}, "Input should be"),
    ],
)
def test_bad_schemas(tmp_path: Path, field: dict[str, Any], message: str) -> None:
    graph = {**BASE, "nodes": {"judge": {**JUDGE, "output": {"reason": "string", "bad": field}}}}
    p = one(tmp_path, graph)
    assert p.node == "judge" and message in p.message
    assert "bad" in (p.field or "")


def test_unknown_compute_function(tmp_path: Path) -> None:
    graph = {
        **BASE,
        "nodes": {"judge": JUDGE, "f": {"kind": "compute", "function": "no_such_fn", "args": {}}},
    }
    p = one(tmp_path, graph)
    assert p.node == "f" and p.field == "function" and "no_such_fn" in p.message


def test_function_with_missing_extra_names_pip_command(tmp_path: Path) -> None:
    register("needs_missing_lib", requires=("definitely_not_installed_xyz",), extra="metrics")(
        lambda: None
    )
    graph = {
        **BASE,
        "nodes": {"judge": JUDGE, "f": {"kind": "compute", "function": "needs_missing_lib"}},
    }
    p = one(tmp_path, graph)
    assert "pip install 'orchestrator-judge[metrics]'" in p.message
    assert "pip install -e '.[metrics]'" in p.message


def test_name_clash_with_input(tmp_path: Path) -> None:
    graph = {**BASE, "nodes": {"text": JUDGE}, "outputs": {"score": "text.score"}}
    assert any(p.node == "text" and "clashes" in p.message for p in problems(tmp_path, graph))


def test_all_problems_reported_together(tmp_path: Path) -> None:
    graph = {
        **BASE,
        "nodes": {
            "judge": {**JUDGE, "prompt": "nope.jinja"},
            "f": {"kind": "compute", "function": "no_such_fn"},
        },
    }
    assert len(problems(tmp_path, graph)) >= 2


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    good = write_graph(tmp_path / "good", BASE, {"judge.jinja": "Judge {{ text }}"})
    assert runner.invoke(app, ["validate", str(good)]).exit_code == 0
    bad = write_graph(tmp_path / "bad", BASE, {"judge.jinja": "Judge {{ txt }}"})
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "txt" in result.output and "judge" in result.output


def test_shipped_graphs_validate() -> None:
    root = Path(__file__).parents[2]
    for graph in sorted((root / "graphs").glob("*.yaml")):
        try:
            compile_graph(graph)
        except GraphError as exc:
            # A graph whose optional extra is missing here is fine; anything else is a bug.
            assert all("pip install" in p.message for p in exc.problems), str(exc)
        assert (root / "examples" / f"{graph.stem}.jsonl").is_file(), graph.stem


# --- hardening against hostile files: what must keep working, and what is refused at render --


def test_yaml_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "judge.jinja").write_text("Judge {{ text }}")
    path = tmp_path / "graph.yaml"
    path.write_text(
        "name: t\n"
        "prompts: prompts\n"
        "inputs: [text]\n"
        "params: {shared: &common {kind: llm, prompt: judge.jinja}}\n"
        "nodes:\n"
        "  a: {<<: *common, output: {score: integer}}\n"
        "  b: {<<: *common, output: {score: integer}}\n"
        "outputs: {a: a.score, b: b.score}\n"
    )
    graph = compile_graph(path)
    assert sorted(graph.nodes) == ["a", "b"]
    assert all(n.is_llm and n.spec.prompt == "judge.jinja" for n in graph.nodes.values())


def test_duplicate_top_level_key_names_the_field(tmp_path: Path) -> None:
    path = write_graph(tmp_path, BASE, {"judge.jinja": "Judge {{ text }}"})
    path.write_text(path.read_text() + "name: again\n")
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    (problem,) = info.value.problems
    assert problem.field == "name" and "appears twice" in problem.message


def test_ordinary_templates_are_not_mistaken_for_escapes(tmp_path: Path) -> None:
    template = (
        "{% for word in text.split() %}{{ loop.index }}:{{ word }} {% endfor %}\n"
        "{{ ['a', 'b'] | join('_') }} {{ [{'name': 'x'}] | map(attribute='name') | list }}\n"
        "{{ '%.2f' % 1.5 }} {{ '-' * 40 }} {{ 2 ** 10 }}{% include 'part.jinja' %}"
    )
    templates = {"judge.jinja": template, "part.jinja": "{{ text | upper }}"}
    graph = {
        **BASE,
        "nodes": {
            "judge": JUDGE,
            "f": {"kind": "compute", "function": "identity", "args": {"value": "judge.get('x')"}},
        },
    }
    path = write_graph(tmp_path, graph, templates)
    compiled = compile_graph(path)
    text = compiled.nodes["judge"].messages({"text": "two words", "params": {}, "run": {}})
    assert "1:two 2:words" in text[0]["content"] and "a_b ['x']" in text[0]["content"]
    assert "1.50 " + "-" * 40 + " 1024TWO WORDS" in text[0]["content"]


def test_filters_over_constants_are_not_run_while_compiling() -> None:
    # Folded, `{{ 'a' | center(2000000000) }}` would build 2 GB inside `validate`.
    env = make_environment(None)
    code = env.compile("{{ 'a' | center(9) }}", raw=True)
    assert "center" in code and "'    a    '" not in code
    assert env.from_string("{{ 'a' | center(5) }}").render() == "  a  "


@pytest.mark.parametrize(
    ("source", "values"),
    [
        ("text * n", {"text": "ab", "n": 10_000_000}),
        ("base ** n", {"base": 7, "n": 10_000_000}),
        ("fmt % 1", {"fmt": "%0999999999d"}),
    ],
)
def test_operators_refuse_huge_results_at_render(source: str, values: dict[str, Any]) -> None:
    expr = Expression(make_environment(None), source)
    with pytest.raises(SecurityError):
        expr(values)


def test_sandbox_still_refuses_internals_named_at_render() -> None:
    # A name that only the data supplies cannot be checked before the run.
    expr = Expression(make_environment(None), "value[key]")
    assert expr({"value": {"a": 1}, "key": "a"}) == 1
    with pytest.raises(SecurityError):
        expr({"value": "text", "key": "__class__"})


def test_problem_is_one_line_whatever_the_names() -> None:
    problem = Problem("g.yaml", "bad\nvalue \x1b[31mred", node="a\nb", field="x\ty")
    text = str(problem)
    assert "\n" not in text and "\x1b" not in text and "\t" not in text
    assert text == "g.yaml: node 'a\\nb', field 'x\\ty': bad value \\x1b[31mred"


def test_a_function_that_needs_the_server_is_refused_as_an_aggregate(tmp_path: Path) -> None:
    """Aggregates run over finished results with no server; an async (runtime) function
    there would hand back an unawaited coroutine, so validate refuses it."""
    spec = {
        "name": "agg",
        "inputs": ["text"],
        "nodes": {"copy": {"kind": "compute", "function": "identity", "args": {"value": "text"}}},
        "outputs": {"copy": "copy"},
        "aggregates": {
            "cut": {"function": "truncate_to_tokens", "args": {"text": "'x'", "max_tokens": 3}}
        },
    }
    path = write_graph(tmp_path, spec, {})
    with pytest.raises(GraphError) as error:
        compile_graph(path)
    assert "can only run as a node, not as an aggregate" in str(error.value)
    assert "aggregates.cut.function" in str(error.value)
