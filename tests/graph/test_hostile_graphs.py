"""Broken and hostile graph files: every one is refused before any request is sent, with one
line naming the file, node and field, and none of them crashes, hangs or eats memory.

Every case goes through `compile_graph` and the in-process run path; a representative subset
(one per layer: file, YAML, spec, graph, template, schema) also goes through the real
`orchestrator validate` and `orchestrator run` commands.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer
from helpers import is_canary, orchestrator_command, run_graph, write_rows

from orchestrator import GraphError, compile_graph
from orchestrator.errors import Problem
from orchestrator.graph.loaders import MAX_TEMPLATE_BYTES
from orchestrator.graph.schemas import MAX_SCHEMA_DEPTH
from orchestrator.graph.spec import MAX_NODES
from orchestrator.graph.yamlfile import MAX_GRAPH_BYTES, MAX_YAML_DEPTH, MAX_YAML_VALUES

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
JUDGE_TEMPLATE = "Judge this text: {{ text }}\n"

JUDGE: dict[str, Any] = {
    "kind": "llm",
    "prompt": "judge.jinja",
    "output": {"reason": "string", "score": {"type": "integer", "min": 1, "max": 10}},
}
GRAPH: dict[str, Any] = {
    "name": "hostile",
    "prompts": "prompts",
    "inputs": ["text"],
    "nodes": {"judge": JUDGE},
    "outputs": {"score": "judge.score"},
}


def graph_text(**top: Any) -> str:
    """The small valid graph as YAML, with top-level keys replaced."""
    return yaml.safe_dump({**GRAPH, **top}, sort_keys=False)


def judge_with(**fields: Any) -> str:
    """The valid graph with extra (or replaced) keys on its one LLM node."""
    return graph_text(nodes={"judge": {**JUDGE, **fields}})


def with_nodes(**nodes: Any) -> str:
    """The valid graph with more nodes beside the judge."""
    return graph_text(nodes={"judge": JUDGE, **nodes})


def identity(value: Any) -> dict[str, Any]:
    return {"kind": "compute", "function": "identity", "args": {"value": value}}


def nested_objects(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        spec = {"type": "object", "fields": {"inner": spec}}
    return spec


def alias_bomb() -> str:
    """Nine levels of nine aliases each: 9**9 strings once expanded, 1 kB as text."""
    lines = ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"  a{level}: &a{level} [{refs}]")
    return graph_text() + "params:\n" + "\n".join(lines) + "\n"


DUPLICATE_NODE = """\
name: hostile
prompts: prompts
inputs: [text]
nodes:
  judge:
    kind: llm
    prompt: judge.jinja
    output: {score: integer}
  judge:
    kind: compute
    function: identity
    args: {value: text}
outputs: {score: judge.score}
"""

DUPLICATE_FIELD = """\
name: hostile
prompts: prompts
inputs: [text]
nodes:
  judge:
    kind: llm
    prompt: judge.jinja
    output:
      score: integer
      reason: string
      score: string
outputs: {score: judge.score}
"""


# Importing it would leave a mark: a refused module must never have been imported.
BESIDE_MODULE = """
import pathlib

pathlib.Path(__file__).with_suffix(".imported").write_text("imported")


def run(v):
    return v
"""


def outside_prompts(root: Path) -> Path:
    """A prompts folder next to (not inside) the graph's folder, holding judge.jinja."""
    folder = root.parent / "outside"
    folder.mkdir(exist_ok=True)
    (folder / "judge.jinja").write_text(JUDGE_TEMPLATE, encoding="utf-8")
    return folder


@dataclass(frozen=True)
class Case:
    """One broken graph and where its problem must be reported."""

    id: str
    graph: str | bytes
    node: str | None = None
    field: str | None = None
    says: str = ""  # a fragment of the message
    templates: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # extra files (symlinks, outside files)
    cli: bool = False  # also run through the real commands


