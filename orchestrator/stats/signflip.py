"""The sign-flip test of a mean difference of 0 and the confidence interval that inverts
it, over units (examples) or over whole clusters of them.

One p-value function, `sign_flip_p`, serves every caller: along the last axis, so one call
tests one series or thousands of simulated ones; exact over all 2^n sign vectors when
they are few, else seeded Monte Carlo, (hits + 1) / (draws + 1). `sign_flip_test` is it on
the non-zero differences with the record `compare` keeps; `sign_flip_interval` and
`cluster_sign_flip` use the very same sign vectors, so an interval leaves out 0 exactly
when the test rejects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from .bootstrap import CELLS, cluster_index
from .intervals import Array, check_level

EXACT_UP_TO = 20  # non-zero differences (or clusters) the test enumerates all 2^n signs of
PERMUTATIONS = 10_000
DRAWS = 4000  # `sign_flip_p`'s default draws: exact while 2^n is no more than these
_EXACT_ROWS = 1 << 22  # sign patterns × zero splits sign_flip_interval enumerates at most


@dataclass(frozen=True)
class SignFlip:
    """A two-sided sign-flip test's p-value and how it was computed."""

    p: float
    method: Literal["exact", "monte-carlo"]
    count: int  # sign vectors enumerated (exact) or drawn (Monte Carlo)


@dataclass(frozen=True)
class SignFlipInterval:
    """The values δ of the mean difference a two-sided sign-flip test does not reject.

    `low`/`high` are None when no δ is rejected (too few examples for the test to reach
    the level: with n ≤ 5 the smallest p is 2/2^n ≥ 0.0625).
    """

    low: float | None
    high: float | None
    level: float
    method: Literal["exact", "monte-carlo"]
    count: int  # sign patterns enumerated (exact) or drawn (Monte Carlo), as SignFlip's


@dataclass(frozen=True)
class ClusterSignFlip:
    """A sign-flip test and its inverted interval over whole clusters, from the same signs."""

    test: SignFlip
    interval: SignFlipInterval
    clusters: int


def _check_permutations(permutations: object) -> None:
    """The Monte-Carlo draw count: a positive integer (True is not one)."""
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ValueError(f"permutations must be a positive integer, got {permutations!r}")


def _all_zero(units: int, level: float, permutations: int, exact_up_to: int) -> SignFlipInterval:
    """The interval when every difference is 0: testing δ ≠ 0 every unit is −δ, so every
    sign vector but the two uniform ones falls short and p is its smallest, 2/2^n (or one
    draw in `permutations` + 1). Each δ ≠ 0 is rejected only when that is below 1 − level,
    so with too few units (n ≤ 5 at 95%) the interval is left empty, not the point 0."""
    alpha = round(1.0 - level, 12)
    exact = units <= exact_up_to
    smallest = 2.0 ** (1 - units) if exact else 1.0 / (permutations + 1.0)
    method: Literal["exact", "monte-carlo"] = "exact" if exact else "monte-carlo"
    count = (1 << units) if exact else permutations
    if units == 0 or smallest >= alpha:
        return SignFlipInterval(None, None, level, method, count)
    return SignFlipInterval(0.0, 0.0, level, method, count)


