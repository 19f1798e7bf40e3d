"""One run, whoever asked for it (the Python API, and the CLI through it), in five phases:
lock the store, check the run key, plan (ask the servers, record what will run), execute
(the engine here, or the workers), finalize (manifest, summary, every file closed).

This is the composition root: it turns a `RunPlan` into the run's cache, client and engine
(through `build_runtime`, as every worker does), its trace and its store, and owns the
order of their start and end. Messages go to the `orchestrator` logger.
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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any

from ..compute import forget_warnings
from ..data import Row, RowSource, check_fields, scan_rows
from ..engine import (
    Flusher,
    ProcessRuntime,
    RunObserver,
    RunPlan,
    RunProgress,
    build_runtime,
    drive,
    engine_window,
    fewer_gc_passes,
)
from ..errors import StorageError
from ..graph import SAMPLE_ROWS, CompiledGraph, check_input_types
from ..kinds import endpoint_wants
from ..scale import ResolvedRun, WorkerPool
from ..servers import Endpoint, ServerChoice, ServerGone, prepare_endpoints, server_urls
from ..shipped import __version__
from ..store import (
    INPUTS,
    LAYOUT_VERSION,
    SNAPSHOT,
    SNAPSHOT_GRAPH,
    EventEntry,
    Manifest,
    ManifestDataset,
    ManifestGraph,
    ManifestPackage,
    ManifestParameters,
    ResponseCache,
    RunKey,
    RunPart,
    RunStore,
    ServerEntry,
    Summary,
    TraceStore,
    WorkerEntry,
    server_components,
    static_components,
    summed_work,
)
from .params import effective_params
from .summary import abstain_note, output_means, run_aggregates, status_counts

log = logging.getLogger(__name__)


@dataclass
class SessionOutcome:
    """What a finished run leaves: its manifest and summary, and the store that holds it."""

    manifest: Manifest
    summary: Summary
    store: RunStore


@dataclass
class _Run:
    """One run between its phases: what the plan phase decided and opened."""

    graph: CompiledGraph
    source: RowSource
    store: RunStore
    plan: RunPlan  # params filled in with the graph's defaults
    runtime: ProcessRuntime
    choice: ServerChoice
    endpoints: dict[str, Endpoint]
    servers: dict[str, ServerEntry]
    run_id: str
    run_key: RunKey
    trace: TraceStore
    resuming: bool
    manifest: Manifest = field(default_factory=Manifest)
    earlier: list[RunPart] = field(default_factory=list)  # the parts this one resumes
    total: int | None = None  # the rows it reads, as counted before the first request


async def run_session(
    graph: CompiledGraph,
    source: RowSource,
    store: RunStore,
    plan: RunPlan,
    observer: RunObserver | None = None,
) -> SessionOutcome:
    """Run `graph` over `source` into `store` as `plan` says; an `observer` (a progress
    display, `orchestrator.ui`) is told how it goes on every flush."""
    # Warnings said once per run (a metric that cannot serve a row's language) are said
    # again by the next run in this process: a notebook's second run would stay silent.
    forget_warnings()
    # A misspelt or missing param is refused before the folder or a server is touched.
    given = frozenset(plan.params)  # the user's own: a server one names is the user's
    plan = replace(plan, params=effective_params(graph, plan.params))
    # Every row is read once first (streamed), even for --workers: a repeated id, a line
    # too long to be a row, or no rows at all stop the run here, not midway through it.
    scan = scan_rows(source, plan.limit, graph.spec.inputs, SAMPLE_ROWS)
    if scan.failing:
        log.warning(
            "%d of %d rows of %s cannot run and are recorded as failed (first: %s)",
            scan.failing,
            scan.rows,
            source.location,
            scan.first_failure,
        )
    # What the first readable rows hold: a `foreach` over a text is refused up front.
    check_input_types(graph, scan.sample, source.location)
    with _locked(store, plan.overwrite):
        static_key = _check_static_key(graph, source, store, plan)
        run = await _plan(graph, source, store, plan, static_key, given)
        run.total = scan.rows
        return await _execute(run, observer)


@contextmanager
def _locked(store: RunStore, overwrite: bool) -> Iterator[None]:
    """Phase 1, lock: the store's writer lock, held until the run ends."""
    took_over = store.open(overwrite)
    try:
        if took_over:
            log.warning("%s: %s.", store.describe(), took_over)
        yield
    finally:
        store.release()


