"""The bootstrap: one way to draw resamples (of units, or of whole clusters of units), and
the intervals and p-value read from what a statistic gives on them (percentile, BCa).

Every resample is drawn from `numpy.random.default_rng(seed)` as `rng.integers(0, n, (resamples,
n))`, which is how `scipy.stats.bootstrap` draws them: the same seed gives scipy's resamples.
Draws come in chunks so that memory stays bounded; the chunk size does not change which
indices are drawn (numpy's generator fills them from one stream).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .intervals import Array, Interval, check_level

CELLS = 4_000_000  # index cells drawn at once
RESAMPLES = 2000
Indices = NDArray[np.intp]
Seed = int | np.random.Generator


def generator(seed: Seed) -> np.random.Generator:
    """The generator a seed starts (a Generator is used as it is, to continue its stream)."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def resample(rng: np.random.Generator, n: int, rows: int) -> Indices:
    """`rows` bootstrap resamples of n units: a (rows, n) array of indices drawn with
    replacement, the one draw every resample here is made of."""
    return rng.integers(0, n, size=(rows, n))


def draws(n: int, resamples: int, seed: Seed = 0, width: int = 0) -> Iterator[Indices]:
    """Bootstrap resamples of n units, as (rows, n) arrays of unit indices drawn with
    replacement; `width` is how many more cells a resample costs its statistic (a second
    group drawn inside it, the units of its clusters), to size the chunks."""
    rng = generator(seed)
    rows = max(1, CELLS // max(n + width, 1))
    for start in range(0, resamples, rows):
        yield resample(rng, n, min(rows, resamples - start))


def draw_counts(n: int, resamples: int, seed: Seed = 0) -> NDArray[np.int64]:
    """The resamples of `draws` as counts: how often each of the n units is drawn in each
    resample, a (resamples, n) array (a statistic linear in its units takes them as weights)."""
    drawn = np.concatenate([np.zeros((0, n), dtype=np.intp), *draws(n, resamples, seed)])
    offsets = np.arange(resamples)[:, None] * n
    counts = np.bincount((drawn + offsets).ravel(), minlength=resamples * n)
    return counts.reshape(resamples, n)


def cluster_index(labels: Sequence[object], sort: bool = True) -> Indices:
    """Each unit's cluster as an integer 0..C−1: clusters in the sorted order of their
    labels, or in the order first seen (`sort=False`). Which cluster a seeded draw picks
    depends on it, so a caller keeps the one its intervals have always used."""
    text = [str(label) for label in labels]
    if sort:
        return np.unique(np.asarray(text), return_inverse=True)[1]
    seen: dict[str, int] = {}
    return np.asarray([seen.setdefault(label, len(seen)) for label in text], dtype=np.intp)


def cluster_draws(index: Indices, resamples: int, seed: Seed = 0) -> Iterator[Indices]:
    """Resampled unit indices of a cluster bootstrap: the clusters of `index` (each unit's
    cluster, 0..C−1) drawn with replacement as `draws` draws C units, each bringing all its
    units (in draw order; a cluster's units in their order). Resamples differ in length when
    clusters do, so they come in batches of one length each, (rows, length) arrays a
    vectorised statistic takes as they are."""
    count = int(index.max()) + 1
    order = np.argsort(index, kind="stable")  # units grouped by cluster
    sizes = np.bincount(index, minlength=count)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for drawn in draws(count, resamples, seed, width=int(index.size) - count):
        lengths = sizes[drawn].sum(axis=1)
        for length in np.unique(lengths):
            rows = drawn[lengths == length].ravel()
            repeated = np.repeat(rows, sizes[rows])  # each drawn cluster, once per unit
            # A unit's place within its cluster: its position minus where its cluster began.
            ends = np.cumsum(sizes[rows])
            within = np.arange(ends[-1]) - np.repeat(ends - sizes[rows], sizes[rows])
            yield order[starts[repeated] + within].reshape(-1, int(length))


def resampled(
    statistic: Callable[[Indices], Array],
    n: int,
    resamples: int = RESAMPLES,
    seed: Seed = 0,
    width: int = 0,
    clusters: Sequence[str] | None = None,
) -> Array:
    """`statistic` over bootstrap resamples of n units, the finite values only: it maps a
    (rows, n) index array to one value per row. Units are drawn with replacement, or with
    `clusters` (a label per unit, clusters in sorted order) whole clusters of units."""
    rng = generator(seed)
    if clusters is not None:
        batches = cluster_draws(cluster_index(clusters), resamples, rng)
    else:
        batches = draws(n, resamples, rng, width)
    values = np.concatenate([statistic(batch) for batch in batches])
    return np.asarray(values[np.isfinite(values)])


def percentile_interval(
    values: ArrayLike, level: float = 0.95, least: float = 1
) -> Interval | None:
    """The percentile interval of resampled values: their (1 − level)/2 and (1 + level)/2
    quantiles; None with fewer than `least` values."""
    found = np.asarray(values, dtype=float)
    if found.size == 0 or found.size < least:
        return None
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(found, [tail, 1.0 - tail])
    return Interval(float(low), float(high))


def bca_interval(
    replicates: ArrayLike, estimate: float, jackknife: ArrayLike, level: float = 0.95
) -> Interval | None:
    """The bias-corrected and accelerated interval (Efron & Tibshirani ch. 14) from the
    resampled `replicates` of a statistic, its `estimate` on the data and its `jackknife`
    (leave-one-out) values; None where it is undefined (every replicate on one side)."""
    from scipy.special import ndtr, ndtri

    values = np.asarray(replicates, dtype=float)
    # Bias: how far the replicates sit off the estimate (ties count half).
    below = np.count_nonzero(values < estimate) + np.count_nonzero(values <= estimate)
    bias = ndtri(below / (2.0 * values.size))
    # Acceleration: the skew of the leave-one-out values.
    leave_one_out = np.asarray(jackknife, dtype=float)
    influence = leave_one_out.mean() - leave_one_out
    acceleration = (influence**3).sum() / (6.0 * ((influence**2).sum()) ** 1.5)
    tail = (1.0 - level) / 2.0
    z = ndtri(np.array([tail, 1.0 - tail]))
    probabilities = ndtr(bias + (bias + z) / (1.0 - acceleration * (bias + z)))
    if not np.all(np.isfinite(probabilities)):
        return None
    low, high = np.quantile(values, probabilities)
    return Interval(float(low), float(high))


def mean_interval(
    values: ArrayLike,
    level: float = 0.95,
    resamples: int = 9999,
    seed: Seed = 0,
    method: str = "bca",
) -> tuple[float, Interval | None]:
    """The mean of one or more values and its bootstrap interval ("bca" or "percentile"):
    zero-width when they are all equal, None when BCa is undefined for them."""
    check_level(level)
    data = np.asarray(values, dtype=float)
    n = int(data.size)
    estimate = float(data.mean())
    if float(data.max() - data.min()) == 0.0:
        return estimate, Interval(estimate, estimate)  # every resample has the same mean
    means = np.concatenate([data[rows].mean(axis=1) for rows in draws(n, resamples, seed)])
    if method == "percentile":
        return estimate, percentile_interval(means, level)
    return estimate, bca_interval(means, estimate, (data.sum() - data) / (n - 1), level)


def bootstrap(
    statistic: Callable[[Indices], Array],
    n: int,
    resamples: int = RESAMPLES,
    seed: Seed = 0,
    level: float = 0.95,
    width: int = 0,
    clusters: Sequence[str] | None = None,
) -> Interval | None:
    """Percentile interval of a vectorised `statistic` over resamples (see `resampled`);
    None under two units or when fewer than half the resamples give a finite value."""
    if n < 2:
        return None
    values = resampled(statistic, n, resamples, seed, width, clusters)
    return percentile_interval(values, level, least=resamples / 2)


def bootstrap_p(values: ArrayLike, null: float = 0.0) -> float:
    """Two-sided bootstrap p of `null`: twice the smaller share of resampled values on
    either side of it, counting the observed data as one more on each side; it rejects at α
    about where the percentile interval at 1 − α leaves out `null`."""
    found = np.asarray(values, dtype=float)
    if found.size == 0:
        return float("nan")
    below = (np.count_nonzero(found <= null) + 1) / (found.size + 1)
    above = (np.count_nonzero(found >= null) + 1) / (found.size + 1)
    return float(min(1.0, 2.0 * min(below, above)))


def percentile_intervals(
    units: Sequence[str],
    statistics: Mapping[str, Callable[[Indices], float | None]],
    resamples: int = RESAMPLES,
    seed: Seed = 0,
    level: float = 0.95,
) -> dict[str, Interval | None]:
    """A percentile interval per statistic, all from the same resamples of whole units:
    records sharing a label in `units` (an example's records, a cluster's examples) are
    drawn together, labels numbered in the order first seen. A statistic maps the drawn
    record indices to a value, None where undefined; such resamples are left out, and a
    statistic that no resample defines gets None."""
    if not units:
        return dict.fromkeys(statistics)
    found: dict[str, list[float]] = {name: [] for name in statistics}
    for batch in cluster_draws(cluster_index(units, sort=False), resamples, seed):
        for picked in batch:
            for name, statistic in statistics.items():
                value = statistic(picked)
                if value is not None and math.isfinite(value):
                    found[name].append(value)
    return {name: percentile_interval(values, level) for name, values in found.items()}
