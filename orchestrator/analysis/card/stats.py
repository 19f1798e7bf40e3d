"""The card's tests, vectorised over a leading axis so the same code tests one run and
thousands of simulated ones: Spearman with its t-approximation p-value, a Monte-Carlo
sign-flip test, Welch's t-test and a percentile bootstrap over examples, or over whole
clusters of them (`--cluster FIELD`, e.g. every example of one user)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from .record import Interval

Array = NDArray[np.float64]
RESAMPLES = 2000
_CELLS = 1 << 22  # array cells a chunk of sign vectors or resamples may take


def cluster_index(labels: Sequence[str]) -> NDArray[np.intp]:
    """Each unit's cluster as an integer 0..C−1 (clusters in sorted order of their labels)."""
    return np.unique(np.asarray([str(label) for label in labels]), return_inverse=True)[1]


def _cluster_draws(
    labels: Sequence[str], resamples: int, rng: np.random.Generator
) -> list[NDArray[np.intp]]:
    """Resampled unit indices of a cluster bootstrap: C clusters drawn with replacement,
    each bringing all its units. Resamples differ in length when clusters do, so they come
    back in batches of one length each, (rows, length) arrays a statistic takes as it is."""
    index = cluster_index(labels)
    count = int(index.max()) + 1
    order = np.argsort(index, kind="stable")  # units grouped by cluster
    sizes = np.bincount(index, minlength=count)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    drawn = rng.integers(0, count, size=(resamples, count))
    lengths = sizes[drawn].sum(axis=1)
    batches = []
    for length in np.unique(lengths):
        rows = drawn[lengths == length].ravel()
        repeated = np.repeat(rows, sizes[rows])  # each drawn cluster, once per unit
        # A unit's place within its cluster: its position minus where its cluster began.
        ends = np.cumsum(sizes[rows])
        within = np.arange(ends[-1]) - np.repeat(ends - sizes[rows], sizes[rows])
        batches.append(order[starts[repeated] + within].reshape(-1, int(length)))
    return batches


def resampled(
    statistic: Callable[[NDArray[np.intp]], Array],
    n: int,
    resamples: int = RESAMPLES,
    seed: int = 0,
    width: int = 0,
    clusters: Sequence[str] | None = None,
) -> Array:
    """`statistic` over bootstrap resamples of n units (the finite values): units drawn
    with replacement, or with `clusters` (a label per unit) whole clusters of units."""
    rng = np.random.default_rng(seed)
    if clusters is not None:
        batches = _cluster_draws(clusters, resamples, rng)
    else:
        chunk = max(1, _CELLS // (n + width))
        batches = [
            rng.integers(0, n, size=(min(chunk, resamples - start), n))
            for start in range(0, resamples, chunk)
        ]
    values = np.concatenate([statistic(batch) for batch in batches])
    return np.asarray(values[np.isfinite(values)])


def bootstrap(
    statistic: Callable[[NDArray[np.intp]], Array],
    n: int,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    width: int = 0,
    clusters: Sequence[str] | None = None,
) -> Interval | None:
    """Percentile interval of `statistic(indices)`, which maps a (resamples, n) index array to
    one value per resample; None when fewer than half the resamples give a finite value.

    Resamples are drawn in chunks; `width` is how many cells a resample of the statistic's
    own draws takes besides these n (a second group resampled inside it), to size them.
    With `clusters` (one label per unit) whole clusters are drawn (see `resampled`).
    """
    if n < 2:
        return None
    return percentile_interval(
        resampled(statistic, n, resamples, seed, width, clusters), resamples, confidence
    )


def percentile_interval(
    values: Array, resamples: int = RESAMPLES, confidence: float = 0.95
) -> Interval | None:
    """The percentile interval of resampled values; None when fewer than half of the
    `resamples` gave a finite value."""
    if values.size < resamples / 2:
        return None
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return Interval(low=float(low), high=float(high))


def bootstrap_p(values: Array, null: float = 0.0) -> float:
    """Two-sided bootstrap p of `null`: twice the smaller share of resampled values on
    either side of it, counting the observed data as one more on each side; it rejects at α
    about where the percentile interval at 1 − α leaves out `null`."""
    if values.size == 0:
        return float("nan")
    below = (np.count_nonzero(values <= null) + 1) / (values.size + 1)
    above = (np.count_nonzero(values >= null) + 1) / (values.size + 1)
    return float(min(1.0, 2.0 * min(below, above)))


def finite(value: float) -> float | None:
    """A float for the record, None for NaN or infinity."""
    return float(value) if np.isfinite(value) else None
