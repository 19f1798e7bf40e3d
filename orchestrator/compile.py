"""Check a graph spec before any request and compile it into runnable parts.

Every problem found is reported together (file, node, field), so a user fixes a broken
graph in one pass instead of one error at a time.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
from jinja2 import TemplateError, TemplateNotFound, TemplateSyntaxError, nodes
from pydantic import BaseModel

from .compute import ComputeFunction, resolve
from .errors import GraphError, Problem
from .loaders import SealedLoader, all_sources, has_dynamic_reference, template_sources
from .schemas import SchemaError, build_model, dynamic_fields
from .spec import (
    IDENTIFIER,
    SAMPLING_RANGES,
    Aggregate,
    ComputeNode,
    FieldSpec,
    GraphSpec,
    LLMNode,
    Sampling,
    load_spec,
    sampling_problem,
    spec_from_raw,
)
from .templates import (
    BUILTIN_NAMES,
    Expression,
    Prompt,
    attribute_uses,
    make_environment,
    names_in,
    parse_expression,
    plain_path,
    shorten,
)

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
    source: bytes = b""  # the graph file as read
    # Every template the graph can render (includes, imports and extends too), as read once
    # at compile time; rendering serves these, so they are exactly what the run key hashes.
    templates: dict[str, str] = field(default_factory=dict)
    prompts_dir: Path | None = None
    label: str = ""  # how the graph is named to a reader: its file, or a dict's name

    @property
    def name(self) -> str:
        return self.spec.name

    @classmethod
    def load(cls, path: Path | str) -> CompiledGraph:
        """Load and check a graph file (same as `orchestrator.load_graph`)."""
        return compile_graph(path)

    @classmethod
    def from_dict(
        cls,
        spec: dict[str, Any],
        prompts: dict[str, str] | None = None,
        *,
        name: str = "<graph dict>",
    ) -> CompiledGraph:
        """A graph built in Python: the file's structure as a dict, templates by name."""
        return compile_dict(spec, prompts, name=name)

    def user_functions(self) -> dict[str, Any]:
        """Functions named by module path (not built-ins): their code is part of a run's
        identity."""
        found: dict[str, Any] = {}
        functions = [cn.function for cn in self.nodes.values() if cn.function is not None]
        functions += [agg.function for agg in self.aggregates.values()]
        for function in functions:
            module = getattr(function.fn, "__module__", "") or ""
            if not module.startswith("orchestrator."):
                found[function.name] = function.fn
        return found


def _hash_graph(source: bytes, templates: dict[str, str]) -> str:
    """Hash of the graph file plus every template it can render: a prompt edit, in an
    included template too, is a new graph."""
    digest = hashlib.sha256(source)
    for name in sorted(templates):
        digest.update(b"\0" + name.encode() + b"\0")
        digest.update(templates[name].encode("utf-8"))
    return digest.hexdigest()[:16]


def _merge_sampling(defaults: Sampling, node: LLMNode) -> Sampling:
    values = defaults.model_dump(exclude_none=True)
    values.update(
        {k: v for k, v in node.model_dump().items() if k in Sampling.model_fields and v is not None}
    )
    return Sampling(**values)


class _Checker:
    """Collects problems while compiling one graph."""

    def __init__(self, origin: _Origin, spec: GraphSpec, functions: bool) -> None:
        self.path = origin.path
        self.file = origin.file
        self.spec = spec
        self.problems: list[Problem] = []
        self.prompts_dir = (origin.prompts_dir or origin.path.parent / spec.prompts).resolve()
        self.functions = functions
        # node -> {name it uses -> first field that uses it}: places cycles precisely.
        self.refs: dict[str, dict[str, str]] = {}
        # (node, field) -> template sources (with includes), for the attribute check.
        self.sources: dict[tuple[str, str], dict[str, str]] = {}
        self.env = make_environment(self.prompts_dir, origin.texts)
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
            message = f"expression '{shorten(source)}' does not parse: {exc.message}"
            self.problem(message, node, field)
        except TemplateError as exc:
            self.problem(str(exc), node, field)
        except RecursionError:
            self.problem(f"expression '{shorten(source)}' nests too deeply", node, field)
        return None

    def template(self, name: str, node: str, field: str) -> tuple[Prompt | None, set[str]]:
        try:
            # Read and check every template it pulls in before Jinja compiles any of them.
            sources = template_sources(self.env, name)
            names = names_in(self.env, sources)
            template = self.env.get_template(name)
            self.sources[(node, field)] = sources
            return Prompt(template, names), names
        except TemplateNotFound as exc:
            where = self.env.loader.where() if isinstance(self.env.loader, SealedLoader) else "?"
            self.problem(f"template '{exc.name}' not found under {where}", node, field)
        except TemplateSyntaxError as exc:
            where = exc.name or exc.filename or name
            self.problem(f"template '{where}' line {exc.lineno}: {exc.message}", node, field)
        except TemplateError as exc:
            # Our own loader and safety errors already name the template.
            message = str(exc) if "template '" in str(exc) else f"template '{name}': {exc}"
            self.problem(message, node, field)
        except RecursionError:
            self.problem(f"template '{name}' nests too deeply to compile", node, field)
        return None, set()


