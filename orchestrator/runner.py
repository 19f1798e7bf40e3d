"""One `orchestrator run`: compile, open the run folder, check the server, run, summarise."""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__
from .cache import BUSY_SECONDS, ResponseCache, default_cache_path
from .client import Endpoint, LLMClient, ServerError
from .compile import CompiledGraph, compile_graph
from .dataset import Row, check_fields, file_hash, read_rows
from .engine import Engine, EngineOptions
from .outage import DEFAULT_SERVER_WAIT, ServerGone
from .runfolder import (
    INPUTS,
    LAYOUT_VERSION,
    SNAPSHOT,
    SNAPSHOT_GRAPH,
    RunFolder,
    iter_results,
    read_results,
)
from .runkey import RunKey, server_components, static_components
from .spec import LLMNode
from .stats import RunStats
from .summary import output_means, run_aggregates, status_counts
from .trace import TraceStore

StructuredChoice = Literal["auto", "server", "prompt"]
FLUSH_SECONDS = 0.5  # how often finished work is written out (and the progress bar redrawn)
RETRY_LOCK_WAIT = 0.2  # seconds a flush waits for a cache lock once a wait has timed out


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


@dataclass
class RunOutcome:
    manifest: dict[str, Any]
    summary: dict[str, Any]
    folder: Path


def _count_rows(path: Path, limit: int | None) -> int:
    with path.open("rb") as handle:
        total = sum(1 for line in handle if line.strip())
    if path.suffix.lower() == ".csv":
        total = max(total - 1, 0)
    return min(total, limit) if limit is not None else total