CASES: list[Case] = [
    # --- the file itself -------------------------------------------------------------------
    Case(
        "five-megabyte file",
        graph_text() + "# " + "x" * 5_000_000 + "\n",
        says=f"limited to 1 MB ({MAX_GRAPH_BYTES:,} bytes)",
        cli=True,
    ),
    Case("empty file", "", says="the file is empty"),
    Case(
        "not UTF-8 (Latin-1)",
        graph_text().replace("hostile", "café", 1).encode("latin-1"),
        says="UTF-8",
    ),
    Case("binary junk", bytes(range(256)) * 64, says="not UTF-8", cli=True),
    Case("top level is a list", "- judge\n- score\n", says="top level is a list"),
    Case("top level is a scalar", "just some words\n", says="top level is a string"),
    # --- YAML ------------------------------------------------------------------------------
    Case(
        "YAML syntax error", "name: x\nnodes: [unclosed\n", says="not valid YAML (line 3", cli=True
    ),
    Case("billion laughs alias bomb", alias_bomb(), says="aliases expand to more than", cli=True),
    Case(
        "alias inside itself",
        graph_text() + "params: &loop {again: *loop}\n",
        says="refers to the value that contains it",
    ),
    Case(
        "!!python/object tag",
        graph_text() + "params: {x: !!python/object/apply:os.system ['echo pwned']}\n",
        says="no !!python",
    ),
    Case(
        "YAML nested 5000 deep",
        graph_text() + "params: {x: " + "[" * 5000 + "]" * 5000 + "}\n",
        says=f"nested deeper than {MAX_YAML_DEPTH} levels",
    ),
    Case(
        "300000 values in 600 kB",
        graph_text() + "params: {x: [" + "1," * 300_000 + "]}\n",
        says=f"more than {MAX_YAML_VALUES} values",
    ),
    Case(
        "integer of 5000 digits",
        graph_text() + "params: {x: " + "9" * 5000 + "}\n",
        says="cannot be read",
    ),
    # --- the spec --------------------------------------------------------------------------
    Case(
        "duplicate node ids",
        DUPLICATE_NODE,
        node="judge",
        says="defined twice (lines 5 and 9)",
        cli=True,
    ),
    Case(
        "duplicate output field",
        DUPLICATE_FIELD,
        node="judge",
        field="output.score",
        says="appears twice (lines 9 and 11)",
    ),
    Case(
        "huge number of nodes",
        with_nodes(**{f"n{i}": identity("text") for i in range(MAX_NODES + 500)}),
        field="nodes",
        says=f"at most {MAX_NODES}",
    ),
    Case(
        "node id that is not a string",
        graph_text().replace("  judge:\n", "  123:\n", 1),
        node="123",
        says="must be a string",
    ),
    Case(
        "node id that is not a name",
        with_nodes(**{"my judge": identity("text")}),
        node="my judge",
        says="plain name",
    ),
    Case("unknown node kind", judge_with(kind="oracle"), node="judge", field="kind", says="oracle"),
    Case(
        "misspelt key",
        judge_with(temprature=0.2),
        node="judge",
        field="temprature",
        says="unknown key",
    ),
    Case(
        "temperature: hot",
        judge_with(temperature="hot"),
        node="judge",
        field="temperature",
        says="'hot'",
    ),
    Case(
        "temperature: true",
        judge_with(temperature=True),
        node="judge",
        field="temperature",
        says="not true/false",
    ),
    Case("top_p above 1", judge_with(top_p=1.5), node="judge", field="top_p", says="at most 1"),
    Case("n: 0", judge_with(n=0), node="judge", field="n", says="at least 1"),
    Case("negative n in defaults", graph_text(defaults={"n": -2}), field="defaults.n"),
    Case(
        "negative retries",
        judge_with(retries=-1),
        node="judge",
        field="retries",
        says="at least 0",
        cli=True,
    ),
    Case(
        "prompts folder path with a NUL byte",
        graph_text(prompts="pro\0mpts"),
        field="prompts",
        says="control characters",
    ),
    # --- the graph -------------------------------------------------------------------------
    Case(
        "cycle",
        with_nodes(a=identity("b"), b=identity("a")),
        node="a",
        field="args.value",
        says="cycle",
        cli=True,
    ),
    Case(
        "twelve nodes all using each other",
        with_nodes(
            **{
                f"n{i}": identity(f"[{', '.join(f'n{j}' for j in range(12) if j != i)}]")
                for i in range(12)
            }
        ),
        node="n0",
        field="args.value",
        says="cycle",
    ),
    Case("self-loop", with_nodes(a=identity("a")), node="a", field="args.value", says="itself"),
    Case("unknown node in after", judge_with(after=["ghost"]), node="judge", field="after"),
    Case(
        "output names an unknown node",
        graph_text(outputs={"score": "ghost.score"}),
        field="outputs.score",
        says="'ghost'",
    ),
    Case(
        "output names an unknown field",
        graph_text(outputs={"score": "judge.scroe"}),
        field="outputs.score",
        says="no output field 'scroe'",
        cli=True,
    ),
    Case(
        "unknown compute function",
        with_nodes(f={"kind": "compute", "function": "no_such_function"}),
        node="f",
        field="function",
        says="no_such_function",
    ),
    Case(
        "compute function from a relative import",
        with_nodes(f={"kind": "compute", "function": ".hidden:thing"}),
        node="f",
        field="function",
        says="cannot load",
    ),
    # --- what an untrusted graph may not reach (docs/RELIABILITY.md, threat model) ---------
    Case(
        "function os:system",
        with_nodes(f={"kind": "compute", "function": "os:system", "args": {"command": "text"}}),
        node="f",
        field="function",
        says="--trust",
        cli=True,
    ),
    Case(
        "function builtins:eval",
        with_nodes(f={"kind": "compute", "function": "builtins:eval", "args": {"source": "text"}}),
        node="f",
        field="function",
        says="--trust",
    ),
    Case(
        "function os.system (dotted)",
        with_nodes(f={"kind": "compute", "function": "os.system", "args": {"command": "text"}}),
        node="f",
        field="function",
        says="--trust",
    ),
    Case(
        "function from a module beside the graph",
        with_nodes(f={"kind": "compute", "function": "beside_hostile:run", "args": {"v": "text"}}),
        node="f",
        field="function",
        says="--trust",
        setup=lambda root: (root / "beside_hostile.py").write_text(BESIDE_MODULE),
    ),
    # Issue 35: the graph chose which environment variable became the key the user's server
    # was sent (here the user's AWS secret).
    Case(
        "api_key_env without a server of its own",
        judge_with(api_key_env="AWS_SECRET_ACCESS_KEY"),
        node="judge",
        field="api_key_env",
        says="no base_url of its own",
        cli=True,
    ),
    Case(
        "prompts folder /etc",
        graph_text(prompts="/etc", nodes={"judge": {**JUDGE, "prompt": "passwd"}}),
        field="prompts",
        says="outside the graph's folder",
        cli=True,
    ),
    Case(
        "prompts folder ../outside",
        graph_text(prompts="../outside"),
        field="prompts",
        says="outside the graph's folder",
        setup=lambda root: outside_prompts(root),
    ),
    Case(
        "prompts folder that is a symlink to outside",
        graph_text(prompts="linked"),
        field="prompts",
        says="outside the graph's folder",
        setup=lambda root: (root / "linked").symlink_to(outside_prompts(root)),
    ),
    Case(
        "when does not parse",
        judge_with(when="text =="),
        node="judge",
        field="when",
        says="does not parse",
    ),
    Case(
        "foreach does not parse",
        judge_with(foreach="[text,"),
        node="judge",
        field="foreach",
        says="does not parse",
    ),
    Case(
        "foreach over an integer field",
        with_nodes(each={**JUDGE, "foreach": "judge.score"}),
        node="each",
        field="foreach",
        says="a field of type integer",
        cli=True,
    ),
    Case(
        "foreach over a number param",
        graph_text(params={"aspects": 3}, nodes={"judge": {**JUDGE, "foreach": "params.aspects"}}),
        node="judge",
        field="foreach",
        says="needs a list",
    ),
    Case(
        "expression nested 5000 deep",
        judge_with(when="(" * 5000 + "text" + ")" * 5000),
        node="judge",
        field="when",
        says="nests too deeply",
        cli=True,
    ),
    Case(
        "expression reaching for globals",
        judge_with(when="cycler.__init__.__globals__"),
        node="judge",
        field="when",
        says="'__globals__' (a Python internal)",
    ),
    Case(
        "expression builds 2**99999999999",
        judge_with(when="2 ** 99999999999 > 1"),
        node="judge",
        field="when",
        says="100,000 bits",
    ),
    # --- templates -------------------------------------------------------------------------
    Case(
        "missing template",
        judge_with(prompt="nope.jinja"),
        node="judge",
        field="prompt",
        says="not found",
    ),
    Case(
        "template variable nothing provides",
        graph_text(),
        node="judge",
        field="prompt (judge.jinja)",
        says="'refernce'",
        templates={"judge.jinja": "{{ text }} against {{ refernce }}"},
    ),
    Case(
        "template syntax error",
        graph_text(),
        node="judge",
        field="prompt",
        says="line 2",
        templates={"judge.jinja": "Judge\n{{ text "},
    ),
    Case(
        "template escape via __class__.__mro__",
        graph_text(),
        node="judge",
        field="prompt",
        says="'__mro__' (a Python internal)",
        templates={"judge.jinja": "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ text }}"},
        cli=True,
    ),
    Case(
        "template escape via cycler globals",
        graph_text(),
        node="judge",
        field="prompt",
        says="'__globals__'",
        templates={"judge.jinja": "{{ cycler.__init__.__globals__.os }}{{ text }}"},
    ),
    Case(
        "template escape via attr filter",
        graph_text(),
        node="judge",
        field="prompt",
        says="'__class__'",
        templates={"judge.jinja": "{{ text|attr('__class__') }}"},
    ),
    Case(
        "template escape via map(attribute=…)",
        graph_text(),
        node="judge",
        field="prompt",
        says="'__class__'",
        templates={"judge.jinja": "{{ [text]|map(attribute='__class__')|list }}"},
    ),
    Case(
        "template escape via item lookup",
        graph_text(),
        node="judge",
        field="prompt",
        says="item '__class__'",
        templates={"judge.jinja": "{{ text['__class__'] }}"},
    ),
    Case(
        "template escape in an included file",
        graph_text(),
        node="judge",
        field="prompt",
        says="template 'part.jinja'",
        templates={
            "judge.jinja": "{{ text }}{% include 'part.jinja' %}",
            "part.jinja": "{{ self.__dict__ }}",
        },
    ),
    Case(
        "template that builds 2 GB",
        graph_text(),
        node="judge",
        field="prompt",
        says="more than 1,000,000 items",
        templates={"judge.jinja": "{{ 'a' * 2000000000 }}{{ text }}"},
    ),
    Case(
        "template that centers to 3 GB",
        graph_text(),
        node="judge",
        field="prompt",
        says="`center` with a width of 3,000,000,000",
        templates={"judge.jinja": "{{ text | center(3000000000) }}"},
    ),
    Case(
        "template that formats 3 GB wide",
        graph_text(),
        node="judge",
        field="prompt",
        says="`format` with a width of 3,000,000,000",
        templates={"judge.jinja": "{{ '{:>3000000000}'.format(text) }}"},
    ),
    Case(
        "template that includes itself",
        graph_text(),
        node="judge",
        field="prompt",
        says="loop",
        templates={"judge.jinja": "{{ text }}{% include 'judge.jinja' %}"},
    ),
    Case(
        "template that is not UTF-8",
        graph_text(),
        node="judge",
        field="prompt",
        says="not UTF-8",
        templates={"judge.jinja": "Jugez {{ text }} – très".encode("cp1252")},
    ),
    Case(
        "prompt path ../../etc/passwd",
        judge_with(prompt="../../etc/passwd"),
        node="judge",
        field="prompt",
        says="leaves the prompts folder",
    ),
    Case(
        "prompt path /etc/passwd",
        judge_with(prompt="/etc/passwd"),
        node="judge",
        field="prompt",
        says="absolute path",
    ),
    Case(
        "symlinked template pointing outside",
        judge_with(prompt="linked.jinja"),
        node="judge",
        field="prompt",
        says="outside the prompts folder",
        setup=lambda root: (root / "prompts" / "linked.jinja").symlink_to(root / "secret.txt"),
        cli=True,
    ),
    Case(
        "data file ../secret.txt",
        graph_text(files={"secret": "../secret.txt"}),
        field="files.secret",
        says="leaves the prompts folder",
    ),
    Case(
        "data file /etc/passwd",
        graph_text(files={"secret": "/etc/passwd"}),
        field="files.secret",
        says="absolute path",
    ),
    Case(
        "symlinked data file pointing outside",
        graph_text(files={"secret": "linked.json"}),
        field="files.secret",
        says="outside the prompts folder",
        setup=lambda root: (root / "prompts" / "linked.json").symlink_to(root / "secret.txt"),
        cli=True,
    ),
    Case(
        "variant template outside",
        graph_text(variants=["prompt=../secret.txt"]),
        field="variants[0]",
        says="leaves the prompts folder",
    ),
    # --- output schemas --------------------------------------------------------------------
    Case(
        "bad schema type",
        judge_with(output={"reason": "string", "score": {"type": "decimal"}}),
        node="judge",
        field="output.score.type",
        says="'string'",
    ),
    Case(
        "enum with no values",
        judge_with(output={"score": "integer", "label": {"type": "string", "enum": []}}),
        node="judge",
        field="output.label",
        says="at least one value",
    ),
    Case(
        "enum values of the wrong type",
        judge_with(
            output={"score": "integer", "grade": {"type": "integer", "enum": ["low", "high"]}}
        ),
        node="judge",
        field="output.grade",
        says="not of type integer",
    ),
    Case(
        "min greater than max",
        judge_with(output={"score": {"type": "integer", "min": 10, "max": 1}}),
        node="judge",
        field="output.score",
        says="greater than max",
    ),
    Case(
        "schema nested 12 deep",
        judge_with(output={"score": "integer", "deep": nested_objects(12)}),
        node="judge",
        says=f"nest more than {MAX_SCHEMA_DEPTH} deep",
        cli=True,
    ),
    Case(
        "schema field pydantic would swallow",
        judge_with(output={"score": "integer", "model_config": "string"}),
        node="judge",
        field="output.model_config",
        says="may not start with",
    ),
    Case(
        "output with no fields",
        judge_with(output={}),
        node="judge",
        field="output",
        says="no fields",
    ),
]