def compile_graph(
    path: Path | str, *, prompts_dir: Path | str | None = None, functions: bool = True
) -> CompiledGraph:
    """Load, check and compile a graph file; raise GraphError listing every problem.

    `prompts_dir` overrides the graph's own `prompts:` folder (a run folder's snapshot keeps
    its templates beside the graph). With `functions=False` compute functions are named but
    not imported: enough to draw and report a run whose user code is not on this machine.
    """
    path = Path(path)
    origin = _Origin(path, str(path), prompts_dir=Path(prompts_dir) if prompts_dir else None)
    return _compile_guarded(origin, lambda: load_spec(path), functions)


def compile_dict(
    spec: dict[str, Any], prompts: dict[str, str] | None = None, *, name: str = "<graph dict>"
) -> CompiledGraph:
    """Compile a graph given as a dict (the shape of a graph file) with its templates as
    texts by name; checked exactly like a file, problems named by `name`."""
    import yaml

    try:
        text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError as exc:
        raise GraphError([Problem(name, f"the graph is not plain data: {exc}")]) from None
    origin = _Origin(Path.cwd() / "graph.yaml", name, texts=dict(prompts or {}))
    origin.source = text.encode("utf-8")
    return _compile_guarded(origin, lambda: spec_from_raw(spec, name), functions=True)


@dataclass
class _Origin:
    """Where a graph comes from: a file (its prompts in a folder) or a dict (prompt texts)."""

    path: Path
    file: str  # how problems name it
    prompts_dir: Path | None = None
    texts: dict[str, str] | None = None
    source: bytes | None = None  # as hashed and snapshotted; a file's bytes when None


def _compile_guarded(
    origin: _Origin, load: Callable[[], GraphSpec], functions: bool
) -> CompiledGraph:
    try:
        return _compile(origin, load(), functions)
    except RecursionError:
        # Every known way to nest deeply is bounded and reported earlier; this is the net.
        raise GraphError([Problem(origin.file, "nested too deeply to check")]) from None


def _compile(origin: _Origin, spec: GraphSpec, functions: bool) -> CompiledGraph:
    path = origin.path
    ck = _Checker(origin, spec, functions)
    inputs = set(spec.inputs) | set(spec.optional_inputs)
    node_names = set(spec.nodes)

    for name in sorted(node_names):
        if not IDENTIFIER.fullmatch(name):
            ck.problem(
                "a node id must be a plain name (letters, digits and _, not starting with a "
                "digit) so that expressions can refer to it",
                name,
            )
    taken = inputs | RESERVED | BUILTIN_NAMES | set(ck.env.globals)
    for name in sorted(node_names & taken):
        ck.problem("node name clashes with a dataset input or a reserved name", name)
    for name in sorted(inputs & RESERVED - {"id"}):
        ck.problem(f"input name '{name}' is reserved", field="inputs")
    if origin.texts is None and not ck.prompts_dir.is_dir():
        ck.problem(f"prompts folder {ck.prompts_dir} does not exist", field="prompts")
    _check_sampling(ck, spec.defaults, None, "defaults.")

    compiled: dict[str, CompiledNode] = {}
    graph = nx.DiGraph()
    graph.add_nodes_from(node_names)
    for name, node in spec.nodes.items():
        cn = _compile_node(ck, name, node, inputs, node_names)
        compiled[name] = cn
        for dep in cn.deps:
            graph.add_edge(dep, name)

    _check_cycles(ck, graph)
    for name, cn in compiled.items():
        if cn.foreach is not None:
            _check_foreach(ck, name, cn.foreach)

    outputs: dict[str, Expression] = {}
    for key, source in spec.outputs.items():
        if key in RESULT_RESERVED:
            ck.problem(f"output name '{key}' is reserved", field=f"outputs.{key}")
        expr = ck.expression(source, None, f"outputs.{key}")
        if expr:
            _check_names(ck, expr.names, inputs | node_names, None, f"outputs.{key}")
            _check_attributes(ck, None, [(f"outputs.{key}", "{{ " + source + " }}")])
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
    templates = _template_closure(ck)
    order = list(nx.topological_sort(graph))
    source = origin.source if origin.source is not None else path.read_bytes()
    return CompiledGraph(
        path,
        spec,
        compiled,
        order,
        outputs,
        aggregates,
        _hash_graph(source, templates),
        source=source,
        templates=templates,
        prompts_dir=ck.prompts_dir,
        label=origin.file,
    )


