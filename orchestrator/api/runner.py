"""Deprecated: `execute(RunConfig(...))`, the library form of `orchestrator run` before
`orc.run`. Kept importable from `orchestrator` (public names) as a thin shim: the config is
turned into a `RunPlan` and run by the session, the path `orc.run` takes. Nothing inside the
package uses it; new code calls `orc.run(graph, data, out=...)`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..calls.endpoints import StructuredChoice
from ..calls.outage import DEFAULT_SERVER_WAIT
from ..calls.retry import RetryPolicy
from ..calls.tuner import Concurrency
from ..data.sources import FileSource
from ..kinds.graphs import compile_graph
from ..providers.base import Transport
from ..session.plan import Executor, RunPlan, Workers, make_plan
from ..session.session import run_session
from ..store.folder import RunFolder
from ..ui.progress import Console, console_progress


@dataclass(kw_only=True)
class RunConfig:
    """Deprecated (use `orc.run`): everything `orchestrator run` took from the command line,
    flat, as `make_plan` names it, plus the graph file, the data file and the run folder."""

    graph: Path
    data: Path
    out: Path
    progress: bool = True
    trust: bool = False  # the graph's modules, prompts folder and servers (`--trust`)
    base_url: str | tuple[str, ...]
    model: str | None = None
    server_id: str | None = None
    api_key: str = field(default="EMPTY", repr=False)
    concurrency: Concurrency = None
    affinity: bool = True
    limit: int | None = None
    cache: Path | None = None
    use_cache: bool = True
    refresh: bool = False
    overwrite: bool = False
    structured: StructuredChoice = "auto"
    params: dict[str, Any] = field(default_factory=dict)
    timeout: float = 120.0
    server_wait: float = DEFAULT_SERVER_WAIT
    workers: Workers = 1
    executor: Executor = "local"
    ray_address: str | None = None
    allow_servers: tuple[str, ...] = ()
    trust_servers: bool = False
    transport: Transport | None = field(default=None, repr=False)
    retry: RetryPolicy | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Strings are paths too: `RunConfig(graph="graphs/x.yaml", ...)` must just work.
        self.graph, self.data, self.out = Path(self.graph), Path(self.data), Path(self.out)
        if self.cache is not None:
            self.cache = Path(self.cache)

    def plan(self) -> RunPlan:
        """The run plan these settings make (`--trust` trusts the graph's servers too)."""
        own = {"graph", "data", "out", "progress", "trust"}
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in own}
        flat["trust_servers"] = self.trust_servers or self.trust
        return make_plan(**flat)


@dataclass
class RunOutcome:
    """Deprecated (use `orc.run`, which returns a `RunResult`)."""

    manifest: dict[str, Any]
    summary: dict[str, Any]
    folder: Path


async def execute(config: RunConfig, console: Console | None = None) -> RunOutcome:
    """Deprecated (use `orc.run`): run a graph file over a dataset file into a run folder
    (resuming it when possible)."""
    warnings.warn(
        "orchestrator.execute(RunConfig(...)) is deprecated: use orchestrator.run(graph, "
        "data, out=...) or orchestrator.arun",
        DeprecationWarning,
        stacklevel=2,
    )
    graph = compile_graph(config.graph, trust=config.trust)
    folder = RunFolder(config.out)
    shown = console_progress(console, config.progress)
    outcome = await run_session(graph, FileSource(config.data), folder, config.plan(), shown)
    return RunOutcome(outcome.manifest.as_written(), outcome.summary.as_written(), folder.path)
