"""Ranks and correlations (orchestrator/stats/ranks.py) against scipy, ties included: the
one implementation compare, the judge card, meta-eval, distill and the compute functions
use. The first two tests moved here from tests/analysis (compare's and the card's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.stats
from scipy import stats

from orchestrator.stats import (
    Method,
    correlation_p,
    correlation_test,
    finite,
    kendall_tau_b,
    pearson,
    ranks,
    spearman,
)


def _paired(n: int, seed: int, shift: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 11, n).astype(float)
    return a, np.clip(a + np.round(rng.normal(shift, 1.2, n)), 1, 10)


def test_correlations_equal_scipy_with_ties() -> None:
    a, b = _paired(50, seed=4)
    assert pearson(a, b) == pytest.approx(scipy.stats.pearsonr(a, b).statistic)
    assert spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b).statistic)
    assert kendall_tau_b(a, b) == pytest.approx(scipy.stats.kendalltau(a, b).statistic)
    assert finite(pearson([1, 2, 3], [4, 4, 4])) is None  # a constant side: undefined
    assert finite(kendall_tau_b([1, 1], [2, 3])) is None


def test_spearman_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(1, 6, size=(5, 40)).astype(float)  # many ties, as judge scores have
    y = rng.normal(size=(5, 40)) + 0.3 * x
    rho = spearman(x, y)
    p = correlation_p(rho, 40)
    for row in range(5):
        expected = stats.spearmanr(x[row], y[row])
        assert rho[row] == pytest.approx(expected.statistic, abs=1e-12)
        assert p[row] == pytest.approx(expected.pvalue, rel=1e-9)
    assert np.isnan(spearman(np.ones(5), np.arange(5.0)))


def test_ranks_are_scipys_average_ranks_along_the_last_axis() -> None:
    rng = np.random.default_rng(2)
    values = rng.integers(0, 4, size=(6, 25)).astype(float)
    assert np.array_equal(ranks(values), scipy.stats.rankdata(values, axis=-1))
    assert ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]


@pytest.mark.parametrize("n", [2, 3, 12, 60])
def test_correlation_tests_equal_scipys_statistic_and_p(n: int) -> None:
    a, b = _paired(n, seed=n)
    b[0] = b[0] + 1  # never constant
    references: list[tuple[Method, Any]] = [
        ("pearson", scipy.stats.pearsonr),
        ("spearman", scipy.stats.spearmanr),
        ("kendall", scipy.stats.kendalltau),
    ]
    for method, reference in references:
        statistic, p = correlation_test(method, a, b)
        expected = reference(a, b)
        assert statistic == pytest.approx(expected.statistic, abs=1e-12), method
        if np.isnan(expected.pvalue):
            assert np.isnan(p), method
        else:
            assert p == pytest.approx(expected.pvalue, abs=1e-12), method


def test_long_series_take_scipys_kendall() -> None:
    # Past SHORT_SERIES values the O(n log n) count replaces the all-pairs one: same τ-b.
    a, b = _paired(900, seed=5)
    assert kendall_tau_b(a, b) == pytest.approx(scipy.stats.kendalltau(a, b).statistic, abs=1e-12)
    assert kendall_tau_b(a[:400], b[:400]) == pytest.approx(
        scipy.stats.kendalltau(a[:400], b[:400]).statistic, abs=1e-12
    )
