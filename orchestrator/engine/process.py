"""The live parts of a run built from its plan, in one place: the response cache, the client
over it, and the engine. The session builds them in the process that owns the run and every
worker (scale/worker.py) builds them in its own; both call `build_runtime`, so a setting
added to the run's settings reaches a worker with nothing copied by hand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass

from ..calls import LLMClient
from ..graph import CompiledGraph
from ..servers import Endpoint
from ..store import Counts, ResponseCache, TraceRecorder, default_cache_path, open_cache
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
            EngineOptions(settings=self.plan, window=window),
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
    if plan.use_cache:
        cache = open_cache(plan.cache_file or default_cache_path(), replace=plan.refresh)
    # The settings the client applies are marked so in their record (engine/settings.py).
    client = LLMClient(cache=cache, stats=stats, **plan.client_options())
    return ProcessRuntime(plan, stats, cache, client)
