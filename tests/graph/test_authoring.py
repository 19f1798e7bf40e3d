"""Papercuts of graph authoring (issue 16, item 10), each pinned by a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import ConfigurationError, GraphError, load_graph, run
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
    from orchestrator.session.summary import run_aggregates

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


def _problems(path: Path) -> list[tuple[str | None, str | None, str]]:
    with pytest.raises(GraphError) as error:
        load_graph(path)
    return [(p.node, p.field, p.message) for p in error.value.problems]


def test_compute_and_aggregate_arguments_are_checked_against_the_signature(
    tmp_path: Path,
) -> None:
    """Item 2: a misspelt or missing argument fails `validate`, not every row or the end of
    the run; a literal of the wrong declared type too."""
    found = _problems(
        _write(
            tmp_path,
            """
name: args
prompts: prompts
inputs: [text]
nodes:
  copy:
    kind: compute
    function: identity
    args: {values: text}
  gap:
    kind: compute
    function: spread
    args: {values: "[1, 2]", measure: 5}
outputs: {copy: copy, gap: gap}
aggregates:
  mid:
    function: median
    args: {valus: "results | map(attribute='gap') | list"}
""",
        )
    )
    assert (
        "copy",
        "args.values",
        "'identity' has no argument 'values' (did you mean 'value'? it takes: value)",
    ) in found
    assert ("copy", "args", "'identity' needs argument 'value' (no default)") in found
    assert any(n == "gap" and f == "args.measure" and "5 does not fit" in m for n, f, m in found)
    assert (
        None,
        "aggregates.mid.args.valus",
        "'median' has no argument 'valus' (did you mean 'values'? it takes: values)",
    ) in found


def test_unknown_keys_and_params_get_a_suggestion(tmp_path: Path) -> None:
    found = _problems(
        _write(
            tmp_path,
            """
name: keys
prompts: prompts
inputs: [text]
params: {threshold: 3}
nodes:
  judge:
    kind: llm
    prompt: judge.jinja
    forech: text
    output: {score: {type: integer, min: 1, mx: 5}}
  keep:
    kind: compute
    function: identity
    args: {value: "judge.score > params.treshold"}
outputs: {keep: keep}
""",
        )
    )
    assert ("judge", "forech", "unknown key (did you mean 'foreach'?)") in found
    assert ("judge", "output.score.mx", "unknown key (did you mean 'max'?)") in found


def test_a_misspelt_param_in_an_expression_fails_validate(tmp_path: Path) -> None:
    found = _problems(
        _write(
            tmp_path,
            """
name: params
prompts: prompts
inputs: [text]
params: {threshold: 3}
nodes:
  keep:
    kind: compute
    function: identity
    args: {value: "text | length > params.treshold"}
outputs: {keep: keep}
""",
        )
    )
    assert any(
        "'params.treshold': the graph declares no param 'treshold' (did you mean 'threshold'?" in m
        for _, _, m in found
    )


def test_required_params_are_refused_before_any_request(tmp_path: Path) -> None:
    """Item 6: perq_distilled's model_dir is required; a run without it refuses to start
    (it used to fail every row with the same error)."""
    from orchestrator.kinds.graphs import compile_graph

    shipped = Path(__file__).parents[2] / "graphs/perq_distilled.yaml"
    # Its scorer needs the `metrics` extra: read it without loading functions.
    assert compile_graph(shipped, functions=False).spec.required_params == ["model_dir"]
    needs = _write(
        tmp_path,
        """
name: needs
prompts: prompts
inputs: [text]
required_params: [model_dir]
nodes:
  copy: {kind: compute, function: identity, args: {value: params.model_dir}}
outputs: {copy: copy}
""",
    )
    with pytest.raises(ConfigurationError, match=r"required param.*model_dir"):
        run(load_graph(needs), [{"id": "a", "text": "x"}], base_url="http://127.0.0.1:9/v1")
    both = _write(
        tmp_path,
        """
name: both
prompts: prompts
inputs: [text]
params: {folder: x}
required_params: [folder]
nodes:
  copy: {kind: compute, function: identity, args: {value: params.folder}}
outputs: {copy: copy}
""",
    )
    assert any("either required or has a default" in m for _, _, m in _problems(both))


def test_agreement_takes_its_categories_from_the_judges_scale(tmp_path: Path) -> None:
    """Item 4: `jury_agreement` on a 1-5 jury no longer assumes PerQ's 0-3 (which raised
    after the whole run); an explicit `categories` still wins."""
    text = """
name: jury
prompts: prompts
inputs: [text]
nodes:
  a: {kind: llm, prompt: judge.jinja, output: {score: {type: integer, min: 1, max: LOW}}}
  b: {kind: llm, prompt: judge.jinja, output: {score: {type: integer, min: 1, max: 5}}}
  label:
    kind: compute
    function: jury_label
    args: {judges: "{'a': a, 'b': b}"}
outputs: {label: label}
aggregates:
  agreement: {function: jury_agreement, args: {results: results}}
  given: {function: jury_agreement, args: {results: results, categories: [1, 2, 3, 4, 5, 6]}}
"""
    same = load_graph(_write(tmp_path, text.replace("LOW", "5")))
    assert same.aggregates["agreement"].args["categories"] == [1, 2, 3, 4, 5]
    assert same.aggregates["given"].args["categories"] == [1, 2, 3, 4, 5, 6]
    mixed = load_graph(_write(tmp_path, text.replace("LOW", "3")))
    assert "categories" not in mixed.aggregates["agreement"].args  # no one scale: default


def test_graph_in_a_subfolder_is_told_where_its_prompts_are(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "graphs/extra").mkdir(parents=True)
    path = tmp_path / "graphs/extra/g.yaml"
    path.write_text("name: g\ninputs: [text]\nnodes: {}\noutputs: {t: text}\n")
    found = _problems(path)
    assert any(
        f == "prompts" and "add `prompts: ../../prompts` to the graph" in m for _, f, m in found
    )


def test_run_order_follows_the_file_for_independent_nodes(tmp_path: Path) -> None:
    """`validate` printed a different order from one process to the next (set order)."""
    import subprocess
    import sys

    orders = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import orchestrator as o; print(o.load_graph('graphs/jury2.yaml').order)",
            ],
            cwd=Path(__file__).parents[2],
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        orders.add(done.stdout)
    assert len(orders) == 1
    assert orders.pop().startswith("['judge_a', 'judge_b'")
