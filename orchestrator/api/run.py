"""The Python API: run a graph over files or in-memory data and get typed results back.

    import orchestrator as orc
    graph = orc.load_graph("graphs/pointwise.yaml")
    result = orc.run(graph, df, base_url="http://gpu:8000/v1", model="judge-8b")
    result.to_pandas()

`run` works in scripts and inside Jupyter (where an event loop is already running); `arun`
is the same coroutine for async code. Nothing is printed unless `progress=True` (a bar on a
terminal; elsewhere, and without it, a progress line every 2 s is logged at INFO on the
`orchestrator` logger), and nothing is written unless `out=` names a run folder (or
`cache=` asks for the response cache).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, Unpack, get_type_hints

from ..data import as_source
from ..engine import SETTINGS, Observers, RunArgs, RunObserver, RunPlan, RunSettings, default_of
from ..errors import ConfigurationError
from ..graph import CompiledGraph
from ..kinds import compile_dict, compile_graph
from ..session import make_plan, run_session
from ..shipped import pip_install
from ..store import Manifest, MemoryStore, ResultLine, RunFolder, RunReader, RunStore, Summary
from ..ui import run_progress

Graph = CompiledGraph
P = ParamSpec("P")
R = TypeVar("R")


def load_graph(
    path: str | Path, *, prompts_dir: str | Path | None = None, trust: bool = False
) -> Graph:
    """Load and check a graph file (GraphError lists every problem at once).

    A graph file is treated as someone else's: templates only from its own folder (or
    `prompts_dir`, your choice), functions only built-in or registered. `trust=True` lets
    it import its own modules, read any prompts folder and talk to its own servers."""
    return compile_graph(path, prompts_dir=prompts_dir, trust=trust)


def graph_from_dict(
    spec: dict[str, Any],
    prompts: dict[str, str] | None = None,
    *,
    name: str = "<graph dict>",
    trust: bool = False,
) -> Graph:
    """A graph built in Python: the file's structure as a dict, templates as texts by name.
    Held to the same boundary as a file unless `trust=True` (see `load_graph`)."""
    return compile_dict(spec, prompts, name=name, trust=trust)


@dataclass
class RunResult:
    """What a run produced: result lines, summary, manifest, and the trace to audit them."""

    manifest: Manifest
    summary: Summary
    folder: Path | None = None
    _store: RunStore | None = field(default=None, repr=False)

    @cached_property
    def results(self) -> list[ResultLine]:
        """One line per example, in the order of the source's rows (after a resumed run,
        each example's latest line)."""
        if isinstance(self._store, MemoryStore):
            lines = list(self._store.results())
            numbers = self._store.numbers
        elif self.folder is not None:
            reader = RunReader(self.folder)
            lines = reader.latest_results()
            numbers = {line.id: line.number for line in reader.inputs()}
        else:
            return []
        # A failed line names its row; an ok line is found by its id (ids are unique: data
        # with a repeated id is refused before the run starts).
        last = len(numbers) + 1
        return sorted(lines, key=lambda line: line.row or numbers.get(line.id, last))

    @property
    def failed(self) -> list[ResultLine]:
        return [line for line in self.results if line.status == "failed"]

    @property
    def abstained(self) -> list[ResultLine]:
        """The examples a node with `abstain:` was too unsure to answer (not failures)."""
        return [line for line in self.results if line.status == "abstained"]

    @property
    def ok(self) -> list[ResultLine]:
        return [line for line in self.results if line.status == "ok"]

    def to_pandas(self) -> Any:
        """A DataFrame: one row per example; id, status, error, then every output (nested
        outputs flattened with dotted names, e.g. `scores.content_only_f1`)."""
        try:
            import pandas as pd
        except ImportError:
            raise ConfigurationError(
                f"to_pandas needs pandas: pip install pandas (or {pip_install('data')})"
            ) from None
        return pd.DataFrame([line.flat() for line in self.results])

    def node_runs_frame(self) -> Any:
        """A DataFrame of every node execution (one row each, attempts summarised), as
        `orchestrator export --what node_runs` writes it; needs a run folder (`out=`)."""
        if self.folder is None:
            raise ConfigurationError(
                "an in-memory run keeps no trace: run with out='runs/NAME' to have node runs"
            )
        from ..analysis import node_runs_frame

        return node_runs_frame(self.folder)


