"""One-number intervals and tests (orchestrator/stats/intervals.py) against statsmodels
and scipy: Holm's correction and the paired effect size (moved here from
tests/analysis/test_compare.py), Welch's test (from test_card_stats.py), the exact binomial
tail (from test_calibrate.py) and Wilson's interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

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
