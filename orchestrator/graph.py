"""A compiled graph: its nodes ready to run (parsed expressions, loaded templates, compiled
schemas) in a runnable order, and what identifies it (source, template closure, hash)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .compute import ComputeFunction
from .spec import (
    Aggregate,
    ComputeNode,
    GraphSpec,
    LLMNode,
    Sampling,
)
from .templates import (
    Expression,
    Prompt,
)


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
        from .compile import compile_graph

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
        from .compile import compile_dict

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


@dataclass
class GraphOrigin:
    """Where a graph comes from: a file (its prompts in a folder) or a dict (prompt texts)."""

    path: Path
    file: str  # how problems name it
    prompts_dir: Path | None = None
    texts: dict[str, str] | None = None
    source: bytes | None = None  # as hashed and snapshotted; a file's bytes when None
