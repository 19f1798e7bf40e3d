"""What a sample size buys: the paired t-test's power (and the normal approximation's
sample size), and the intra-cluster correlation that discounts nested examples (the
design effect 1 + (m − 1)·ICC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .bootstrap import cluster_index


def normal_n(effect: float, alpha: float, power: float) -> float:
    """((z₁₋α/₂ + z_power) / effect)²: the observations a two-sided z-test of effect Δ/σ
    needs for `power`, the t-test's sample size to first order; infinity past a float."""
    from scipy.stats import norm

    try:
        return ((float(norm.ppf(1.0 - alpha / 2.0)) + float(norm.ppf(power))) / effect) ** 2
    except (OverflowError, ZeroDivisionError):
        return math.inf


def t_power(n: int, effect: float, alpha: float) -> float:
    """The two-sided one-sample t-test's power at n observations and effect Δ/σ."""
    from scipy import stats

    if n < 2:
        return 0.0
    df = n - 1
    critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    shift = abs(effect) * math.sqrt(n)
    found = float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))
    if math.isfinite(found):
        return found
    # scipy's noncentral t gives nan far out (a shift or df in the millions), where the t
    # statistic is the normal one: its power is the normal test's.
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    return float(stats.norm.sf(z - shift) + stats.norm.cdf(-z - shift))


def one_way_icc(values: ArrayLike, groups: Sequence[Any]) -> tuple[float, int, float]:
    """The intra-cluster correlation by one-way ANOVA (clipped at 0), the number of
    clusters and their mean size; unequal sizes use the usual adjusted size n₀."""
    data = np.asarray(values, dtype=float)
    index = cluster_index(groups)
    k, total = (int(index.max()) + 1 if index.size else 0), data.size
    sizes = np.bincount(index, minlength=k).astype(float)
    mean_size = total / k
    if k < 2 or total <= k:
        return 0.0, k, mean_size
    means = np.bincount(index, weights=data, minlength=k) / sizes
    between = float((sizes * (means - data.mean()) ** 2).sum()) / (k - 1)
    within = float(((data - means[index]) ** 2).sum()) / (total - k)
    n0 = (total - float((sizes**2).sum()) / total) / (k - 1)
    denominator = between + (n0 - 1.0) * within
    icc = (between - within) / denominator if denominator > 0 else 0.0
    return max(0.0, icc), k, mean_size