def _check_static_key(
    graph: CompiledGraph, source: RowSource, store: RunStore, plan: RunPlan
) -> RunKey:
    """Phase 2, key: graph, templates, params and data are compared with the store's run
    before any server is asked (the servers' part is checked once they answered)."""
    # The settings that shape replies and have parts of their own (a retest's resample:
    # its replies are other samples than the run's, never the same run).
    parts = {**static_components(graph, plan.params, source.fingerprint()), **plan.key_parts()}
    static_key = RunKey.from_components(parts)
    store.check_key(static_key, static_only=True)
    return static_key


def new_run_id() -> str:
    """Twelve characters, the first a letter: a bare hex id such as `73e020132014` is read
    back from CSV as the float `inf` by pandas and spreadsheets (seen in CI)."""
    return "r" + uuid.uuid4().hex[:11]


async def _plan(
    graph: CompiledGraph,
    source: RowSource,
    store: RunStore,
    plan: RunPlan,
    static_key: RunKey,
    given_params: frozenset[str],
) -> _Run:
    """Phase 3, plan: the runtime built, the servers asked which endpoint each node uses,
    the whole run key checked, the trace and the store opened for writing."""
    runtime = build_runtime(plan)
    run_id = new_run_id()
    choice = _server_choice(plan, given_params)
    try:
        endpoints, servers = await prepare_endpoints(endpoint_wants(graph), runtime.client, choice)
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
        await runtime.close()
        if not store.has_manifest() and isinstance(exc, Exception):
            # A new store says why it stayed empty; a resumable run's manifest (and its
            # key) is never replaced by one of a run that did not start.
            store.write_manifest(
                Manifest(
                    layout_version=LAYOUT_VERSION,
                    run_id=run_id,
                    run_key=static_key,
                    graph=ManifestGraph(path=graph.label, name=graph.name),
                    status="error",
                    error=str(exc),
                )
            )
        raise
    resuming = await _begin(graph, store, runtime, trace)
    run = _Run(
        graph=graph,
        source=source,
        store=store,
        plan=plan,
        runtime=runtime,
        choice=choice,
        endpoints=endpoints,
        servers=servers,
        run_id=run_id,
        run_key=run_key,
        trace=trace,
        resuming=resuming,
    )
    if resuming:
        # Read before this part's manifest replaces it: the earlier parts' counts live on.
        previous = store.read_manifest()
        run.earlier = previous.earlier_parts() if previous is not None else []
    run.manifest = _manifest(graph, source, plan, run_id, run_key, runtime.cache, resuming)
    # This part is listed from its start: a part killed midway stays "running", uncounted.
    run.manifest.parts = [
        *run.earlier,
        RunPart(run_id=run_id, started=run.manifest.started, status=run.manifest.status),
    ]
    run.manifest.servers = servers
    run.manifest.model = plan.model or next((e.model for e in endpoints.values()), None)
    return run


def _server_choice(plan: RunPlan, given_params: frozenset[str]) -> ServerChoice:
    """The servers the user named, as the endpoint choice reads them."""
    return ServerChoice(
        plan.base_url,
        plan.model,
        plan.api_key,
        plan.structured,
        plan.params,
        plan.server_id,
        allowed=None if plan.trust else plan.allow_servers,
        given_params=given_params,
    )


