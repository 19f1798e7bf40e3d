"""Scale-out: one run's rows on several workers — local processes (`--workers N`) or Ray
actors (`--ray`) — each running the async engine on the rows it is handed, while the
process that started the run keeps its one run folder, lock and run key (docs/scale.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine import Executor, Workers, parse_workers
from ..faces import lazy

if TYPE_CHECKING:
    from .messages import WorkerFailed, WorkerLost
    from .onray import import_ray
    from .pool import (
        ResolvedRun,
        WorkerPool,
        run_options,
    )
    from .processes import check_main_guard

lazy(__name__)

__all__ = [
    "Executor",
    "ResolvedRun",
    "WorkerFailed",
    "WorkerLost",
    "WorkerPool",
    "Workers",
    "check_main_guard",
    "import_ray",
    "parse_workers",
    "run_options",
]
