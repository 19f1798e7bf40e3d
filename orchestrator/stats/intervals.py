"""One number's interval or test: the interval record every part of the package returns,
Wilson's interval of a proportion, the exact binomial tail, Holm's correction, Welch's
t-test, and the paired effect size."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval."""

    low: float
    high: float


def check_level(level: float) -> None:
    """A confidence level strictly between 0 and 1, else a ValueError naming it."""
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")


def finite(value: Any) -> float | None:
    """A float for a record, None for NaN or infinity (a statistic that is undefined)."""
    number = float(value)
    return number if math.isfinite(number) else None


def wilson(successes: float, n: int, level: float = 0.95) -> Interval:
    """Wilson's score interval of the proportion successes / n (n ≥ 1): it stays inside
    [0, 1] and keeps a width when every trial succeeds or none does."""
    from scipy.special import ndtri

    check_level(level)
    z = float(ndtri(1.0 - (1.0 - level) / 2.0))
    share = successes / n
    scale = 1.0 + z * z / n
    centre = (share + z * z / (2 * n)) / scale
    half = z * math.sqrt(share * (1.0 - share) / n + z * z / (4 * n * n)) / scale
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def binomial_tail(errors: Any, n: Any, risk: float) -> Array:
    """P(Binomial(n, risk) ≤ errors), elementwise: the exact p-value of "the rate exceeds
    `risk`" given `errors` of n (the test a Clopper–Pearson upper bound inverts).

    Through the regularised incomplete beta, I_{1−R}(n − k, k + 1); 1 where k ≥ n and
    where n is 0 (no evidence against the null).
    """
    from scipy.special import betainc

    k = np.asarray(errors, dtype=float)
    m = np.asarray(n, dtype=float)
    inside = (k < m) & (m > 0)
    a = np.where(inside, m - k, 1.0)
    out = betainc(a, k + 1.0, 1.0 - risk)
    return np.asarray(np.where(inside, out, 1.0))


def holm(pvalues: ArrayLike) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (family-wise error control)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    # The i-th smallest is multiplied by (m − i); a later one may not fall below an earlier.
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return [float(x) for x in adjusted]


def welch_p(a: ArrayLike, b: ArrayLike) -> Array:
    """Two-sided Welch t-test p of equal means along the last axis (NaN when undefined)."""
    from scipy.stats import ttest_ind

    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(ttest_ind(a, b, axis=-1, equal_var=False).pvalue)


def cohens_dz(differences: ArrayLike) -> float | None:
    """Paired Cohen's d_z: mean difference over the differences' sample sd (ddof = 1);
    None with fewer than two differences or when they are all equal."""
    data = np.asarray(differences, dtype=float)
    if data.size < 2:
        return None
    sd = float(data.std(ddof=1))
    return None if sd == 0.0 else float(data.mean()) / sd
