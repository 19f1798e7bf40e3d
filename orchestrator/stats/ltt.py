"""Learn then Test's testing step (Angelopoulos, Bates, Candès, Jordan, Lei, 2021): the
hypotheses "configuration j errs on more than R of what it answers", tested in an order
fixed before the data are seen, each at level δ, stopping at the first that cannot be
rejected. The chance of keeping any configuration whose true risk exceeds R is then at most
δ, whatever the configurations are (no monotonicity needed). `calibrate` orders one judge's
thresholds this way, and a cascade's threshold sets (`analysis/cascade.py`)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["fixed_sequence", "least_answered"]


def least_answered(risk: float, delta: float) -> int:
    """The fewest answers with which "risk > R" can be rejected at δ (all of them right):
    with fewer, (1 − R)^n > δ, so such a configuration can never pass."""
    return max(1, math.ceil(math.log(delta) / math.log(1.0 - risk) - 1e-12))


def fixed_sequence(pvalues: ArrayLike, testable: ArrayLike, delta: float) -> NDArray[np.int64]:
    """Per row of (rows, hypotheses) p-values in their fixed order: the index of the last
    hypothesis rejected at `delta` before the first testable one that is not, −1 when none
    is. A hypothesis not `testable` (decided from what is not its errors, such as how many
    examples it answers) is passed over without stopping the walk."""
    p = np.atleast_2d(np.asarray(pvalues, dtype=float))
    test = np.atleast_2d(np.asarray(testable, dtype=bool))
    failed = test & (p > delta)
    kept = test & (np.cumsum(failed, axis=1) == 0)
    last = p.shape[1] - 1 - np.argmax(kept[:, ::-1], axis=1)
    return np.where(kept.any(axis=1), last, -1).astype(np.int64)
