"""The bootstrap (orchestrator/stats/bootstrap.py): the mean's BCa and percentile intervals
equal scipy's paired bootstrap on the same resamples (moved here from
tests/analysis/test_compare.py), and the cluster bootstrap draws whole clusters and covers
under nested data where the per-example one does not (from tests/analysis/test_cluster.py)."""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pytest
import scipy.stats

from orchestrator import stats

USERS, PER_USER = 40, 5
LABELS = [f"u{u:02d}" for u in np.repeat(np.arange(USERS), PER_USER)]


def _paired(n: int, seed: int, shift: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 11, n).astype(float)
    return a, np.clip(a + np.round(rng.normal(shift, 1.2, n)), 1, 10)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
    return np.mean(x - y, axis=axis)


def _seeded(seed: int) -> dict[str, Any]:
    """scipy's seed argument: `rng` since 1.15 (a Generator from the seed), before that
    `random_state`, given the same Generator so both draw the same stream."""
    if "rng" in inspect.signature(scipy.stats.bootstrap).parameters:
        return {"rng": seed}
    return {"random_state": np.random.default_rng(seed)}


def _nested(rng: np.random.Generator, sims: int, shift: float = 0.0) -> np.ndarray:
    """Per-example paired differences: shift + a user effect (sd 1) + noise (sd 1)."""
    users = rng.normal(0.0, 1.0, (sims, USERS))
    return (
        shift + np.repeat(users, PER_USER, axis=1) + rng.normal(0.0, 1.0, (sims, USERS * PER_USER))
    )


def _tolerance(rate: float, sims: int) -> float:
    return 4.0 * math.sqrt(rate * (1.0 - rate) / sims)


@pytest.mark.parametrize("method", ["bca", "percentile"])
def test_paired_bootstrap_ci_equals_scipy_paired_bootstrap(method: str) -> None:
    """BCa by default; scipy's `paired=True` resamples the same example indices."""
    a, b = _paired(35, seed=11)
    _, ours = stats.mean_interval(list(b - a), 0.95, 4999, 42, method)
    assert ours is not None
    ref = scipy.stats.bootstrap(
        (b, a),
        _mean_difference,
        paired=True,
        n_resamples=4999,
        **_seeded(42),
        method=method,
        vectorized=True,
    )
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=1e-9)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=1e-9)


def test_card_cluster_bootstrap_draws_whole_clusters_and_covers() -> None:
    sizes = np.array([1, 2, 3, 4, 5, 6])
    labels = [f"c{c}" for c in np.repeat(np.arange(6), sizes)]
    seen: list[np.ndarray] = []

    def record(idx: np.ndarray) -> np.ndarray:
        seen.append(idx)
        return np.zeros(idx.shape[0])

    stats.resampled(record, len(labels), resamples=300, seed=0, clusters=labels)
    assert sum(batch.shape[0] for batch in seen) == 300
    owner = np.repeat(np.arange(6), sizes)
    for batch in seen:
        for row in batch:
            drawn, counts = np.unique(owner[row], return_counts=True)
            assert np.array_equal(counts % sizes[drawn], np.zeros_like(drawn))
    # Coverage of the mean under ICC 0.5: per-example bootstrap well below 95%, the
    # cluster bootstrap near it (percentile intervals over 40 clusters run a little short).
    data = _nested(np.random.default_rng(3), 200)
    naive = clustered = 0
    for seed, row in enumerate(data):
        naive_ci = stats.bootstrap(lambda i, r=row: r[i].mean(axis=1), row.size, 1000, seed)
        cluster_ci = stats.bootstrap(
            lambda i, r=row: r[i].mean(axis=1), row.size, 1000, seed, clusters=LABELS
        )
        assert naive_ci is not None and cluster_ci is not None
        naive += naive_ci.low <= 0.0 <= naive_ci.high
        clustered += cluster_ci.low <= 0.0 <= cluster_ci.high
    assert naive / 200 < 0.85
    assert clustered / 200 == pytest.approx(0.95, abs=_tolerance(0.95, 200) + 0.02)


def test_draws_are_scipys_resamples_whatever_the_chunks_and_counts_are_the_same_draws() -> None:
    # A width of ~CELLS splits 300 resamples into chunks of one row: the stream is the same.
    whole = np.random.default_rng(4).integers(0, 7, size=(300, 7))
    chunked = list(stats.draws(7, 300, 4, width=3_999_990))
    assert len(chunked) == 300 and np.array_equal(np.concatenate(chunked), whole)
    counts = stats.draw_counts(7, 300, 4)
    assert np.array_equal(counts, np.stack([np.bincount(row, minlength=7) for row in whole]))


def test_cluster_numbering_is_sorted_or_first_seen() -> None:
    labels = ["b", "a", "b", "c", "a"]
    assert stats.cluster_index(labels).tolist() == [1, 0, 1, 2, 0]
    assert stats.cluster_index(labels, sort=False).tolist() == [0, 1, 0, 2, 1]
