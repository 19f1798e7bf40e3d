"""What a run is, as one frozen record: `RunPlan`, the run's settings (settings.py) with
what the caller left open decided — which server, which key, how many workers, whether the
graph's servers are trusted — built once (`session.plan.make_plan`) and carried whole to
every worker process and Ray actor.

It is `RunSettings` itself, field for field, narrowed where a setting is now decided: a
setting added to the record is in the plan with nothing copied by hand. The session reads
it; a worker receives it inside its `WorkerJob` next to the facts the run's owner resolved
(endpoints, run id, window), and `build_runtime` (runtime.py) turns it into a cache, a
client and an engine in either place. It pickles, the seams (`transport`, `retry`)
included when the user's do.

It lives in engine/ rather than session/ for the layer contract (pyproject
[tool.importlinter]): scale/ and engine/ consume it and sit below session/, which builds
it; `orchestrator.session.planning` re-exports it under the name the design uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .settings import (
    FIELDS,
    Executor,
    Replay,
    Resample,
    RunSettings,
    Workers,
)

__all__ = ["Executor", "Replay", "Resample", "RunPlan", "Workers"]


@dataclass(frozen=True, kw_only=True)
class RunPlan(RunSettings):
    """Everything a run is, decided before the store or a server is touched. `params` are
    the graph's with the caller's over them once the session has read the graph. What
    shapes replies is part of the run key (each setting's `run_key`); the rest only says
    how the run goes."""

    # The settings decided here: each the same field of the record, with no default.
    base_url: str | tuple[str, ...] = field(metadata=FIELDS["base_url"].metadata)
    api_key: str = field(repr=False, metadata=FIELDS["api_key"].metadata)
    workers: Workers = field(metadata=FIELDS["workers"].metadata)
    allow_servers: tuple[str, ...] = field(default=(), metadata=FIELDS["allow_servers"].metadata)