def _template_closure(ck: _Checker) -> dict[str, str]:
    """Every template the run can render, then the loader sealed to exactly those.

    A template that includes a name computed at render time could reach any file of the
    prompts folder, so then the whole folder is the closure.
    """
    loader = ck.env.loader
    if not isinstance(loader, SealedLoader):
        return {}
    if has_dynamic_reference(ck.env, dict(loader.served)):
        all_sources(ck.env)
    loader.seal()
    return dict(sorted(loader.served.items()))


def _check_cycles(ck: _Checker, graph: nx.DiGraph) -> None:
    """One problem per group of nodes that wait on each other, naming who uses whom where.

    Strongly connected components keep this polynomial: listing every simple cycle is
    exponential in a densely connected graph.
    """
    uses = graph.reverse(copy=False)  # edge a -> b: a uses b
    groups = sorted(
        (sorted(group) for group in nx.strongly_connected_components(uses) if len(group) > 1),
        key=lambda group: group[0],
    )
    for group in groups[:5]:
        chain = _shortest_cycle(uses, set(group), group[0])
        edges = list(zip(chain, [*chain[1:], chain[0]], strict=True))
        steps = ", ".join(f"{a} uses {b} ({ck.refs[a].get(b, 'after')})" for a, b in edges)
        first, second = edges[0]
        ck.problem(f"nodes form a cycle: {steps}", first, ck.refs[first].get(second, "after"))


