"""The sign-flip test and the interval that inverts it (orchestrator/stats/signflip.py)
against scipy's permutation test, its error rate measured, and the interval checked to be
exactly the set the test does not reject (moved here from tests/analysis/test_compare.py);
the vectorised p-value the judge card uses against the exact test (from test_card_stats.py)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import scipy.stats

from orchestrator import stats


def _paired(n: int, seed: int, shift: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 11, n).astype(float)
    return a, np.clip(a + np.round(rng.normal(shift, 1.2, n)), 1, 10)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
    return np.mean(x - y, axis=axis)


def test_false_positive_rate_near_the_nominal_level() -> None:
    """Under no shift, p < 0.05 about 5% of the time (over 400 data sets, both test paths)."""
    rejected = {"exact": 0, "monte-carlo": 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        for n in (15, 40):  # 15: exact enumeration; 40: Monte Carlo
            # Integer scores, so many differences are zero, as with real 1-10 judges.
            a = rng.integers(1, 11, n)
            b = np.clip(a + rng.integers(-2, 3, n), 1, 10)
            differences = (b - a).astype(float)
            test = stats.sign_flip_test(differences, permutations=1000, seed=seed)
            rejected[test.method] += test.p < 0.05
    # Clipping at 1 and 10 pulls both ways equally; a discrete test stays at or below α.
    assert 0.01 <= rejected["exact"] / 200 <= 0.09
    assert 0.02 <= rejected["monte-carlo"] / 200 <= 0.09


@pytest.mark.parametrize("n", [6, 12, 16])
def test_exact_sign_flip_p_equals_scipy_permutation_test(n: int) -> None:
    a, b = _paired(n, seed=n)
    test = stats.sign_flip_test(b - a)
    ref = scipy.stats.permutation_test(
        (b, a), _mean_difference, permutation_type="samples", n_resamples=np.inf, vectorized=True
    )
    # Zero differences are left out of the enumeration: the p-value is the same.
    assert test.method == "exact" and test.count == 2 ** int(np.count_nonzero(b - a))
    assert test.p == pytest.approx(ref.pvalue, abs=1e-12)


def _seeded(seed: int) -> dict[str, Any]:
    """scipy's seed argument: `rng` since 1.15 (a Generator from the seed), before that
    `random_state`, given the same Generator so both draw the same stream."""
    if "rng" in inspect.signature(scipy.stats.bootstrap).parameters:
        return {"rng": seed}
    return {"random_state": np.random.default_rng(seed)}


def test_monte_carlo_sign_flip_p_close_to_scipy() -> None:
    a, b = _paired(60, seed=3, shift=0.5)
    test = stats.sign_flip_test(b - a, permutations=20_000, seed=1)
    ref = scipy.stats.permutation_test(
        (b, a),
        _mean_difference,
        permutation_type="samples",
        n_resamples=20_000,
        **_seeded(2),
        vectorized=True,
    )
    assert test.method == "monte-carlo" and test.count == 20_000
    assert 0.001 < ref.pvalue < 0.5  # a p-value where the comparison means something
    assert test.p == pytest.approx(ref.pvalue, abs=0.01)


def test_sign_flip_edge_cases() -> None:
    assert stats.sign_flip_test([0.0, 0.0, 0.0]).p == 1.0
    # Four equal positive differences: only the all-plus and all-minus signs reach |sum| 4.
    assert stats.sign_flip_test([1.0, 1.0, 1.0, 1.0, 0.0]).p == pytest.approx(2 / 16)
    big = stats.sign_flip_test(np.ones(20))  # 2^20 signs enumerated
    assert big.method == "exact" and big.p == pytest.approx(2 / 2**20)


def _ends_are_where_the_test_turns(
    differences: np.ndarray, low: float, high: float, **test: Any
) -> None:
    """Just inside each end the sign-flip test of "mean = δ" gives p ≥ 0.05, just outside
    p < 0.05 (the test itself is checked against scipy above)."""
    step = 1e-9 * max(1.0, float(np.abs(differences).max()))
    for end, inward in ((low, step), (high, -step)):
        inside = stats.sign_flip_test(differences - (end + inward), **test).p
        outside = stats.sign_flip_test(differences - (end - inward), **test).p
        assert inside >= 0.05 > outside, (end, inside, outside)


def test_sign_flip_interval_is_the_set_the_test_does_not_reject() -> None:
    rng = np.random.default_rng(8)
    # Monte Carlo, no zero difference: the test of d − δ draws the very same signs.
    continuous = rng.normal(0.4, 1.0, 40)
    interval = stats.sign_flip_interval(continuous, 0.95, 10_000, seed=3)
    assert interval.method == "monte-carlo" and interval.count == 10_000
    assert interval.low is not None and interval.high is not None
    _ends_are_where_the_test_turns(continuous, interval.low, interval.high, seed=3)
    # Exact, with ties (zero differences count at δ ≠ 0): against all 2^n signs.
    for _ in range(6):
        scores = rng.integers(-3, 4, 12).astype(float)
        interval = stats.sign_flip_interval(scores)
        assert interval.method == "exact" and interval.low is not None
        assert interval.high is not None
        _ends_are_where_the_test_turns(scores, interval.low, interval.high, exact_up_to=30)
    # Five examples cannot reach p < 0.05 (2/32 at best): nothing is rejected, no ends.
    assert stats.sign_flip_interval([1.0, 2.0, 3.0, 4.0, 5.0]).low is None


def test_sign_flip_is_exact_for_few_units_and_close_for_many() -> None:
    rng = np.random.default_rng(2)
    for n in (3, 7, 11):
        d = rng.integers(-2, 3, size=n).astype(float)
        assert float(stats.sign_flip_p(d)) == pytest.approx(stats.sign_flip_test(d).p, abs=1e-12)
    d = rng.integers(-2, 3, size=60).astype(float) + 0.4
    assert abs(float(stats.sign_flip_p(d, draws=20000)) - stats.sign_flip_test(d, 20000).p) < 0.02


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 25])
def test_all_zero_differences_are_left_empty_where_no_shift_can_be_rejected(n: int) -> None:
    """Every difference 0: a shift δ ≠ 0 makes every unit −δ, so its p is 2/2^n, below
    0.05 only from six units on. With five or fewer the interval is empty (as with any
    other five differences), not the point 0; from six on it is [0, 0]. The same over
    whole clusters."""
    zeros = np.zeros(n)
    interval = stats.sign_flip_interval(zeros)
    nested = stats.cluster_sign_flip(zeros, [f"u{i}" for i in range(n)]).interval
    for found in (interval, nested):
        if n <= 5:
            assert found.low is None and found.high is None
        else:
            assert found.low == 0.0 and found.high == 0.0
        # What the interval says, the test of a shift says too.
        p = stats.sign_flip_test(zeros - 0.5).p
        assert (p < 0.05) == (found.low is not None)
    assert stats.cluster_sign_flip(zeros, [f"u{i}" for i in range(n)]).clusters == n
