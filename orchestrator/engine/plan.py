"""What a run is, as one frozen record: `RunPlan`, built once from the API's (or the CLI's,
through the API) arguments and carried whole to every worker process and Ray actor.

Before it, a run's settings were copied field by field through five shapes (`arun`'s
arguments, `RunSettings`, `RunConfig`, `JobParts`, `WorkerJob`) and a new setting touched
six places. Now the API fills one `RunPlan`; the session reads it; a worker receives it
inside its `WorkerJob` next to the facts the run's owner resolved (endpoints, run id,
window), and `build_runtime` (runtime.py) turns it into a cache, a client and an engine in
either place.

It is grouped into four small sub-records because each is read by one part of the code:
`ServerPlan` by the endpoint choice (which servers, which key, what may be reached),
`CallPolicy` by the client (how each call is made and waited for), `CachePlan` by the
response cache, `ScalePlan` by the worker pool. `params`, `limit` and `overwrite` are the
run's own and stay at the top. Every record is frozen (a plan is never edited, only
`replace`d) and pickles, the seams (`transport`, `retry`) included when the user's do.

It lives in engine/ rather than session/ for the layer contract (pyproject
[tool.importlinter]): scale/ and engine/ consume it and sit below session/, which builds
it; `orchestrator.session.plan` re-exports it under the name the design uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..calls.endpoints import StructuredChoice
from ..calls.outage import DEFAULT_SERVER_WAIT
from ..calls.retry import RetryPolicy
from ..calls.tuner import Concurrency
from ..providers.base import Transport

Executor = Literal["local", "ray"]
Workers = int | Literal["auto"]


@dataclass(frozen=True, kw_only=True)
class ServerPlan:
    """Which servers the run talks to, with which key, and which others it may reach."""

    base_url: str | tuple[str, ...]  # several: replicas serving one model
    model: str | None = None
    # What serves the model when its root does not tell (two checkpoints at one path): in
    # the cache key and the run key in place of the root the server reports.
    server_id: str | None = None
    api_key: str = field(default="EMPTY", repr=False)  # never printed with the plan
    # Servers a node's own `base_url` may name besides the run's (--allow-server), or all of
    # them (--trust): the user's key goes only where the user said.
    allow_servers: tuple[str, ...] = ()
    trust_servers: bool = False
    # The seam for tests and other providers: None is the OpenAI SDK.
    transport: Transport | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class CallPolicy:
    """How each call to a server is made, limited and waited for."""

    timeout: float = 120.0
    server_wait: float = DEFAULT_SERVER_WAIT
    # Per server: N fixed, "auto" tuned from its load, None auto against vLLM else 64.
    concurrency: Concurrency = None
    affinity: bool = True  # an example's calls prefer the replica of its earlier calls
    structured: StructuredChoice = "auto"
    retry: RetryPolicy | None = field(default=None, repr=False)  # None: the default policy


@dataclass(frozen=True, kw_only=True)
class CachePlan:
    """The response cache: whether there is one, where, and whether it starts empty."""

    use: bool = True
    path: Path | None = None  # None: the shared default cache file
    refresh: bool = False


@dataclass(frozen=True, kw_only=True)
class ScalePlan:
    """Scale-out (orchestrator/scale): N worker processes, or actors on a Ray cluster; the
    run folder, cache and run key are the same as for one process."""

    workers: Workers = 1
    executor: Executor = "local"
    ray_address: str | None = None

    @property
    def sharded(self) -> bool:
        """False for the plain in-process run: one worker (or `auto` on one core), no Ray."""
        if self.executor == "ray":
            return True
        return (os.cpu_count() or 1) > 1 if self.workers == "auto" else self.workers != 1


@dataclass(frozen=True, kw_only=True)
class Resample:
    """A retest's re-asks (`orc.retest`): `nodes` (empty: every LLM node) are asked again
    under fresh sample indices — repeat `repeat` of a node of n samples takes indices
    repeat·n … repeat·n + n − 1 — so the cache, keyed by sample index, holds each repeat
    apart from the run's own replies (indices 0 … n − 1) and from the other repeats.
    `temperature`, when given, replaces those nodes' own."""

    repeat: int
    nodes: tuple[str, ...] = ()
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"a retest repeat is numbered from 1, not {self.repeat}")

    def covers(self, node: str) -> bool:
        """Whether `node` is one of the nodes re-asked."""
        return not self.nodes or node in self.nodes

    def first_sample(self, node: str, n: int) -> int:
        """The sample index `node`'s call of n samples starts at (0: the run's own)."""
        return self.repeat * n if self.covers(node) else 0

    def describe(self) -> dict[str, Any]:
        """As the manifest and the run key show it."""
        return {
            "repeat": self.repeat,
            "nodes": list(self.nodes) or "every llm node",
            "temperature": self.temperature,
        }


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything a run is, decided before the store or a server is touched. `params`,
    `resample` and `servers.model`, `.base_url`, `.server_id` and `calls.structured` shape
    replies and are part of the run key; the rest only say how the run goes."""

    servers: ServerPlan
    calls: CallPolicy = field(default_factory=CallPolicy)
    cache: CachePlan = field(default_factory=CachePlan)
    scale: ScalePlan = field(default_factory=ScalePlan)
    # The graph's params as the user gave them; the session fills in the defaults.
    params: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None  # the first N rows only
    overwrite: bool = False  # start the run folder afresh
    # A retest's re-asks under fresh sample indices (None: an ordinary run). It shapes
    # replies, so it is part of the run key.
    resample: Resample | None = None
