"""A compiled graph: its nodes ready to run (parsed expressions, loaded templates, compiled
schemas) in a runnable order, and what identifies it (source, template closure, hash)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compute import ComputeFunction, registered
from ..errors import ConfigurationError
from ..store import GraphSnapshot
from .spec import Aggregate, GraphSpec, Kinds, NodeBase, NodeKind
from .templates import Expression


@dataclass
class _Compilers:
    """How `CompiledGraph.load` / `.from_dict` compile: with the built-in node kinds plus
    the user's, which only `orchestrator.kinds` knows. It sits above this layer, so it hands
    these in when imported (`install_compilers`) instead of this module reaching up for
    them; a process that never imported it has it loaded by name (`BUILTIN_KINDS`)."""

    load: Callable[..., CompiledGraph] | None = None
    from_dict: Callable[..., CompiledGraph] | None = None


_COMPILERS = _Compilers()

# The module that defines the built-in kinds and installs the compilers: loaded by name on
# the first compile that needs it, as compute/ loads its built-in functions, so
# `CompiledGraph.load` works first thing in a process and nothing here imports upward.
BUILTIN_KINDS = "orchestrator.kinds.graphs"


def install_compilers(
    load: Callable[..., CompiledGraph], from_dict: Callable[..., CompiledGraph]
) -> None:
    """Called once by `orchestrator.kinds.graphs` on import."""
    _COMPILERS.load, _COMPILERS.from_dict = load, from_dict


def _compiler(which: str) -> Callable[..., CompiledGraph]:
    if getattr(_COMPILERS, which) is None:
        importlib.import_module(BUILTIN_KINDS)
    found: Callable[..., CompiledGraph] | None = getattr(_COMPILERS, which)
    if found is None:  # the module named did not install them
        raise ConfigurationError(f"CompiledGraph.{which}: {BUILTIN_KINDS} installed no compiler")
    return found


@dataclass
class CompiledNode:
    """A node ready to run; its kind's subclass adds what its executor needs (templates,
    schema, function...)."""

    name: str
    spec: NodeBase
    deps: set[str]
    kind: NodeKind
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

    def snapshot(self) -> GraphSnapshot:
        """What a run's store keeps of this graph: the file and its templates as read."""
        return GraphSnapshot(self.source, dict(self.templates))

    @classmethod
    def load(cls, path: Path | str, *, trust: bool = False) -> CompiledGraph:
        """Load and check a graph file (same as `orchestrator.load_graph`)."""
        return _compiler("load")(path, trust=trust)

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
        return _compiler("from_dict")(spec, prompts, name=name, trust=trust)

    def _functions(self) -> list[ComputeFunction]:
        """Every function its nodes and aggregates run."""
        functions = [fn for cn in self.nodes.values() for fn in cn.kind.functions(cn)]
        return functions + [agg.function for agg in self.aggregates.values()]

    def user_functions(self) -> dict[str, Any]:
        """Functions named by module path (not built-ins): their code is part of a run's
        identity."""
        found: dict[str, Any] = {}
        for function in self._functions():
            module = getattr(function.fn, "__module__", "") or ""
            if not module.startswith("orchestrator."):
                found[function.name] = function.fn
        return found

    def registries(self) -> GraphRegistries:
        """The node kinds and registered functions this graph was compiled with, to compile
        it again in another process (a worker, a Ray actor) whose own registries may lack
        them. A function named by module path is left out: the other process imports it
        as this one did (beside the graph file, which only this process's path may reach)."""
        return GraphRegistries(
            kinds={cn.kind.name: cn.kind for cn in self.nodes.values()},
            functions={fn.name: fn for fn in self._functions() if registered(fn.name) is fn},
        )


@dataclass(frozen=True)
class GraphRegistries:
    """What a graph's compile looked up in the process-wide registries: the kinds of its
    nodes, and its functions by the name the graph gives them. It goes to workers pickled
    by value (a kind or function registered inside `main()` included) over their pipes;
    it is never written to a run or batch folder, where loading it would run code."""

    kinds: dict[str, NodeKind] = field(default_factory=dict)
    functions: dict[str, ComputeFunction] = field(default_factory=dict)


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
    # Functions found by name before the registries are asked: those a worker's graph
    # brought with it (GraphRegistries), which its own process may never have registered.
    known_functions: Mapping[str, ComputeFunction] = field(default_factory=dict, kw_only=True)