async def _begin(
    graph: CompiledGraph, store: RunStore, runtime: ProcessRuntime, trace: TraceStore
) -> bool:
    """The store opened for writing with the graph's snapshot; True when it resumes."""
    try:
        resuming = store.begin()
        store.write_snapshot(graph.snapshot())
    except BaseException:
        # Nothing has run yet; asyncio would report a client left open.
        with suppress(StorageError, sqlite3.Error):
            trace.close()
        with suppress(StorageError):
            store.close()  # the files `begin` opened
        await runtime.close()
        raise
    if resuming:
        log.info("Resuming %s: %d examples already done.", store.describe(), len(store.done))
    return resuming


async def _execute(run: _Run, observer: RunObserver | None) -> SessionOutcome:
    """Phase 4, execute: every row through the engine here, or through the workers; how
    it ended goes in the manifest, whatever happens, before phase 5 writes it."""
    flush = Flusher(run.runtime.cache, run.trace, run.store)
    pool = WorkerPool(run.plan) if run.plan.sharded else None
    last_write: BaseException | None = None  # the run's last writes failed (a full disk)
    manifest = run.manifest
    try:
        await _run_rows(run, flush, pool, observer)
        manifest.status = "complete"
    except (asyncio.CancelledError, KeyboardInterrupt):
        manifest.status = "interrupted"
        raise
    except ServerGone as exc:
        manifest.status = "server gone"
        manifest.error = str(exc)
        raise
    except Exception as exc:
        manifest.status = "error"
        manifest.error = _error_text(exc, run.store)
        raise
    finally:
        last_write = await _finalize(run, flush, pool)
    if last_write is not None:
        # Every example ran, but what the last writes held is lost: not a finished run.
        raise last_write
    return _summarize(run)


async def _run_rows(
    run: _Run, flush: Flusher, pool: WorkerPool | None, observer: RunObserver | None
) -> None:
    """The run recorded as started (trace and manifest), then its rows driven to the end."""
    graph, store, plan, manifest = run.graph, run.store, run.plan, run.manifest
    client = run.runtime.client
    run.trace.start_run(
        graph=graph.label,
        model=manifest.model,
        base_url=" | ".join(server_urls(plan.base_url)),
        server=str(run.servers),
        structured=",".join(str(s.structured_output) for s in run.servers.values()),
        settings=manifest.parameters.as_written(),
    )
    store.write_manifest(manifest)
    rows = _rows(graph, run.source, store, plan.limit)
    if pool is None:
        engine = run.runtime.engine(
            graph, run.trace, run.endpoints, engine_window(client.servers.max_in_flight())
        )
        work = engine.run(rows, store.write_result, store.done)
    else:
        cache = run.runtime.cache
        # The once-nodes run here, before any worker starts; their values go with the job.
        # The once_per groups run here too, as their rows go out (scale/coordinator.py).
        engine = run.runtime.engine(graph, run.trace, run.endpoints, 1)
        once = await engine.run_once()
        parts = ResolvedRun(
            plan=plan,
            graph=graph,
            endpoints=run.endpoints,
            choice=run.choice,
            in_flight=client.servers.max_in_flight(),
            cache=cache.path if cache is not None else None,
            run_id=run.run_id,
            run_key=run.run_key.digest,
            once=once,
        )

        def started(workers: list[WorkerEntry]) -> None:
            manifest.workers = workers  # which processes to look at while it runs
            store.write_manifest(manifest)

        work = pool.run(
            parts,
            rows,
            store,
            run.trace,
            run.runtime.stats,
            started,
            events=client.events,
            groups=engine.groups,
        )
    with fewer_gc_passes():
        progress = RunProgress(
            run.runtime.stats,
            run.total if run.total is not None else run.source.count(plan.limit),
            client.servers.limits_text,
            # Workers hold their requests in their own processes: none is counted here.
            in_flight=client.servers.in_flight if pool is None else None,
            events=client.events,
        )
        await drive(work, flush, progress, observer)


