"""Ranks and correlations: average-tie ranks, Pearson, Spearman and Kendall's τ-b, their
p-values, and a Fisher-z interval for Spearman's ρ.

Pearson, Spearman and the ranks work along the last axis, so one call correlates one pair
of series or every row of a batch of resamples; an undefined correlation (fewer than two
values, a constant series) is NaN, which `finite` turns into None for a record. Values are
finite numbers: callers drop missing pairs first.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from .intervals import Array, Interval

Method = Literal["pearson", "spearman", "kendall"]
SHORT_SERIES = 400  # Kendall by all pairs up to this length (fast per resample), else scipy


def ranks(values: ArrayLike) -> Array:
    """Ranks from 1 along the last axis, tied values sharing the mean of the ranks they
    span (scipy's `rankdata`, method "average")."""
    data = np.asarray(values, dtype=float)
    n = data.shape[-1]
    # Tied values share their average rank, so the order among them does not matter.
    order = np.argsort(data, axis=-1)
    ordered = np.take_along_axis(data, order, axis=-1)
    position = np.arange(1, n + 1, dtype=float)
    starts = np.ones(ordered.shape, dtype=bool)
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends = np.ones(ordered.shape, dtype=bool)
    ends[..., :-1] = starts[..., 1:]
    # Each value's tie run spans from the last run start at or before it to the first run
    # end at or after it; the average rank is the midpoint.
    first = np.maximum.accumulate(np.where(starts, position, 0.0), axis=-1)
    backwards = np.where(ends, position, np.inf)[..., ::-1]
    last = np.minimum.accumulate(backwards, axis=-1)[..., ::-1]
    found = np.empty_like(ordered)
    np.put_along_axis(found, order, (first + last) / 2.0, axis=-1)
    return found


def pearson(x: ArrayLike, y: ArrayLike) -> Array:
    """Pearson's r along the last axis; NaN with fewer than two values or a constant side."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape[-1] < 2:
        return np.full(np.broadcast_shapes(a.shape, b.shape)[:-1], np.nan)
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        found = np.where(denominator > 0, (a * b).sum(axis=-1) / denominator, np.nan)
    # Rounding can put a perfect correlation a hair past ±1.
    return np.asarray(np.clip(found, -1.0, 1.0))


def spearman(x: ArrayLike, y: ArrayLike) -> Array:
    """Spearman's ρ along the last axis: Pearson's r of the average-tie ranks."""
    return pearson(ranks(x), ranks(y))


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's τ-b of two series (ties in either corrected for); NaN when either is
    constant or shorter than two. Over every pair up to SHORT_SERIES values, scipy's
    O(n log n) count beyond."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = a.size
    if n < 2:
        return float("nan")
    if n > SHORT_SERIES:
        from scipy.stats import kendalltau

        return float(kendalltau(a, b).statistic)
    # Σ over ordered pairs of sign(Δx)·sign(Δy) is twice concordant minus discordant.
    score = float((np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])).sum())
    pairs = n * (n - 1) / 2.0

    def tied(values: Array) -> float:
        counts = np.unique(values, return_counts=True)[1]
        return float((counts * (counts - 1) / 2.0).sum())

    denominator = float(np.sqrt((pairs - tied(a)) * (pairs - tied(b))))
    if denominator == 0.0:
        return float("nan")
    return max(-1.0, min(1.0, score / 2.0 / denominator))


def correlation_p(r: ArrayLike, n: int) -> Array:
    """Two-sided p of a correlation of 0 from t = r·√((n − 2)/(1 − r²)) with n − 2 degrees
    of freedom: Pearson's exact test under normality, and scipy's for Spearman's ρ; NaN
    under three pairs."""
    from scipy.stats import t

    if n < 3:
        return np.full(np.shape(r), np.nan)
    rho = np.clip(np.asarray(r, dtype=float), -1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = rho * np.sqrt((n - 2) / ((1.0 - rho) * (1.0 + rho)))
    return np.asarray(2.0 * t.sf(np.abs(stat), n - 2))


def correlation_test(method: Method, x: ArrayLike, y: ArrayLike) -> tuple[float, float]:
    """A correlation of two series and the two-sided p of its being 0, NaN when undefined.

    Pearson and Spearman take `correlation_p` (two points always lie on a line: Pearson's p
    is then 1, as scipy's); Kendall's p is scipy's test of τ-b (its exact distribution
    without ties in short series, else the tie-corrected normal approximation).
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if method == "kendall":
        statistic = kendall_tau_b(a, b)
        if np.isnan(statistic):
            return statistic, float("nan")
        from scipy.stats import kendalltau

        return statistic, float(kendalltau(a, b).pvalue)
    statistic = float(pearson(a, b) if method == "pearson" else spearman(a, b))
    if method == "pearson" and a.size == 2 and not np.isnan(statistic):
        return statistic, 1.0
    return statistic, float(correlation_p(statistic, int(a.size)))


def spearman_interval(rho: float, n: int, level: float = 0.95) -> Interval | None:
    """Fisher-z interval of Spearman's ρ with Bonett and Wright's (2000) standard error
    √((1 + ρ²/2) / (n − 3)): for large n, where re-ranking every resample is slow."""
    from scipy.stats import norm

    if n < 4 or not np.isfinite(rho) or abs(rho) >= 1.0:
        return None
    half = norm.ppf(0.5 + level / 2.0) * np.sqrt((1.0 + rho * rho / 2.0) / (n - 3))
    z = np.arctanh(rho)
    return Interval(low=float(np.tanh(z - half)), high=float(np.tanh(z + half)))
