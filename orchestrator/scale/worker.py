"""One worker of a scaled-out run: the async engine on the rows it is handed, its finished
work handed back as reports. The same class runs in a worker process (processes.py) and in
a Ray actor (onray.py): only how rows and reports travel differs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from contextlib import ExitStack, suppress
from dataclasses import replace
from typing import Any

from ..calls import LLMClient
from ..engine import CacheFlusher, Engine, ProcessRuntime, build_runtime, fewer_gc_passes
from ..servers import Endpoint, ServerGone
from ..store import WHOLE, Counts, EncodedLine, ResultLine, TraceRecorder, loads
from .messages import ResumeValues, RowChunk, WorkerFailure, WorkerJob, WorkerReport

log = logging.getLogger(__name__)


class ShardTrace(TraceRecorder):
    """The trace as a worker keeps it: rows queued until the next report takes them, and
    resume answered from the values the run's owner sent with each half-done example."""

    def __init__(self, run_id: str, graph_hash: str, run_key: str) -> None:
        super().__init__(run_id, graph_hash, run_key)
        self.resume: dict[str, ResumeValues] = {}

    def flush(self) -> None:
        return None  # `take` hands the rows over with the next report

    def finished_value(self, example_id: str, node: str, item: int = WHOLE) -> tuple[bool, Any]:
        values = self.resume.get(example_id)
        if not values or (node, item) not in values:
            return False, None
        return True, loads(values[node, item])


def _endpoints(client: LLMClient, job: WorkerJob) -> dict[str, Endpoint]:
    """The run's endpoints rebuilt in this worker, with the structured-output mode the run
    chose (no model list or canary asked again)."""
    endpoints: dict[str, Endpoint] = {}
    for plan in job.endpoints:
        endpoint = client.endpoint(
            plan.urls,
            plan.model,
            plan.api_key,
            identity=plan.identity,
            check_joins=plan.check_joins,
            provider=client.provider(plan.provider) if plan.provider else None,
        )
        endpoint.structured = plan.structured
        endpoints[plan.node] = endpoint
    return endpoints


class ShardWorker:
    """Runs the engine on pushed rows; `pull` hands back what finished."""

    def __init__(self, job: WorkerJob, name: str) -> None:
        self.job = job
        self.name = name
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.stats = Counts()
        self.runtime: ProcessRuntime | None = None
        self.engine: Engine | None = None
        self.trace = ShardTrace(job.run_id, job.graph_hash, job.run_key)
        self.failure: WorkerFailure | None = None
        self._flush_cache = CacheFlusher(None)
        self._ids: list[str] = []
        self._lines: list[EncodedLine] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._settled = False  # closed and idle, or failed: the last report is due
        # A report goes as soon as a quarter of the window has finished, not only on the
        # owner's tick: rows are handed out as reported ones free room, and a worker that
        # waited 0.5 s per window ran at ~250 req/s against an instant server.
        self.report_every = max(job.window // 4, 1)
        self._due = asyncio.Event()
        self._for_life = ExitStack()  # what the worker holds until its last report
        self._ended = False

    def start(self) -> None:
        """Compile the graph and open the cache and the client; a failure is reported."""
        # As in one process: the collector's default passes cost ~15% of throughput.
        self._for_life.enter_context(fewer_gc_passes())
        try:
            graph = self.job.graph.compile()
            self.runtime = build_runtime(self.job.plan, self.stats)
            self._flush_cache = CacheFlusher(self.runtime.cache)
            endpoints = _endpoints(self.runtime.client, self.job)
            self.engine = self.runtime.engine(graph, self.trace, endpoints, self.job.window)
            self.engine.use_once(self.job.once)
        except Exception as exc:
            self._fail(WorkerFailure("error", f"{self.describe()} could not start: {exc}"))

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid} on {self.host})"

    # -- rows in ----------------------------------------------------------------------

    def push(self, chunk: RowChunk) -> None:
        """Start the engine on these rows (alongside any still running)."""
        if self.engine is None or self._closed or self.failure is not None:
            return
        self.trace.resume.update(chunk.resume)
        self.engine.groups.adopt(chunk.groups)
        task = asyncio.create_task(self.engine.run(chunk.rows, self._sink))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def close(self, cancel: bool) -> None:
        """No more rows will come; with `cancel`, the rows in flight are given up."""
        self._closed = True
        if cancel:
            for task in self._tasks:
                task.cancel()
        self._settle()

    def _sink(self, line: ResultLine) -> None:
        example = line.id
        self._lines.append(line.encode())
        self._ids.append(example)
        self.trace.resume.pop(example, None)
        if len(self._ids) >= self.report_every:
            self._due.set()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, ServerGone):
                self._fail(WorkerFailure("server gone", str(exc)))
            else:
                self._fail(WorkerFailure("error", f"{type(exc).__name__}: {exc}"))
        self._settle()

    def _fail(self, failure: WorkerFailure) -> None:
        if self.failure is None:
            self.failure = failure
        self.close(cancel=True)

    def _settle(self) -> None:
        if self.failure is not None or (self._closed and not self._tasks):
            self._settled = True
            self._due.set()

    # -- reports out ------------------------------------------------------------------

    async def pull(self, wait: float) -> WorkerReport:
        """What finished since the last pull, after at most `wait` seconds (sooner when
        `report_every` examples have finished, at once when the worker is done). Replies
        go to the cache before their lines leave, so a line the run keeps never lacks its
        cached reply."""
        if not self._due.is_set():
            with suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), wait)
        if not self._settled:
            self._due.clear()
        final = self._settled and not self._tasks
        self._flush_cache()
        report = WorkerReport(
            worker=self.name,
            pid=self.pid,
            host=self.host,
            ids=self._ids,
            lines=self._lines,
            trace=self.trace.take(),
            stats=replace(self.stats),
            final=final,
            failure=self.failure,
        )
        self._ids, self._lines = [], []
        if final:
            await self._end(report)
        if self.runtime is not None:
            # Taken after the end, so the final report carries every event of the worker.
            report.events = self.runtime.client.events.take_new()
        return report

    async def _end(self, report: WorkerReport) -> None:
        """Close the client and the cache once; the report carries their last word."""
        if self._ended:
            return
        self._ended = True
        report.cache_error = self._flush_cache.error
        if self.runtime is not None:
            await self.runtime.close()
        self._for_life.close()
