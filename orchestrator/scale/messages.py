"""What crosses between the process that owns a run and its workers (processes or Ray
actors): the job a worker is given once, the rows it is handed, and the reports of finished
work it hands back. Everything here pickles; nothing holds a socket or a file.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import cloudpickle
from pydantic import BaseModel, Field

from ..data import Row
from ..engine import GroupOutcome, RunPlan
from ..errors import ConfigurationError
from ..errors import WorkerFailed as WorkerFailed
from ..errors import WorkerLost as WorkerLost
from ..events import RunEvent
from ..graph import CompiledGraph, GraphRegistries
from ..kinds import compile_source
from ..servers import StructuredMode
from ..store import Counts, EncodedLine, TraceBatch

# (node, foreach item) -> the stored JSON of its finished value, for one example.
ResumeValues = dict[tuple[str, int], bytes | None]


def pack_registries(graph: CompiledGraph) -> bytes:
    """The graph's kinds and functions as bytes a worker can load; ConfigurationError
    naming them when one cannot be pickled (a closure over an open file or a lock)."""
    registries = graph.registries()
    try:
        return cloudpickle.dumps(registries, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # cloudpickle raises whatever the object's reducer raises
        names = ", ".join([*registries.kinds, *registries.functions])
        raise ConfigurationError(
            f"the graph {graph.label} cannot be sent to a worker: its kinds and functions "
            f"({names}) must pickle to run with workers > 1 ({type(exc).__name__}: {exc})"
        ) from None


@dataclass(frozen=True)
class GraphRecipe:
    """A compiled graph as the bytes it was compiled from, so a worker compiles the very
    same graph without reading a file (it may be on another machine), with the node kinds
    and functions it was compiled with: the worker's own registries may lack them."""

    source: bytes
    templates: dict[str, str]
    path: Path
    label: str
    content_hash: str
    trusted: bool = False  # the user's trust goes with the graph (its own modules import)
    # The graph's GraphRegistries as cloudpickle wrote them: by reference what a worker can
    # import, by value what it cannot (a kind or function defined inside the user's
    # `main()`, a closure). Only ever sent to workers, never stored: loading it runs code.
    registries: bytes = field(default=b"", repr=False)

    @classmethod
    def of(cls, graph: CompiledGraph) -> GraphRecipe:
        return cls(
            source=graph.source,
            templates=graph.templates,
            path=graph.path,
            label=graph.label,
            content_hash=graph.content_hash,
            trusted=graph.trusted,
            registries=pack_registries(graph),
        )

    def compile(self) -> CompiledGraph:
        """The graph again; WorkerFailed if it hashes differently (a worker must never run
        a graph the run key does not name)."""
        brought = pickle.loads(self.registries) if self.registries else GraphRegistries()
        graph = compile_source(
            self.source,
            self.templates,
            path=self.path,
            label=self.label,
            trust=self.trusted,
            brought=brought,
        )
        if graph.content_hash != self.content_hash:
            raise WorkerFailed(
                f"the graph {self.label} compiled to hash {graph.content_hash} in a worker but "
                f"{self.content_hash} in the run; report this as a bug."
            )
        return graph


class EndpointPlan(BaseModel):
    """One LLM node's server as the run decided it (model listed, canary asked once)."""

    node: str
    urls: list[str]  # the server's URL, or each replica's
    model: str
    api_key: str = Field(default="EMPTY", repr=False)  # never printed with the plan
    structured: StructuredMode
    # What serves the model as the run found it: a worker's cache keys must be the run's.
    identity: str
    check_joins: bool
    provider: str | None = None  # the built-in provider the node names (None: the run's)


@dataclass(frozen=True, kw_only=True)
class WorkerJob:
    """Everything a worker needs to run the engine on the rows it is handed: the run's plan
    whole (with this worker's share of a fixed concurrency, and the cache file the owner
    opened), the graph, and the facts the owner resolved before any worker started."""

    plan: RunPlan
    graph: GraphRecipe
    endpoints: list[EndpointPlan]
    window: int  # examples this worker keeps in flight
    run_id: str
    graph_hash: str
    run_key: str
    # The once-nodes' values by node, as the owner ran them (or took them from the trace)
    # before any worker started: a worker never runs a once-node.
    once: dict[str, Any] = field(default_factory=dict)


# The two records below go back and forth several times a second with thousands of rows
# or lines: plain slotted dataclasses, since they are built by this code, never parsed
# from user input, and pydantic's validation of every row's data would be pure cost.


@dataclass(slots=True)
class RowChunk:
    """Rows handed to one worker, with the finished node values of those an earlier run
    left half done (so they resume from the trace, as in one process), and the outcome of
    each once_per group of these rows the worker was not handed before (the owner ran it)."""

    rows: list[Row]
    resume: dict[str, ResumeValues] = field(default_factory=dict)
    groups: dict[str, GroupOutcome] = field(default_factory=dict)


@dataclass(slots=True)
class WorkerFailure:
    kind: Literal["server gone", "error"]
    message: str


@dataclass(slots=True)
class WorkerReport:
    """What one worker finished since its last report: result lines (JSON, one per
    example, ids alongside), their trace rows, its counters so far, and the run events
    (outages, limit changes) it saw since. The last report of a worker is `final`, with
    any cache error."""

    worker: str
    pid: int
    host: str
    ids: list[str]
    lines: list[EncodedLine]
    trace: TraceBatch
    stats: Counts
    final: bool = False
    failure: WorkerFailure | None = None
    events: list[RunEvent] = field(default_factory=list)
    cache_error: str | None = None
