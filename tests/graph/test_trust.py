"""The trust boundary for graph files (issue 24): a graph from someone else reads templates
only from its own folder, calls only built-in and registered functions, renders under limits
that stop work, and fails cleanly when nested too deep; `trust=True` / `--trust` (or a
folder the user names) lifts what the user asks it to. See docs/RELIABILITY.md."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import orchestrator_command

import orchestrator as orc
from orchestrator import GraphError
from orchestrator.store.runkey import RunKey, static_components

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = {"score": {"type": "integer", "min": 1, "max": 10}}
JUDGE: dict[str, Any] = {"kind": "llm", "prompt": "judge.jinja", "output": OUTPUT}


def judge_spec(**top: Any) -> dict[str, Any]:
    return {
        "name": "trust",
        "inputs": ["text"],
        "nodes": {"judge": JUDGE},
        "outputs": {"score": "judge.score"},
        **top,
    }


def compute_spec(function: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "trust",
        "inputs": ["text"],
        "nodes": {"f": {"kind": "compute", "function": function, "args": args}},
        "outputs": {"f": "f"},
    }


# --- prompts ---------------------------------------------------------------------------------


def test_dict_graph_reads_no_file_through_prompts() -> None:
    spec = judge_spec(prompts="/etc", nodes={"judge": {**JUDGE, "prompt": "passwd"}})
    with pytest.raises(GraphError) as info:
        orc.graph_from_dict(spec)
    assert "root:" not in str(info.value)


def _project_with_sibling_prompts(tmp_path: Path) -> Path:
    """A user's project laid out like the shipped one: graphs/ beside prompts/."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "judge.jinja").write_text("Rate {{ text }}\n", encoding="utf-8")
    (tmp_path / "graphs").mkdir()
    path = tmp_path / "graphs" / "graph.yaml"
    path.write_text(yaml.safe_dump(judge_spec(prompts="../prompts")), encoding="utf-8")
    return path


def test_sibling_prompts_need_the_users_word(tmp_path: Path) -> None:
    path = _project_with_sibling_prompts(tmp_path)
    with pytest.raises(GraphError) as info:
        orc.load_graph(path)
    (problem,) = info.value.problems
    assert problem.field == "prompts" and "outside the graph's folder" in problem.message
    assert "--prompts" in problem.message and "--trust" in problem.message
    trusted = orc.load_graph(path, trust=True)
    named = orc.load_graph(path, prompts_dir=tmp_path / "prompts")
    assert trusted.templates == named.templates == {"judge.jinja": "Rate {{ text }}\n"}
    # Trust changes what is allowed, not what is asked: the same graph, the same key.
    assert trusted.content_hash == named.content_hash
    keys = [RunKey.from_components(static_components(g, {}, "data")) for g in (trusted, named)]
    assert keys[0].digest == keys[1].digest
    refused = orchestrator_command("validate", str(path))
    assert refused.returncode == 1 and "--trust" in refused.stderr, refused.stderr
    for flags in (["--trust"], ["--prompts", str(tmp_path / "prompts")]):
        done = orchestrator_command("validate", str(path), *flags)
        assert done.returncode == 0, done.stdout + done.stderr


def test_shipped_graphs_validate_untrusted() -> None:
    for path in sorted((ROOT / "graphs").glob("*.yaml")):
        try:
            assert orc.load_graph(path).name, path
        except GraphError as exc:
            # Without an optional extra (the floors' venv) a graph is refused for that alone.
            assert all("not installed" in p.message for p in exc.problems), exc


# --- functions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "args"),
    [("os:system", {"command": "text"}), ("builtins:eval", {"source": "text"})],
)
def test_dict_graph_calls_no_library_function(function: str, args: dict[str, Any]) -> None:
    spec = compute_spec(function, args)
    with pytest.raises(GraphError) as info:
        orc.graph_from_dict(spec)
    (problem,) = info.value.problems
    assert (problem.node, problem.field) == ("f", "function")
    assert "trust=True" in problem.message and "--trust" in problem.message
    graph = orc.graph_from_dict(spec, trust=True)
    assert graph.nodes["f"].function is not None  # type: ignore[attr-defined]


BESIDE = """
def double(value):
    return value * 2
"""


def test_module_beside_the_graph_needs_trust_and_keeps_its_key(tmp_path: Path) -> None:
    (tmp_path / "trust_beside_mod.py").write_text(BESIDE, encoding="utf-8")
    path = tmp_path / "graph.yaml"
    spec = compute_spec("trust_beside_mod:double", {"value": "text"})
    path.write_text(yaml.safe_dump({**spec, "prompts": "."}), encoding="utf-8")
    with pytest.raises(GraphError) as info:
        orc.load_graph(path)
    assert "--trust" in str(info.value)
    graph = orc.load_graph(path, trust=True)
    key = RunKey.from_components(static_components(graph, {}, "data"))
    assert "function trust_beside_mod:double" in " ".join(key.components)
    result = orc.run(path, [{"id": "a", "text": "ab"}], trust=True)
    assert result.results[0].outputs == {"f": "abab"}


