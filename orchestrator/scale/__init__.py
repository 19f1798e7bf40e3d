"""Scale-out: one run's rows on several workers — local processes (`--workers N`) or Ray
actors (`--ray`) — each running the async engine on the rows it is handed, while the
process that started the run keeps its one run folder, lock and run key (docs/scale.md)."""

from ..engine.settings import Executor, Workers, parse_workers
from .messages import WorkerFailed, WorkerLost
from .pool import (
    ResolvedRun,
    WorkerPool,
    run_options,
)

__all__ = [
    "Executor",
    "ResolvedRun",
    "WorkerFailed",
    "WorkerLost",
    "WorkerPool",
    "Workers",
    "parse_workers",
    "run_options",
]
