"""Graphs compiled with every registered node kind: what everything above the kinds calls.

The graph package parses and compiles with whatever kinds it is handed (it imports none,
being below them); these hand it the registry, built-ins and any `register_kind` added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import graph as _compile
from ..graph import CompiledGraph, GraphRegistries, install_compilers
from ..servers import EndpointWant
from .base import kinds


def compile_graph(
    path: Path | str,
    *,
    prompts_dir: Path | str | None = None,
    functions: bool = True,
    trust: bool = False,
) -> CompiledGraph:
    """`graph.compile.compile_graph` with every registered kind (`orc.compile_graph`)."""
    return _compile.compile_graph(
        path, kinds=kinds(), prompts_dir=prompts_dir, functions=functions, trust=trust
    )


def compile_dict(
    spec: dict[str, Any],
    prompts: dict[str, str] | None = None,
    *,
    name: str = "<graph dict>",
    trust: bool = False,
) -> CompiledGraph:
    """`graph.compile.compile_dict` with every registered kind."""
    return _compile.compile_dict(spec, prompts, kinds=kinds(), name=name, trust=trust)


def compile_source(
    source: bytes,
    templates: dict[str, str],
    *,
    path: Path,
    label: str,
    trust: bool = False,
    brought: GraphRegistries | None = None,
) -> CompiledGraph:
    """`graph.compile.compile_source` with every registered kind (a worker's compile), and
    the kinds and functions the graph `brought` from the process that first compiled it
    (which this one may never have registered: a closure inside the user's `main()`)."""
    brought = brought or GraphRegistries()
    return _compile.compile_source(
        source,
        templates,
        kinds={**kinds(), **brought.kinds},
        path=path,
        label=label,
        trust=trust,
        known_functions=brought.functions,
    )


def endpoint_wants(graph: CompiledGraph) -> dict[str, EndpointWant]:
    """What each node that talks to a server asks of the run's servers, as its kind reads
    it (nodes that talk to none are left out)."""
    wants = {name: cn.kind.endpoint_want(cn.spec) for name, cn in graph.nodes.items()}
    return {name: want for name, want in wants.items() if isinstance(want, EndpointWant)}


# `CompiledGraph.load` / `.from_dict` (public as `orc.Graph`, `orc.CompiledGraph`) compile
# with these: the graph layer is handed them rather than importing the kinds above it.
install_compilers(compile_graph, compile_dict)
