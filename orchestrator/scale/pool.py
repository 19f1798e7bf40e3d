"""The workers of one run, whichever executor: the job they are given (built from what the
run decided — graph, endpoints, limits, run key), started as processes or Ray actors, fed
by the `Coordinator`, and stopped however the run ends."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..data import Row
from ..engine import GroupRuns, RunArgs, RunPlan, engine_window, parse_workers
from ..errors import ConfigurationError
from ..events import RunEvents
from ..graph import CompiledGraph
from ..kinds import endpoint_wants
from ..servers import Concurrency, Endpoint, EndpointWant, ServerChoice, node_api_key
from ..store import Counts, RunStore, TraceStore, WorkerEntry
from .coordinator import Coordinator, WorkerLink
from .messages import EndpointPlan, GraphRecipe, WorkerJob


class _Disposable(WorkerLink, Protocol):
    async def dispose(self) -> None: ...


def run_options(workers: str | None, ray: str | None) -> RunArgs:
    """`--workers` and `--ray ADDRESS` as `orc.run` takes them; `--ray local` (or an
    empty ADDRESS) is the Ray instance this machine runs, or a new one."""
    options: RunArgs = {"executor": "ray" if ray is not None else "local"}
    if ray not in (None, "", "local"):
        options["ray_address"] = ray
    if workers is not None:
        options["workers"] = parse_workers(workers)
    return options


@dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """What the run's owner decided before any worker starts, which every worker shares:
    the plan (params filled in), the graph, each node's endpoint, the cache file it opened
    (None: none), the run's ids and key, and what its servers may hold in flight."""

    plan: RunPlan
    graph: CompiledGraph
    endpoints: dict[str, Endpoint]
    choice: ServerChoice
    in_flight: int  # requests every server of the run together may hold (the owner's limits)
    cache: Path | None
    run_id: str
    run_key: str
    once: dict[str, Any] = field(default_factory=dict)  # the once-nodes' values, by node


def _want(parts: ResolvedRun, node: str) -> EndpointWant:
    """What the node asks of the run's servers, as the run's own client read it."""
    want = endpoint_wants(parts.graph).get(node)
    if want is None:  # only nodes that talk to a server have endpoints
        raise ConfigurationError(f"node '{node}' has an endpoint but asks for no server")
    return want


def _api_key(parts: ResolvedRun, node: str) -> str:
    """The key the run's own client uses for this node (decided where the run started)."""
    return node_api_key(_want(parts, node), parts.choice, parts.endpoints[node].urls)


def worker_job(parts: ResolvedRun, count: int) -> WorkerJob:
    """The job of each of `count` workers: a fixed per-server limit split between them (so
    `--concurrency N` stays what each server sees in total; a tuned limit is each worker's
    own, and they all read the same server load), the graph as compiled."""
    plan = parts.plan
    concurrency: Concurrency = plan.concurrency
    held = parts.in_flight  # a tuned limit: each worker's may grow to the ceiling
    if isinstance(concurrency, int):
        concurrency = max(1, math.ceil(concurrency / count))
        held = math.ceil(held / count)  # every server's fixed limit split the same way
    endpoints = [
        EndpointPlan(
            node=node,
            urls=endpoint.urls,
            model=endpoint.model,
            api_key=_api_key(parts, node),
            structured=endpoint.structured,
            identity=endpoint.identity,
            check_joins=endpoint.check_joins,
            provider=_want(parts, node).provider,
        )
        for node, endpoint in parts.endpoints.items()
    ]
    share = replace(
        plan,
        concurrency=concurrency,
        # The file the owner opened, or none if it could not be opened.
        cache=parts.cache if parts.cache is not None else False,
    )
    return WorkerJob(
        plan=share,
        graph=GraphRecipe.of(parts.graph),
        endpoints=endpoints,
        window=engine_window(held),
        run_id=parts.run_id,
        graph_hash=parts.graph.content_hash,
        run_key=parts.run_key,
        once=parts.once,
    )


@dataclass
class WorkerPool:
    """Runs a session's rows on workers and keeps what the manifest records of them."""

    choice: RunPlan
    cache_errors: list[str] = field(default_factory=list)
    workers: list[WorkerEntry] = field(default_factory=list)

    async def run(
        self,
        parts: ResolvedRun,
        rows: Iterable[Row],
        store: RunStore,
        trace: TraceStore,
        stats: Counts,
        started: Callable[[list[WorkerEntry]], None] | None = None,
        events: RunEvents | None = None,
        groups: GroupRuns | None = None,
    ) -> None:
        """Start the workers, run the rows through them, stop them; `started` is told of
        each worker (name, pid, host) as it first reports; the workers' events (and any
        worker lost) go to the run's sink `events`; `groups` are the owner's once_per
        groups, run here as their rows go out."""
        job, links = await self._start(parts)
        coordinator = Coordinator(
            list(links), store, trace, stats, job.window, started, events=events, groups=groups
        )
        try:
            await coordinator.run(rows)
        finally:
            self.cache_errors.extend(coordinator.cache_errors)
            self.workers = list(coordinator.workers.values())
            for link in links:
                await link.dispose()

    async def _start(self, parts: ResolvedRun) -> tuple[WorkerJob, list[_Disposable]]:
        if self.choice.executor == "ray":
            from .onray import actor_count, connect, start_actors

            ray = connect(self.choice.ray_address)
            wanted = None if self.choice.workers == "auto" else self.choice.workers
            count = actor_count(ray, wanted)
            job = worker_job(parts, count)
            return job, list(await start_actors(ray, job, count))
        from .processes import ProcessLink

        auto = self.choice.workers == "auto"
        count = (os.cpu_count() or 1) if auto else int(self.choice.workers)
        job = worker_job(parts, count)
        links: list[_Disposable] = []
        try:
            for index in range(count):
                links.append(await ProcessLink.start(f"worker-{index + 1}", job))
        except BaseException:
            for link in links:
                await link.close(cancel=True)
                await link.dispose()
            raise
        return job, links
