"""Papercuts of graph authoring (issue 16, item 10), each pinned by a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import GraphError, load_graph
from orchestrator.compute.registry import resolve


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts/judge.jinja").write_text("Is this polite? {{ text }}")
    path = tmp_path / "graph.yaml"
    path.write_text(text)
    return path


def test_yes_and_no_are_labels_not_booleans(tmp_path: Path) -> None:
    graph = load_graph(
        _write(
            tmp_path,
            """
name: polite
prompts: prompts
inputs: [text]
params: {strict: true, mode: on}
nodes:
  judge:
    kind: llm
    prompt: judge.jinja
    output:
      verdict: {type: string, enum: [yes, no]}
outputs: {verdict: judge.verdict}
""",
        )
    )
    assert graph.spec.nodes["judge"].output["verdict"].enum == ["yes", "no"]
    # true/false stay booleans (YAML 1.2); YAML 1.1's on/off/yes/no are plain words.
    assert graph.spec.params == {"strict": True, "mode": "on"}


def test_unknown_function_suggests_the_closest_builtins() -> None:
    with pytest.raises(LookupError, match="did you mean jury_agreement"):
        resolve("jury_agrement")
    with pytest.raises(LookupError, match="orchestrator functions"):
        resolve("nothing_like_it_at_all")


def test_misspelt_function_in_a_graph_is_named_with_a_suggestion(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
name: typo
prompts: prompts
inputs: [text]
nodes:
  total:
    kind: compute
    function: idenity
    args: {value: text}
outputs: {total: total}
""",
    )
    with pytest.raises(GraphError) as error:
        load_graph(path)
    message = str(error.value)
    assert "total" in message and "did you mean identity" in message


def test_aggregates_see_param_overrides(tmp_path: Path) -> None:
    """docs/pairwise.md once said they did not; they do, as nodes do."""
    from orchestrator.summary import run_aggregates

    path = _write(
        tmp_path,
        """
name: spread
prompts: prompts
inputs: [text]
params: {measure: range}
nodes:
  length:
    kind: compute
    function: identity
    args: {value: "text | length"}
outputs: {length: length}
aggregates:
  gap:
    function: spread
    args: {values: "results | map(attribute='length') | list", measure: params.measure}
""",
    )
    graph = load_graph(path)
    lines = [{"id": str(i), "status": "ok", "length": n} for i, n in enumerate([1, 2, 3, 4, 100])]
    assert run_aggregates(graph, lines)["gap"] == 99
    assert run_aggregates(graph, lines, {"measure": "iqr"})["gap"] == 2
