"""The live parts of a run built from its plan, in one place: the response cache, the client
over it, and the engine. The session builds them in the process that owns the run and every
worker (scale/worker.py) builds them in its own; both call `build_runtime`, so a setting
added to `RunPlan` reaches a worker with nothing copied by hand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass

from ..calls.client import Endpoint, LLMClient
from ..graph.compiled import CompiledGraph
from ..store.cache import ResponseCache, default_cache_path, open_cache
from ..store.records import Counts
from ..store.trace import TraceRecorder
from .plan import RunPlan
from .scheduler import Engine, EngineOptions


@dataclass
class ProcessRuntime:
    """A run's cache, client and counters in this process; `engine` puts them to work."""

    plan: RunPlan
    stats: Counts
    cache: ResponseCache | None
    client: LLMClient

    def engine(
        self,
        graph: CompiledGraph,
        trace: TraceRecorder,
        endpoints: Mapping[str, Endpoint],
        window: int,
    ) -> Engine:
        """The engine over this runtime's client, keeping `window` examples in flight."""
        return Engine(
            graph,
            self.client,
            trace,
            dict(endpoints),
            self.stats,
            EngineOptions(params=self.plan.params, window=window, resample=self.plan.resample),
        )

    async def close(self) -> None:
        """Close the client, then the cache (a cache that fails to close costs nothing)."""
        try:
            await self.client.close()
        finally:
            if self.cache is not None:
                with suppress(sqlite3.Error):
                    self.cache.close()


def build_runtime(plan: RunPlan, stats: Counts | None = None) -> ProcessRuntime:
    """Open the plan's cache (None when it has none, or a damaged file: that costs its
    replies, not the run) and the client over it."""
    stats = stats if stats is not None else Counts()
    cache = None
    if plan.cache.use:
        cache = open_cache(plan.cache.path or default_cache_path(), replace=plan.cache.refresh)
    client = LLMClient(
        cache=cache,
        stats=stats,
        concurrency=plan.calls.concurrency,
        timeout=plan.calls.timeout,
        refresh=plan.cache.refresh,
        server_wait=plan.calls.server_wait,
        transport=plan.servers.transport,
        retry=plan.calls.retry,
        affinity=plan.calls.affinity,
    )
    return ProcessRuntime(plan, stats, cache, client)
