"""One-number intervals and tests (orchestrator/stats/intervals.py) against statsmodels
and scipy: Holm's correction and the paired effect size (moved here from
tests/analysis/test_compare.py), Welch's test (from test_card_stats.py), the exact binomial
tail (from test_calibrate.py) and Wilson's interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.stats import binom

from orchestrator import stats


def test_holm_equals_statsmodels() -> None:
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for p in ([0.01, 0.04, 0.03, 0.2, 0.001], [0.5, 0.5, 0.01], [0.9, 0.8], [0.04]):
        expected = multitest.multipletests(p, method="holm")[1]
        assert stats.holm(p) == pytest.approx(list(expected), abs=1e-12)
    assert stats.holm([]) == []


def test_effect_size_is_paired_cohens_dz() -> None:
    d = np.array([1.0, 2.0, 0.0, 3.0, 1.0])
    assert stats.cohens_dz(d) == pytest.approx(d.mean() / d.std(ddof=1))
    assert stats.cohens_dz([2.0, 2.0]) is None and stats.cohens_dz([1.0]) is None


def test_welch_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 15)), rng.normal(0.5, 2.0, size=(4, 30))
    for row in range(4):
        expected = scipy_stats.ttest_ind(a[row], b[row], equal_var=False).pvalue
        assert stats.welch_p(a, b)[row] == pytest.approx(expected)


def test_binomial_tail_is_the_exact_binomial_cdf() -> None:
    n = np.array([1, 5, 20, 50, 200, 200, 300])
    k = np.array([0, 1, 0, 3, 10, 25, 12])
    for risk in (0.05, 0.1, 0.3):
        assert stats.binomial_tail(k, n, risk) == pytest.approx(binom.cdf(k, n, risk), rel=1e-10)
    assert stats.binomial_tail(5, 5, 0.1) == 1.0  # every answer wrong: no evidence
    assert stats.binomial_tail(0, 0, 0.1) == 1.0  # nothing answered: no evidence


def test_wilson_equals_statsmodels() -> None:
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    for successes, n, level in ((7, 10, 0.95), (0, 5, 0.9), (20, 20, 0.99), (1, 1, 0.95)):
        low, high = proportion.proportion_confint(successes, n, 1 - level, method="wilson")
        found = stats.wilson(successes, n, level)
        assert (found.low, found.high) == pytest.approx((low, high), abs=1e-12)


@pytest.mark.parametrize("level", [95, 0.0, 1.0, float("nan"), True])
def test_a_level_outside_zero_and_one_is_refused_naming_it(level: float) -> None:
    for compute in (
        lambda: stats.wilson(3, 10, level),
        lambda: stats.mean_interval([1.0, 2.0, 4.0], level),
        lambda: stats.sign_flip_interval([1.0, 2.0, 4.0], level),
    ):
        with pytest.raises(ValueError, match="level must be between 0 and 1, got"):
            compute()