def _shortest_cycle(uses: nx.DiGraph, group: set[str], start: str) -> list[str]:
    """Nodes of a shortest cycle from `start` back to itself (ties broken by name)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(set(uses.successors(node)) & group):
            if nxt == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(parent[chain[-1]])
                return chain[::-1]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a strongly connected group, so on a cycle")


def _check_sampling(ck: _Checker, values: Sampling, node: str | None, prefix: str) -> None:
    """Literal sampling values in range (expression values are checked per call)."""
    for key in SAMPLING_RANGES:
        problem = sampling_problem(key, getattr(values, key))
        if problem is not None:
            ck.problem(problem, node, prefix + key)


def _check_foreach(ck: _Checker, name: str, expr: Expression) -> None:
    """`foreach` over something that is known, before any call, not to be a list."""
    what = _static_kind(ck, parse_expression(ck.env, expr.source), expr.source)
    if what is not None:
        ck.problem(f"foreach needs a list, but '{shorten(expr.source)}' is {what}", name, "foreach")


def _static_kind(ck: _Checker, ast: nodes.Expr, source: str) -> str | None:
    """What a foreach expression gives when that is known now and is not a list, else None.

    Known now: a literal; a param's default; a field of a single-call LLM node's schema.
    """
    if isinstance(ast, nodes.Const):
        return None if isinstance(ast.value, list | tuple) else _kind(ast.value)
    if isinstance(ast, nodes.Dict):
        return "a mapping"
    path = plain_path(source)
    if not path:
        return None
    head, rest = path[0], path[1:]
    if head == "params":
        value: Any = ck.spec.params
        for part in rest:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        # null is a placeholder that `--param` fills in.
        return None if value is None or isinstance(value, list) else _kind(value)
    other = ck.spec.nodes.get(head)
    if not isinstance(other, LLMNode) or other.foreach or not _single_call(ck, other):
        return None
    spec: FieldSpec | None = None  # None: the node's whole output object
    for part in rest:
        fields = other.output if spec is None else spec.fields
        if fields is None or part not in fields:
            return None  # a missing field is the attribute check's to report
        spec = fields[part]
    if spec is None:
        return "an object (the node's whole output)"
    return None if spec.type == "list" else f"a field of type {spec.type}"


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), "a mapping" if isinstance(value, dict) else "not a list")


def _single_call(ck: _Checker, node: LLMNode) -> bool:
    """An LLM node whose value is one output object (not a list of samples)."""
    return (node.n or ck.spec.defaults.n or 1) == 1


def _check_names(
    ck: _Checker, names: set[str], known: set[str], node: str | None, field: str
) -> None:
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
    refs = ck.refs.setdefault(name, {})

    def use(names: set[str], field: str) -> None:
        nonlocal used
        used |= names
        for ref in sorted(names):
            refs.setdefault(ref, field)

    if node.foreach:
        if not IDENTIFIER.fullmatch(node.as_):
            ck.problem(f"'{node.as_}' is not a plain name to bind each element to", name, "as")
        cn.foreach = ck.expression(node.foreach, name, "foreach")
        if cn.foreach:
            use(cn.foreach.names, "foreach")
            _check_names(ck, cn.foreach.names, known, name, "foreach")
    if node.when:
        cn.when = ck.expression(node.when, name, "when")
        if cn.when:
            use(cn.when.names, "when")
            _check_names(ck, cn.when.names, known | item_names, name, "when")
    for dep in node.after:
        if dep not in node_names:
            ck.problem(f"unknown node '{dep}'", name, "after")
    use(set(node.after), "after")

    if isinstance(node, LLMNode):
        cn.sampling = _merge_sampling(ck.spec.defaults, node)
        for fld, tname in (("prompt", node.prompt), ("system", node.system)):
            if tname is None:
                continue
            template, tnames = ck.template(tname, name, fld)
            setattr(cn, fld, template)
            use(tnames, fld)
            _check_names(ck, tnames, known | item_names, name, f"{fld} ({tname})")
        if not node.output:
            ck.problem("the output declares no fields", name, "output")
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
                use(expr.names, f"output.{fpath}.enum_from")
                _check_names(ck, expr.names, known | item_names, name, f"output.{fpath}")
        _check_sampling(ck, node, name, "")
        for key, value in cn.sampling.model_dump(exclude_none=True).items():
            if isinstance(value, str):
                expr = ck.expression(value, name, key)
                if expr:
                    cn.sampling_exprs[key] = expr
                    use(expr.names, key)
                    _check_names(ck, expr.names, known | item_names, name, key)
    else:
        cn.function = _resolve_function(ck, node.function, name, "function")
        for arg, value in node.args.items():
            if isinstance(value, str):
                expr = ck.expression(value, name, f"args.{arg}")
                if expr:
                    cn.args[arg] = expr
                    use(expr.names, f"args.{arg}")
                    _check_names(ck, expr.names, known | item_names, name, f"args.{arg}")
            else:
                cn.args[arg] = value

    cn.deps = (used & node_names) - {name} - item_names
    if name in used - item_names:
        ck.problem("node refers to itself", name, refs.get(name))
    _check_attributes(ck, name, _node_sources(ck, cn))
    return cn


def _node_sources(ck: _Checker, cn: CompiledNode) -> list[tuple[str, str]]:
    """(field, template text) for every template and expression of a node."""
    sources: list[tuple[str, str]] = []
    for fld in ("prompt", "system"):
        for text in ck.sources.get((cn.name, fld), {}).values():
            sources.append((fld, text))
    exprs: list[tuple[str, Expression | None]] = [("when", cn.when), ("foreach", cn.foreach)]
    exprs += [(f"args.{arg}", v) for arg, v in cn.args.items() if isinstance(v, Expression)]
    exprs += [(f"output.{path}.enum_from", v) for path, v in cn.dynamic.items()]
    exprs += list(cn.sampling_exprs.items())
    sources += [(fld, "{{ " + expr.source + " }}") for fld, expr in exprs if expr is not None]
    return sources


def _check_attributes(ck: _Checker, owner: str | None, sources: list[tuple[str, str]]) -> None:
    """`judge.scoer` typos: an attribute of an LLM node that its schema lacks."""
    for fld, source in sources:
        try:
            uses = list(attribute_uses(ck.env, source))
        except (TemplateSyntaxError, RecursionError):
            continue  # reported where the source was first parsed
        for target, attr in uses:
            other = ck.spec.nodes.get(target)
            if (
                isinstance(other, LLMNode)
                and not other.foreach
                and _single_call(ck, other)
                and attr not in other.output
                and attr not in ("failed", "error")
                and not hasattr(dict, attr)  # judge.get('score'): a method of the value
            ):
                ck.problem(
                    f"'{target}.{attr}': node '{target}' has no output field '{attr}' "
                    f"(fields: {', '.join(other.output)})",
                    owner,
                    fld,
                )


def _resolve_function(
    ck: _Checker, fname: str, node: str | None, field: str
) -> ComputeFunction | None:
    if not ck.functions:
        return ComputeFunction(fname, _not_loaded)
    try:
        function = resolve(fname)
    except LookupError as exc:
        ck.problem(str(exc), node, field)
        return None
    except Exception as exc:  # importing a user's module can fail in any way
        ck.problem(f"cannot load function '{fname}': {type(exc).__name__}: {exc}", node, field)
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


def _not_loaded(**_: Any) -> Any:
    raise RuntimeError("this graph was compiled for reading only; its functions are not loaded")


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
