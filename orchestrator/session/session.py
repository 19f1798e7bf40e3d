"""One run, whoever asked for it (the CLI or the Python API): take the store, check the run
key, ask the servers, run the engine over the rows, write the manifest and summary.

This is the composition root: it builds the client, cache, trace and engine for one run and
owns the order of their start and end. Messages go to the `orchestrator` logger.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import platform
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import __version__
from ..calls.client import LLMClient
from ..calls.counters import RunStats
from ..calls.endpoints import ServerChoice, StructuredChoice, prepare_endpoints
from ..calls.outage import DEFAULT_SERVER_WAIT, ServerGone
from ..calls.registry import server_urls
from ..calls.retry import RetryPolicy
from ..calls.tuner import Concurrency
from ..data.dataset import Row, check_fields
from ..data.sources import RowSource
from ..engine.flush import Flusher, drive, fewer_gc_passes
from ..engine.scheduler import Engine, EngineOptions, engine_window
from ..errors import StorageError
from ..graph.compiled import CompiledGraph
from ..providers.base import Transport
from ..scale import Executor, JobParts, ScaleChoice, WorkerPool, Workers
from ..store.cache import ResponseCache, default_cache_path, open_cache
from ..store.folder import INPUTS, LAYOUT_VERSION, SNAPSHOT, SNAPSHOT_GRAPH
from ..store.protocol import RunStore
from ..store.runkey import RunKey, server_components, static_components
from .params import effective_params
from .summary import output_means, run_aggregates, status_counts

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RunSettings:
    """How to run: the server, and settings that do not change replies (except `params`,
    `model`, `base_url`, `server_id` and `structured`, which are part of the run key)."""

    base_url: str | tuple[str, ...]  # several: replicas serving one model
    model: str | None = None
    # What serves the model when its root does not tell (two checkpoints at one path): in
    # the cache key and the run key in place of the root the server reports.
    server_id: str | None = None
    api_key: str = field(default="EMPTY", repr=False)  # never printed with the settings
    # Per server: N fixed, "auto" tuned from its load, None auto against vLLM else 64.
    concurrency: Concurrency = None
    affinity: bool = True  # an example's calls prefer the replica of its earlier calls
    limit: int | None = None
    cache: Path | None = None
    use_cache: bool = True
    refresh: bool = False
    overwrite: bool = False
    structured: StructuredChoice = "auto"
    params: dict[str, Any] = field(default_factory=dict)
    timeout: float = 120.0
    server_wait: float = DEFAULT_SERVER_WAIT
    # Scale-out (orchestrator/scale): N worker processes, or actors on a Ray cluster; the
    # run folder, cache and run key are the same as for one process.
    workers: Workers = 1
    executor: Executor = "local"
    ray_address: str | None = None
    # Servers a node's own `base_url` may name besides the run's (--allow-server), or all of
    # them (--trust): the user's key goes only where the user said.
    allow_servers: tuple[str, ...] = ()
    trust_servers: bool = False
    # Seams for tests and other providers: None is the OpenAI SDK and the default policy.
    transport: Transport | None = field(default=None, repr=False)
    retry: RetryPolicy | None = field(default=None, repr=False)


@dataclass
class SessionOutcome:
    manifest: dict[str, Any]
    summary: dict[str, Any]
    store: RunStore


async def run_session(
    graph: CompiledGraph,
    source: RowSource,
    store: RunStore,
    settings: RunSettings,
    console: Console | None = None,
) -> SessionOutcome:
    """Run `graph` over `source` into `store`; with a console, draw a progress bar."""
    # A misspelt or missing param is refused before the folder or a server is touched.
    given = frozenset(settings.params)  # the user's own: a server one names is the user's
    settings = replace(settings, params=effective_params(graph, settings.params))
    static_key = RunKey.from_components(
        static_components(graph, settings.params, source.fingerprint())
    )
    took_over = store.open(settings.overwrite)  # the writer lock, held until the run ends
    try:
        if took_over:
            log.warning("%s: %s.", store.describe(), took_over)
        # Graph, templates, params and data are compared before any server is asked.
        store.check_key(static_key, static_only=True)
        return await _run_locked(graph, source, store, settings, static_key, console, given)
    finally:
        store.release()


def _open_cache(settings: RunSettings) -> ResponseCache | None:
    """The response cache, or None; a damaged cache file costs its replies, not the run."""
    if not settings.use_cache:
        return None
    return open_cache(settings.cache or default_cache_path(), replace=settings.refresh)


async def _run_locked(
    graph: CompiledGraph,
    source: RowSource,
    store: RunStore,
    settings: RunSettings,
    static_key: RunKey,
    console: Console | None,
    given_params: frozenset[str],
) -> SessionOutcome:
    stats = RunStats()
    cache = _open_cache(settings)
    client = LLMClient(
        cache=cache,
        stats=stats,
        concurrency=settings.concurrency,
        timeout=settings.timeout,
        refresh=settings.refresh,
        server_wait=settings.server_wait,
        transport=settings.transport,
        retry=settings.retry,
        affinity=settings.affinity,
    )
    run_id = uuid.uuid4().hex[:12]
    choice = ServerChoice(
        settings.base_url,
        settings.model,
        settings.api_key,
        settings.structured,
        settings.params,
        settings.server_id,
        allowed=None if settings.trust_servers else settings.allow_servers,
        given_params=given_params,
    )
    try:
        endpoints, servers = await prepare_endpoints(graph, client, choice)
        run_key = RunKey.from_components(
            {
                **static_key.components,
                **server_components(
                    (node, ep.model, ep.urls, ep.structured, ep.identity)
                    for node, ep in endpoints.items()
                ),
            }
        )
        store.check_key(run_key)
        trace = store.trace(run_id, graph.content_hash, run_key.digest)
    except BaseException as exc:
        await client.close()
        if cache is not None:
            cache.close()
        if not store.has_manifest() and isinstance(exc, Exception):
            # A new store says why it stayed empty; a resumable run's manifest (and its
            # key) is never replaced by one of a run that did not start.
            store.write_manifest(
                {
                    "layout_version": LAYOUT_VERSION,
                    "run_id": run_id,
                    "run_key": static_key.model_dump(),
                    "graph": {"path": graph.label, "name": graph.name},
                    "status": "error",
                    "error": str(exc),
                }
            )
        raise
    try:
        resuming = store.begin()
        store.write_snapshot(graph)
    except BaseException:
        # Nothing has run yet; asyncio would report a client left open.
        await client.close()
        with suppress(StorageError, sqlite3.Error):
            trace.close()
        with suppress(StorageError):
            store.close()  # the files `begin` opened
        if cache is not None:
            cache.close()
        raise
    if resuming:
        log.info("Resuming %s: %d examples already done.", store.describe(), len(store.done))
    manifest = _manifest(graph, source, settings, run_id, run_key, cache, resuming)
    manifest["servers"] = servers
    manifest["model"] = settings.model or next((e.model for e in endpoints.values()), None)
    flush = Flusher(cache, trace, store)
    last_write: BaseException | None = None  # the run's last writes failed (a full disk)
    scale = ScaleChoice(settings.workers, settings.executor, settings.ray_address)
    pool = WorkerPool(scale) if scale.sharded else None
    try:
        trace.start_run(
            graph=graph.label,
            model=manifest["model"],
            base_url=" | ".join(server_urls(settings.base_url)),
            server=str(servers),
            structured=",".join(s["structured_output"] for s in servers.values()),
            settings=manifest["parameters"],
        )
        store.write_manifest(manifest)
        rows = _rows(graph, source, store, settings.limit)
        if pool is None:
            engine = Engine(
                graph,
                client,
                trace,
                endpoints,
                stats,
                EngineOptions(
                    params=settings.params, window=engine_window(client.servers.max_in_flight())
                ),
            )
            work = engine.run(rows, store.write_result, store.done)
        else:
            parts = JobParts(
                graph=graph,
                endpoints=endpoints,
                choice=choice,
                params=settings.params,
                concurrency=settings.concurrency,
                in_flight=client.servers.max_in_flight(),
                timeout=settings.timeout,
                server_wait=settings.server_wait,
                refresh=settings.refresh,
                affinity=settings.affinity,
                cache=cache.path if cache is not None else None,
                run_id=run_id,
                run_key=run_key.digest,
                transport=settings.transport,
                retry=settings.retry,
            )

            def started(workers: list[dict[str, Any]]) -> None:
                manifest["workers"] = workers  # which processes to look at while it runs
                store.write_manifest(manifest)

            work = pool.run(parts, rows, store, trace, stats, started)
        with fewer_gc_passes():
            await drive(
                work,
                flush,
                stats,
                source.count(settings.limit),
                console,
                client.servers.limits_text,
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
        manifest["error"] = _error_text(exc, store)
        raise
    finally:
        # Each step on its own: a full disk that fails the last flush must still leave the
        # manifest saying "error" (not "running") and close every file.
        for step in (flush, store.close):
            try:
                step()
            except (StorageError, OSError, sqlite3.Error) as exc:
                last_write = last_write or exc
                manifest["status"] = "error"
                manifest["error"] = manifest.get("error") or _error_text(exc, store, True)
        cache_errors = [flush.cache_error, *(pool.cache_errors if pool else [])]
        if any(cache_errors):
            first = next(error for error in cache_errors if error)
            manifest["cache_error"] = f"replies not saved to the cache: {first}"
        manifest["ended"] = time.time()
        manifest["wall_seconds"] = round(manifest["ended"] - manifest["started"], 3)
        manifest["outages"] = client.outages() + (pool.outages if pool else [])
        manifest["replicas"] = [r.model_dump() for r in client.servers.replica_reports()]
        if pool is not None:
            manifest["workers"] = pool.workers
        # Streamed from the store, twice, rather than held: runs can have millions of lines.
        manifest["counts"] = {**stats.as_dict(), **status_counts(store.results())}
        manifest["means"] = output_means(store.results())
        try:
            store.write_manifest(manifest)
        finally:
            await client.close()
            with suppress(StorageError, sqlite3.Error):
                trace.close()
            if cache is not None:
                with suppress(sqlite3.Error):
                    cache.close()
    if last_write is not None:
        # Every example ran, but what the last writes held is lost: not a finished run.
        raise last_write
    # Aggregates (Elo, agreement…) need every line at once; most graphs have none.
    aggregates = {}
    if graph.aggregates:
        aggregates = run_aggregates(graph, list(store.results()), settings.params)
    summary = {
        "graph": graph.name,
        "counts": manifest["counts"],
        "means": manifest["means"],
        **aggregates,
    }
    store.write_summary(summary)
    return SessionOutcome(manifest, summary, store)


def _error_text(exc: BaseException, store: RunStore, writing: bool = False) -> str:
    """What the manifest says ended the run (`writing`: while the run folder was written);
    a full disk is named as such, whichever file of the folder found it."""
    if isinstance(exc, StorageError):
        # It names the file and what failed; the manifest says how the run goes on.
        if exc.disk_full:
            return f"{exc.problem}; free some space, then run the same command again to resume"
        return f"{exc.problem}; fix the cause, then run the same command again to resume"
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
        isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)
    )
    if full:
        return (
            f"the disk is full: could not write the run folder {store.describe()} ({exc}); "
            "free some space, then run the same command again to resume"
        )
    return f"could not write the run folder {store.describe()}: {exc}" if writing else str(exc)


def _rows(
    graph: CompiledGraph, source: RowSource, store: RunStore, limit: int | None
) -> Iterator[Row]:
    """The source's rows, fields checked, each new example's inputs kept with the run."""
    required = graph.spec.inputs
    for row in source.rows(limit):
        check_fields(row, required, source.location)
        if row.id not in store.done:
            store.write_input(row)
        yield row


def _manifest(
    graph: CompiledGraph,
    source: RowSource,
    settings: RunSettings,
    run_id: str,
    run_key: RunKey,
    cache: ResponseCache | None,
    resuming: bool,
) -> dict[str, Any]:
    return {
        "layout_version": LAYOUT_VERSION,
        "run_id": run_id,
        "run_key": run_key.model_dump(),
        "graph": {
            "path": graph.label,
            "name": graph.name,
            "hash": graph.content_hash,
            "snapshot": f"{SNAPSHOT}/{SNAPSHOT_GRAPH}",
        },
        "dataset": {
            **source.describe(),
            "hash": run_key.components["data"],
            "inputs": INPUTS,
        },
        "model": settings.model,
        "parameters": {
            "concurrency": settings.concurrency or "default",
            "affinity": settings.affinity,
            "limit": settings.limit,
            "params": settings.params,
            "cache": str(cache.path) if cache else None,
            "refresh": settings.refresh,
            "structured": settings.structured,
            "timeout": settings.timeout,
            "server_wait": settings.server_wait,
            "workers": settings.workers,
            "executor": settings.executor,
            **(
                {"transport": type(settings.transport).__name__}
                if settings.transport is not None
                else {}
            ),
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
