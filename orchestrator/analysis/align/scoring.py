"""Agreement between the judge and the people on a set of examples, and the held-out
comparison of two judges: each one's value with a bootstrap interval, the paired
difference's interval, and the verdict it supports.

Series are float arrays matched by example, NaN where the judge gave no answer; choices
are coded as numbers first (`metaeval_stats.codes`). The statistics are meta-eval's
(Krippendorff's α, Spearman, raw agreement) and the compute library's Cohen's κ
(quadratic weights for scores, none for choices); intervals are meta-eval's bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from ...compute import cohen_kappa
from ..metaeval_stats import Bootstrap, agreement, alpha, correlation, intervals
from .record import Difference, Estimate, Metric, Verdict

Kind = Literal["scores", "choices"]


def _kappa(x: np.ndarray, y: np.ndarray, kind: Kind) -> float | None:
    keep = ~(np.isnan(x) | np.isnan(y))
    if not keep.any():
        return None
    return cohen_kappa(
        x[keep].tolist(), y[keep].tolist(), weights="quadratic" if kind == "scores" else None
    )


def measure(metric: Metric, judged: np.ndarray, truth: np.ndarray, kind: Kind) -> float | None:
    """The metric between the judge's answers and the labels; None where undefined (too
    few answers, or a constant series)."""
    x, y = np.asarray(judged, dtype=float), np.asarray(truth, dtype=float)
    if metric == "alpha":
        return alpha(np.column_stack([x, y]), "interval" if kind == "scores" else "nominal")
    if metric == "kappa":
        return _kappa(x, y, kind)
    if metric == "spearman":
        return correlation("spearman", x, y)
    return agreement(x, y)


def mean_score(values: Sequence[float | None]) -> float | None:
    """A configuration's search score: the mean of its defined fold scores."""
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def verdict(ci: list[float] | None) -> Verdict:
    """`better` or `worse` when the difference's interval excludes 0, else `same`."""
    if ci is None:
        return "same"
    if ci[0] > 0:
        return "better"
    return "worse" if ci[1] < 0 else "same"


def compare(
    ids: Sequence[str],
    baseline: np.ndarray,
    aligned: np.ndarray,
    truth: np.ndarray,
    metric: Metric,
    kind: Kind,
    boot: Bootstrap,
) -> tuple[Estimate, Estimate, Difference]:
    """Baseline and aligned judge on the same test examples: each one's metric with its
    interval, and aligned − baseline with the interval of the same resamples (paired)."""
    base, mine, labels = (np.asarray(a, dtype=float) for a in (baseline, aligned, truth))

    def one(judged: np.ndarray, rows: np.ndarray) -> float | None:
        return measure(metric, judged[rows], labels[rows], kind)

    def gap(rows: np.ndarray) -> float | None:
        first, second = one(mine, rows), one(base, rows)
        return None if first is None or second is None else first - second

    found = intervals(
        list(ids),
        {
            "baseline": lambda rows: one(base, rows),
            "aligned": lambda rows: one(mine, rows),
            "difference": gap,
        },
        boot,
    )
    every = np.arange(len(ids))
    n_base = int((~np.isnan(base)).sum())
    n_mine = int((~np.isnan(mine)).sum())
    return (
        Estimate(value=one(base, every), ci=found["baseline"], n=n_base),
        Estimate(value=one(mine, every), ci=found["aligned"], n=n_mine),
        Difference(value=gap(every), ci=found["difference"], verdict=verdict(found["difference"])),
    )
