"""L2-regularised logistic regression without intercept, fit by damped Newton steps: the
weights of a stacked style ensemble (`compute/stacking.py`), where the features are the
member metrics' votes."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


def _objective(x: Array, y: Array, w: Array, l2: float) -> float:
    return float(0.5 * l2 * w @ w + np.logaddexp(0.0, -y * (x @ w)).sum())


def fit_logistic(
    x: Array, y: Array, l2: float = 1.0, max_iter: int = 100, tol: float = 1e-10
) -> tuple[Array, bool]:
    """L2-regularised logistic regression without intercept, by damped Newton steps.

    Minimises l2/2·|w|² + Σ log(1 + exp(−yᵢ·w·xᵢ)) for y in {−1, +1}, the same objective
    as scikit-learn's LogisticRegression(C=1/l2, fit_intercept=False). Returns (w, converged).
    """
    if l2 <= 0:
        raise ValueError("l2 must be > 0: with votes as features the data is often separable")
    w = np.zeros(x.shape[1])
    if x.shape[1] == 0:
        return w, True
    current = _objective(x, y, w, l2)
    for _ in range(max_iter):
        margin = y * (x @ w)
        p = 0.5 * (1.0 - np.tanh(margin / 2.0))  # sigmoid(-margin), stable for large |margin|
        grad = l2 * w - x.T @ (y * p)
        hess = l2 * np.eye(x.shape[1]) + (x.T * (p * (1.0 - p))) @ x
        step = np.linalg.solve(hess, grad)
        # Halve the step until the objective drops: plain Newton may overshoot far from w*.
        scale = 1.0
        while scale > 1e-8:
            trial = w - scale * step
            value = _objective(x, y, trial, l2)
            if value <= current + 1e-15:
                break
            scale /= 2.0
        w, current = trial, value
        if float(np.max(np.abs(scale * step))) < tol:
            return w, True
    return w, False
