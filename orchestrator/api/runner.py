"""Deprecated: `execute(RunConfig(...))`, the library form of `orchestrator run` before
`orc.run`. Kept importable from `orchestrator` (public names) as a thin shim: the config is
turned into a `RunPlan` and run by the session, the path `orc.run` takes. Nothing inside the
package uses it; new code calls `orc.run(graph, data, out=...)`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..data import FileSource
from ..graph import CompiledGraph
from ..kinds import compile_graph
from ..session import RunPlan, RunSettings, make_plan, run_session
from ..store import RunFolder
from ..ui import Console, console_progress


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunSettings):
    """Deprecated (use `orc.run`): everything `orchestrator run` took from the command line,
    flat — `orc.run`'s settings, plus the graph file, the data file and the run folder, and
    the names it had before: `use_cache` (False: no cache, whatever `cache` says) and
    `trust_servers`."""

    graph: Path
    data: Path
    out: Path
    progress: bool = True
    base_url: str | tuple[str, ...]
    api_key: str | None = field(default="EMPTY", repr=False)
    cache: bool | str | Path = True  # a file, or the shared one
    use_cache: bool = True
    trust_servers: bool = False  # the graph's servers only (`trust` trusts its modules too)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Strings are paths too: `RunConfig(graph="graphs/x.yaml", ...)` must just work.
        for name in ("graph", "data", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))

    def run_settings(self) -> RunSettings:
        """The run settings this config holds, as `orc.run` takes them."""
        given = {item.name: getattr(self, item.name) for item in fields(RunSettings)}
        if not self.use_cache:
            given["cache"] = False
        elif self.cache is None:  # as the config once took it: the shared cache
            given["cache"] = True
        return RunSettings(**given)

    def plan(self, graph: CompiledGraph | None = None) -> RunPlan:
        """The run plan these settings make for `graph` (default: the config's file);
        `trust_servers` trusts its servers, as `trust` does."""
        if graph is None:
            graph = compile_graph(self.graph, trust=self.trust)
        plan = make_plan(self.run_settings(), graph)
        return replace(plan, trust=plan.trust or self.trust_servers)


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
    outcome = await run_session(graph, FileSource(config.data), folder, config.plan(graph), shown)
    return RunOutcome(outcome.manifest.as_written(), outcome.summary.as_written(), folder.path)
