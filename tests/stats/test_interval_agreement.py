"""compare's interval and its test agree (issue 28): the interval inverts the sign-flip test,
so over seeded simulations it rejects a true zero shift as often as the test does (≈ 5%),
excludes 0 on exactly the data sets where p < 0.05, and covers a planted shift ≈ 95%."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator import stats

# Few draws keep the simulation fast; (hits + 1) / (draws + 1) keeps the test exact at any
# number of draws, and 0.05 · 200 is a whole number of them.
DRAWS = 199
DATA_SETS = 1000


def _tolerance(rate: float, trials: int) -> float:
    """Four binomial standard errors: a seeded check that flakes once in ~16,000."""
    return 4.0 * math.sqrt(rate * (1.0 - rate) / trials)


def _excludes(interval: stats.SignFlipInterval, value: float) -> bool:
    if interval.low is None or interval.high is None:
        return False  # nothing rejected
    return not interval.low <= value <= interval.high


def _simulate(data: np.ndarray, truth: float, exact_up_to: int = 0) -> tuple[int, int, int]:
    """Per data set (row): the interval, the test of 0, and whether the interval misses
    `truth`; fails on any data set where the interval and the test disagree about 0.
    Returns (intervals excluding 0, data sets with p < 0.05, intervals missing `truth`)."""
    excluded = significant = disagree = missed = 0
    for seed, row in enumerate(data):
        interval = stats.sign_flip_interval(row, 0.95, DRAWS, seed, exact_up_to)
        p = stats.sign_flip_test(row, DRAWS, seed, exact_up_to).p
        out = _excludes(interval, 0.0)
        excluded += out
        significant += p < 0.05
        disagree += out != (p < 0.05)
        missed += _excludes(interval, truth)
    assert disagree == 0, f"{disagree} data sets where the interval and the test disagree"
    assert excluded == significant
    return excluded, significant, missed


@pytest.mark.parametrize("n", [20, 30, 200])
def test_interval_rejects_a_true_null_about_five_percent_and_agrees_with_p(n: int) -> None:
    rng = np.random.default_rng(n)
    # Continuous differences with no shift (heavy tails, as judge differences can have).
    rejected, _, _ = _simulate(rng.standard_t(3, size=(DATA_SETS, n)), truth=0.0)
    assert rejected / DATA_SETS == pytest.approx(0.05, abs=_tolerance(0.05, DATA_SETS))


@pytest.mark.parametrize("n", [20, 30, 200])
def test_interval_and_p_agree_on_tied_judge_scores(n: int) -> None:
    """Two judges' 1–10 scores of the same items: many zero and tied differences."""
    rng = np.random.default_rng(100 + n)
    scores = rng.integers(1, 11, size=(2, DATA_SETS // 2, n))
    rejected, _, _ = _simulate((scores[1] - scores[0]).astype(float), truth=0.0)
    # Ties make the test conservative, never liberal.
    assert rejected / (DATA_SETS // 2) <= 0.05 + _tolerance(0.05, DATA_SETS // 2)


def test_interval_covers_a_planted_shift_and_finds_it() -> None:
    rng = np.random.default_rng(7)
    shift = 0.8
    data = shift + rng.standard_t(4, size=(DATA_SETS, 30))
    rejected, _, missed = _simulate(data, truth=shift)
    assert missed / DATA_SETS == pytest.approx(0.05, abs=_tolerance(0.05, DATA_SETS))
    assert rejected / DATA_SETS > 0.6  # the shift is found in most data sets


def test_exact_path_agrees_with_its_test_on_small_tied_samples() -> None:
    """The exact enumeration (compare's path up to 20 non-zero differences), with zeros."""
    rng = np.random.default_rng(12)
    data = (rng.integers(1, 6, size=(300, 12)) - rng.integers(1, 6, size=(300, 12))) + 0.0
    data[:150] += rng.choice([0.0, 1.0], size=(150, 12))  # half with a shift to find
    rejected, _, _ = _simulate(data, truth=math.nan, exact_up_to=stats.EXACT_UP_TO)
    assert rejected > 20


def test_compare_draws_for_both_when_ties_are_too_many_to_enumerate() -> None:
    """20 non-zero differences and 40 ties: the test alone could enumerate 2^20 signs, the
    interval would need 2^20 × 41 weighted rows; compare then draws for both, alike."""
    from orchestrator.analysis.compare import _pair, _Settings

    rng = np.random.default_rng(5)
    settings = _Settings(0.95, 2000, DRAWS, 0, False)
    disagree = 0
    for seed in range(200):
        steps = rng.choice([1.0, 2.0, 3.0], size=20) * rng.choice([1, -1], size=20)
        b = np.concatenate([steps + 0.5 * (seed % 3 == 0), np.zeros(40)])  # a third shifted
        found = _pair([0.0] * 60, list(b), ("a", "b"), settings)
        assert found.p_method == "monte-carlo" and found.ci is not None
        assert found.ci.draws == "monte-carlo" and found.p is not None
        disagree += (found.p < 0.05) != (not found.ci.low <= 0.0 <= found.ci.high)
    assert disagree == 0
