"""The checks a graph passes before a token is spent: cycles, names, attributes of upstream
outputs, sampling ranges, `foreach` sources, the functions nodes and aggregates name. Each
problem is collected, not raised, so all of them are reported at once, each naming file,
node and field."""

from __future__ import annotations

import difflib
import inspect
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
from jinja2 import TemplateError, TemplateNotFound, TemplateSyntaxError, nodes

from ..compute import ComputeFunction, primary, resolve
from ..errors import GraphError, Problem
from ..shipped import pip_install, shipped_root
from .compiled import CompiledGraph, CompiledNode
from .datafiles import load_files
from .loaders import SealedLoader, template_sources
from .spec import (
    SAMPLING_RANGES,
    FieldSpec,
    GraphSpec,
    Sampling,
    node_kind,
    sampling_problem,
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

if TYPE_CHECKING:
    from .compiled import GraphOrigin


class Checker:
    """Collects problems while compiling one graph."""

    def __init__(self, origin: GraphOrigin, spec: GraphSpec, functions: bool) -> None:
        self.path = origin.path
        self.file = origin.file
        self.spec = spec
        self.kinds = origin.kinds
        self.problems: list[Problem] = []
        self.prompts_dir = (origin.prompts_dir or origin.path.parent / spec.prompts).resolve()
        if origin.texts is None:
            refused = prompts_refusal(origin, self.prompts_dir)
            if refused is not None:
                # Refused before a template is read: nothing of that folder may reach a prompt.
                raise GraphError([Problem(self.file, refused, field="prompts")])
        self.functions = functions
        self.known_functions = origin.known_functions
        self.trusted = origin.trusted
        # node -> {name it uses -> first field that uses it}: places cycles precisely.
        self.refs: dict[str, dict[str, str]] = {}
        # (node, field) -> template sources (with includes), for the attribute check.
        self.sources: dict[tuple[str, str], dict[str, str]] = {}
        self.env = make_environment(self.prompts_dir, origin.texts)
        # A required param has no value until a run gives one: known, but null here.
        self.params: dict[str, Any] = {**dict.fromkeys(spec.required_params), **spec.params}
        self.env.globals["params"] = self.params
        # `run` (base_url, model of the run's server) is filled in by the engine.
        self.env.globals["run"] = {}
        # Paths of the `files:` read through the loader: data, never parsed as templates.
        self.data_files: set[str] = set()
        self.env.globals["files"] = load_files(self)

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


def prompts_refusal(origin: GraphOrigin, folder: Path) -> str | None:
    """Why an untrusted graph file may not read templates from `folder` (resolved, so a
    symlink pointing out is out), or None. Allowed: a folder inside the graph file's own
    folder; the shipped prompts for a shipped graph; any folder the user named
    (`--prompts`, `prompts_dir=`) or, with `--trust`, any folder at all."""
    if origin.trusted or origin.prompts_dir is not None or not folder.is_dir():
        return None  # a missing folder is reported as such, and nothing can be read from it
    home = origin.path.parent.resolve()
    if folder.is_relative_to(home):
        return None
    shipped = shipped_root()
    if shipped is not None:
        root = shipped.resolve()
        if origin.path.resolve().is_relative_to(root / "graphs") and folder.is_relative_to(
            root / "prompts"
        ):
            return None
    return (
        f"prompts folder {folder} is outside the graph's folder {home}: a graph file reads "
        "templates only from its own folder. If that folder is yours, name it with "
        "--prompts DIR (prompts_dir= in Python); if you trust the graph, run it with --trust "
        "(trust=True)"
    )


@dataclass
class NodeScope:
    """One node as its kind compiles it: parses its expressions and templates, checks the
    names they use and records the uses (edges, cycle places, attribute checks)."""

    ck: Checker
    node: str
    known: set[str]  # names its expressions may use: inputs, nodes, its `foreach` item
    refs: dict[str, str]  # name used -> first field that uses it
    used: set[str] = field(default_factory=set)
    template_fields: list[str] = field(default_factory=list)
    exprs: list[tuple[str, Expression]] = field(default_factory=list)

    def problem(self, message: str, field: str | None = None) -> None:
        self.ck.problem(message, self.node, field)

    def use(self, names: set[str], field: str) -> None:
        self.used |= names
        for ref in sorted(names):
            self.refs.setdefault(ref, field)

    def expression(
        self, source: Any, field: str, names_field: str | None = None
    ) -> Expression | None:
        """`source` parsed, its names checked (reported under `names_field` if given)."""
        expr = self.ck.expression(source, self.node, field)
        if expr:
            self.use(expr.names, field)
            check_names(self.ck, expr.names, self.known, self.node, names_field or field)
            self.exprs.append((field, expr))
        return expr

    def template(self, name: str, field: str) -> Prompt | None:
        """The template `name` loaded and checked with everything it includes."""
        template, names = self.ck.template(name, self.node, field)
        self.template_fields.append(field)
        self.use(names, field)
        check_names(self.ck, names, self.known, self.node, f"{field} ({name})")
        return template


def check_cycles(ck: Checker, graph: nx.DiGraph) -> None:
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


def check_sampling(ck: Checker, values: Sampling, node: str | None, prefix: str) -> None:
    """Literal sampling values in range (expression values are checked per call)."""
    for key in SAMPLING_RANGES:
        problem = sampling_problem(key, getattr(values, key))
        if problem is not None:
            ck.problem(problem, node, prefix + key)


def check_foreach(ck: Checker, name: str, expr: Expression) -> None:
    """`foreach` over something that is known, before any call, not to be a list."""
    what = _static_kind(ck, parse_expression(ck.env, expr.source), expr.source)
    if what is not None:
        ck.problem(f"foreach needs a list, but '{shorten(expr.source)}' is {what}", name, "foreach")


def _static_kind(ck: Checker, ast: nodes.Expr, source: str) -> str | None:
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
        value: Any = ck.params
        for part in rest:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        # null is a placeholder that `--param` fills in.
        return None if value is None or isinstance(value, list) else _kind(value)
    output = _known_fields(ck, head)
    if output is None:
        return None
    spec: FieldSpec | None = None  # None: the node's whole output object
    for part in rest:
        fields = output if spec is None else spec.fields
        if fields is None or part not in fields:
            return None  # a missing field is the attribute check's to report
        spec = fields[part]
    if spec is None:
        return "an object (the node's whole output)"
    return None if spec.type == "list" else f"a field of type {spec.type}"


def _ast_path(ast: nodes.Expr) -> tuple[str, ...] | None:
    """`a.b['c']` as ("a", "b", "c") when the expression is only a name and lookups."""
    if isinstance(ast, nodes.Name):
        return (ast.name,)
    if isinstance(ast, nodes.Getattr):
        head = _ast_path(ast.node)
        return None if head is None else (*head, ast.attr)
    if isinstance(ast, nodes.Getitem) and isinstance(ast.arg, nodes.Const):
        head = _ast_path(ast.node)
        key = ast.arg.value
        return None if head is None or not isinstance(key, str) else (*head, key)
    return None


def _path_spec(ck: Checker, path: tuple[str, ...], items: dict[str, FieldSpec]) -> FieldSpec | None:
    """The declared schema of the value at `path` (a node's field, or a field of a bound
    `foreach` element), or None when it is not known before a call."""
    head, rest = path[0], path[1:]
    if head in items:
        spec: FieldSpec | None = items[head]
        fields = None
    else:
        fields = _known_fields(ck, head)
        if fields is None or not rest:
            return None
        spec = None
    for part in rest:
        if spec is not None:
            fields = spec.fields
        if fields is None or part not in fields:
            return None
        spec = fields[part]
    return spec


def item_specs(ck: Checker, name: str, foreach: Expression | str | None) -> dict[str, FieldSpec]:
    """The schema of node `name`'s `foreach` element when it walks a declared list field
    (`foreach: claims.claims`), by the name it is bound to; else nothing."""
    node = ck.spec.nodes[name]
    source = foreach.source if isinstance(foreach, Expression) else foreach
    path = plain_path(source) if source else None
    spec = _path_spec(ck, path, {}) if path else None
    if spec is None or spec.type != "list" or spec.items is None:
        return {}
    return {node.as_: spec.items}


def _truth_reads(
    ck: Checker, ast: nodes.Expr, items: dict[str, FieldSpec]
) -> list[tuple[str, FieldSpec]]:
    """Fields of a declared type other than boolean that `ast` takes as true/false as they
    are: under `not`, `and`, `or` or bare (`x == 'yes'` compares, so it is not one)."""
    if isinstance(ast, nodes.Not):
        return _truth_reads(ck, ast.node, items)
    if isinstance(ast, nodes.And | nodes.Or):
        return _truth_reads(ck, ast.left, items) + _truth_reads(ck, ast.right, items)
    path = _ast_path(ast)
    spec = _path_spec(ck, path, items) if path else None
    if spec is None or spec.type == "boolean":
        return []
    return [(".".join(path or ()), spec)]


def _comparison_hint(name: str, spec: FieldSpec) -> str:
    """The comparison a `when` should write instead of reading `name` as true/false."""
    if spec.enum:
        return f"{name} == {spec.enum[0]!r}"
    return {
        "string": f"{name} != ''",
        "integer": f"{name} > 0",
        "number": f"{name} > 0",
        "list": f"{name} | length > 0",
    }.get(spec.type, f"{name} is not none")


def check_when(ck: Checker, name: str, expr: Expression, items: dict[str, FieldSpec]) -> None:
    """`when` takes a declared field as true/false only if it is a boolean: a "no" string is
    true, and so is every number but 0, so the node would run where it should not."""
    try:
        ast = parse_expression(ck.env, expr.source)
    except (TemplateSyntaxError, RecursionError):
        return  # reported where the expression was parsed
    for field_name, spec in _truth_reads(ck, ast, items):
        values = f" ({', '.join(map(repr, spec.enum))})" if spec.enum else ""
        why = {
            "string": 'any non-empty text, "no" too, is true',
            "integer": "every number but 0 is true",
            "number": "every number but 0 is true",
        }.get(spec.type, "it is true whenever it is not empty")
        ck.problem(
            f"when '{shorten(expr.source)}' needs a true/false value, but '{field_name}' is a "
            f"{spec.type} field{values}: {why}, so the node would run on rows it should "
            f'skip. Compare it, e.g. when: "{_comparison_hint(field_name, spec)}"',
            name,
            "when",
        )


def check_skipped_read(ck: Checker, key: str, expr: Expression) -> None:
    """An output that is a bare `node.field` of a node with `when` fails every row that
    skips the node, whose value is then null: name the form that gives null there."""
    path = plain_path(expr.source)
    node = ck.spec.nodes.get(path[0]) if path is not None and len(path) > 1 else None
    if path is None or node is None or node.when is None or node.foreach:
        return
    read = ".".join(path)
    ck.problem(
        f"'{read}' reads a field of node '{path[0]}', which is skipped on rows where its when "
        f"'{shorten(node.when)}' is false; its value there is null, so those rows would fail. "
        f'Give null instead: "{read} if {path[0]} is not none else none"',
        None,
        f"outputs.{key}",
    )


def _result_dicts(ast: nodes.Expr) -> Iterable[nodes.Dict]:
    """The mapping literals whose keys end up in an expression's value: the value itself,
    inside list and mapping literals, and either branch of `a if c else b` (a mapping that
    is only looked up in, `{1: 'low'}[x]`, is not one)."""
    if isinstance(ast, nodes.Dict):
        yield ast
        for pair in ast.items:
            yield from _result_dicts(pair.value)
    elif isinstance(ast, nodes.List | nodes.Tuple):
        for item in ast.items:
            yield from _result_dicts(item)
    elif isinstance(ast, nodes.CondExpr):
        yield from _result_dicts(ast.expr1)
        if ast.expr2 is not None:
            yield from _result_dicts(ast.expr2)


def _non_text_key(ck: Checker, key: nodes.Expr) -> str | None:
    """What a mapping key is when it is known now not to be text, else None."""
    if isinstance(key, nodes.Const):
        value = key.value
        if isinstance(value, str):
            return None
        if value is None:
            return "null"
        if isinstance(value, bool):
            return f"the boolean {str(value).lower()}"
        return f"the number {value!r}" if isinstance(value, int | float) else None
    path = _ast_path(key)
    spec = _path_spec(ck, path, {}) if path else None
    if spec is None or spec.type in ("string", "list", "object"):
        return None
    return f"'{'.'.join(path or ())}', {_a_field(spec)}"


def _a_field(spec: FieldSpec) -> str:
    """'an integer field', 'a string field': how messages name a declared type."""
    return f"{'an' if spec.type == 'integer' else 'a'} {spec.type} field"


def check_output_keys(ck: Checker, key: str, expr: Expression) -> None:
    """An output that builds a mapping keyed by something known not to be text (a number,
    an integer field): a result line is JSON, whose keys are text, so every row would fail
    once its calls are paid for."""
    try:
        ast = parse_expression(ck.env, expr.source)
    except (TemplateSyntaxError, RecursionError):
        return  # reported where the expression was parsed
    for mapping in _result_dicts(ast):
        for pair in mapping.items:
            what = _non_text_key(ck, pair.key)
            if what is None:
                continue
            ck.problem(
                f"'{shorten(expr.source)}' builds a mapping keyed by {what}: a result line is "
                "JSON, whose keys are text, so no row's result could be written. Make the "
                "key text with `| string` (e.g. {judge.score | string: ...})",
                None,
                f"outputs.{key}",
            )
            return


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), "a mapping" if isinstance(value, dict) else "not a list")