# --- graphs that validate, and whose render would build gigabytes or work for minutes -------
# (issue 35, item 8). Each must fail its example within milliseconds to a second, naming the
# node, before the big value exists and before any request; `validate` cannot see these,
# since the sizes come from params or from values the template computes.

BIG = "{% set s = 'x' * 1000000 %}"
RENDER_CASES: list[Case] = [
    Case(
        "400 concatenations of a 10M-item list",
        graph_text(),
        says="items or characters in all",
        templates={
            "judge.jinja": "{% set l = ('x' * 1000000) | list %}{% set m = l + l + l + l + l %}"
            + "{% set a = m + m %}" * 400
            + "{{ text }}"
        },
    ),
    Case(
        "an integer squared 30 times",
        graph_text(),
        says="over 100,000 bits",
        templates={"judge.jinja": "{% set x = 3 %}" + "{% set x = x * x %}" * 30 + "{{ text }}"},
    ),
    Case(
        "center to a width from params",
        graph_text(params={"width": 3_000_000_000}),
        says="center filter would build at least 3,000,000,000",
        templates={"judge.jinja": "{{ text | center(params.width) }}"},
    ),
    Case(
        "str.format to a width from params",
        graph_text(params={"width": 3_000_000_000}),
        says="`str.format` would build at least 3,000,000,000",
        templates={"judge.jinja": "{{ ('{:>' ~ params.width ~ '}').format(text) }}"},
    ),
    Case(
        "a long string a million times, printed",
        graph_text(),
        says="printing a value would build",
        templates={"judge.jinja": BIG + "{{ [s] * 1000000 }}{{ text }}"},
    ),
    Case(
        "a long string a million times, joined",
        graph_text(),
        says="join filter would build",
        templates={"judge.jinja": BIG + "{{ ([s] * 1000000) | join }}{{ text }}"},
    ),
    Case(
        "a macro printing a long string 100000 times",
        graph_text(),
        says="a macro or block's output would build",
        templates={
            "judge.jinja": BIG + "{% macro m() %}{% for i in range(100000) %}{{ s }}{% endfor %}"
            "{% endmacro %}{{ m() | length }}{{ text }}"
        },
    ),
]


