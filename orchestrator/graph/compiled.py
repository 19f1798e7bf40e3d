"""A compiled graph: its nodes ready to run (parsed expressions, loaded templates, compiled
schemas) in a runnable order, and what identifies it (source, template closure, hash)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..compute import ComputeFunction
from .spec import Aggregate, GraphSpec, NodeBase
from .templates import Expression

if TYPE_CHECKING:
    # Type hints only (they do not run): the kinds sit above the graph.
    from ..kinds.base import NodeKind
    from .spec import Kinds


@dataclass
class CompiledNode:
    """A node ready to run; its kind's subclass adds what its executor needs (templates,
    schema, function...)."""

    name: str
    spec: NodeBase
    deps: set[str]
    kind: NodeKind[Any, Any]
    foreach: Expression | None = None
    when: Expression | None = None

    @property
    def is_llm(self) -> bool:
        return self.kind.name == "llm"

    @property
    def uses_server(self) -> bool:
        """It talks to a server, so the run needs an endpoint for it."""
        return self.kind.endpoint_want(self.spec) is not None


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
    # Compiled with the user's trust (--trust): what it may reach, never part of its hash.
    trusted: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @classmethod
    def load(cls, path: Path | str, *, trust: bool = False) -> CompiledGraph:
        """Load and check a graph file (same as `orchestrator.load_graph`)."""
        # With every registered kind, which only the kinds' own package knows: the one
        # upward import left in graph/ (pyproject's import-linter contract names it).
        from ..kinds.graphs import compile_graph

        return compile_graph(path, trust=trust)

    @classmethod
    def from_dict(
        cls,
        spec: dict[str, Any],
        prompts: dict[str, str] | None = None,
        *,
        name: str = "<graph dict>",
        trust: bool = False,
    ) -> CompiledGraph:
        """A graph built in Python: the file's structure as a dict, templates by name."""
        from ..kinds.graphs import compile_dict  # as in `load`

        return compile_dict(spec, prompts, name=name, trust=trust)

    def user_functions(self) -> dict[str, Any]:
        """Functions named by module path (not built-ins): their code is part of a run's
        identity."""
        found: dict[str, Any] = {}
        functions = [fn for cn in self.nodes.values() for fn in cn.kind.functions(cn)]
        functions += [agg.function for agg in self.aggregates.values()]
        for function in functions:
            module = getattr(function.fn, "__module__", "") or ""
            if not module.startswith("orchestrator."):
                found[function.name] = function.fn
        return found


@dataclass
class GraphOrigin:
    """Where a graph comes from: a file (its prompts in a folder) or a dict (prompt texts)."""

    path: Path
    file: str  # how problems name it
    prompts_dir: Path | None = None
    texts: dict[str, str] | None = None
    source: bytes | None = None  # as hashed and snapshotted; a file's bytes when None
    # The user trusts the graph (--trust): it may import modules and read any prompts folder.
    trusted: bool = False
    # The node kinds its nodes are parsed and compiled with (orchestrator/kinds registers
    # them; the graph package imports none).
    kinds: Kinds = field(kw_only=True)
