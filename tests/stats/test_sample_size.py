"""The power and design-effect helpers (orchestrator/stats/power.py): the one-way ICC
recovers a planted intra-cluster correlation (moved here from tests/analysis/test_power.py),
and the t-test's power equals statsmodels'."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.stats import one_way_icc, t_power


def test_one_way_icc_recovers_a_planted_correlation() -> None:
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(400), 6)
    values = rng.normal(0, math.sqrt(0.3), 400)[groups] + rng.normal(0, math.sqrt(0.7), 2400)
    icc, count, size = one_way_icc(values, list(groups))
    assert (count, size) == (400, 6.0)
    assert icc == pytest.approx(0.3, abs=0.05)
    independent, _, _ = one_way_icc(rng.normal(size=2400), list(groups))
    assert independent < 0.06  # clipped at 0, never negative


def test_t_power_equals_statsmodels() -> None:
    power = pytest.importorskip("statsmodels.stats.power")
    for n, effect in ((10, 0.5), (40, 0.3), (200, 0.1)):
        expected = power.TTestPower().power(effect_size=effect, nobs=n, alpha=0.05)
        assert t_power(n, effect, 0.05) == pytest.approx(expected, abs=1e-9)
    assert t_power(1, 0.5, 0.05) == 0.0