def build(case: Case, root: Path) -> Path:
    """Write the case's graph, its templates and any extra files under `root`."""
    prompts = root / "prompts"
    prompts.mkdir(parents=True)
    for name, text in {"judge.jinja": JUDGE_TEMPLATE, **case.templates}.items():
        data = text.encode("utf-8") if isinstance(text, str) else text
        (prompts / name).write_bytes(data)
    (root / "secret.txt").write_text("not a prompt\n", encoding="utf-8")
    if case.setup:
        case.setup(root)
    path = root / "graph.yaml"
    path.write_bytes(case.graph.encode("utf-8") if isinstance(case.graph, str) else case.graph)
    return path


def matches(problem: Problem, case: Case) -> bool:
    """The problem sits exactly where the case says and says what it should."""
    if case.node is not None and problem.node != case.node:
        return False
    if case.field is not None and problem.field != case.field:
        return False
    return case.says in problem.message


def located_line(text: str, path: Path, case: Case) -> str | None:
    """The output line naming the file (and the node and field, when the case has them)."""
    wanted = [str(path), case.says]
    if case.node is not None:
        wanted.append(f"node '{case.node}'")
    if case.field is not None:
        wanted.append(f"field '{case.field}'")
    return next((line for line in text.splitlines() if all(w in line for w in wanted)), None)


