"""Running a compiled graph over rows: the scheduler (examples × nodes, under the endpoint
limits) and the flush loop that writes finished work and tells a progress display."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .flush import (
        FLUSH_SECONDS,
        CacheFlusher,
        Flusher,
        Observers,
        RunObserver,
        RunProgress,
        drive,
        fewer_gc_passes,
    )
    from .groups import GroupOutcome, GroupRuns
    from .plan import Executor, Replay, Resample, RunPlan, Workers
    from .process import ProcessRuntime, build_runtime
    from .scheduler import Engine, engine_window
    from .settings import SETTINGS, UNSET, RunArgs, RunSettings, default_of, parse_workers, sharded

lazy(__name__)

__all__ = [
    "FLUSH_SECONDS",
    "SETTINGS",
    "UNSET",
    "CacheFlusher",
    "Engine",
    "Executor",
    "Flusher",
    "GroupOutcome",
    "GroupRuns",
    "Observers",
    "ProcessRuntime",
    "Replay",
    "Resample",
    "RunArgs",
    "RunObserver",
    "RunPlan",
    "RunProgress",
    "RunSettings",
    "Workers",
    "build_runtime",
    "default_of",
    "drive",
    "engine_window",
    "fewer_gc_passes",
    "parse_workers",
    "sharded",
]