def _known_fields(ck: Checker, name: str) -> dict[str, FieldSpec] | None:
    """The fields node `name`'s value is known to have now (its kind says), else None."""
    other = ck.spec.nodes.get(name)
    if other is None or other.foreach:
        return None
    return node_kind(ck.kinds, other).value_fields(other, ck.spec)


def check_names(
    ck: Checker, names: set[str], known: set[str], node: str | None, field: str
) -> None:
    for missing in sorted(names - known - BUILTIN_NAMES - set(ck.env.globals)):
        close = difflib.get_close_matches(missing, sorted(known), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        if missing == "id" and "results" not in known:  # a row's scope, not an aggregate's
            # Every row has an id, but a graph reads only the fields it declares.
            hint = " (to read the row's id, list `id` in `inputs:`; every row must then have one)"
        if missing in ck.spec.nodes and "results" in known:
            # It exists: "not provided by any node" would send the author looking for it.
            ck.problem(
                f"'{missing}' is a node, and an aggregate reads the result lines, not nodes: "
                f"give what it needs an output (outputs: {{NAME: {missing}.FIELD}}), then read "
                "results | map(attribute='NAME') | list",
                node,
                field,
            )
            continue
        ck.problem(
            f"variable '{missing}' is not provided by the dataset inputs, params or any node{hint}",
            node,
            field,
        )


def node_sources(ck: Checker, cn: CompiledNode, scope: NodeScope) -> list[tuple[str, str]]:
    """(field, template text) for every template and expression of a node."""
    sources: list[tuple[str, str]] = []
    for fld in scope.template_fields:
        for text in ck.sources.get((cn.name, fld), {}).values():
            sources.append((fld, text))
    exprs: list[tuple[str, Expression | None]] = [("when", cn.when), ("foreach", cn.foreach)]
    exprs += scope.exprs
    sources += [(fld, "{{ " + expr.source + " }}") for fld, expr in exprs if expr is not None]
    return sources


def check_attributes(ck: Checker, owner: str | None, sources: list[tuple[str, str]]) -> None:
    """`judge.scoer` typos: an attribute of a node's value that its schema lacks."""
    for fld, source in sources:
        try:
            uses = list(attribute_uses(ck.env, source))
        except (TemplateSyntaxError, RecursionError):
            continue  # reported where the source was first parsed
        for target, attr in uses:
            if target == "params":
                _check_param(ck, attr, owner, fld)
                continue
            output = _known_fields(ck, target)
            if (
                output is not None
                and attr not in output
                and attr not in ("failed", "error")  # an LLM node's value with on_error: record
                and not hasattr(dict, attr)  # judge.get('score'): a method of the value
            ):
                close = difflib.get_close_matches(attr, list(output), n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                ck.problem(
                    f"'{target}.{attr}': node '{target}' has no output field '{attr}' "
                    f"({hint}fields: {', '.join(output)})",
                    owner,
                    fld,
                )


# Filters that read a field of each element of a list: by `attribute=`, or (these) by their
# first argument.
_FIELD_FIRST = frozenset({"selectattr", "rejectattr", "groupby"})
RESULT_FIELDS = ("id", "status", "row", "error")  # on every line of results.jsonl


def _element_fields(ck: Checker, name: str) -> tuple[dict[str, FieldSpec] | None, str]:
    """The fields of each element of node `name`'s value when that value is a list of
    outputs of a known schema (one per `foreach` element, or its n samples), and how to
    name that list; (None, "") otherwise."""
    other = ck.spec.nodes.get(name)
    if other is None:
        return None, ""
    sampled = "n" in type(other).model_fields
    n = getattr(other, "n", None) or (ck.spec.defaults.n if sampled else None)
    many = n is not None and n != 1  # an expression counts: it is a list when it is not 1
    kind = node_kind(ck.kinds, other)
    if other.foreach:
        # With n > 1 too, each element is itself a list of samples: not read here.
        fields = None if many else kind.value_fields(other, ck.spec)
        return fields, f"node '{name}' (a list, one value per foreach element)"
    if many:
        fields = kind.value_fields(other.model_copy(update={"n": 1}), ck.spec)
        return fields, f"node '{name}' (a list of its n samples)"
    return None, ""


def _field_reads(env: Any, source: str) -> Iterable[tuple[nodes.Expr, str, str]]:
    """(list expression, the filter as written, field) for every filter reading a named
    field of each element of a list: `x | map(attribute='f')`, `x | selectattr('f')`."""
    for flt in env.parse(source).find_all(nodes.Filter):
        named = [("attribute=", kw.value) for kw in flt.kwargs if kw.key == "attribute"]
        if flt.name in _FIELD_FIRST and flt.args:
            named.append(("", flt.args[0]))
        for how, value in named:
            if isinstance(value, nodes.Const) and isinstance(value.value, str) and flt.node:
                yield flt.node, f"{flt.name}({how}{value.value!r})", value.value


def check_list_reads(
    ck: Checker,
    owner: str | None,
    sources: list[tuple[str, str]],
    results: list[str] | None = None,
) -> None:
    """A field read off each element of a list whose elements' schema is known now, that
    the schema lacks: a node's n samples or foreach values, a declared list field's items,
    and (`results`, in an aggregate) the result lines, whose fields are the graph's
    outputs. Found otherwise only once every call is paid for."""
    for fld, source in sources:
        try:
            reads = list(_field_reads(ck.env, source))
        except (TemplateSyntaxError, RecursionError):
            continue  # reported where the source was first parsed
        for target, flt, attr in reads:
            path = _ast_path(target)
            if path is None:
                continue
            fields: list[str] | None = None
            if path == ("results",) and results is not None:
                fields, what = (
                    results,
                    "results (one line per example: id, status, error, row and the outputs)",
                )
            elif len(path) == 1:
                found, what = _element_fields(ck, path[0])
                fields = list(found) if found is not None else None
            else:
                spec = _path_spec(ck, path, {})
                if spec is not None and spec.items is not None and spec.items.fields:
                    fields, what = list(spec.items.fields), f"list field '{'.'.join(path)}'"
            first = attr.split(".")[0]
            if (
                fields is None
                or first in fields
                or first.isdigit()
                or first in ("failed", "error")  # a node's value with on_error: record
                or hasattr(dict, first)
            ):
                continue
            close = difflib.get_close_matches(first, fields, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            ck.problem(
                f"'{'.'.join(path)} | {flt}': each element of {what} has no "
                f"field '{first}' ({hint}fields: {', '.join(fields)})",
                owner,
                fld,
            )


def check_answer_map(
    ck: Checker,
    function: ComputeFunction,
    args: dict[str, Expression | Any],
    node: str | None,
    where: str,
) -> None:
    """The keys of an answer map (map_votes' `positions`) are the answers the judge can
    give: each key one of the enum values of the field it maps, and every value a key.
    'Output (A)' for an enum of 'Output (a)' would fail every row after its calls."""
    if function.answer_map is None:
        return
    map_arg, values_arg, field_arg = function.answer_map
    keys = _literal(ck, args.get(map_arg))
    values = args.get(values_arg)
    path = plain_path(values.source) if isinstance(values, Expression) else None
    if not isinstance(keys, dict) or path is None or len(path) != 1:
        return
    field_name = (
        _literal(ck, args[field_arg]) if field_arg in args else _default(function, field_arg)
    )
    fields, what = _element_fields(ck, path[0])
    if fields is None or not isinstance(field_name, str):
        return
    place = f"{where}.{map_arg}"
    spec = fields.get(field_name)
    if spec is None:
        close = difflib.get_close_matches(field_name, list(fields), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        ck.problem(
            f"'{map_arg}' maps the answers in field '{field_name}', but each element of {what} "
            f"has no such field ({hint}fields: {', '.join(fields)})",
            node,
            f"{where}.{field_arg}" if field_arg in args else place,
        )
        return
    if not spec.enum:
        return
    answers = [str(v) for v in spec.enum]
    for key in map(str, keys):
        if key not in answers:
            # 'Output (A)' for 'Output (a)': difflib alone weighs case like any letter.
            same = [a for a in answers if a.casefold() == key.casefold()]
            close = same or difflib.get_close_matches(key, answers, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            ck.problem(
                f"'{map_arg}' key '{key}' is not an answer the judge can give in '{path[0]}."
                f"{field_name}' ({hint}its enum: {', '.join(answers)})",
                node,
                place,
            )
    missing = [a for a in answers if a not in set(map(str, keys))]
    if missing:
        ck.problem(
            f"'{map_arg}' has no key for the answer(s) {', '.join(missing)} that "
            f"'{path[0]}.{field_name}' may give; a row with that answer would fail",
            node,
            place,
        )


def check_language(
    ck: Checker,
    function: ComputeFunction,
    args: dict[str, Expression | Any],
    node: str | None,
    where: str,
) -> None:
    """A function that serves only some languages (METEOR: English WordNet), given another
    one by the graph itself (a constant or a param's value in the graph): refused here, as
    every row would come back unavailable. A language read from the rows is the run's."""
    if function.languages is None:
        return
    arg, served = function.languages
    value = args.get(arg)
    declared = _literal(ck, value)
    path = plain_path(value.source) if isinstance(value, Expression) else None
    if declared is None and path is not None and len(path) == 2 and path[0] == "params":
        declared = ck.params.get(path[1])
    tag = primary(declared) if isinstance(declared, str) else None
    if tag is None or tag in served:
        return
    ck.problem(
        f"'{function.name}' serves only {', '.join(served)}, but '{arg}' here is "
        f"{declared!r}: drop the node for this language, or leave '{arg}' to the rows "
        "(a row it cannot serve is then marked unavailable)",
        node,
        f"{where}.{arg}",
    )


def _literal(ck: Checker, value: Any) -> Any:
    """The value of a literal argument or of an expression that is a constant (a dict or a
    quoted string), else None."""
    if not isinstance(value, Expression):
        return value
    try:
        ast = parse_expression(ck.env, value.source)
        return ast.as_const(nodes.EvalContext(ck.env))
    except Exception:  # not a constant: known only when it runs
        return None


def _default(function: ComputeFunction, argument: str) -> Any:
    """The default of one of the function's arguments, or None."""
    try:
        param = inspect.signature(function.fn).parameters.get(argument)
    except (TypeError, ValueError):
        return None
    return None if param is None or param.default is param.empty else param.default


def _check_param(ck: Checker, name: str, owner: str | None, fld: str) -> None:
    """`params.X` where the graph declares no X: it could never be given (an unknown
    `--param` is refused), so every row would fail on it."""
    if name in ck.params or hasattr(dict, name):
        return
    close = difflib.get_close_matches(name, list(ck.params), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    ck.problem(
        f"'params.{name}': the graph declares no param '{name}' ({hint}declare it under "
        f"params: with a default, or under required_params:)",
        owner,
        fld,
    )


def resolve_function(
    ck: Checker, fname: str, node: str | None, field: str
) -> ComputeFunction | None:
    """The function `fname` names, or None with the problem reported (a node's or an
    aggregate's); a placeholder when the graph is compiled without its functions. A module
    path (trusted graphs only) is looked for beside the graph file first."""
    if not ck.functions:
        return ComputeFunction(fname, _not_loaded)
    try:
        function = ck.known_functions.get(fname) or resolve(
            fname, near=ck.path.parent, trusted=ck.trusted
        )
    except LookupError as exc:
        ck.problem(str(exc), node, field)
        return None
    except Exception as exc:  # importing a user's module can fail in any way
        ck.problem(f"cannot load function '{fname}': {type(exc).__name__}: {exc}", node, field)
        return None
    missing = function.missing()
    if missing:
        hint = (
            f"{pip_install(function.extra)} (in a checkout: pip install -e '.[{function.extra}]')"
            if function.extra
            else "pip install " + " ".join(missing)
        )
        ck.problem(
            f"function '{fname}' needs {', '.join(missing)}, not installed: run {hint}",
            node,
            field,
        )
    return function


def check_arguments(
    ck: Checker,
    function: ComputeFunction,
    args: dict[str, Expression | Any],
    node: str | None,
    where: str,
) -> None:
    """Report `args:` that do not fit the function's signature (a node's or an aggregate's),
    so a misspelt argument fails `validate`, not every row or the end of a run."""
    literals = {k: v for k, v in args.items() if not isinstance(v, Expression)}
    for arg, message in function.argument_problems(literals, set(args)).items():
        ck.problem(message, node, f"{where}.{arg}" if arg in args else where)
    check_answer_map(ck, function, args, node, where)
    check_language(ck, function, args, node, where)
    check_argument_fields(ck, function, args, node, where)
    for arg in function.reads_files if not ck.trusted else ():
        if arg not in args:
            continue
        value = args[arg]
        path = plain_path(value.source) if isinstance(value, Expression) else None
        user_only = (
            path is not None
            and len(path) == 2
            and path[0] == "params"
            and ck.params.get(path[1]) in (None, "")
        )
        if not user_only:
            # A graph choosing this path could read any file of the user's into its outputs,
            # or load code (a pickle, a model folder's custom modules).
            ck.problem(
                f"'{function.name}' reads the file or folder '{arg}' names (a model, a pickle, "
                "a calibration file; loading some runs code): in a graph you do not trust it "
                "must be `params.NAME` with no value in the graph (under required_params, or "
                "null), so only you give it (--param NAME=...); or run with --trust",
                node,
                f"{where}.{arg}",
            )


_SAMPLES: dict[str, Any] = {"string": "text", "integer": 1, "number": 1.0, "boolean": True}


def _sample(spec: FieldSpec) -> Any:
    """A value of the declared type (the first of its enum), to try an argument with."""
    if spec.enum:
        return spec.enum[0]
    if spec.type == "list":
        return [_sample(spec.items)] if spec.items is not None else []
    if spec.type == "object":
        return {name: _sample(inner) for name, inner in (spec.fields or {}).items()}
    return _SAMPLES[spec.type]


def _conversion(function: ComputeFunction, argument: str) -> str:
    """The filter that would make a value fit the argument, as advice."""
    for sample, fix in (("text", "| string"), (1.0, "| float"), (1, "| int")):
        if function.value_problem(argument, sample) is None:
            return f"; convert it in the expression (`{fix}`)"
    return ""


def check_argument_fields(
    ck: Checker,
    function: ComputeFunction,
    args: dict[str, Expression | Any],
    node: str | None,
    where: str,
) -> None:
    """An argument given a declared field of a type the function does not take (`rouge`
    on an integer field): every row would fail in the function, after its calls."""
    spec_node = ck.spec.nodes.get(node) if node is not None else None
    if node is None or spec_node is None:
        return  # an aggregate's: it reads the result lines, whose fields are not declared
    items = item_specs(ck, node, spec_node.foreach)
    for arg, value in args.items():
        path = plain_path(value.source) if isinstance(value, Expression) else None
        spec = _path_spec(ck, path, items) if path else None
        if spec is None or path is None:
            continue
        problem = function.value_problem(arg, _sample(spec))
        if problem is None:
            continue
        ck.problem(
            f"'{'.'.join(path)}' is {_a_field(spec)}, which '{function.name}' does "
            f"not take for '{arg}' ({problem}){_conversion(function, arg)}",
            node,
            f"{where}.{arg}",
        )


_NEVER = {"eq": "==", "ne": "!="}


def _literal_value(ast: nodes.Expr) -> tuple[bool, Any]:
    """(True, value) for a literal (`'yes'`, `false`, `-1`), else (False, None)."""
    if isinstance(ast, nodes.Const) or (
        isinstance(ast, nodes.Neg | nodes.Pos) and isinstance(ast.node, nodes.Const)
    ):
        try:
            return True, ast.as_const()
        except nodes.Impossible:
            return False, None
    return False, None


def _jinja_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else repr(value)


def _never_equal(spec: FieldSpec, value: Any) -> str | None:
    """Why a field of this declared type never equals `value`, or None when it can (a
    number and true/false compare as Python does: true == 1)."""
    if value is None or spec.type in ("list", "object"):
        return None
    text = isinstance(value, str)
    if (spec.type == "string") != text:
        return f"{_jinja_literal(value)} is {'text' if text else 'no text'}"
    if spec.enum is not None and value not in spec.enum:
        return f"{_jinja_literal(value)} is not one of its values"
    return None


def check_comparisons(
    ck: Checker, owner: str | None, sources: list[tuple[str, str]], items: dict[str, FieldSpec]
) -> None:
    """`==` or `!=` between a declared field and a literal it can never equal (an enum of
    'yes'/'no' against false, an integer against '3'): always false (or true), silently,
    on every row. `items`: the fields of a `foreach` element, by its name."""
    for fld, source in sources:
        try:
            compares = list(ck.env.parse(source).find_all(nodes.Compare))
        except (TemplateSyntaxError, RecursionError):
            continue  # reported where the source was first parsed
        for compare in compares:
            left = compare.expr
            for operand in compare.ops:
                right = operand.expr
                if operand.op in _NEVER:
                    for field_ast, literal_ast in ((left, right), (right, left)):
                        _check_pair(ck, owner, fld, operand.op, field_ast, literal_ast, items)
                left = right


def _check_pair(
    ck: Checker,
    owner: str | None,
    fld: str,
    op: str,
    field_ast: nodes.Expr,
    literal_ast: nodes.Expr,
    items: dict[str, FieldSpec],
) -> None:
    is_literal, value = _literal_value(literal_ast)
    path = _ast_path(field_ast) if is_literal else None
    spec = _path_spec(ck, path, items) if path else None
    why = _never_equal(spec, value) if spec is not None else None
    if why is None or spec is None or path is None:
        return
    name = ".".join(path)
    values = f" ({', '.join(map(repr, spec.enum))})" if spec.enum else ""
    always = "false" if op == "eq" else "true"
    example = (
        repr(spec.enum[0])
        if spec.enum
        else {"boolean": "true", "string": "'text'"}.get(spec.type, "a number")
    )
    ck.problem(
        f"`{name} {_NEVER[op]} {_jinja_literal(value)}` is always {always}: '{name}' is "
        f"{_a_field(spec)}{values} and {why}, so the two are never equal. Compare "
        f"it with {example}",
        owner,
        fld,
    )


def _names(ast: nodes.Node) -> set[str]:
    found = {name.name for name in ast.find_all(nodes.Name)}
    return found | ({ast.name} if isinstance(ast, nodes.Name) else set())


def _gated_reads(
    ast: nodes.Node, gated: dict[str, set[str]], guards: set[str]
) -> Iterable[tuple[str, str]]:
    """(node, field) for every `node.field` read of a node in `gated` (by the names its
    `when` reads) that nothing guards: an `if`, `a if c else b` or `x and …` whose test
    names the node or all of its when's names (`x or …` too: `not v or v.x`), `| default`,
    `is defined`/`is none`."""

    def safe(name: str) -> bool:
        return name in guards or (bool(gated[name]) and gated[name] <= guards)

    if isinstance(ast, nodes.Getattr) and isinstance(ast.node, nodes.Name):
        if ast.node.name in gated and not safe(ast.node.name):
            yield ast.node.name, ast.attr
        return
    if isinstance(ast, nodes.If | nodes.CondExpr):
        yield from _gated_reads(ast.test, gated, guards)
        inner = guards | _names(ast.test)
        for child in ast.iter_child_nodes():
            if child is not ast.test:
                yield from _gated_reads(child, gated, inner)
        return
    if isinstance(ast, nodes.And | nodes.Or):  # `v and v.x`, `not v or v.x`
        yield from _gated_reads(ast.left, gated, guards)
        yield from _gated_reads(ast.right, gated, guards | _names(ast.left))
        return
    if isinstance(ast, nodes.Filter) and ast.name == "default":
        return
    if isinstance(ast, nodes.Test) and ast.name in ("defined", "undefined", "none"):
        return
    for child in ast.iter_child_nodes():
        yield from _gated_reads(child, gated, guards)


def check_gated_reads(ck: Checker, owner: str | None, sources: list[tuple[str, str]]) -> None:
    """A template or expression that reads a field of a node `when` may skip, unguarded:
    on a skipped row that node's value is null, and the read fails the row. Said as that,
    with the guard to write (a bare output is `check_skipped_read`'s)."""
    gated: dict[str, set[str]] = {}
    for name, node in ck.spec.nodes.items():
        if node.when and not node.foreach and name != owner:
            try:
                gated[name] = _names(parse_expression(ck.env, node.when))
            except (TemplateSyntaxError, RecursionError):
                continue  # reported where it was first parsed
    own = ck.spec.nodes[owner].when if owner is not None else None
    try:
        own_names = _names(parse_expression(ck.env, own)) if own else set()
    except (TemplateSyntaxError, RecursionError):
        own_names = set()
    said: set[tuple[str, str]] = set()
    for fld, source in sources:
        if owner is None and plain_path(source.removeprefix("{{ ").removesuffix(" }}")):
            continue  # a bare output: check_skipped_read says it, with its own fix
        try:
            ast = ck.env.parse(source)
        except (TemplateSyntaxError, RecursionError):
            continue
        # The node's own when guards the rest of it (it runs only where that holds).
        guards = set() if fld == "when" else own_names
        for name, attr in _gated_reads(ast, gated, guards):
            if (fld, name) in said:
                continue
            said.add((fld, name))
            when = shorten(ck.spec.nodes[name].when or "")
            also = f", or give node '{owner}' a when that implies it" if owner else ""
            ck.problem(
                f"'{name}.{attr}' reads a field of node '{name}', which is skipped on rows "
                f"where its when '{when}' is false; its value there is null, so the read fails "
                f"those rows. Guard it ({{% if {name} %}}…{{% endif %}} in a template, "
                f"`{name}.{attr} if {name} else none` in an expression){also}",
                owner,
                fld,
            )


def _not_loaded(**_: Any) -> Any:
    raise RuntimeError("this graph was compiled for reading only; its functions are not loaded")


SAMPLE_ROWS = 20  # rows read before any request to learn what the inputs hold


def check_input_types(
    graph: CompiledGraph, rows: Sequence[Mapping[str, Any]], location: str
) -> None:
    """A `foreach` over a dataset input that holds no list in any of the first rows (a text,
    a number, an object): refused before any request with one error naming the node and
    the input, instead of failing every row. Inputs have no declared type, so their first
    rows (`rows`, the first SAMPLE_ROWS that could be read) are what is known; a mix of
    lists and others is left to each row. A compute argument reading an input of a type its
    function does not take is refused the same way."""
    sample = rows[:SAMPLE_ROWS]
    inputs = set(graph.spec.inputs) | set(graph.spec.optional_inputs)
    problems = []
    for name, cn in graph.nodes.items():
        path = plain_path(cn.foreach.source) if cn.foreach is not None else None
        if path is None or path[0] not in inputs:
            continue
        seen = [found for row in sample if (found := _walk_row(row, path)) is not None]
        if not seen or any(isinstance(value, list | tuple) for value in seen):
            continue
        kinds = sorted({_kind(value) for value in seen})
        example = shorten(repr(seen[0]), 60)
        problems.append(
            Problem(
                graph.label,
                f"foreach needs a list, but input '{'.'.join(path)}' is {' or '.join(kinds)} "
                f"in the first {len(sample)} row(s) of {location} (e.g. {example}); give a "
                "list there, or loop over something that is one",
                name,
                "foreach",
            )
        )
    problems += _input_argument_problems(graph, sample, location, inputs)
    if problems:
        raise GraphError(problems)


def _input_argument_problems(
    graph: CompiledGraph, sample: Sequence[Mapping[str, Any]], location: str, inputs: set[str]
) -> list[Problem]:
    """A compute node's argument that reads a dataset input straight (`reference: answer`)
    which, in every one of the first rows that has it, holds a value of a type the function
    does not take (`rouge` on numbers): every row would fail there, after its calls. A mix
    is left to each row."""
    problems = []
    for name, cn in graph.nodes.items():
        function = getattr(cn, "function", None)  # a compute node's (graph/ names no kind)
        if not isinstance(function, ComputeFunction):
            continue
        for arg, value in getattr(cn, "args", {}).items():
            path = plain_path(value.source) if isinstance(value, Expression) else None
            if path is None or path[0] not in inputs:
                continue
            seen = [v for row in sample if (v := _walk_row(row, path)) is not None]
            found = [(v, function.value_problem(arg, v)) for v in seen]
            if not found or any(problem is None for _, problem in found):
                continue
            example, problem = found[0]
            problems.append(
                Problem(
                    graph.label,
                    f"'{function.name}' does not take input '{'.'.join(path)}' for '{arg}': it "
                    f"holds {shorten(repr(example), 40)} ({type(example).__name__}) in the first "
                    f"{len(sample)} row(s) of {location} ({problem})"
                    f"{_conversion(function, arg)}",
                    name,
                    f"args.{arg}",
                )
            )
    return problems


def _walk_row(row: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path` in a row, or None when a step is missing."""
    value: Any = row
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value
