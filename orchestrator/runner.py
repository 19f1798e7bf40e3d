"""`orchestrator run` in library form: a graph file over a data file into a run folder.

A thin layer over `session.run_session`, kept for the CLI and for callers of `execute`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from .compile import compile_graph
from .outage import DEFAULT_SERVER_WAIT
from .runfolder import RunFolder
from .servers import StructuredChoice
from .session import RunSettings, run_session
from .sources import FileSource


@dataclass
class RunConfig:
    """Everything `orchestrator run` takes from the command line."""

    graph: Path
    data: Path
    out: Path
    base_url: str
    model: str | None = None
    api_key: str = field(default="EMPTY", repr=False)  # never printed with the config
    concurrency: int = 64
    limit: int | None = None
    cache: Path | None = None
    use_cache: bool = True
    refresh: bool = False
    overwrite: bool = False
    structured: StructuredChoice = "auto"
    params: dict[str, Any] = field(default_factory=dict)
    timeout: float = 120.0
    server_wait: float = DEFAULT_SERVER_WAIT
    progress: bool = True

    def __post_init__(self) -> None:
        # Strings are paths too: `RunConfig(graph="graphs/x.yaml", ...)` must just work.
        self.graph, self.data, self.out = Path(self.graph), Path(self.data), Path(self.out)
        if self.cache is not None:
            self.cache = Path(self.cache)

    def settings(self) -> RunSettings:
        return RunSettings(
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            concurrency=self.concurrency,
            limit=self.limit,
            cache=self.cache,
            use_cache=self.use_cache,
            refresh=self.refresh,
            overwrite=self.overwrite,
            structured=self.structured,
            params=self.params,
            timeout=self.timeout,
            server_wait=self.server_wait,
        )


@dataclass
class RunOutcome:
    manifest: dict[str, Any]
    summary: dict[str, Any]
    folder: Path


async def execute(config: RunConfig, console: Console | None = None) -> RunOutcome:
    """Run a graph file over a dataset file into a run folder (resuming it when possible)."""
    console = console or Console()
    graph = compile_graph(config.graph)
    folder = RunFolder(config.out)
    show = console if config.progress and console.is_terminal else None
    outcome = await run_session(graph, FileSource(config.data), folder, config.settings(), show)
    return RunOutcome(outcome.manifest, outcome.summary, folder.path)
