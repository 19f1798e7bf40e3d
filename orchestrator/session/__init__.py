"""One run, whoever asked for it: the run plan built from the caller's settings (`plan.py`),
the run in phases (`session.py`), the run's params checked, what it reports at the end
(summary, failures)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .failures import failure_groups
    from .planning import (
        UNUSED_BASE_URL,
        Replay,
        Resample,
        RunArgs,
        RunPlan,
        RunSettings,
        make_plan,
    )
    from .session import run_session
    from .summary import SUMMARY_FIELDS, aggregate_errors, numeric_leaves, summarize

lazy(__name__)

__all__ = [
    "SUMMARY_FIELDS",
    "UNUSED_BASE_URL",
    "Replay",
    "Resample",
    "RunArgs",
    "RunPlan",
    "RunSettings",
    "aggregate_errors",
    "failure_groups",
    "make_plan",
    "numeric_leaves",
    "run_session",
    "summarize",
]