def test_function_registered_by_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    (site / "trustpkg_ep").mkdir(parents=True)
    (site / "trustpkg_ep" / "__init__.py").write_text(
        "def shout(text):\n    return text.upper()\n\n\ndef other(text):\n    return text\n"
    )
    info = site / "trustpkg_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trustpkg-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[orchestrator.functions]\nshout_ep = trustpkg_ep:shout\n"
    )
    monkeypatch.syspath_prepend(str(site))
    by_name = orc.graph_from_dict(compute_spec("shout_ep", {"text": "text"}))
    by_path = orc.graph_from_dict(compute_spec("trustpkg_ep:shout", {"text": "text"}))
    for graph in (by_name, by_path):
        result = orc.run(graph, [{"id": "a", "text": "hi"}])
        assert result.results[0].outputs == {"f": "HI"}
    with pytest.raises(GraphError, match="--trust"):
        orc.graph_from_dict(compute_spec("trustpkg_ep:other", {"text": "text"}))


def test_function_registered_in_process_is_the_users() -> None:
    @orc.register("trust_test_triple")
    def triple(value: str) -> str:
        return value * 3

    graph = orc.graph_from_dict(compute_spec("trust_test_triple", {"value": "text"}))
    assert orc.run(graph, [{"id": "a", "text": "x"}]).results[0].outputs == {"f": "xxx"}


# --- templates that work for ever ------------------------------------------------------------

FOREVER = {
    "nested range loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"
    ),
    "empty-body range loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    ),
    "empty-body loops over a string": (
        "{% set s = 'x' * 1000 %}{% for a in s %}{% for b in s %}{% for c in s %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    ),
    "a huge repeat": "{{ 'x' * 10**9 }}",
    "repeats in a loop": "{% for i in range(100000) %}{{ 'x' * 999999 }}{% endfor %}",
    "doubling with ~ in a namespace": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}"
    ),
    "doubling with + in a macro": (
        "{% macro d(s, n) %}{% if n %}{{ d(s + s, n - 1) }}{% endif %}{% endmacro %}"
        "{{ d('x', 45) }}"
    ),
    "doubling with a filter": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s | replace('x', 'xx') %}{% endfor %}{{ ns.s | length }}"
    ),
    "doubling through a recursive loop": (
        "{% for s in ['x'] recursive %}{{ loop([s ~ s]) }}{% endfor %}"
    ),
    "endless macro recursion": "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
    "branching macro recursion": (
        "{% macro m(n) %}{% if n < 40 %}{{ m(n + 1) }}{{ m(n + 1) }}{% endif %}{% endmacro %}"
        "{{ m(0) }}"
    ),
}


@pytest.mark.parametrize("template", list(FOREVER.values()), ids=list(FOREVER))
def test_template_that_works_for_ever_is_stopped(template: str) -> None:
    graph = orc.graph_from_dict(judge_spec(), {"judge.jinja": template})
    transport = orc.FakeTransport()
    started = time.monotonic()
    result = orc.run(graph, [{"id": "a", "text": "x"}], transport=transport)
    took = time.monotonic() - started
    (line,) = result.results
    assert line.status == "failed" and line.error is not None
    assert "node 'judge'" in line.error and "rendering the prompt failed" in line.error
    assert took < 20, took
    assert transport.node_requests == []


def test_normal_template_renders_as_before() -> None:
    template = (
        "{% macro item(n) %}<{{ n }}>{% endmacro %}"
        "{% for i in range(3) %}{{ item(i) }}{% endfor %} {{ text }} {{ 'ab' * 2 }}"
    )
    graph = orc.graph_from_dict(judge_spec(), {"judge.jinja": template})
    messages = graph.nodes["judge"].messages({"text": "t", "params": {}, "run": {}})  # type: ignore[attr-defined]
    assert messages[-1]["content"] == "<0><1><2> t abab"


# --- nesting ---------------------------------------------------------------------------------


