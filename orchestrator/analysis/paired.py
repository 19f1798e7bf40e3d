"""The bootstrap interval of a paired mean difference (what `--by` groups report for a
score); the paired tests themselves are `orchestrator.stats`'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compute.statistics import bootstrap_mean_ci


def paired_interval(
    differences: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Bootstrap CI of the mean difference (examples resampled as pairs): BCa, or the
    percentile interval when BCa is undefined (every resample on one side)."""
    values = [float(x) for x in differences]
    try:
        return bootstrap_mean_ci(values, level, resamples, seed, method="bca")
    except ValueError:
        return bootstrap_mean_ci(values, level, resamples, seed, method="percentile")
