"""What a sample size buys: the paired t-test's power (and the normal approximation's
sample size), the exact sign-flip test's power where its few sign vectors make it
coarser than the t-test, and the intra-cluster correlation that discounts nested examples
(the design effect 1 + (m − 1)·ICC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .bootstrap import cluster_index
from .signflip import sign_flip_p

POWER_SIMULATIONS = 4000  # data sets `sign_flip_power` draws: a standard error under 0.008
ENUMERATED_UP_TO = 14  # differences whose 2^n signs `sign_flip_power` enumerates


def normal_n(effect: float, alpha: float, power: float) -> float:
    """((z₁₋α/₂ + z_power) / effect)²: the observations a two-sided z-test of effect Δ/σ
    needs for `power`, the t-test's sample size to first order; infinity past a float."""
    from scipy.stats import norm

    try:
        return ((float(norm.ppf(1.0 - alpha / 2.0)) + float(norm.ppf(power))) / effect) ** 2
    except (OverflowError, ZeroDivisionError):
        return math.inf


def t_power(n: int, effect: float, alpha: float) -> float:
    """The two-sided one-sample t-test's power at n observations and effect Δ/σ."""
    from scipy import stats

    if n < 2:
        return 0.0
    df = n - 1
    critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    shift = abs(effect) * math.sqrt(n)
    found = float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))
    if math.isfinite(found):
        return found
    # scipy's noncentral t gives nan far out (a shift or df in the millions), where the t
    # statistic is the normal one: its power is the normal test's.
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    return float(stats.norm.sf(z - shift) + stats.norm.cdf(-z - shift))


def sign_flip_power(
    n: int, effect: float, alpha: float, simulations: int = POWER_SIMULATIONS, seed: int = 0
) -> float:
    """The exact two-sided sign-flip test's power at n normal differences of mean effect
    Δ/σ, by seeded simulation: the share of data sets whose p (over all 2^n signs) is
    below alpha. At n = 6 it rejects only when all six differences share a sign, so its
    power at Δ/σ = 1.5 is Φ(1.5)⁶ ≈ 0.66 where the t-test's is 0.83."""
    if n < 1:
        return 0.0
    rng = np.random.default_rng([seed, n])
    # The test is blind to scale: shrinking a huge effect keeps its sums finite.
    size = abs(effect)
    data = (size + rng.standard_normal((simulations, n))) / max(1.0, size)
    # All 2^n signs while they are few; past that, seeded draws as compare's Monte Carlo.
    return float((sign_flip_p(data, exact=n <= ENUMERATED_UP_TO) < alpha).mean())


def sd_interval(sd: float, df: int, level: float) -> tuple[float, float]:
    """The chi-square interval of a normal σ from a sample sd with `df` degrees of
    freedom: how far a pilot's σ may be from the truth."""
    from scipy.stats import chi2

    tail = (1.0 - level) / 2.0
    low = sd * math.sqrt(df / float(chi2.ppf(1.0 - tail, df)))
    high = sd * math.sqrt(df / float(chi2.ppf(tail, df)))
    return low, high


def one_way_icc(values: ArrayLike, groups: Sequence[Any]) -> tuple[float, int, float]:
    """The intra-cluster correlation by one-way ANOVA (clipped at 0), the number of
    clusters and their mean size; unequal sizes use the usual adjusted size n₀."""
    data = np.asarray(values, dtype=float)
    index = cluster_index(groups)
    k, total = (int(index.max()) + 1 if index.size else 0), data.size
    sizes = np.bincount(index, minlength=k).astype(float)
    mean_size = total / k
    if k < 2 or total <= k:
        return 0.0, k, mean_size
    means = np.bincount(index, weights=data, minlength=k) / sizes
    between = float((sizes * (means - data.mean()) ** 2).sum()) / (k - 1)
    within = float(((data - means[index]) ** 2).sum()) / (total - k)
    n0 = (total - float((sizes**2).sum()) / total) / (k - 1)
    denominator = between + (n0 - 1.0) * within
    icc = (between - within) / denominator if denominator > 0 else 0.0
    return max(0.0, icc), k, mean_size
