"""Statistics of two runs scored on the same examples: paired difference, sign-flip test,
Holm's correction, effect size, and the correlations two judges are compared with.

Each function takes plain sequences of floats (already matched by example) and uses numpy
only; the bootstrap is `compute.statistics.bootstrap_mean_ci` applied to the differences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..compute.statistics import bootstrap_mean_ci

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# Up to this many non-zero differences the sign-flip test enumerates all 2^n sign vectors.
EXACT_UP_TO = 20
PERMUTATIONS = 10_000
_CHUNK = 1 << 16  # sign vectors (or Kendall rows) handled at once, to bound memory


@dataclass(frozen=True)
class SignFlip:
    """A two-sided sign-flip test's p-value and how it was computed."""

    p: float
    method: Literal["exact", "monte-carlo"]
    count: int  # sign vectors enumerated (exact) or drawn (Monte Carlo)


def _array(values: ArrayLike) -> Any:
    import numpy as np

    return np.asarray(values, dtype=float)


def sign_flip_test(
    differences: ArrayLike,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    exact_up_to: int = EXACT_UP_TO,
) -> SignFlip:
    """Two-sided paired permutation test of mean difference 0: each difference's sign is
    flipped at random; exact (all 2^n signs) up to `exact_up_to` non-zero differences.

    A zero difference is its own flip, so it adds nothing to any resampled sum and is left
    out of the enumeration (the p-value is the same). The Monte-Carlo p-value counts the
    observed sum as one of the draws, (hits + 1) / (draws + 1), so it is never 0.
    """
    import numpy as np

    data = _array(differences)
    nonzero = data[data != 0.0]
    observed = abs(float(nonzero.sum()))
    if nonzero.size == 0:
        return SignFlip(1.0, "exact", 1)
    # Sums equal to the observed one up to rounding count as reaching it.
    threshold = observed - observed * np.finfo(float).eps * 100
    k = int(nonzero.size)
    if k <= exact_up_to:
        total = 1 << k
        hits = 0
        for start in range(0, total, _CHUNK):
            masks = np.arange(start, min(start + _CHUNK, total), dtype=np.int64)
            sums = np.zeros(masks.size)
            for bit, value in enumerate(nonzero):
                sums += np.where((masks >> bit) & 1, -value, value)
            hits += int(np.count_nonzero(np.abs(sums) >= threshold))
        return SignFlip(hits / total, "exact", total)
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ValueError(f"permutations must be a positive integer, got {permutations!r}")
    rng = np.random.default_rng(seed)
    hits = 0
    rows = max(1, 4_000_000 // k)
    for start in range(0, permutations, rows):
        stop = min(start + rows, permutations)
        signs = rng.integers(0, 2, size=(stop - start, k)) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= threshold))
    return SignFlip((hits + 1) / (permutations + 1), "monte-carlo", permutations)


def holm(pvalues: ArrayLike) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (family-wise error control)."""
    import numpy as np

    p = _array(pvalues)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    # The i-th smallest is multiplied by (m − i); a later one may not fall below an earlier.
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return [float(x) for x in adjusted]


def cohens_dz(differences: ArrayLike) -> float | None:
    """Paired Cohen's d_z: mean difference over the differences' sample sd (ddof = 1);
    None with fewer than two differences or when they are all equal."""
    data = _array(differences)
    if data.size < 2:
        return None
    sd = float(data.std(ddof=1))
    return None if sd == 0.0 else float(data.mean()) / sd


def paired_interval(
    differences: ArrayLike, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Bootstrap CI of the mean difference (examples resampled as pairs): BCa, or the
    percentile interval when BCa is undefined (every resample on one side)."""
    values = [float(x) for x in _array(differences)]
    try:
        return bootstrap_mean_ci(values, level, resamples, seed, method="bca")
    except ValueError:
        return bootstrap_mean_ci(values, level, resamples, seed, method="percentile")


def win_tie_loss(a: ArrayLike, b: ArrayLike) -> tuple[int, int, int]:
    """Examples where b scored higher, the same, and lower than a."""
    first, second = _array(a), _array(b)
    wins = int((second > first).sum())
    ties = int((second == first).sum())
    return wins, ties, int(first.size) - wins - ties


def pearson(x: ArrayLike, y: ArrayLike) -> float | None:
    """Pearson's r; None with fewer than two pairs or when either side is constant."""
    import numpy as np

    a, b = _array(x), _array(y)
    if a.size < 2:
        return None
    a, b = a - a.mean(), b - b.mean()
    scale = float(np.sqrt((a * a).sum() * (b * b).sum()))
    if scale == 0.0:
        return None
    return max(-1.0, min(1.0, float((a * b).sum()) / scale))


def ranks(values: ArrayLike) -> Any:
    """Ranks from 1, tied values sharing the mean of the ranks they span."""
    import numpy as np

    _, inverse, counts = np.unique(_array(values), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return (last - (counts - 1) / 2.0)[inverse]


def spearman(x: ArrayLike, y: ArrayLike) -> float | None:
    """Spearman's ρ: Pearson's r of the (average-tie) ranks."""
    return pearson(ranks(x), ranks(y))


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float | None:
    """Kendall's τ-b (ties in either variable corrected for); None when either is constant."""
    import numpy as np

    a, b = _array(x), _array(y)
    n = a.size
    if n < 2:
        return None
    # Σ over ordered pairs of sign(Δx)·sign(Δy) is twice concordant minus discordant.
    score = 0.0
    rows = max(1, 4_000_000 // n)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        dx = np.sign(a[start:stop, None] - a[None, :])
        dy = np.sign(b[start:stop, None] - b[None, :])
        score += float((dx * dy).sum())
    pairs = n * (n - 1) / 2.0

    def tied(values: Any) -> float:
        counts = np.unique(values, return_counts=True)[1]
        return float((counts * (counts - 1) / 2.0).sum())

    denominator = float(np.sqrt((pairs - tied(a)) * (pairs - tied(b))))
    if denominator == 0.0:
        return None
    return max(-1.0, min(1.0, score / 2.0 / denominator))