async def _server_version(base_url: str) -> str | None:
    """vLLM answers /version at its root; other servers may not, which is fine."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            reply = await http.get(f"{root}/version")
            if reply.status_code == 200:
                return str(reply.json().get("version"))
    except (httpx.HTTPError, ValueError):
        pass
    return None


async def _prepare_endpoints(
    graph: CompiledGraph, client: LLMClient, config: RunConfig, say: Callable[[str], None]
) -> tuple[dict[str, Endpoint], dict[str, Any]]:
    """Endpoint of every LLM node, each server checked once (models, canary)."""
    llm_nodes = {n: c for n, c in graph.nodes.items() if isinstance(c.spec, LLMNode)}
    endpoints: dict[str, Endpoint] = {}
    servers: dict[str, Any] = {}
    default_models: dict[str, list[str]] = {}
    for name, cn in llm_nodes.items():
        spec = cn.spec
        assert isinstance(spec, LLMNode)
        base_url = spec.base_url or config.base_url
        api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else config.api_key
        if base_url not in default_models:
            default_models[base_url] = await client.list_models(base_url, api_key or "EMPTY")
        served = default_models[base_url]
        model = spec.model or (config.model if base_url == config.base_url else None)
        model = model or (served[0] if served else None)
        if model is None:
            raise ServerError(f"{base_url} serves no model; pass --model")
        if served and model not in served:
            raise ServerError(
                f"node '{name}': model '{model}' is not served by {base_url} "
                f"(it serves: {', '.join(served)})"
            )
        endpoints[name] = client.endpoint(base_url, model, api_key or "EMPTY")
    for ep in {id(e): e for e in endpoints.values()}.values():
        key = f"{ep.base_url} {ep.model}"
        if config.structured == "auto":
            enforced = await client.canary(ep)
            ep.structured = "server" if enforced else "prompt"
            if not enforced:
                say(
                    f"[bold red]WARNING:[/] {ep.base_url} ({ep.model}) ignored the JSON schema "
                    "in 3 canary requests. Falling back to schema-in-prompt plus validation: "
                    "expect more retries. (vLLM >= 0.12 takes `response_format` json_schema.)"
                )
        else:
            ep.structured = config.structured
        servers[key] = {
            "base_url": ep.base_url,
            "model": ep.model,
            "models_served": default_models[ep.base_url],
            "structured_output": ep.structured,
            "version": await _server_version(ep.base_url),
            **ep.server_info,
        }
    return endpoints, servers


async def execute(config: RunConfig, console: Console | None = None) -> RunOutcome:
    """Run a graph over a dataset into a run folder (resuming it when possible)."""
    console = console or Console()
    graph = compile_graph(config.graph)
    data_hash = file_hash(config.data)
    static_key = RunKey.from_components(static_components(graph, config.params, data_hash))
    folder = RunFolder(config.out)
    folder.open(config.overwrite)  # the writer lock, held until the run ends
    try:
        return await _execute_locked(config, console, graph, folder, static_key)
    finally:
        folder.release()


async def _execute_locked(
    config: RunConfig,
    console: Console,
    graph: CompiledGraph,
    folder: RunFolder,
    static_key: RunKey,
) -> RunOutcome:
    say = console.print
    took_over = folder.lock.took_over()
    if took_over:
        say(f"{config.out}: {took_over}.")
    # Graph, templates, params and data are compared before any server is asked.
    folder.check_key(static_key, static_only=True)

    stats = RunStats()
    cache = None
    if config.use_cache:
        cache = ResponseCache(config.cache or default_cache_path())
    client = LLMClient(
        cache=cache,
        stats=stats,
        concurrency=config.concurrency,
        timeout=config.timeout,
        refresh=config.refresh,
        server_wait=config.server_wait,
        say=say,
    )
    run_id = uuid.uuid4().hex[:12]
    try:
        endpoints, servers = await _prepare_endpoints(graph, client, config, say)
    except BaseException as exc:
        await client.close()
        if cache is not None:
            cache.close()
        if not folder.manifest_path.is_file() and isinstance(exc, Exception):
            # A new folder says why it stayed empty; a resumable run's manifest (and its
            # key) is never replaced by one of a run that did not start.
            folder.write_manifest(
                {
                    "layout_version": LAYOUT_VERSION,
                    "run_id": run_id,
                    "run_key": static_key.model_dump(),
                    "graph": {"path": str(config.graph), "name": graph.name},
                    "status": "error",
                    "error": str(exc),
                }
            )
        raise
    run_key = RunKey.from_components(
        {
            **static_key.components,
            **server_components(
                (node, ep.model, ep.base_url, ep.structured) for node, ep in endpoints.items()
            ),
        }
    )
    try:
        folder.check_key(run_key)
        trace = TraceStore(folder.traces_path, run_id, graph.content_hash, run_key.digest)
    except BaseException:
        await client.close()
        if cache is not None:
            cache.close()
        raise
    resuming = folder.begin()
    if resuming:
        say(f"Resuming {config.out}: {len(folder.done)} examples already done.")
    folder.write_snapshot(graph)
    flush = _Flusher(cache, trace, folder, say)
    manifest: dict[str, Any] = {
        "layout_version": LAYOUT_VERSION,
        "run_id": run_id,
        "run_key": run_key.model_dump(),
        "graph": {
            "path": str(config.graph),
            "name": graph.name,
            "hash": graph.content_hash,
            "snapshot": f"{SNAPSHOT}/{SNAPSHOT_GRAPH}",
        },
        "dataset": {
            "path": str(config.data),
            "hash": static_key.components["data"],
            "inputs": INPUTS,
        },
        "model": config.model,
        "parameters": {
            "concurrency": config.concurrency,
            "limit": config.limit,
            "params": {**graph.spec.params, **config.params},
            "cache": str(cache.path) if cache else None,
            "refresh": config.refresh,
            "structured": config.structured,
            "timeout": config.timeout,
            "server_wait": config.server_wait,
        },
        "package": {
            "name": "orchestrator",
            "version": __version__,
            "python": platform.python_version(),
        },
        "started": time.time(),
        "status": "running",
        "resumed": resuming,
    }
    try:
        manifest["servers"] = servers
        manifest["model"] = config.model or next((e.model for e in endpoints.values()), None)
        trace.start_run(
            graph=str(config.graph),
            model=manifest["model"],
            base_url=config.base_url,
            server=str(servers),
            structured=",".join(s["structured_output"] for s in servers.values()),
            settings=manifest["parameters"],
        )
        folder.write_manifest(manifest)
        engine = Engine(
            graph,
            client,
            trace,
            endpoints,
            stats,
            EngineOptions(params=config.params, window=max(2 * config.concurrency, 16)),
        )
        required = graph.spec.inputs

        def rows() -> Iterator[Row]:
            for row in read_rows(config.data, config.limit):
                check_fields(row, required, config.data)
                if row.id not in folder.done:
                    folder.write_input(row)
                yield row

        total = _count_rows(config.data, config.limit)
        with _fewer_gc_passes():
            await _drive(
                engine.run(rows(), folder.write_result, folder.done),
                flush,
                stats,
                total,
                config.progress and console.is_terminal,
                console,
            )
        manifest["status"] = "complete"
    except (asyncio.CancelledError, KeyboardInterrupt):
        manifest["status"] = "interrupted"
        raise
    except ServerGone as exc:
        manifest["status"] = "server gone"
        manifest["error"] = str(exc)
        raise
    except Exception as exc:
        manifest["status"] = "error"
        manifest["error"] = str(exc)
        raise
    finally:
        # Each step on its own: a full disk that fails the last flush must still leave the
        # manifest saying "error" (not "running") and close every file.
        try:
            flush()
            folder.close()
        except (OSError, sqlite3.Error) as exc:
            manifest["status"] = "error"
            manifest["error"] = manifest.get("error") or f"could not write the run folder: {exc}"
        if flush.cache_error is not None:
            manifest["cache_error"] = f"replies not saved to the cache: {flush.cache_error}"
        manifest["ended"] = time.time()
        manifest["wall_seconds"] = round(manifest["ended"] - manifest["started"], 3)
        manifest["outages"] = client.outages()
        # Streamed from the file, twice, rather than held: runs can have millions of lines.
        manifest["counts"] = {**stats.as_dict(), **status_counts(iter_results(folder.path))}
        manifest["means"] = output_means(iter_results(folder.path))
        try:
            folder.write_manifest(manifest)
        finally:
            await client.close()
            with suppress(sqlite3.Error):
                trace.close()
            if cache is not None:
                with suppress(sqlite3.Error):
                    cache.close()
    # Aggregates (Elo, agreement…) need every line at once; most graphs have none.
    aggregates = {}
    if graph.aggregates:
        aggregates = run_aggregates(graph, read_results(folder.path), config.params)
    summary = {
        "graph": graph.name,
        "counts": manifest["counts"],
        "means": manifest["means"],
        **aggregates,
    }
    folder.write_summary(summary)
    return RunOutcome(manifest, summary, folder.path)


@contextmanager
def _fewer_gc_passes() -> Iterator[None]:
    """Run the young-generation collector less often while a run is in flight.

    Every request allocates thousands of short-lived objects; at Python's default threshold
    (700) the collector's passes over the run's live objects cost ~15% of throughput against
    a fast server (bench/engine_overhead.py). Restored when the run ends.
    """
    before = gc.get_threshold()
    gc.set_threshold(20_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


class _Flusher:
    """Writes what has finished: replies, then traces, then result lines, so every result
    line on disk has its trace, and a kill loses at most one flush interval of work."""

    def __init__(
        self,
        cache: ResponseCache | None,
        trace: TraceStore,
        folder: RunFolder,
        say: Callable[[str], None],
    ) -> None:
        self.cache, self.trace, self.folder, self.say = cache, trace, folder, say
        self.cache_error: str | None = None

    def __call__(self) -> None:
        if self.cache is not None:
            try:
                self.cache.flush()
            except sqlite3.OperationalError as exc:
                # The cache only saves requests (resume reads the trace): a cache another
                # process keeps locked costs its writes, not the run. Replies stay queued.
                if self.cache_error is None:
                    self.say(
                        f"[yellow]warning:[/] cannot write the response cache {self.cache.path}"
                        f" ({exc}); the run goes on and retries at every flush."
                    )
                    # The wait blocks the event loop: after one long wait, try briefly.
                    self.cache.lock_wait(RETRY_LOCK_WAIT)
                self.cache_error = str(exc)
            else:
                if self.cache_error is not None:
                    self.cache.lock_wait(BUSY_SECONDS)
                self.cache_error = None
        self.trace.flush()
        self.folder.flush()


async def _drive(
    work: Awaitable[None],
    flush: Callable[[], None],
    stats: RunStats,
    total: int,
    show: bool,
    console: Console,
) -> None:
    """Await `work`, flushing every FLUSH_SECONDS; with `show`, a progress bar of examples,
    requests, cache hits, retries and tokens/s (drawn on the same tick, no extra thread)."""
    columns = (
        TextColumn("[bold]examples"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    runner = asyncio.ensure_future(work)
    progress = Progress(*columns, console=console, auto_refresh=False) if show else None
    task = progress.add_task("run", total=total, detail="") if progress else None

    def tick() -> None:
        flush()
        if progress is None or task is None:
            return
        done = stats.examples_ok + stats.examples_failed + stats.examples_resumed
        progress.update(
            task,
            completed=done,
            detail=(
                f"ok {stats.examples_ok} · failed {stats.examples_failed} · "
                f"req {stats.requests} · hits {stats.cache_hits} · retries {stats.retries} · "
                f"{stats.tokens_per_second():.0f} tok/s"
            ),
        )
        progress.refresh()

    if progress is not None:
        progress.start()
    try:
        while not runner.done():
            await asyncio.wait({runner}, timeout=FLUSH_SECONDS)
            tick()
    finally:
        if progress is not None:
            progress.stop()
        if not runner.done():
            runner.cancel()
    await runner
