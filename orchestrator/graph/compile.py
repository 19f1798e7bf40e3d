"""Check a graph spec before any request and compile it into runnable parts.

Every problem found is reported together (file, node, field), so a user fixes a broken
graph in one pass instead of one error at a time.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from ..compute import ComputeFunction
from ..errors import GraphError, Problem
from .checks import (
    RESULT_FIELDS,
    Checker,
    NodeScope,
    check_arguments,
    check_attributes,
    check_comparisons,
    check_cycles,
    check_foreach,
    check_gated_reads,
    check_list_reads,
    check_names,
    check_output_keys,
    check_sampling,
    check_skipped_read,
    check_when,
    item_specs,
    node_sources,
    resolve_function,
)
from .compiled import CompiledAggregate, CompiledGraph, CompiledNode, GraphOrigin
from .datafiles import check_variants
from .loaders import SealedLoader, all_sources, has_dynamic_reference
from .once import check_once, check_once_per
from .spec import (
    IDENTIFIER,
    Aggregate,
    GraphSpec,
    NodeBase,
    load_spec,
    node_kind,
    spec_from_raw,
)
from .templates import (
    BUILTIN_NAMES,
    Expression,
)
from .yamlfile import check_plain_shape

if TYPE_CHECKING:
    from .spec import Kinds

RESERVED = frozenset({"params", "run", "id", "status", "error", "results", "files", "shots"})
RESULT_RESERVED = frozenset({"id", "status", "error"})


def _hash_graph(source: bytes, templates: dict[str, str]) -> str:
    """Hash of the graph file plus every template it can render: a prompt edit, in an
    included template too, is a new graph."""
    digest = hashlib.sha256(source)
    for name in sorted(templates):
        digest.update(b"\0" + name.encode() + b"\0")
        digest.update(templates[name].encode("utf-8"))
    return digest.hexdigest()[:16]


def compile_graph(
    path: Path | str,
    *,
    kinds: Kinds,
    prompts_dir: Path | str | None = None,
    functions: bool = True,
    trust: bool = False,
) -> CompiledGraph:
    """Load, check and compile a graph file whose nodes are of `kinds` (orchestrator.kinds
    passes every registered one); raise GraphError listing every problem.

    `prompts_dir` overrides the graph's own `prompts:` folder (a run folder's snapshot keeps
    its templates beside the graph); it is the caller's choice, so it may be anywhere. With
    `functions=False` compute functions are named but not imported: enough to draw and
    report a run whose user code is not on this machine. `trust=True` lets the graph import
    any module path (one beside it too) and read a prompts folder outside its own folder.
    """
    path = Path(path)
    origin = GraphOrigin(
        path,
        str(path),
        prompts_dir=Path(prompts_dir) if prompts_dir else None,
        trusted=trust,
        kinds=kinds,
    )
    return _compile_guarded(origin, lambda: load_spec(path, kinds), functions)


def compile_dict(
    spec: dict[str, Any],
    prompts: dict[str, str] | None = None,
    *,
    kinds: Kinds,
    name: str = "<graph dict>",
    trust: bool = False,
) -> CompiledGraph:
    """Compile a graph given as a dict (the shape of a graph file) with its templates as
    texts by name; checked exactly like a file, problems named by `name`."""
    import yaml

    check_plain_shape(spec, name)  # before yaml.safe_dump, which recurses
    try:
        text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError as exc:
        raise GraphError([Problem(name, f"the graph is not plain data: {exc}")]) from None
    origin = GraphOrigin(
        Path.cwd() / "graph.yaml", name, texts=dict(prompts or {}), trusted=trust, kinds=kinds
    )
    origin.source = text.encode("utf-8")
    return _compile_guarded(origin, lambda: spec_from_raw(spec, name, kinds), functions=True)


def compile_source(
    source: bytes,
    templates: dict[str, str],
    *,
    kinds: Kinds,
    path: Path,
    label: str,
    trust: bool = False,
    known_functions: Mapping[str, ComputeFunction] | None = None,
) -> CompiledGraph:
    """A graph compiled again from what an earlier compile read (the file's bytes and every
    template it can render), reading no graph or template file: what a worker process or
    another machine runs (orchestrator/scale). `known_functions` are found by name first
    (those the graph brought with it); functions named by module path (trusted graphs
    only) are imported near `path`, as for the file."""
    from .yamlfile import load_yaml_text

    origin = GraphOrigin(
        path,
        label,
        texts=dict(templates),
        source=source,
        trusted=trust,
        kinds=kinds,
        known_functions=dict(known_functions or {}),
    )
    return _compile_guarded(
        origin,
        lambda: spec_from_raw(load_yaml_text(source.decode("utf-8"), label), label, kinds),
        functions=True,
    )


def _compile_guarded(
    origin: GraphOrigin, load: Callable[[], GraphSpec], functions: bool
) -> CompiledGraph:
    try:
        return _compile(origin, load(), functions)
    except RecursionError:
        # Every known way to nest deeply is bounded and reported earlier; this is the net.
        raise GraphError([Problem(origin.file, "nested too deeply to check")]) from None


def _compile(origin: GraphOrigin, spec: GraphSpec, functions: bool) -> CompiledGraph:
    path = origin.path
    ck = Checker(origin, spec, functions)
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
        ck.problem(
            f"prompts folder {ck.prompts_dir} does not exist{_prompts_hint(origin, spec)}",
            field="prompts",
        )
    check_sampling(ck, spec.defaults, None, "defaults.")

    compiled: dict[str, CompiledNode] = {}
    graph = nx.DiGraph()
    graph.add_nodes_from(node_names)
    for name, node in spec.nodes.items():
        compiled[name] = _compile_node(ck, name, node, inputs, node_names)
    for cn in list(compiled.values()):
        cn.kind.link(cn, compiled, ck)  # a cascade's later stages wait for earlier ones
    for name, cn in compiled.items():
        for dep in cn.deps:
            graph.add_edge(dep, name)

    check_cycles(ck, graph)
    check_once(ck, spec, inputs)
    check_once_per(ck, spec, inputs)
    check_variants(ck)
    for name, cn in compiled.items():
        if cn.foreach is not None:
            check_foreach(ck, name, cn.foreach)

    outputs: dict[str, Expression] = {}
    for key, source in spec.outputs.items():
        if key in RESULT_RESERVED:
            ck.problem(f"output name '{key}' is reserved", field=f"outputs.{key}")
        expr = ck.expression(source, None, f"outputs.{key}")
        if expr:
            check_names(ck, expr.names, inputs | node_names, None, f"outputs.{key}")
            check_attributes(ck, None, [(f"outputs.{key}", "{{ " + source + " }}")])
            check_list_reads(ck, None, [(f"outputs.{key}", "{{ " + source + " }}")])
            check_skipped_read(ck, key, expr)
            check_output_keys(ck, key, expr)
            check_comparisons(ck, None, [(f"outputs.{key}", "{{ " + source + " }}")], {})
            check_gated_reads(ck, None, [(f"outputs.{key}", "{{ " + source + " }}")])
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
    # Ties broken by the file's own order, so the same graph always runs and prints the same.
    position = {name: i for i, name in enumerate(spec.nodes)}
    order = list(nx.lexicographical_topological_sort(graph, key=position.__getitem__))
    graph_bytes = origin.source if origin.source is not None else path.read_bytes()
    return CompiledGraph(
        path,
        spec,
        compiled,
        order,
        outputs,
        aggregates,
        _hash_graph(graph_bytes, templates),
        source=graph_bytes,
        templates=templates,
        prompts_dir=ck.prompts_dir,
        label=origin.file,
        trusted=origin.trusted,
    )


def _prompts_hint(origin: GraphOrigin, spec: GraphSpec) -> str:
    """For the default `prompts: ../prompts` of a graph in a subfolder: the prompts folder
    found further up, as the `prompts:` line that would reach it."""
    if origin.prompts_dir is not None or "prompts" in spec.model_fields_set:
        return ""
    folder = origin.path.resolve().parent
    for parent in folder.parents:
        if (parent / "prompts").is_dir():
            relative = os.path.relpath(parent / "prompts", folder)
            return (
                f" (the default is ../prompts beside the graph's folder; "
                f"add `prompts: {relative}` to the graph, then name that folder with "
                "--prompts or run with --trust: it is outside the graph's folder)"
            )
    return " (set `prompts:` in the graph to the folder of its templates)"


def _template_closure(ck: Checker) -> dict[str, str]:
    """Every template the run can render, then the loader sealed to exactly those.

    A template that includes a name computed at render time could reach any file of the
    prompts folder, so then the whole folder is the closure.
    """
    loader = ck.env.loader
    if not isinstance(loader, SealedLoader):
        return {}
    templates = {k: v for k, v in loader.served.items() if k not in ck.data_files}
    if has_dynamic_reference(ck.env, templates):
        all_sources(ck.env)
    loader.seal()
    return dict(sorted(loader.served.items()))


def _compile_node(
    ck: Checker, name: str, node: NodeBase, inputs: set[str], node_names: set[str]
) -> CompiledNode:
    """What every node has (`foreach`, `when`, `after`), then its kind compiles the rest."""
    kind = node_kind(ck.kinds, node)
    cn = kind.compiled(name=name, spec=node, deps=set(), kind=kind)
    known = inputs | node_names
    item_names = {node.as_, f"{node.as_}_index"} if node.foreach else set()
    scope = NodeScope(ck, name, known | item_names, ck.refs.setdefault(name, {}))

    if node.foreach:
        if not IDENTIFIER.fullmatch(node.as_):
            ck.problem(f"'{node.as_}' is not a plain name to bind each element to", name, "as")
        cn.foreach = ck.expression(node.foreach, name, "foreach")
        if cn.foreach:
            scope.use(cn.foreach.names, "foreach")
            check_names(ck, cn.foreach.names, known, name, "foreach")
    if node.when:
        cn.when = ck.expression(node.when, name, "when")
        if cn.when:
            scope.use(cn.when.names, "when")
            check_names(ck, cn.when.names, known | item_names, name, "when")
            check_when(ck, name, cn.when, item_specs(ck, name, cn.foreach))
    for dep in node.after:
        if dep not in node_names:
            close = difflib.get_close_matches(dep, sorted(node_names), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            ck.problem(f"unknown node '{dep}'{hint}", name, "after")
    scope.use(set(node.after), "after")

    kind.compile(cn, scope)

    used = scope.used
    cn.deps = (used & node_names) - {name} - item_names
    if name in used - item_names:
        ck.problem("node refers to itself", name, scope.refs.get(name))
    sources = node_sources(ck, cn, scope)
    check_attributes(ck, name, sources)
    check_list_reads(ck, name, sources)
    check_comparisons(ck, name, sources, item_specs(ck, name, cn.foreach))
    check_gated_reads(ck, name, sources)
    return cn


def _compile_aggregate(ck: Checker, name: str, item: Aggregate) -> CompiledAggregate | None:
    where = f"aggregates.{name}"
    function = resolve_function(ck, item.function, None, f"{where}.function")
    if function is not None and (function.is_async or function.wants_runtime):
        # Aggregates run after the last request, over the finished results: no server.
        ck.problem(
            f"function '{item.function}' talks to the server (it is async or takes "
            "`runtime`), so it can only run as a node, not as an aggregate",
            None,
            f"{where}.function",
        )
    args: dict[str, Expression | Any] = {}
    for arg, value in item.args.items():
        if isinstance(value, str):
            expr = ck.expression(value, None, f"{where}.args.{arg}")
            if expr:
                check_names(ck, expr.names, {"results"}, None, f"{where}.args.{arg}")
                fields = [*RESULT_FIELDS, *ck.spec.outputs]
                source = "{{ " + value + " }}"
                check_list_reads(ck, None, [(f"{where}.args.{arg}", source)], results=fields)
                args[arg] = expr
        else:
            args[arg] = value
    if function is not None:
        check_arguments(ck, function, args, None, f"{where}.args")
        if "categories" not in args and function.takes("categories"):
            scale = _score_scale(ck)
            if scale is not None:
                args["categories"] = scale
    return CompiledAggregate(name, item, function, args) if function else None


MAX_SCALE = 101  # an integer range wider than this is a measurement, not a rating scale


def _score_scale(ck: Checker) -> list[int] | None:
    """The rating scale the graph's LLM nodes declare: every bounded integer output field's
    min..max, when they all agree (a 1-5 jury's agreement must not assume PerQ's 0-3)."""
    ranges = set()
    for node in ck.spec.nodes.values():
        for spec in (getattr(node, "output", None) or {}).values():
            if getattr(spec, "type", None) == "integer" and None not in (spec.min, spec.max):
                ranges.add((int(spec.min), int(spec.max)))
    if len(ranges) != 1:
        return None
    low, high = ranges.pop()
    return list(range(low, high + 1)) if 0 < high - low + 1 <= MAX_SCALE else None