def _deep(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    current = root
    for _ in range(depth):
        current["a"] = {}
        current = current["a"]
    return root


def test_deeply_nested_dict_is_a_graph_error() -> None:
    spec = compute_spec("identity", {"value": "text"})
    with pytest.raises(GraphError, match="nested deeper"):
        orc.graph_from_dict({**spec, "params": {"deep": _deep(5000)}})


def test_huge_dict_is_a_graph_error() -> None:
    spec = compute_spec("identity", {"value": "text"})
    with pytest.raises(GraphError, match="more than"):
        orc.graph_from_dict({**spec, "params": {"big": list(range(200_000))}})


def test_deeply_nested_yaml_file_is_a_graph_error(tmp_path: Path) -> None:
    path = tmp_path / "graph.yaml"
    text = yaml.safe_dump({**compute_spec("identity", {"value": "text"}), "prompts": "."})
    path.write_text(text + "params: {deep: " + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(GraphError, match="nested deeper"):
        orc.load_graph(path)
    nested = yaml.safe_load("[" * 100 + "]" * 100)  # as a user's own yaml.safe_load reads it
    with pytest.raises(GraphError, match="nested deeper"):
        orc.graph_from_dict(
            {**compute_spec("identity", {"value": "text"}), "params": {"d": nested}}
        )


# --- servers (the CLI and real sockets: tests/calls/test_secrets.py) -----------------------


def test_graphs_server_param_is_allowed_only_by_the_user() -> None:
    theirs = "http://graph-chose.invalid:9/v1"
    spec = judge_spec(
        params={"judge_url": theirs}, nodes={"judge": {**JUDGE, "base_url": "params.judge_url"}}
    )
    graph = orc.graph_from_dict(spec, {"judge.jinja": "Rate {{ text }}"})
    rows = [{"id": "a", "text": "x"}]
    mine = "http://mine.invalid:1/v1"
    refused = orc.FakeTransport()
    with pytest.raises(orc.ConfigurationError, match="--allow-server"):
        orc.run(graph, rows, base_url=mine, transport=refused)
    assert refused.requests == [] and refused.posts == []
    for allowed in (
        {"params": {"judge_url": "http://also-mine.invalid:2/v1"}},  # the user's --param
        {"allow_servers": [theirs]},
        {"trust": True},
    ):
        transport = orc.FakeTransport()
        result = orc.run(graph, rows, base_url=mine, transport=transport, **allowed)
        assert result.results[0].status == "ok", allowed
        assert transport.node_requests, allowed


def skip_without_extras(function: str) -> None:
    """Skip where the function's optional extra is missing (the floors' venv): the graph is
    then refused for that too, and a trusted one cannot compile."""
    from orchestrator.compute.registry import resolve

    missing = resolve(function).missing()
    if missing:
        pytest.skip(f"{function} needs {', '.join(missing)}")


def test_pickle_path_comes_only_from_the_user() -> None:
    """distilled_score unpickles `model_dir`/scorer.joblib: a graph naming a folder of its
    own (a literal, or a param it defaults) would run that pickle's code."""
    skip_without_extras("distilled_score")

    def spec(model_dir: str, **top: Any) -> dict[str, Any]:
        args = {"text": "text", "model_dir": model_dir}
        return {**compute_spec("distilled_score", args), **top}

    for refused in (
        spec("'.'"),
        spec("params.model_dir", params={"model_dir": "."}),
    ):
        with pytest.raises(GraphError) as info:
            orc.graph_from_dict(refused)
        (problem,) = info.value.problems
        assert (problem.node, problem.field) == ("f", "args.model_dir")
        assert "required_params" in problem.message and "--trust" in problem.message
        assert orc.graph_from_dict(refused, trust=True).nodes["f"]
    assert orc.graph_from_dict(spec("params.model_dir", required_params=["model_dir"]))


FILE_ARGUMENTS = [
    ("distilled_score", {"text": "text"}, "model_dir"),
    ("embedding_similarity", {"reference": "text", "candidate": "text"}, "model_path"),
    ("meteor", {"reference": "text", "candidate": "text"}, "wordnet_dir"),
    ("ensemble_votes", {"votes": "{}", "sets": "{}"}, "calibration"),
]


@pytest.mark.parametrize(("function", "args", "arg"), FILE_ARGUMENTS)
def test_a_graph_does_not_choose_which_file_a_function_reads(
    function: str, args: dict[str, Any], arg: str
) -> None:
    """A built-in that reads a file or folder (a pickle, a model folder whose modules.json
    names classes to import, WordNet, a calibration JSON whose numbers land in the outputs)
    takes that path only from the user: a graph naming /etc/passwd there, directly or as its
    own param default, is refused; a param the graph leaves empty is the user's to give."""

    skip_without_extras(function)

    def spec(value: str, **top: Any) -> dict[str, Any]:
        return {**compute_spec(function, {**args, arg: value}), **top}

    for refused in (
        spec("'/etc/passwd'"),
        spec("params.where", params={"where": "/etc/passwd"}),
        spec("text"),  # a row's field: whoever wrote the data would choose
    ):
        with pytest.raises(GraphError) as info:
            orc.graph_from_dict(refused)
        (problem,) = info.value.problems
        assert (problem.node, problem.field) == ("f", f"args.{arg}")
        assert "--param" in problem.message and "--trust" in problem.message
        assert orc.graph_from_dict(refused, trust=True).nodes["f"]
    assert orc.graph_from_dict(spec("params.where", params={"where": None})).nodes["f"]
    assert orc.graph_from_dict(spec("params.where", required_params=["where"])).nodes["f"]


def test_render_limits_are_the_documented_ones() -> None:
    from orchestrator.graph.sandbox import MAX_MACRO_DEPTH, MAX_RENDER_CHARS, RENDER_SECONDS

    doc = " ".join((ROOT / "docs" / "graph-format.md").read_text(encoding="utf-8").split())
    assert f"within {RENDER_SECONDS:g} s, {MAX_RENDER_CHARS // 1_000_000} million characters" in doc
    assert f"{MAX_MACRO_DEPTH} nested macro calls" in doc
