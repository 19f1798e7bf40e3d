"""What a report shows besides the trace: the graph's nodes and edges and each example's
inputs, from the run folder's own snapshot, or (for folders from before snapshots) from
the files the manifest names, with a note when they are gone or changed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..store import Manifest, RunReader
from .values import abridge
from .views import ScoreField


@dataclass
class NodeInfo:
    """What the report needs of one graph node (from the compiled graph when available)."""

    name: str
    kind: str  # "llm" | "compute" | "?" (not in the graph file)
    deps: list[str] = field(default_factory=list)
    foreach: str | None = None
    when: str | None = None
    function: str | None = None
    description: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "deps": self.deps,
            "foreach": self.foreach,
            "when": self.when,
            "function": self.function,
            "description": self.description,
        }


@dataclass
class GraphInfo:
    """Nodes in display order and the note on where they came from."""

    nodes: list[NodeInfo]
    inputs: list[str]
    description: str | None = None
    path: Path | None = None
    note: str | None = None  # why the drawing may be incomplete or out of date
    aggregates: dict[str, str] = field(default_factory=dict)  # aggregate → compute function
    score_fields: list[ScoreField] = field(default_factory=list)


def _candidates(raw: str, run_dir: Path) -> list[Path]:
    """Places a path written at run time may be now: as written, or beside the run folder."""
    path = Path(raw)
    if path.is_absolute():
        return [path]
    found = [Path.cwd() / path]
    base = run_dir.resolve()
    for parent in [base, *base.parents][:5]:
        found.append(parent / path)
    return found


def find_file(raw: str | None, run_dir: Path) -> Path | None:
    if not raw:
        return None
    return next((p for p in _candidates(raw, run_dir) if p.is_file()), None)


def load_graph(manifest: Manifest, run: RunReader, seen_nodes: Iterable[str]) -> GraphInfo:
    """Nodes and edges from the run's graph file; the trace's node names when it is gone."""
    from ..errors import GraphError
    from ..kinds import compile_graph

    info = manifest.graph
    fallback = [NodeInfo(name, "?") for name in dict.fromkeys(seen_nodes)]
    snapshot = run.snapshot_graph
    path = snapshot or find_file(info.path, run.path)
    if path is None:
        missing = f"graph file {info.path!r} not found: nodes come from the trace, no edges"
        return GraphInfo(fallback, [], note=missing)
    try:
        # The snapshot is the graph as the run used it: drawn without the user's functions,
        # which need not be installed where the folder is read (and a drawing never runs a
        # graph's code, whoever wrote the folder).
        graph = (
            compile_graph(path, prompts_dir=run.snapshot_prompts, functions=False)
            if snapshot
            else compile_graph(path, functions=False)
        )
    except (GraphError, OSError, ValueError) as exc:
        broken = f"graph file {path} no longer compiles ({str(exc).splitlines()[0]}): no edges"
        return GraphInfo(fallback, [], path=path, note=broken)
    import networkx as nx

    position = {name: i for i, name in enumerate(graph.spec.nodes)}
    dag = nx.DiGraph()
    dag.add_nodes_from(graph.nodes)
    for name, node in graph.nodes.items():
        dag.add_edges_from((dep, name) for dep in node.deps)
    # File order among nodes that could run in either order, so the page reads like the file.
    order = list(nx.lexicographical_topological_sort(dag, key=lambda n: position.get(n, 0)))
    nodes = []
    for name in order:
        spec = graph.nodes[name].spec
        nodes.append(
            NodeInfo(
                name=name,
                kind=graph.nodes[name].kind.name,
                deps=sorted(graph.nodes[name].deps, key=lambda n: position.get(n, 0)),
                foreach=spec.foreach,
                when=spec.when,
                function=getattr(spec, "function", None),
                description=spec.description,
            )
        )
    note: str | None = None
    if info.get("hash") and graph.content_hash != info.get("hash"):
        note = (
            f"graph file {path} changed since this run (hash {graph.content_hash}, run used "
            f"{info.get('hash')}): the drawing shows the file as it is now"
        )
    inputs = list(graph.spec.inputs) + list(graph.spec.optional_inputs)
    aggregates = {name: agg.function for name, agg in graph.spec.aggregates.items()}
    return GraphInfo(
        nodes, inputs, graph.spec.description, path, note, aggregates, _score_fields(graph)
    )


def _score_fields(graph: Any) -> list[ScoreField]:
    """Outputs that are an LLM node's integer or number field, named `node.field`."""
    found = []
    for output, expression in graph.spec.outputs.items():
        node, dot, name = str(expression).strip().partition(".")
        spec = graph.nodes[node].spec if dot and node in graph.nodes else None
        fields = getattr(spec, "output", None)
        declared = fields.get(name) if isinstance(fields, dict) else None
        if declared is not None and getattr(declared, "type", None) in ("integer", "number"):
            found.append(ScoreField(output, node, declared.type, declared.min, declared.max))
    return found


def load_inputs(
    manifest: Manifest, run: RunReader, fields: list[str], limit: int | None
) -> tuple[dict[str, dict[str, str]], dict[str, int], str | None]:
    """Dataset fields of every row by id (abridged), row numbers, and a note when unusable."""
    from ..data import file_hash, read_rows

    if run.has_inputs:
        return _snapshot_inputs(run, fields, limit)
    info = manifest.dataset
    path = find_file(info.path, run.path)
    if path is None:
        return {}, {}, f"dataset {info.path!r} not found: inputs are not shown"
    if info.hash and file_hash(path) != info.hash:
        return {}, {}, f"dataset {path} changed since this run: inputs are not shown"
    inputs: dict[str, dict[str, str]] = {}
    numbers: dict[str, int] = {}
    try:
        for row in read_rows(path):
            numbers[row.id] = row.number
            if row.error is None:
                wanted = fields or [k for k in row.data if k != "id"]
                inputs[row.id] = {
                    name: abridge(
                        row.data[name]
                        if isinstance(row.data[name], str)
                        else orjson.dumps(row.data[name], default=str).decode(),
                        limit,
                    )
                    for name in wanted
                    if name in row.data
                }
    except Exception as exc:  # a dataset the run could read but we cannot is only a note
        return {}, {}, f"dataset {path} could not be read: {exc}"
    return inputs, numbers, None


def _snapshot_inputs(
    run: RunReader, fields: list[str], limit: int | None
) -> tuple[dict[str, dict[str, str]], dict[str, int], str | None]:
    """Inputs as the run read them (inputs.jsonl), so the dataset file is not needed."""
    inputs: dict[str, dict[str, str]] = {}
    numbers: dict[str, int] = {}
    for line in run.inputs():
        example, data = line.id, line.data or {}
        numbers[example] = line.number
        wanted = fields or [k for k in data if k != "id"]
        inputs[example] = {
            name: abridge(
                data[name]
                if isinstance(data[name], str)
                else orjson.dumps(data[name], default=str).decode(),
                limit,
            )
            for name in wanted
            if name in data
        }
    return inputs, numbers, None