async def _finalize(run: _Run, flush: Flusher, pool: WorkerPool | None) -> BaseException | None:
    """Phase 5, finalize: the last flush, the manifest's closing fields, every file and the
    client closed; returns the error of a last write that failed (the run then is not
    finished, though every example ran)."""
    store, manifest, client, stats = run.store, run.manifest, run.runtime.client, run.runtime.stats
    last_write: BaseException | None = None
    try:
        # Each step on its own: a full disk that fails the last flush must still leave the
        # manifest saying "error" (not "running") and close every file.
        for step in (flush, store.close):
            try:
                step()
            except (StorageError, OSError, sqlite3.Error) as exc:
                last_write = last_write or exc
                manifest.status = "error"
                manifest.error = manifest.error or _error_text(exc, store, True)
        cache_errors = [flush.cache_error, *(pool.cache_errors if pool else [])]
        if any(cache_errors):
            first = next(error for error in cache_errors if error)
            manifest.cache_error = f"replies not saved to the cache: {first}"
        manifest.ended = time.time()
        manifest.wall_seconds = round(manifest.ended - (manifest.started or manifest.ended), 3)
        # The run's own outages and its workers', from the events they emitted.
        manifest.outages = client.outages()
        manifest.events = [EventEntry.of(event) for event in client.events.notable()]
        manifest.replicas = client.servers.replica_reports()
        if pool is not None:
            manifest.workers = pool.workers
        part = RunPart(
            run_id=manifest.run_id,
            started=manifest.started,
            ended=manifest.ended,
            status=manifest.status,
            counts=replace(stats),
        )
        manifest.parts = [*run.earlier, part]
        # The whole run's: the work of every part, the examples as the store holds them
        # (streamed, twice, rather than held: runs can have millions of lines).
        manifest.counts = replace(
            stats,
            **status_counts(_line_dicts(store)),
            **summed_work([p.counts for p in manifest.parts]),
        )
        manifest.means = output_means(_line_dicts(store))
        store.write_manifest(manifest)
    finally:
        with suppress(StorageError, sqlite3.Error):
            run.trace.close()
        await run.runtime.close()
    return last_write


def _summarize(run: _Run) -> SessionOutcome:
    """The run's summary, written beside its manifest."""
    graph, manifest = run.graph, run.manifest
    # Aggregates (Elo, agreement…) need every line at once; most graphs have none.
    aggregates = {}
    if graph.aggregates:
        aggregates = run_aggregates(graph, list(_line_dicts(run.store)), run.plan.params)
    summary = Summary.model_validate(
        {
            "graph": graph.name,
            "counts": manifest.counts,
            "means": manifest.means,
            **abstain_note(graph),
            **aggregates,
        }
    )
    run.store.write_summary(summary)
    return SessionOutcome(manifest, summary, run.store)


def _line_dicts(store: RunStore) -> Iterator[dict[str, Any]]:
    """The store's result lines as the JSON objects the summary arithmetic reads."""
    return (line.as_dict() for line in store.results())


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
    plan: RunPlan,
    run_id: str,
    run_key: RunKey,
    cache: ResponseCache | None,
    resuming: bool,
) -> Manifest:
    return Manifest(
        layout_version=LAYOUT_VERSION,
        run_id=run_id,
        run_key=run_key,
        graph=ManifestGraph(
            path=graph.label,
            name=graph.name,
            hash=graph.content_hash,
            snapshot=f"{SNAPSHOT}/{SNAPSHOT_GRAPH}",
        ),
        dataset=ManifestDataset.model_validate(
            {**source.describe(), "hash": run_key.components["data"], "inputs": INPUTS}
        ),
        model=plan.model,
        # Every setting its record marks for the manifest; the cache as the file opened
        # (none when it could not be).
        parameters=ManifestParameters.model_validate(
            {**plan.manifest_section(), "cache": str(cache.path) if cache else None}
        ),
        package=ManifestPackage(
            name="orchestrator", version=__version__, python=platform.python_version()
        ),
        started=time.time(),
        status="running",
        resumed=resuming,
    )
