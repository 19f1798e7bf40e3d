"""The clustered sign-flip test (`--cluster FIELD`) on simulated nested data: 40 users × 5
examples with a user effect as large as the noise (ICC 0.5). The examples-as-independent
interval under-covers clearly; the cluster-level test holds its 5% level, its interval
covers about 95%, and a planted shift is still found; the same for the judge card's sign
flip over cluster sums. Moved here from tests/analysis/test_cluster.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator import stats
from orchestrator.analysis.groups import cluster_labels

USERS, PER_USER = 40, 5
SIMULATIONS = 600
DRAWS = 499  # sign vectors per simulated data set: the level is exact, the run fast
LABELS = [f"u{u:02d}" for u in np.repeat(np.arange(USERS), PER_USER)]


def _nested(rng: np.random.Generator, sims: int, shift: float = 0.0) -> np.ndarray:
    """Per-example paired differences: shift + a user effect (sd 1) + noise (sd 1)."""
    users = rng.normal(0.0, 1.0, (sims, USERS))
    return (
        shift + np.repeat(users, PER_USER, axis=1) + rng.normal(0.0, 1.0, (sims, USERS * PER_USER))
    )


def _tolerance(rate: float, sims: int) -> float:
    return 4.0 * math.sqrt(rate * (1.0 - rate) / sims)


def _covers(found: stats.SignFlipInterval, truth: float) -> bool:
    return found.low is not None and found.high is not None and found.low <= truth <= found.high


def test_naive_interval_under_covers_and_the_clustered_one_holds() -> None:
    data = _nested(np.random.default_rng(28), SIMULATIONS)
    naive = clustered = false_positives = 0
    for seed, row in enumerate(data):
        naive += _covers(stats.sign_flip_interval(row, 0.95, DRAWS, seed), 0.0)
        found = stats.cluster_sign_flip(row, LABELS, 0.95, DRAWS, seed)
        clustered += _covers(found.interval, 0.0)
        false_positives += found.test.p < 0.05
        assert found.clusters == USERS
        # The interval inverts the test: it leaves out 0 exactly when p < 0.05.
        assert _covers(found.interval, 0.0) == (found.test.p >= 0.05)
    # Design effect 1 + 4 · 0.5 = 3: the naive interval is √3 too narrow, covering ~74%.
    assert naive / SIMULATIONS < 0.85
    assert clustered / SIMULATIONS == pytest.approx(0.95, abs=_tolerance(0.95, SIMULATIONS))
    assert false_positives / SIMULATIONS == pytest.approx(0.05, abs=_tolerance(0.05, SIMULATIONS))


def test_a_planted_shift_is_found_over_clusters() -> None:
    # The mean of 40 user means has sd √(1.2 / 40) ≈ 0.17: a shift of 0.7 is 4 sd.
    data = _nested(np.random.default_rng(5), 100, shift=0.7)
    found = [
        stats.cluster_sign_flip(row, LABELS, 0.95, DRAWS, seed) for seed, row in enumerate(data)
    ]
    assert sum(f.test.p < 0.05 for f in found) / len(found) > 0.9
    assert sum(_covers(f.interval, 0.7) for f in found) / len(found) > 0.85


def test_interval_inverts_the_clustered_test_exactly() -> None:
    """With few clusters of unequal sizes (ties and zero sums too) the interval is exactly
    the set of shifts δ whose clustered test of d − δ gives p ≥ 0.05."""
    rng = np.random.default_rng(7)
    for trial in range(6):
        sizes = rng.integers(1, 5, 9)
        labels = [f"c{c}" for c in np.repeat(np.arange(sizes.size), sizes)]
        d = rng.normal(0.4, 1.0, sizes.sum()) + np.repeat(rng.normal(0, 1, sizes.size), sizes)
        if trial % 2:
            d = np.round(d)
        found = stats.cluster_sign_flip(d, labels)
        assert found.test.method == "exact" and found.interval.low is not None
        low, high = found.interval.low, found.interval.high or 0.0
        for delta, inside in ((low - 1e-7, False), (low + 1e-7, True), (high - 1e-7, True)):
            assert (stats.cluster_sign_flip(d - delta, labels).test.p >= 0.05) == inside
        assert stats.cluster_sign_flip(d - high - 1e-7, labels).test.p < 0.05


def test_one_example_per_cluster_is_the_unclustered_test() -> None:
    d = np.random.default_rng(2).normal(0.5, 1.0, 12)
    found = stats.cluster_sign_flip(d, [f"{i:02d}" for i in range(12)])
    assert found.test == stats.sign_flip_test(d)
    assert found.interval == stats.sign_flip_interval(d)
    assert cluster_labels(["a", "b"], {"a": "u1"}) == ["u1", "\0b"]


def test_card_sign_flip_over_cluster_sums_holds_its_level() -> None:
    """Position votes nested in users whose own leaning (first or second slot) varies, with
    no leaning on average: per comparison the test rejects far too often; over whole
    users' vote sums it holds 5%."""
    rng = np.random.default_rng(11)
    sims = 800
    lean = rng.normal(0.0, 0.25, (sims, USERS))
    chance = np.clip(0.5 + np.repeat(lean, PER_USER, axis=1), 0.0, 1.0)
    votes = rng.random((sims, USERS * PER_USER, 2)) < chance[..., None]  # two votes each
    signed = (2.0 * votes - 1.0).sum(axis=-1)
    naive = stats.sign_flip_p(signed, draws=DRAWS, seed=1)
    sums = signed.reshape(sims, USERS, PER_USER).sum(axis=-1)
    clustered = stats.sign_flip_p(sums, draws=DRAWS, seed=1)
    assert (naive < 0.05).mean() > 0.15
    assert (clustered < 0.05).mean() == pytest.approx(0.05, abs=_tolerance(0.05, sims))
    assert np.allclose(stats.cluster_sums(signed[0], LABELS), sums[0])
