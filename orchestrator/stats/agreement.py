"""Agreement beyond chance, from ratings already coded: Cohen's κ of two raters, Fleiss' κ
of a jury of fixed size, and Krippendorff's α, of one matrix or of every bootstrap
resample at once. The compute functions (`cohen_kappa`, `krippendorff_alpha`, the jury's
agreement) check and code the ratings a graph hands them and call these."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import Any

import numpy as np

from .intervals import Array


def cohen_kappa_codes(
    first: Sequence[int], second: Sequence[int], categories: int, weights: str | None = None
) -> float | None:
    """Cohen's κ of two raters' codes (0..categories − 1, position on the scale) of the same
    items: disagreement counted fully (`weights` None), or by the codes' distance
    ("linear") or its square ("quadratic"). None when chance agreement is already perfect."""
    k = categories
    observed = np.zeros((k, k))
    for x, y in zip(first, second, strict=True):
        observed[x, y] += 1
    observed /= len(first)
    # Chance: the two raters' own label frequencies, combined as if independent.
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    positions = np.arange(k)
    distance = np.abs(positions[:, None] - positions[None, :]).astype(float)
    if weights is None:
        penalty = (distance > 0).astype(float)
    elif weights == "linear":
        penalty = distance
    else:
        penalty = distance**2
    chance_disagreement = float((penalty * expected).sum())
    if chance_disagreement == 0.0:
        return None
    return 1.0 - float((penalty * observed).sum()) / chance_disagreement


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items x categories count table (same raters per item).

    None when it is undefined: no items, fewer than two raters, or chance agreement of 1
    (every rating in one category).
    """
    rows = [list(map(int, r)) for r in table if sum(r) > 0]
    if not rows:
        return None
    raters = sum(rows[0])
    if raters < 2 or any(sum(r) != raters for r in rows):
        if raters >= 2:
            raise ValueError("Fleiss' kappa needs the same number of ratings for every item")
        return None
    items = len(rows)
    categories = len(rows[0])
    agreement = fmean((sum(c * c for c in r) - raters) / (raters * (raters - 1)) for r in rows)
    shares = [sum(r[j] for r in rows) / (items * raters) for j in range(categories)]
    chance = sum(p * p for p in shares)
    if chance >= 1.0:
        return None
    return (agreement - chance) / (1.0 - chance)


def krippendorff_alpha_counts(
    counts: Array, level: str, values: Sequence[Any] | None = None
) -> float | None:
    """Krippendorff's α from a units × categories count matrix (each unit rated at least
    twice; categories in scale order), at a level of measurement; `values` are the
    categories' numbers (interval and ratio). None when every paired rating is the same."""
    pairable = counts.sum(axis=1)
    # Coincidences: every ordered pair of ratings within an item, each item weighted
    # 1/(m − 1) so that it contributes as many coincidences as it has ratings.
    weighted = counts / (pairable - 1)[:, None]
    coincidence = weighted.T @ counts - np.diag(weighted.sum(axis=0))
    marginal = coincidence.sum(axis=1)
    total = float(marginal.sum())
    distance = _alpha_distance(level, list(values or []), marginal)
    observed = float((coincidence * distance).sum()) / total
    expected = float((np.outer(marginal, marginal) * distance).sum()) / (total * (total - 1))
    if expected == 0.0:
        return None
    return 1.0 - observed / expected


def _alpha_distance(level: str, domain: list[Any], marginal: Any) -> Any:
    """The squared difference δ² between every two categories for a level of measurement."""
    k = len(marginal)
    if level == "nominal":
        return 1.0 - np.eye(k)
    if level == "ordinal":
        # Between ranks c ≤ k: the ratings from c to k, counting the two ends half.
        through = np.cumsum(marginal)
        low = np.minimum.outer(np.arange(k), np.arange(k))
        high = np.maximum.outer(np.arange(k), np.arange(k))
        between = through[high] - through[low] + marginal[low]
        return (between - (marginal[low] + marginal[high]) / 2.0) ** 2
    values = np.asarray(domain, dtype=float)
    difference = values[:, None] - values[None, :]
    if level == "interval":
        return difference**2
    total = values[:, None] + values[None, :]
    safe = np.where(total == 0.0, 1.0, total)  # only 0 vs 0 sums to 0, and its δ is 0
    return (difference / safe) ** 2


def _unit_sums(matrix: Array, level: str) -> tuple[Array, ...]:
    """Per unit, the sums Krippendorff's α is linear in: pairable ratings m, observed
    disagreement (coincidences × distance), and what the expected disagreement needs
    (value counts for nominal; Σx and Σx² for interval). Units rated once count zero."""
    rated = ~np.isnan(matrix)
    m = rated.sum(axis=1).astype(float)
    pairable = m >= 2
    m = np.where(pairable, m, 0.0)
    values = np.where(rated & pairable[:, None], matrix, np.nan)
    spread = np.where(pairable, m - 1.0, 1.0)
    if level == "nominal":
        domain = np.unique(values[~np.isnan(values)])
        counts = (values[:, :, None] == domain[None, None, :]).sum(axis=1).astype(float)
        # Off-diagonal coincidences of a unit: m − (Σ c² − m)/(m − 1).
        observed = m - ((counts**2).sum(axis=1) - m) / spread
        return m, observed, counts
    filled = np.nan_to_num(values)
    first, second = filled.sum(axis=1), (filled**2).sum(axis=1)
    # Σ over ordered pairs within a unit of (x_i − x_j)², over m − 1.
    observed = (2.0 * m * second - 2.0 * first**2) / spread
    return m, observed, first, second


def weighted_alpha(matrix: Array, level: str, weights: Array) -> Array:
    """Krippendorff's α of `matrix` for each row of `weights` (times each unit is counted:
    a bootstrap resample, or ones for the data itself), NaN where α is undefined. Equal to
    `krippendorff_alpha_counts` of the matrix with its rows repeated so (tests check it); done
    for every resample at once because α over a thousand resamples one by one took ~0.4 s
    per field."""
    sums = _unit_sums(matrix, level)
    m, observed = sums[0], sums[1]
    n = weights @ m
    observed_total = weights @ observed
    if level == "nominal":
        marginal = weights @ sums[2]
        expected = n**2 - (marginal**2).sum(axis=1)
    else:
        first, second = weights @ sums[2], weights @ sums[3]
        expected = 2.0 * n * second - 2.0 * first**2
    with np.errstate(divide="ignore", invalid="ignore"):
        found = 1.0 - (n - 1.0) * observed_total / expected
    return np.where((expected > 1e-12 * np.maximum(n, 1.0) ** 2) & (n > 1), found, np.nan)