def ids(cases: list[Case]) -> list[str]:
    return [case.id for case in cases]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rows")
    return write_rows(folder / "rows.jsonl", [{"id": "1", "text": "a fine text"}])


def test_corpus_is_large_and_distinct() -> None:
    assert len(CASES) >= 25
    assert len(set(ids(CASES + RENDER_CASES))) == len(CASES) + len(RENDER_CASES)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_refused_at_compile_with_place(case: Case, tmp_path: Path) -> None:
    path = build(case, tmp_path)
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    problems = info.value.problems
    assert any(matches(p, case) for p in problems), "\n".join(map(str, problems))
    for problem in problems:
        line = str(problem)
        assert "\n" not in line and line.startswith(f"{path}: ")
        assert len(line) < 1000, line[:200]
    assert not list(tmp_path.rglob("*.imported"))  # refused without importing the module


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_refused_before_any_request(case: Case, tmp_path: Path, rows: Path) -> None:
    path = build(case, tmp_path / "case")
    out = tmp_path / "run"
    with FakeServer() as server, pytest.raises(GraphError):
        run_graph(path, rows, out, server.base_url)
    assert server.requests == []
    assert not out.exists()  # refused before the run folder was even made


def refused_render(case: Case, root: Path, rows: Path, server: FakeServer) -> str | None:
    """The error of the case's one example when it failed naming the node, before any
    request for it (the canary a run sends first aside); None when it did not."""
    path = build(case, root / "case")
    before = len(server.requests)
    ran = run_graph(path, rows, root / "run", server.base_url, use_cache=False)
    sent = [body for body in server.requests[before:] if not is_canary(body)]
    (line,) = ran.result.results
    error = line.error or ""
    refused = line.status == "failed" and not sent
    if refused and "node 'judge': rendering the prompt failed" in error and case.says in error:
        return error
    return None


