"""`orc.power`: the sample size a paired comparison needs, from one or two pilot runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis import PowerEstimate, estimate_power

if TYPE_CHECKING:
    from .run import RunResult

__all__ = ["PowerEstimate", "power"]


def power(
    *runs: str | Path | RunResult,
    diff: float,
    output: str | None = None,
    cluster: str | None = None,
    alpha: float = 0.05,
    target: float = 0.8,
    correlation: float = 0.0,
) -> PowerEstimate:
    """How many examples (or clusters, e.g. users, with `cluster`) a paired comparison
    needs to detect a mean difference `diff` with probability `target` at two-sided
    `alpha`, from two pilot runs over the same examples or one pilot run.

    `n_required` is the answer; the record also carries the pilot's σ of the differences
    and, with `cluster`, its intra-cluster correlation and design effect. See
    `analysis.power.estimate_power` for the method.
    """
    return estimate_power(
        *runs,
        diff=diff,
        output=output,
        cluster=cluster,
        alpha=alpha,
        power=target,
        correlation=correlation,
    )