async def arun(
    graph: Graph | str | Path,
    data: Any,
    *,
    out: str | Path | None = None,
    progress: bool = False,
    prompts_dir: str | Path | None = None,
    **settings: Unpack[RunArgs],
) -> RunResult:
    """Run `graph` over `data` (a path, list of dicts, pandas/polars DataFrame or Hugging
    Face Dataset). With `out`, results go to a resumable run folder; without, they stay
    in memory. `cache=True` uses the shared response cache, a path another one.
    `base_url` may list several servers (replicas of one model): each request takes the
    first free slot on any of them, the least loaded when several are free; a graph with no
    node that talks to a server needs none. `concurrency` is the in-flight limit per
    server: N, or "auto" (tuned from vLLM's /metrics, else from latency); the default tunes
    against vLLM and holds 64 elsewhere. `server_id` names the weights the server serves
    (in place of the `root` vLLM reports): replies are cached, and a folder resumed, per
    what serves the model, not per model name (docs/servers.md).
    `transport` (e.g. `orc.FakeTransport()`, no server needed) and `retry` replace the
    OpenAI SDK and the default retry policy; `provider` names a built-in one instead
    ("openai", the default; docs/providers.md). `workers=N` (or "auto", one per core) runs
    the graph in N processes into the same folder and cache; `executor="ray"` runs it on
    Ray actors (one per cluster CPU unless `workers` says), at `ray_address` or the Ray
    instance this process finds or starts (docs/scale.md).
    A node's own `base_url` is refused unless listed in `allow_servers` (or given by you in
    `params`); `trust=True` (or a graph loaded with it) trusts the graph's servers, modules
    and prompts folder (docs/RELIABILITY.md, threat model).
    `resample` re-asks nodes under fresh sample indices (what `orc.retest` runs with).
    `prompts_dir` is where a graph given as a path reads its templates (see `load_graph`).
    Every setting, with its default, is a field of `RunSettings` (engine/settings.py).
    What it raises on purpose is an `OrchestratorError` (the tree: orchestrator/errors.py):
    a disk that fails a file of `out` is a `StorageError` naming the file, never OSError."""
    chosen = RunSettings.of(settings)
    if isinstance(graph, CompiledGraph):
        if prompts_dir is not None:
            # Its templates were read when it was compiled: the folder would be ignored.
            raise ConfigurationError(
                "prompts_dir= applies to a graph file given by path; this graph is compiled "
                "already: load it with orc.load_graph(path, prompts_dir=...)"
            )
        compiled = graph
    else:
        compiled = load_graph(graph, prompts_dir=prompts_dir, trust=chosen.trust)
    plan = make_plan(chosen, compiled)
    if plan.executor == "ray":
        from ..scale import import_ray

        import_ray()  # a missing extra is said before the folder or a server is touched
    elif plan.sharded:
        from ..scale import check_main_guard

        check_main_guard()  # a script without `if __name__ == "__main__":`, said up front
    observer: RunObserver = run_progress(progress)
    if plan.otlp is not None:
        observer = Observers(observer, live_exporter(plan, out))
    store: RunStore = RunFolder(out) if out is not None else MemoryStore()
    outcome = await run_session(compiled, as_source(data), store, plan, observer)
    return RunResult(
        manifest=outcome.manifest,
        summary=outcome.summary,
        folder=Path(out) if out is not None else None,
        _store=store,
    )


def live_exporter(plan: RunPlan, out: str | Path | None) -> RunObserver:
    """The observer that sends the run's spans to `plan.otlp` as it goes; it reads them
    from the run folder's trace, so a run kept in memory has none to send."""
    if out is None:
        raise ConfigurationError(
            "otlp= sends the spans the run folder's trace holds: give the run a folder (out=)"
        )
    from ..otel import OtlpObserver

    return OtlpObserver(out, plan.otlp, plan.otlp_headers, content=plan.otlp_content)


def _signature() -> inspect.Signature:
    """`arun`'s signature with every setting written out, its default shown, for `help()`,
    notebooks and editors that read signatures rather than `Unpack`."""
    own = inspect.signature(arun)
    hints = get_type_hints(RunSettings)
    settings = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default_of(name), annotation=hints[name]
        )
        for name in SETTINGS
    ]
    kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return own.replace(parameters=[*kept, *settings])


arun.__signature__ = _signature()  # type: ignore[attr-defined]


def _blocking(coroutine_function: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """The same function for code that is not async. Inside a running event loop
    (Jupyter) the run gets its own loop in a worker thread, so it works there too."""

    @functools.wraps(coroutine_function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            in_loop = False
        else:
            in_loop = True
        if not in_loop:
            # Outside the `except`: a run's own error must not be shown as raised "during
            # handling of" the probe's RuntimeError ("no running event loop").
            return asyncio.run(coroutine_function(*args, **kwargs))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="orchestrator") as pool:
            return pool.submit(asyncio.run, coroutine_function(*args, **kwargs)).result()

    return call


run = _blocking(arun)
run.__doc__ = "`arun` for code that is not async (scripts, and Jupyter too). " + (
    arun.__doc__ or ""
)