@pytest.mark.parametrize("case", RENDER_CASES, ids=ids(RENDER_CASES))
def test_render_that_would_build_gigabytes_is_refused_at_once(
    case: Case, tmp_path: Path, rows: Path
) -> None:
    path = build(case, tmp_path / "compiled")
    assert compile_graph(path)  # nothing in the source says how big it gets
    with FakeServer() as server:
        started = time.monotonic()
        error = refused_render(case, tmp_path, rows, server)
        took = time.monotonic() - started
    assert error is not None, case.id
    # Before: 20-130 s, or gigabytes, or both. The refusal comes before the big value is
    # built; the bound is generous for a loaded CI machine, not the expected time.
    assert took < 15, took


# --- the real commands, in subprocesses ------------------------------------------------------

CLI_CASES = [case for case in CASES if case.cli]
MARKUP_CASE = Case(
    "node id that is Rich markup",
    with_nodes(**{"[/x]": identity("text")}),
    node="[/x]",
    says="plain name",
)


@dataclass
class CommandResult:
    path: Path
    validate: subprocess.CompletedProcess[str]
    run: subprocess.CompletedProcess[str]
    run_out: Path
    requests: int


def run_commands(case: Case, root: Path, rows: Path) -> CommandResult:
    path = build(case, root / "case")
    out = root / "run"
    validate = orchestrator_command("validate", str(path))
    with FakeServer() as server:
        run = orchestrator_command(
            "run", str(path), "--data", str(rows), "--out", str(out), "--no-cache",
            "--base-url", server.base_url,
        )  # fmt: skip
        requests = len(server.requests)
    return CommandResult(path, validate, run, out, requests)


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory, rows: Path) -> dict[str, CommandResult]:
    """Both commands for every CLI case, run a few at a time (each is a fresh interpreter)."""
    cases = [*CLI_CASES, MARKUP_CASE]
    roots = [tmp_path_factory.mktemp("cli") for _ in cases]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = pool.map(lambda pair: run_commands(*pair, rows), zip(cases, roots, strict=True))
        return {case.id: result for case, result in zip(cases, results, strict=True)}


