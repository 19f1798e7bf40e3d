"""Check a graph spec before any request and compile it into runnable parts.

Every problem found is reported together (file, node, field), so a user fixes a broken
graph in one pass instead of one error at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
from jinja2 import TemplateError, TemplateNotFound, TemplateSyntaxError
from pydantic import BaseModel

from .compute import ComputeFunction, resolve
from .errors import GraphError, Problem
from .schemas import SchemaError, build_model, dynamic_fields
from .spec import Aggregate, ComputeNode, GraphSpec, LLMNode, Sampling, load_spec
from .templates import Expression, Prompt, attribute_uses, make_environment, template_names

RESERVED = frozenset({"params", "run", "id", "status", "error", "results"})
RESULT_RESERVED = frozenset({"id", "status", "error"})


@dataclass
class CompiledNode:
    """A node ready to run: parsed expressions, loaded templates, compiled schema."""

    name: str
    spec: LLMNode | ComputeNode
    deps: set[str]
    foreach: Expression | None = None
    when: Expression | None = None
    prompt: Prompt | None = None
    system: Prompt | None = None
    model: type[BaseModel] | None = None  # static schema (dynamic enums left open)
    dynamic: dict[str, Expression] = field(default_factory=dict)
    function: ComputeFunction | None = None
    args: dict[str, Expression | Any] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=Sampling)
    sampling_exprs: dict[str, Expression] = field(default_factory=dict)

    @property
    def is_llm(self) -> bool:
        return isinstance(self.spec, LLMNode)

    def messages(self, context: dict[str, Any]) -> list[dict[str, str]]:
        """The chat messages of an LLM node for one call: system (if any), then user."""
        assert self.prompt is not None, f"{self.name} is not an LLM node"
        messages = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system.render(context)})
        messages.append({"role": "user", "content": self.prompt.render(context)})
        return messages


@dataclass
class CompiledAggregate:
    name: str
    spec: Aggregate
    function: ComputeFunction
    args: dict[str, Expression | Any]


@dataclass
class CompiledGraph:
    """A validated graph: nodes in a runnable order, plus what identifies it."""

    path: Path
    spec: GraphSpec
    nodes: dict[str, CompiledNode]
    order: list[str]
    outputs: dict[str, Expression]
    aggregates: dict[str, CompiledAggregate]
    content_hash: str

    @property
    def name(self) -> str:
        return self.spec.name


def _hash_graph(path: Path, spec: GraphSpec, prompts_dir: Path) -> str:
    """Hash of the graph file plus every template it uses: a prompt edit is a new graph."""
    digest = hashlib.sha256(path.read_bytes())
    for node in spec.nodes.values():
        if isinstance(node, LLMNode):
            for name in (node.prompt, node.system):
                if name and (prompts_dir / name).is_file():
                    digest.update(name.encode())
                    digest.update((prompts_dir / name).read_bytes())
    return digest.hexdigest()[:16]


def _merge_sampling(defaults: Sampling, node: LLMNode) -> Sampling:
    values = defaults.model_dump(exclude_none=True)
    values.update(
        {k: v for k, v in node.model_dump().items() if k in Sampling.model_fields and v is not None}
    )
    return Sampling(**values)


class _Checker:
    """Collects problems while compiling one graph."""

    def __init__(self, path: Path, spec: GraphSpec) -> None:
        self.path = path
        self.file = str(path)
        self.spec = spec
        self.problems: list[Problem] = []
        self.prompts_dir = (path.parent / spec.prompts).resolve()
        self.env = make_environment(self.prompts_dir)
        self.env.globals["params"] = spec.params
        # `run` (base_url, model of the run's server) is filled in by the engine.
        self.env.globals["run"] = {}

    def problem(self, message: str, node: str | None = None, field: str | None = None) -> None:
        self.problems.append(Problem(self.file, message, node, field))

    def expression(self, source: Any, node: str | None, field: str) -> Expression | None:
        if not isinstance(source, str) or not source.strip():
            self.problem("expected a non-empty expression string", node, field)
            return None
        try:
            return Expression(self.env, source)
        except TemplateSyntaxError as exc:
            self.problem(f"expression '{source}' does not parse: {exc.message}", node, field)
            return None

    def template(self, name: str, node: str, field: str) -> tuple[Prompt | None, set[str]]:
        try:
            template = self.env.get_template(name)
            names = template_names(self.env, name)
            return Prompt(template, names), names
        except TemplateNotFound as exc:
            self.problem(f"template '{exc.name}' not found under {self.prompts_dir}", node, field)
        except TemplateSyntaxError as exc:
            self.problem(
                f"template '{exc.filename or name}' line {exc.lineno}: {exc.message}", node, field
            )
        except TemplateError as exc:
            self.problem(f"template '{name}': {exc}", node, field)
        return None, set()


def compile_graph(path: Path | str) -> CompiledGraph:
    """Load, check and compile a graph file; raise GraphError listing every problem."""
    path = Path(path)
    spec = load_spec(path)
    ck = _Checker(path, spec)
    inputs = set(spec.inputs) | set(spec.optional_inputs)
    node_names = set(spec.nodes)

    for name in sorted(node_names & (inputs | RESERVED)):
        ck.problem("node name clashes with a dataset input or a reserved name", name)
    for name in sorted(inputs & RESERVED - {"id"}):
        ck.problem(f"input name '{name}' is reserved", field="inputs")
    if not ck.prompts_dir.is_dir():
        ck.problem(f"prompts folder {ck.prompts_dir} does not exist", field="prompts")

    compiled: dict[str, CompiledNode] = {}
    graph = nx.DiGraph()
    graph.add_nodes_from(node_names)
    for name, node in spec.nodes.items():
        cn = _compile_node(ck, name, node, inputs, node_names)
        compiled[name] = cn
        for dep in cn.deps:
            graph.add_edge(dep, name)

    for cycle in list(nx.simple_cycles(graph))[:5]:
        ck.problem("nodes form a cycle: " + " -> ".join([*cycle, cycle[0]]), cycle[0])

    outputs: dict[str, Expression] = {}
    for key, source in spec.outputs.items():
        if key in RESULT_RESERVED:
            ck.problem(f"output name '{key}' is reserved", field=f"outputs.{key}")
        expr = ck.expression(source, None, f"outputs.{key}")
        if expr:
            _check_names(ck, expr.names, inputs | node_names, None, f"outputs.{key}")
            outputs[key] = expr
    if not spec.outputs:
        ck.problem("the graph declares no outputs", field="outputs")

    aggregates = {
        name: agg
        for name, item in spec.aggregates.items()
        if (agg := _compile_aggregate(ck, name, item)) is not None
    }
    if ck.problems:
        raise GraphError(ck.problems)
    order = list(nx.topological_sort(graph))
    return CompiledGraph(
        path, spec, compiled, order, outputs, aggregates, _hash_graph(path, spec, ck.prompts_dir)
    )


def _check_names(
    ck: _Checker, names: set[str], known: set[str], node: str | None, field: str
) -> None:
    from .templates import BUILTIN_NAMES

    for missing in sorted(names - known - BUILTIN_NAMES - set(ck.env.globals)):
        ck.problem(
            f"variable '{missing}' is not provided by the dataset inputs, params or any node",
            node,
            field,
        )


def _compile_node(
    ck: _Checker, name: str, node: LLMNode | ComputeNode, inputs: set[str], node_names: set[str]
) -> CompiledNode:
    cn = CompiledNode(name, node, deps=set())
    known = inputs | node_names
    item_names = {node.as_, f"{node.as_}_index"} if node.foreach else set()
    used: set[str] = set()

    if node.foreach:
        cn.foreach = ck.expression(node.foreach, name, "foreach")
        if cn.foreach:
            used |= cn.foreach.names
            _check_names(ck, cn.foreach.names, known, name, "foreach")
    if node.when:
        cn.when = ck.expression(node.when, name, "when")
        if cn.when:
            used |= cn.when.names
            _check_names(ck, cn.when.names, known | item_names, name, "when")
    for dep in node.after:
        if dep not in node_names:
            ck.problem(f"unknown node '{dep}'", name, "after")
    used |= set(node.after)

    if isinstance(node, LLMNode):
        cn.sampling = _merge_sampling(ck.spec.defaults, node)
        for fld, tname in (("prompt", node.prompt), ("system", node.system)):
            if tname is None:
                continue
            template, tnames = ck.template(tname, name, fld)
            setattr(cn, fld, template)
            used |= tnames
            _check_names(ck, tnames, known | item_names, name, f"{fld} ({tname})")
        try:
            cn.model = build_model(name, node.output)
        except SchemaError as exc:
            ck.problem(f"bad output schema: {exc}", name, f"output.{exc.field}")
        except (TypeError, ValueError) as exc:
            ck.problem(f"bad output schema: {exc}", name, "output")
        for fpath, source in dynamic_fields(node.output).items():
            expr = ck.expression(source, name, f"output.{fpath}.enum_from")
            if expr:
                cn.dynamic[fpath] = expr
                used |= expr.names
                _check_names(ck, expr.names, known | item_names, name, f"output.{fpath}")
        for key, value in cn.sampling.model_dump(exclude_none=True).items():
            if isinstance(value, str):
                expr = ck.expression(value, name, key)
                if expr:
                    cn.sampling_exprs[key] = expr
                    used |= expr.names
                    _check_names(ck, expr.names, known | item_names, name, key)
        if isinstance(cn.sampling.n, int) and cn.sampling.n < 1:
            ck.problem("n must be at least 1", name, "n")
        if isinstance(cn.sampling.retries, int) and cn.sampling.retries < 0:
            ck.problem("retries must be 0 or more", name, "retries")
    else:
        cn.function = _resolve_function(ck, node.function, name, "function")
        for arg, value in node.args.items():
            if isinstance(value, str):
                expr = ck.expression(value, name, f"args.{arg}")
                if expr:
                    cn.args[arg] = expr
                    used |= expr.names
                    _check_names(ck, expr.names, known | item_names, name, f"args.{arg}")
            else:
                cn.args[arg] = value

    cn.deps = (used & node_names) - {name} - item_names
    if name in used - item_names:
        ck.problem("node refers to itself", name)
    _check_attributes(ck, cn, node_names)
    return cn


def _check_attributes(ck: _Checker, cn: CompiledNode, node_names: set[str]) -> None:
    """`judge.scoer` typos: an attribute of an LLM node that its schema lacks."""
    sources: list[tuple[str, str]] = []
    spec = cn.spec
    if isinstance(spec, LLMNode):
        assert ck.env.loader is not None
        for fld, tname in (("prompt", spec.prompt), ("system", spec.system)):
            if tname and (ck.prompts_dir / tname).is_file():
                sources.append((fld, (ck.prompts_dir / tname).read_text(encoding="utf-8")))
    for fld, expr in (("when", cn.when), ("foreach", cn.foreach)):
        if expr:
            sources.append((fld, "{{ " + expr.source + " }}"))
    for arg, value in cn.args.items():
        if isinstance(value, Expression):
            sources.append((f"args.{arg}", "{{ " + value.source + " }}"))
    for fld, source in sources:
        try:
            uses = list(attribute_uses(ck.env, source))
        except TemplateSyntaxError:
            continue
        for target, attr in uses:
            other = ck.spec.nodes.get(target)
            if (
                target in node_names
                and isinstance(other, LLMNode)
                and not other.foreach
                and (other.n or ck.spec.defaults.n or 1) == 1
                and attr not in other.output
                and attr not in ("failed", "error")
            ):
                ck.problem(
                    f"'{target}.{attr}': node '{target}' has no output field '{attr}' "
                    f"(fields: {', '.join(other.output)})",
                    cn.name,
                    fld,
                )


def _resolve_function(
    ck: _Checker, fname: str, node: str | None, field: str
) -> ComputeFunction | None:
    try:
        function = resolve(fname)
    except LookupError as exc:
        ck.problem(str(exc), node, field)
        return None
    missing = function.missing()
    if missing:
        hint = (
            f"pip install -e '.[{function.extra}]'"
            if function.extra
            else "pip install " + " ".join(missing)
        )
        ck.problem(
            f"function '{fname}' needs {', '.join(missing)}, not installed: run {hint}",
            node,
            field,
        )
    return function


def _compile_aggregate(ck: _Checker, name: str, item: Aggregate) -> CompiledAggregate | None:
    where = f"aggregates.{name}"
    function = _resolve_function(ck, item.function, None, f"{where}.function")
    args: dict[str, Expression | Any] = {}
    for arg, value in item.args.items():
        if isinstance(value, str):
            expr = ck.expression(value, None, f"{where}.args.{arg}")
            if expr:
                _check_names(ck, expr.names, {"results"}, None, f"{where}.args.{arg}")
                args[arg] = expr
        else:
            args[arg] = value
    return CompiledAggregate(name, item, function, args) if function else None


def validate(path: Path | str) -> CompiledGraph:
    """Alias for compile_graph, named for the CLI verb."""
    return compile_graph(path)