def _drawn_signs(k: int, draws: int, seed: int) -> Iterator[Any]:
    """`draws` seeded random sign vectors of length k (rows of ±1), in chunks."""
    rng = np.random.default_rng(seed)
    rows = max(1, CELLS // max(k, 1))
    for start in range(0, draws, rows):
        yield rng.integers(0, 2, size=(min(start + rows, draws) - start, k)) * 2 - 1


def sign_flip_p(
    differences: ArrayLike, draws: int = DRAWS, seed: int = 0, exact: bool | None = None
) -> Array:
    """Two-sided sign-flip p of mean 0 along the last axis: `exact` over all 2^n sign
    vectors (by default when there are no more of them than `draws`), else Monte Carlo
    over `draws` seeded vectors, (hits + 1) / (draws + 1), never 0.

    The same sign vectors serve every row, so a batch costs matrix products, made in
    chunks so that memory stays bounded however many units there are. A resampled sum
    within rounding of the observed one counts as reaching it.
    """
    d = np.asarray(differences, dtype=float)
    n = d.shape[-1]
    observed = np.abs(d.sum(axis=-1))
    threshold = observed - observed * np.finfo(float).eps * 100
    if exact is None:
        exact = 2**n <= draws
    hits = np.zeros(observed.shape)
    if exact:
        total = 1 << n
        batch = max(1, int(np.prod(observed.shape)))
        chunk = max(1, CELLS // batch)
        for start in range(0, total, chunk):
            masks = np.arange(start, min(start + chunk, total), dtype=np.int64)
            sums = np.zeros((*observed.shape, masks.size))
            for bit in range(n):  # bit set: a minus sign
                value = d[..., bit, None]
                sums += np.where((masks >> bit) & 1, -value, value)
            hits += (np.abs(sums) >= threshold[..., None]).sum(axis=-1)
        return np.asarray(hits / float(total))
    for signs in _drawn_signs(n, draws, seed):
        # One series is multiplied as a vector (gemv), a batch as a matrix.
        flipped = signs @ d if d.ndim == 1 else d @ signs.T
        hits += (np.abs(flipped) >= threshold[..., None]).sum(axis=-1)
    return np.asarray((hits + 1.0) / (draws + 1.0))


def sign_flip_test(
    differences: ArrayLike,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    exact_up_to: int = EXACT_UP_TO,
) -> SignFlip:
    """Two-sided paired permutation test of mean difference 0: each difference's sign is
    flipped at random; exact (all 2^n signs) up to `exact_up_to` non-zero differences.

    A zero difference is its own flip, so it adds nothing to any resampled sum and is left
    out of the enumeration (the p-value is the same).
    """
    data = np.asarray(differences, dtype=float)
    nonzero = data[data != 0.0]
    k = int(nonzero.size)
    if k == 0:
        return SignFlip(1.0, "exact", 1)
    if k <= exact_up_to:
        return SignFlip(float(sign_flip_p(nonzero, exact=True)), "exact", 1 << k)
    _check_permutations(permutations)
    p = float(sign_flip_p(nonzero, permutations, seed, exact=False))
    return SignFlip(p, "monte-carlo", permutations)


def _group_means(sum_plus: Any, size_plus: Any, values: Any, size: int) -> tuple[Any, Any]:
    """Lowest and highest of the two group means each sign row splits the examples into.

    Row r puts `size_plus[r]` of the `size` examples, summing to `sum_plus[r]`, in one
    group and the rest (of `values`, the non-zero differences) in the other; an empty
    group has no mean, which makes the row agree with every δ (−inf, +inf).
    """
    size_minus = size - size_plus
    sum_minus = values.sum() - sum_plus
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_plus = np.where(size_plus > 0, sum_plus / np.maximum(size_plus, 1), np.nan)
        mean_minus = np.where(size_minus > 0, sum_minus / np.maximum(size_minus, 1), np.nan)
    # A group mean within rounding of zero is zero, so a tie at δ = 0 is a tie here as it is
    # for the test (which compares sums with a relative tolerance).
    scale = float(np.abs(values).sum())
    for means in (mean_plus, mean_minus):
        means[np.abs(means) <= scale * 1e-13] = 0.0
    empty = np.isnan(mean_plus) | np.isnan(mean_minus)
    low = np.where(empty, -np.inf, np.fmin(mean_plus, mean_minus))
    high = np.where(empty, np.inf, np.fmax(mean_plus, mean_minus))
    return low, high


def _bound(ends: Any, weights: Any | None, needed: float, descending: bool) -> float | None:
    """The first end (in the given direction) by which `needed` weight is reached (each
    row weighing one when `weights` is None)."""
    keyed = -ends if descending else ends
    if weights is None:  # every row weighs one: an order statistic, no full sort needed
        at = min(math.ceil(needed), ends.size) - 1
        value = float(np.partition(keyed, at)[at])
        value = -value if descending else value
        return value if np.isfinite(value) else None
    order = np.argsort(keyed, kind="stable")
    reached = np.cumsum(weights[order])
    at = int(np.searchsorted(reached, needed, side="left"))
    value = float(ends[order][min(at, ends.size - 1)])
    return value if np.isfinite(value) else None


def _needed(total: float, alpha: float) -> float:
    """The fewest agreeing sign rows (by weight) for p = agreeing / total to reach alpha,
    found with the same floating-point division the p-value uses."""
    needed = math.ceil(alpha * total)
    while needed > 0 and (needed - 1) / total >= alpha:
        needed -= 1
    while needed / total < alpha:
        needed += 1
    return float(needed)


def sign_flip_interval(
    differences: ArrayLike,
    level: float = 0.95,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    exact_up_to: int = EXACT_UP_TO,
) -> SignFlipInterval:
    """The confidence interval that inverts `sign_flip_test`: every δ for which the test
    of "mean difference = δ" (the signs of d − δ flipped) gives p ≥ 1 − level.

    With the same sign vectors as the test (the same enumeration, or the same seeded
    draws), the interval excludes 0 exactly when `sign_flip_test(differences).p` is below
    1 − level, so the two never disagree (Monte Carlo with zero differences draws their
    signs from a second stream). A sign vector splits the examples into two groups, and
    flipping reaches the observed |sum| of d − δ exactly when δ lies between the groups'
    means; so the bounds are order statistics of those means, with no search over δ.
    Exact while the non-zero differences are at most `exact_up_to` (and the zero ones few
    enough to weigh every split of them), Monte Carlo otherwise.
    """
    from scipy.stats import binom

    check_level(level)
    data = np.asarray(differences, dtype=float)
    alpha = round(1.0 - level, 12)  # 1 − 0.95 is 0.05000000000000004 in floating point
    nonzero = data[data != 0.0]
    k, zeros = int(nonzero.size), int(data.size - nonzero.size)
    if k == 0:
        return _all_zero(int(data.size), level, permutations, exact_up_to)
    if k <= exact_up_to and (1 << k) * (zeros + 1) <= max(_EXACT_ROWS, 1 << k):
        masks = np.arange(1 << k, dtype=np.int64)
        sum_plus, size_plus = np.zeros(masks.size), np.zeros(masks.size, dtype=np.int64)
        for bit, value in enumerate(nonzero):  # bit set: a minus sign, as in the test
            plus = ((masks >> bit) & 1) == 0
            sum_plus += np.where(plus, value, 0.0)
            size_plus += plus
        # Each pattern of the non-zero signs, with j of the zeros on the plus side, stands
        # for C(zeros, j) sign vectors of all the differences: weight it by that share.
        split = np.arange(zeros + 1)
        sum_plus = np.repeat(sum_plus, zeros + 1)
        size_plus = np.repeat(size_plus, zeros + 1) + np.tile(split, masks.size)
        weights = np.tile(binom.pmf(split, zeros, 0.5), masks.size) if zeros else None
        total: float = float(masks.size)
        method: Literal["exact", "monte-carlo"] = "exact"
        count = int(masks.size)
    else:
        _check_permutations(permutations)
        sums, sizes = [], []
        for signs in _drawn_signs(k, permutations, seed):  # as sign_flip_test draws them
            # The plus group's sum and size from the signed sum: (Σ s·d + Σ d) / 2.
            sums.append((signs.astype(float) @ nonzero + nonzero.sum()) / 2.0)
            sizes.append((signs.sum(axis=1) + k) // 2)
        # The zeros' signs only matter by how many land on the plus side.
        extra = np.random.default_rng([seed, 1]).binomial(zeros, 0.5, size=permutations)
        # The observed signs (all plus) count as one more draw, as in the test's
        # (hits + 1) / (draws + 1).
        sum_plus = np.append(np.concatenate(sums), nonzero.sum())
        size_plus = np.append(np.concatenate(sizes) + extra, data.size)
        weights = None
        total, method, count = float(permutations + 1), "monte-carlo", permutations
    low, high = _group_means(sum_plus, size_plus, nonzero, int(data.size))
    # The exact path's weights are shares of a pattern (a row of zeros' splits sums to 1 up
    # to rounding), so a whole number of patterns may fall a hair short of its count.
    needed = (alpha * total if method == "exact" else _needed(total, alpha)) * (1.0 - 1e-9)
    return SignFlipInterval(
        _bound(low, weights, needed, descending=False),
        _bound(high, weights, needed, descending=True),
        level,
        method,
        count,
    )


def cluster_sums(values: ArrayLike, labels: Sequence[str]) -> Array:
    """The sum of `values` over each cluster (clusters in sorted order of their labels):
    the units a clustered sign-flip test flips."""
    weights = np.asarray(values, dtype=float)
    return np.asarray(np.bincount(cluster_index(labels), weights=weights))


def cluster_sign_flip(
    differences: ArrayLike,
    clusters: Sequence[str],
    level: float = 0.95,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    exact_up_to: int = EXACT_UP_TO,
) -> ClusterSignFlip:
    """Sign-flip test of mean difference 0 for examples nested in clusters, and the
    interval that inverts it: each cluster's differences are summed and whole clusters'
    signs flipped, so examples of one cluster (one user's) never count as independent.

    Cluster c holds n_c examples summing to S_c. A sign vector splits the clusters into a
    plus group A and a minus group B; testing "mean = δ" it reaches the observed
    |Σ (S_c − n_c δ)| exactly when (S_A − n_A δ)(S_B − n_B δ) ≤ 0, that is when δ lies
    between S_A/n_A and S_B/n_B. Both means straddle the overall mean, so the interval's
    bounds are order statistics of them, as in `sign_flip_interval`. Exact over all 2^C
    sign vectors up to `exact_up_to` clusters, else `permutations` seeded draws (the
    observed signs counted as one more, (hits + 1) / (draws + 1)); the test and the
    interval use the same vectors, so the interval excludes 0 exactly when p < 1 − level.
    """
    check_level(level)
    data = np.asarray(differences, dtype=float)
    if len(clusters) != data.size:
        raise ValueError(f"{data.size} differences but {len(clusters)} cluster labels")
    sums = cluster_sums(data, clusters) if data.size else np.zeros(0)
    index = cluster_index(clusters) if data.size else np.zeros(0, dtype=np.intp)
    sizes = np.bincount(index).astype(np.int64) if data.size else np.zeros(0, dtype=np.int64)
    count_clusters = int(sums.size)
    alpha = round(1.0 - level, 12)
    if count_clusters == 0 or np.all(data == 0.0):
        empty = _all_zero(count_clusters, level, permutations, exact_up_to)
        return ClusterSignFlip(SignFlip(1.0, "exact", 1), empty, count_clusters)
    method: Literal["exact", "monte-carlo"]
    if count_clusters <= exact_up_to:
        total = 1 << count_clusters
        test = SignFlip(float(sign_flip_p(sums, exact=True)), "exact", total)
        masks = np.arange(total, dtype=np.int64)
        sum_plus, size_plus = np.zeros(total), np.zeros(total, dtype=np.int64)
        for bit in range(count_clusters):  # bit set: a minus sign, as in the test
            plus = ((masks >> bit) & 1) == 0
            sum_plus += np.where(plus, sums[bit], 0.0)
            size_plus += np.where(plus, sizes[bit], 0)
        denominator, method, count = float(total), "exact", total
    else:
        _check_permutations(permutations)
        p = sign_flip_p(sums, permutations, seed, exact=False)
        test = SignFlip(float(p), "monte-carlo", permutations)
        signed_sums, signed_sizes = [], []
        for signs in _drawn_signs(count_clusters, permutations, seed):  # the test's vectors
            signed_sums.append(signs.astype(float) @ sums)
            signed_sizes.append(signs.astype(float) @ sizes.astype(float))
        # The plus group's sum and size from the signed ones, (Σ s·x + Σ x) / 2; the
        # observed signs (all plus) are one more row, as in the p-value.
        sum_plus = np.append((np.concatenate(signed_sums) + sums.sum()) / 2.0, sums.sum())
        size_plus = np.append(
            np.rint((np.concatenate(signed_sizes) + sizes.sum()) / 2.0).astype(np.int64),
            sizes.sum(),
        )
        denominator, method, count = float(permutations + 1), "monte-carlo", permutations
    low, high = _group_means(sum_plus, size_plus, sums, int(sizes.sum()))
    needed = _needed(denominator, alpha) * (1.0 - 1e-9)
    interval = SignFlipInterval(
        _bound(low, None, needed, descending=False),
        _bound(high, None, needed, descending=True),
        level,
        method,
        count,
    )
    return ClusterSignFlip(test, interval, count_clusters)