def check_commands(case: Case, result: CommandResult) -> None:
    for proc in (result.validate, result.run):
        output = proc.stdout + proc.stderr
        assert proc.returncode == 1, output
        assert "Traceback" not in output, output
        assert located_line(proc.stderr, result.path, case), proc.stderr
    assert result.requests == 0
    assert not result.run_out.exists()


# The `commands` fixture runs 36 interpreters (~50 s on 2 cores); under `--dist loadgroup`
# each worker that took one of these tests would run all of them again, so they share one.
ONE_WORKER = pytest.mark.xdist_group("hostile-graph-commands")


@ONE_WORKER
@pytest.mark.parametrize("case", CLI_CASES, ids=ids(CLI_CASES))
def test_commands_refuse_with_one_clear_line(
    case: Case, commands: dict[str, CommandResult]
) -> None:
    check_commands(case, commands[case.id])


@ONE_WORKER
def test_commands_refuse_node_id_that_is_markup(commands: dict[str, CommandResult]) -> None:
    check_commands(MARKUP_CASE, commands[MARKUP_CASE.id])


def test_markup_node_id_refused_in_process(tmp_path: Path) -> None:
    path = build(MARKUP_CASE, tmp_path)
    with pytest.raises(GraphError) as info:
        compile_graph(path)
    assert any(matches(p, MARKUP_CASE) for p in info.value.problems)


# --- the figure for docs/RELIABILITY.md ------------------------------------------------------


def test_hostile_graph_figure(tmp_path: Path, rows: Path, figure: Any) -> None:
    """Every case through the run path against one fake server: refusals and requests."""
    refused = 0
    most_requests = 0
    with FakeServer() as server:
        for number, case in enumerate(CASES):
            path = build(case, tmp_path / f"case{number}")
            before = len(server.requests)
            try:
                run_graph(path, rows, tmp_path / f"run{number}", server.base_url)
            except GraphError:
                refused += 1
            most_requests = max(most_requests, len(server.requests) - before)
        for number, case in enumerate(RENDER_CASES):
            if refused_render(case, tmp_path / f"render{number}", rows, server) is not None:
                refused += 1
    total = len(CASES) + len(RENDER_CASES)
    let_through = total - refused
    figure(
        "hostile graph files",
        f"{total} broken graphs (5 MB file, alias bomb, sandbox escapes, cycles, "
        f"bad schemas, …) given to `run`, {len(RENDER_CASES)} of them valid until a render "
        "would build gigabytes",
        runs=total,
        lost=let_through,
        max_requests=most_requests,
        note="lost: broken graphs that got past validation, or whose render was not refused "
        "before any request",
    )
    assert let_through == 0
    assert most_requests == 0


def test_limits_are_the_documented_ones() -> None:
    doc = (ROOT / "docs" / "graph-format.md").read_text(encoding="utf-8")
    rows = {
        "graph file size": f"1 MB ({MAX_GRAPH_BYTES:,} bytes)",
        "YAML nesting": f"{MAX_YAML_DEPTH} levels",
        "counting every alias expansion": f"{MAX_YAML_VALUES:,}",
        "nodes": f"{MAX_NODES:,}",
        "schema nesting": f"{MAX_SCHEMA_DEPTH} levels",
        "template file size": f"{MAX_TEMPLATE_BYTES // 1_000_000} MB",
    }
    for name, value in rows.items():
        assert any(name in line and value in line for line in doc.splitlines()), name
