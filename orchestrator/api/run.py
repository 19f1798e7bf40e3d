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
import os
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from ..calls.endpoints import StructuredChoice
from ..calls.outage import DEFAULT_SERVER_WAIT
from ..calls.retry import RetryPolicy
from ..calls.tuner import Concurrency
from ..data.sources import as_source
from ..errors import ConfigurationError
from ..graph.compiled import CompiledGraph
from ..kinds.graphs import compile_dict, compile_graph
from ..providers.base import Transport
from ..providers.fake import FAKE_BASE_URL
from ..providers.registry import make_provider
from ..scale import Executor, Workers, parse_workers
from ..session.plan import Resample, make_plan
from ..session.session import run_session
from ..shipped import pip_install
from ..store.folder import RunFolder
from ..store.protocol import MemoryStore, RunStore
from ..store.reader import RunReader
from ..store.records import Manifest, ResultLine, Summary
from ..ui.progress import run_progress

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
        # A failed line names its row; an ok line is found by its id (ids are unique but for
        # a repeated id, whose second row fails as such).
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
        from ..analysis.export import node_runs_frame

        return node_runs_frame(self.folder)


def _default_workers(executor: Executor) -> Workers:
    """One process locally; on Ray, one actor per CPU of the cluster."""
    return "auto" if executor == "ray" else 1


# The base URL of a run whose graph has no node that talks to a server (compute nodes only,
# e.g. graphs/perq_distilled.yaml): never contacted, so none need be given or started.
UNUSED_BASE_URL = "http://127.0.0.1:8000/v1"


def _default_base_url(graph: CompiledGraph) -> str:
    if not any(node.uses_server for node in graph.nodes.values()):
        return UNUSED_BASE_URL
    url = os.environ.get("OPENAI_BASE_URL")
    if url:
        return url
    from ..local import server as embedded

    running = embedded.find_running(embedded.DEFAULT_PORT)
    if running:
        return running
    raise ConfigurationError(
        "no server to talk to: pass base_url='http://host:port/v1', set OPENAI_BASE_URL, or "
        "start the embedded one with `orchestrator serve`"
    )


async def arun(
    graph: Graph | str | Path,
    data: Any,
    *,
    base_url: str | list[str] | None = None,
    model: str | None = None,
    server_id: str | None = None,
    api_key: str | None = None,
    params: dict[str, Any] | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    cache: bool | str | Path = False,
    refresh: bool = False,
    concurrency: Concurrency = None,
    limit: int | None = None,
    structured: StructuredChoice = "auto",
    timeout: float = 120.0,
    server_wait: float = DEFAULT_SERVER_WAIT,
    progress: bool = False,
    transport: Transport | None = None,
    provider: str | None = None,
    retry: RetryPolicy | None = None,
    workers: int | Literal["auto"] | None = None,
    executor: Executor = "local",
    ray_address: str | None = None,
    affinity: bool = True,
    trust: bool = False,
    allow_servers: list[str] | tuple[str, ...] = (),
    resample: Resample | None = None,
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
    What it raises on purpose is an `OrchestratorError` (the tree: orchestrator/errors.py):
    a disk that fails a file of `out` is a `StorageError` naming the file, never OSError."""
    compiled = graph if isinstance(graph, CompiledGraph) else load_graph(graph, trust=trust)
    if base_url is None and transport is not None:
        base_url = FAKE_BASE_URL  # a transport of its own needs no server to be found
    if provider is not None:
        if transport is not None:
            raise ConfigurationError(
                f"both transport= and provider={provider!r} given: pass one of them"
            )
        transport = make_provider(provider)
    plan = make_plan(
        base_url=(base_url if isinstance(base_url, str) else tuple(base_url))
        if base_url
        else _default_base_url(compiled),
        model=model,
        server_id=server_id,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
        concurrency=concurrency,
        limit=limit,
        cache=None if isinstance(cache, bool) else Path(cache),
        use_cache=cache is not False,
        refresh=refresh,
        overwrite=overwrite,
        structured=structured,
        params=dict(params or {}),
        timeout=timeout,
        server_wait=server_wait,
        transport=transport,
        retry=retry,
        workers=parse_workers(workers) if workers is not None else _default_workers(executor),
        executor=executor,
        ray_address=ray_address,
        affinity=affinity,
        trust_servers=trust or compiled.trusted,
        allow_servers=tuple(allow_servers),
        resample=resample,
    )
    if executor == "ray":
        from ..scale.onray import import_ray

        import_ray()  # a missing extra is said before the folder or a server is touched
    elif plan.scale.sharded:
        from ..scale.processes import check_main_guard

        check_main_guard()  # a script without `if __name__ == "__main__":`, said up front
    store: RunStore = RunFolder(out) if out is not None else MemoryStore()
    outcome = await run_session(compiled, as_source(data), store, plan, run_progress(progress))
    return RunResult(
        manifest=outcome.manifest,
        summary=outcome.summary,
        folder=Path(out) if out is not None else None,
        _store=store,
    )


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
