"""`orchestrator run` in library form: a graph file over a data file into a run folder.

A thin layer over `session.run_session`, kept for the CLI and for callers of `execute`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from ..data.sources import FileSource
from ..kinds.graphs import compile_graph
from ..store.folder import RunFolder
from .session import RunSettings, run_session


@dataclass(kw_only=True)
class RunConfig(RunSettings):
    """Everything `orchestrator run` takes from the command line: the settings of a run plus
    the graph file, the data file and the run folder."""

    graph: Path
    data: Path
    out: Path
    progress: bool = True
    trust: bool = False  # the graph's modules, prompts folder and servers (`--trust`)

    def __post_init__(self) -> None:
        # Strings are paths too: `RunConfig(graph="graphs/x.yaml", ...)` must just work.
        self.graph, self.data, self.out = Path(self.graph), Path(self.data), Path(self.out)
        if self.cache is not None:
            self.cache = Path(self.cache)


@dataclass
class RunOutcome:
    manifest: dict[str, Any]
    summary: dict[str, Any]
    folder: Path


async def execute(config: RunConfig, console: Console | None = None) -> RunOutcome:
    """Run a graph file over a dataset file into a run folder (resuming it when possible)."""
    console = console or Console()
    graph = compile_graph(config.graph, trust=config.trust)
    if config.trust:
        config = replace(config, trust_servers=True)
    folder = RunFolder(config.out)
    show = console if config.progress and console.is_terminal else None
    outcome = await run_session(graph, FileSource(config.data), folder, config, show)
    return RunOutcome(outcome.manifest.as_written(), outcome.summary.as_written(), folder.path)
