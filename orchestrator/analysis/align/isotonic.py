"""A monotone (isotonic) map of the judge's score onto the people's scale, fitted on
search-set examples only: scipy's pool-adjacent-violators fit of the labels on the judge's
scores, kept as knots and applied by linear interpolation (flat beyond the ends)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .record import IsotonicMap


def fit(judged: np.ndarray, truth: np.ndarray) -> IsotonicMap | None:
    """The non-decreasing map from judge score to label that fits best in least squares;
    None with fewer than two distinct judge scores (nothing to order)."""
    from scipy.optimize import isotonic_regression

    x, y = np.asarray(judged, dtype=float), np.asarray(truth, dtype=float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 2:
        return None
    knots = np.unique(x)
    # One point per distinct score, its labels' mean weighted by their count.
    where = np.searchsorted(knots, x)
    counts = np.bincount(where, minlength=len(knots)).astype(float)
    means = np.bincount(where, weights=y, minlength=len(knots)) / counts
    fitted = isotonic_regression(means, weights=counts, increasing=True).x
    return IsotonicMap(x=knots.tolist(), y=[float(v) for v in fitted])


def apply(
    found: IsotonicMap | None, judged: np.ndarray, levels: Sequence[float] = ()
) -> np.ndarray:
    """The judge's scores through the map (NaN stays NaN); with `levels` (the labels'
    values, for κ and accuracy, which compare categories) each result is snapped to the
    nearest of them. No map leaves the scores as they are."""
    x = np.asarray(judged, dtype=float)
    if found is None:
        return x
    out = np.interp(x, found.x, found.y)
    out[np.isnan(x)] = np.nan
    if len(levels):
        grid = np.asarray(sorted(set(levels)), dtype=float)
        nearest = np.abs(out[:, None] - grid[None, :]).argmin(axis=1)
        out = np.where(np.isnan(out), np.nan, grid[nearest])
    return out


def table(
    found: IsotonicMap, low: int, high: int, levels: Sequence[float] = ()
) -> dict[str, float]:
    """The map as a lookup for an integer score from `low` to `high` (its text → the mapped
    value, snapped to `levels` when given): what a written graph applies with an expression."""
    points = np.arange(low, high + 1, dtype=float)
    return {
        str(int(p)): float(v) for p, v in zip(points, apply(found, points, levels), strict=True)
    }
