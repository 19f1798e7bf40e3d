"""The judge card's tests, checked by seeded, vectorised simulation: an unbiased judge's
card raises a flag at most 5% of the time (family-wise, Holm across the card), and planted
effects are found (that each test agrees with scipy and the exact sign-flip test is
checked in tests/stats/)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from orchestrator.analysis.card.jury import effective_jurors
from orchestrator.stats import (
    correlation_p,
    holm,
    sign_flip_p,
    spearman,
    spearman_interval,
    welch_p,
)

SIMULATIONS = 2000
ALPHA = 0.05


def _at_most(count: int, rate: float, trials: int = SIMULATIONS) -> bool:
    """Whether `count` hits are consistent with a true rate of at most `rate` (one-sided,
    binomial, 0.1% chance of a false alarm)."""
    return count <= stats.binom.ppf(0.999, trials, rate)


def test_effective_jurors_counts_independent_jurors() -> None:
    rng = np.random.default_rng(4)
    independent = rng.normal(size=(4000, 3))
    assert effective_jurors(independent) == pytest.approx(3.0, abs=0.05)
    base = rng.normal(size=(4000, 1))
    copies = base + 0.05 * rng.normal(size=(4000, 3))
    assert effective_jurors(copies) == pytest.approx(1.0, abs=0.05)
    assert effective_jurors(np.ones((10, 2))) is None


def _pairwise_units(
    rng: np.random.Generator, sims: int, units: int, first: float, longer: float
) -> tuple[np.ndarray, np.ndarray]:
    """Signed per-comparison counts (both orders) for position and for length, of a judge that
    has a fixed opinion of each pair, follows it 80% of the time and ties 10% of the time;
    `first` and `longer` shift its choice toward the first slot or the longer text."""
    prefers = rng.integers(0, 2, size=(sims, units)) * 2 - 1  # +1: prefers text X
    x_longer = rng.integers(0, 2, size=(sims, units)) * 2 - 1
    position = np.zeros((sims, units))
    length = np.zeros((sims, units))
    for x_first in (1, -1):  # order ab shows X first, order ba shows it second
        follow = 0.8 + first * x_first * prefers + longer * x_longer * prefers
        picks_x = np.where(rng.random((sims, units)) < follow, prefers, -prefers)
        decisive = rng.random((sims, units)) >= 0.1
        position += decisive * picks_x * x_first
        length += decisive * picks_x * x_longer
    return position, length


def _family_p(rng: np.random.Generator, planted: float = 0.0) -> np.ndarray:
    """p-values of one simulated card per row: two pointwise nodes' length bias and
    self-preference, plus a pairwise judge's position and length bias (six effects);
    `planted` adds a length bias to the first node's scores."""
    n = 60
    lengths = rng.integers(20, 2000, size=(SIMULATIONS, n)).astype(float)
    p = []
    for node in range(2):
        noise = rng.normal(size=(SIMULATIONS, n))
        latent = noise + (planted * stats.zscore(lengths, axis=1) if node == 0 else 0.0)
        scores = np.clip(np.round(5.5 + 2.0 * latent), 1, 10)
        p.append(correlation_p(spearman(scores, lengths), n))
        own = np.arange(n) % 3 == 0
        p.append(welch_p(scores[:, own], scores[:, ~own]))
    position, length = _pairwise_units(rng, SIMULATIONS, 40, 0.0, 0.0)
    p.append(sign_flip_p(position))
    p.append(sign_flip_p(length))
    return np.column_stack(p)


def _any_flag(pvalues: np.ndarray) -> np.ndarray:
    return np.asarray([min(holm(row)) <= ALPHA for row in pvalues])


def test_unbiased_judge_family_wise_false_flag_rate_at_most_five_percent() -> None:
    p = _family_p(np.random.default_rng(5))
    flagged = _any_flag(p)
    assert _at_most(int(flagged.sum()), ALPHA), flagged.mean()
    # Six tests uncorrected would flag far more often: the family needs the correction.
    assert (p.min(axis=1) <= ALPHA).mean() > 0.15


def test_planted_length_bias_is_found() -> None:
    p = _family_p(np.random.default_rng(6), planted=0.6)
    adjusted = np.asarray([holm(row) for row in p])
    found = adjusted[:, 0] <= ALPHA
    others = (adjusted[:, 1:] <= ALPHA).any(axis=1)
    assert found.mean() > 0.9
    assert _at_most(int(others.sum()), ALPHA)


def test_planted_position_and_length_preference_are_found() -> None:
    rng = np.random.default_rng(7)
    position, _ = _pairwise_units(rng, 500, 60, 0.2, 0.0)
    assert (sign_flip_p(position) <= ALPHA / 6).mean() > 0.8
    _, length = _pairwise_units(rng, 500, 60, 0.0, 0.3)
    assert (sign_flip_p(length) <= ALPHA / 6).mean() > 0.8


def test_large_samples_use_a_fisher_interval_close_to_the_bootstrap() -> None:
    from orchestrator.analysis.card.bias import BOOTSTRAP_UP_TO, length_bias
    from orchestrator.stats import bootstrap

    rng = np.random.default_rng(8)
    n = BOOTSTRAP_UP_TO + 200
    lengths = rng.integers(10, 3000, size=n).astype(float)
    scores = np.clip(np.round(5 + 2 * stats.zscore(lengths) * 0.3 + rng.normal(size=n)), 1, 10)
    found = length_bias("judge", "m", "score", "output", scores, lengths)
    assert found.ci == spearman_interval(float(spearman(scores, lengths)), n)
    boot = bootstrap(lambda idx: spearman(scores[idx], lengths[idx]), n, resamples=500)
    assert found.ci is not None and boot is not None
    assert abs(found.ci.low - boot.low) < 0.02 and abs(found.ci.high - boot.high) < 0.02
