"""Prediction-powered inference (PPI++) for a mean: a judge's scores on every example, people's
labels on a few, and an estimate whose interval stays valid however wrong the judge is.

The estimate (Angelopoulos, Duchi and Zrnic, "PPI++", 2023) is

    θ̂(λ) = mean_N(λ·f) + mean_n(y − λ·f)

over the N unlabelled predictions f and the n labelled pairs (y, f): the judge's mean,
corrected by its average error on the labelled examples. λ = 0 is the classical (labels
only) mean, λ = 1 plain PPI; the power-tuned λ minimises the estimate's variance and is
clipped to [0, 1], so a useless judge gets λ ≈ 0 and costs almost nothing. Sample weights
(`w`: 1/π of a label plan's inclusion probabilities, active inference after Zrnic and
Candès) are scaled to mean 1 and multiply each term. Everything follows `ppi_py`'s
`ppi_mean_pointestimate` and `ppi_mean_ci` (ppi-python 0.2.3), which the tests check to
1e-6; the arithmetic runs over the last axis, so a simulation passes many draws at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bootstrap import draw_counts

__all__ = [
    "SMALL_SAMPLE",
    "UNIFORM_SHARE",
    "PPIMean",
    "active_probabilities",
    "bootstrap_t_interval",
    "cluster_interval",
    "inclusion_probabilities",
    "labels_for_width",
    "ppi_mean",
    "ppi_terms",
    "systematic_sample",
    "tuned_lambda",
]


@dataclass(frozen=True)
class PPIMean:
    """One mean estimate (or one per draw, with array fields): its value, standard error,
    two-sided interval, the λ it used, and how many labels a labels-only estimate would need
    for the same standard error."""

    value: np.ndarray
    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    lam: np.ndarray
    n: int
    N: int
    effective_labels: np.ndarray


def _z(alpha: float) -> float:
    """The normal quantile of a two-sided 1 − alpha interval."""
    from scipy.special import ndtri

    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    return float(ndtri(1.0 - alpha / 2.0))


def _scaled(weights: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """Weights scaled to mean 1 along the last axis (ones when none are given)."""
    if weights is None:
        return np.ones(shape)
    w = np.broadcast_to(np.asarray(weights, dtype=float), shape)
    return w / w.sum(axis=-1, keepdims=True) * shape[-1]


def tuned_lambda(
    y: np.ndarray, f: np.ndarray, f_all: np.ndarray, w: np.ndarray, w_all: np.ndarray
) -> np.ndarray:
    """The power-tuned λ (PPI++), clipped to [0, 1], from weights already scaled: the
    covariance of the label and judge terms over twice the judge's variance, inflated by
    1 + n/N. A judge that never varies gives λ = 0 (ppi_py returns NaN there)."""
    n, big_n = y.shape[-1], f_all.shape[-1]
    start = (w_all * f_all).mean(axis=-1, keepdims=True) + (w * (y - f)).mean(
        axis=-1, keepdims=True
    )
    grads = w * (y - start)
    grads_hat = w * (f - start)
    centred = (grads - grads.mean(axis=-1, keepdims=True)) * (
        grads_hat - grads_hat.mean(axis=-1, keepdims=True)
    )
    covariance = 2 * centred.sum(axis=-1) / n
    pooled = np.concatenate([grads_hat, w_all * (f_all - start)], axis=-1)
    variance = pooled.var(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = covariance / (2 * (1 + n / big_n) * variance)
    return np.where(variance > 0, np.clip(lam, 0.0, 1.0), 0.0)


def ppi_terms(
    y: np.ndarray,
    f: np.ndarray,
    f_all: np.ndarray,
    lam: float | np.ndarray | None,
    w: np.ndarray | None = None,
    w_all: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ̂(λ), its standard error and λ (tuned when `lam` is None), over the last axis."""
    y, f, f_all = (np.asarray(a, dtype=float) for a in (y, f, f_all))
    ws, ws_all = _scaled(w, y.shape), _scaled(w_all, f_all.shape)
    if lam is None:
        lam = tuned_lambda(y, f, f_all, ws, ws_all)
    lam_arr = np.asarray(lam, dtype=float)
    step = lam_arr[..., None] if lam_arr.ndim else lam_arr
    imputed = ws_all * step * f_all
    rectifier = ws * (y - step * f)
    value = imputed.mean(axis=-1) + rectifier.mean(axis=-1)
    variance = imputed.var(axis=-1) / f_all.shape[-1] + rectifier.var(axis=-1) / y.shape[-1]
    return value, np.sqrt(variance), np.broadcast_to(lam_arr, value.shape)


def ppi_mean(
    y: np.ndarray,
    f: np.ndarray,
    f_all: np.ndarray,
    *,
    alpha: float = 0.05,
    lam: float | None = None,
    w: np.ndarray | None = None,
    w_all: np.ndarray | None = None,
) -> PPIMean:
    """The PPI++ mean of the labels `y` from the judge's `f` on the same examples and its
    `f_all` on the unlabelled ones (or, with plan weights, on every example), with a
    two-sided 1 − `alpha` normal interval. `lam` None tunes λ; 0 gives the classical mean.
    `effective_labels` is n times the ratio of the classical variance to this one."""
    value, se, used = ppi_terms(y, f, f_all, lam, w, w_all)
    _, classical_se, _ = ppi_terms(y, f, f_all, 0.0, w, w_all)
    z = _z(alpha)
    n = np.shape(y)[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        effective = np.where(se > 0, n * (classical_se / se) ** 2, float(n))
    return PPIMean(
        value=value,
        se=se,
        low=value - z * se,
        high=value + z * se,
        lam=used,
        n=n,
        N=np.shape(f_all)[-1],
        effective_labels=effective,
    )


# -- fewer labels: a bootstrap-t interval ---------------------------------------------------

SMALL_SAMPLE = 100  # labels below which `estimate` uses the bootstrap-t interval by default


def _tuned_terms(
    y: np.ndarray,
    f: np.ndarray,
    sum_all: np.ndarray,
    square_all: np.ndarray,
    big_n: int,
    lam: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """θ̂ and its standard error over the last axis from the unlabelled part's sum and sum
    of squares alone (no weights): λ tuned as `tuned_lambda` does unless given, so that a
    resample of the labels re-tunes it without touching the N unlabelled values."""
    n = y.shape[-1]
    if lam is None:
        covariance = ((y - y.mean(-1, keepdims=True)) * (f - f.mean(-1, keepdims=True))).mean(-1)
        total, squares, size = f.sum(-1) + sum_all, (f * f).sum(-1) + square_all, n + big_n
        pooled = (squares - total * total / size) / (size - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(pooled > 0, np.clip(covariance / ((1 + n / big_n) * pooled), 0, 1), 0)
    else:
        step = np.full(y.shape[:-1], float(lam))
    mean_all = sum_all / big_n
    spread_all = np.maximum(square_all / big_n - mean_all**2, 0.0)
    rectifier = y - step[..., None] * f
    value = step * mean_all + rectifier.mean(-1)
    return value, np.sqrt(step**2 * spread_all / big_n + rectifier.var(-1) / n)


def bootstrap_t_interval(
    y: np.ndarray,
    f: np.ndarray,
    f_all: np.ndarray,
    *,
    lam: float | None = None,
    alpha: float = 0.05,
    resamples: int = 1000,
    seed: int | np.random.Generator = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """A two-sided 1 − `alpha` interval for θ̂(λ) (unweighted) that holds with few labels:
    bootstrap-t, the studentised estimate's quantiles from resamples of the labelled pairs
    with λ re-tuned on each (`lam` None) and the unlabelled mean redrawn from its normal
    law. The normal interval misses on two counts below ~100 labels: a skewed score's mean
    and its standard error move together, and the tuned λ varies with the labels it is
    tuned on (at 50 Bernoulli(0.2) labels and a perfect judge its sd is 0.14, and the
    normal interval covers 0.91). Over the last axis; rows on leading axes share nothing."""
    y, f, f_all = (np.asarray(a, dtype=float) for a in (y, f, f_all))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    shape, n, big_n = y.shape[:-1], y.shape[-1], f_all.shape[-1]
    y, f = y.reshape(-1, n), f.reshape(-1, n)
    f_all = f_all.reshape(-1, big_n)
    sum_all, square_all = f_all.sum(-1), (f_all * f_all).sum(-1)
    value, se = _tuned_terms(y, f, sum_all, square_all, big_n, lam)
    rows = np.arange(y.shape[0])[:, None, None]
    drawn = rng.integers(0, n, (y.shape[0], resamples, n))
    spread = np.sqrt(np.maximum(square_all / big_n - (sum_all / big_n) ** 2, 0.0))
    sums = sum_all[:, None] + np.sqrt(big_n) * spread[:, None] * rng.standard_normal(
        (y.shape[0], resamples)
    )
    # The redrawn mean moves the unlabelled values as a whole: their spread stays as it is.
    squares = square_all[:, None] + (sums**2 - sum_all[:, None] ** 2) / big_n
    values, ses = _tuned_terms(y[rows, drawn], f[rows, drawn], sums, squares, big_n, lam)
    shift = values - value[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        studentised = np.where(ses > 0, shift / ses, np.sign(shift) * np.inf)
    studentised = np.nan_to_num(studentised, nan=0.0, posinf=np.inf, neginf=-np.inf)
    upper = np.quantile(studentised, 1 - alpha / 2, axis=1, method="higher")
    lower = np.quantile(studentised, alpha / 2, axis=1, method="lower")
    with np.errstate(invalid="ignore"):
        low, high = value - upper * se, value - lower * se
    # A sample without spread (every label alike, a judge that never varies) has se 0:
    # the interval is its point, as the normal form gives.
    low, high = np.where(se > 0, low, value), np.where(se > 0, high, value)
    return low.reshape(shape), high.reshape(shape)


def labels_for_width(
    y: np.ndarray,
    f: np.ndarray,
    f_all: np.ndarray,
    width: float,
    *,
    alpha: float = 0.05,
    lam: float | None = None,
) -> int:
    """Labels needed for a PPI++ interval of total `width`, from a pilot: the pilot's tuned λ
    (or `lam`; 0 asks about the labels alone) and per-label variances held fixed, n solved
    from z²·(σ²_rect/n + σ²_imp/N) = (width/2)² with N the unlabelled examples (at least 2
    labels; a width the judge's own noise already exceeds raises ValueError)."""
    if not width > 0:
        raise ValueError(f"width must be positive, got {width!r}")
    y, f, f_all = (np.asarray(a, dtype=float) for a in (y, f, f_all))
    if lam is None:
        lam = float(tuned_lambda(y, f, f_all, np.ones(y.shape), np.ones(f_all.shape)))
    rectifier = float(np.var(y - lam * f))
    imputed = float(np.var(lam * f_all)) / f_all.size
    room = (width / (2 * _z(alpha))) ** 2 - imputed
    if room <= 0:
        raise ValueError(
            f"no number of labels reaches width {width:g}: the judge's own noise over "
            f"{f_all.size} examples already takes more"
        )
    return max(2, int(np.ceil(rectifier / room)))


# -- where labels help most: a fixed-size design with exact inclusion probabilities ----------

UNIFORM_SHARE = 0.2  # of the design spread evenly, so no example's weight 1/π grows unbounded


def inclusion_probabilities(scores: np.ndarray, budget: int) -> np.ndarray:
    """π_i = K·p_i for p ∝ `scores` (positive) over the last axis, summing to `budget` K;
    an example whose share would exceed 1 is taken for sure (π = 1) and the rest rescaled,
    as a fixed-size design needs."""
    s = np.asarray(scores, dtype=float)
    size = s.shape[-1]
    if not 0 < budget <= size:
        raise ValueError(f"budget must be between 1 and {size} (the examples), got {budget}")
    if np.any(~np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("scores must be positive and finite")
    fixed = np.zeros(s.shape, dtype=bool)
    pi = s
    for _ in range(size):
        room = budget - fixed.sum(axis=-1, keepdims=True)
        free = np.where(fixed, 0.0, s).sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            pi = np.where(fixed, 1.0, s * room / free)
        over = (pi > 1.0) & ~fixed
        if not over.any():
            break
        fixed |= over
    return np.minimum(pi, 1.0)


def active_probabilities(uncertainty: np.ndarray, budget: int) -> np.ndarray:
    """Inclusion probabilities leaning towards uncertain examples (active inference, Zrnic
    and Candès 2024: π ∝ the judge's expected error), mixed with a uniform share so that
    confident examples keep a chance; no uncertainty anywhere gives the uniform design."""
    u = np.asarray(uncertainty, dtype=float)
    mean = u.mean(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lean = np.where(mean > 0, u / mean, 1.0)
    return inclusion_probabilities((1 - UNIFORM_SHARE) * lean + UNIFORM_SHARE, budget)


def systematic_sample(pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exactly round(Σπ) distinct indices, each with inclusion probability π_i (systematic
    PPS over the given order: one uniform start, then steps of 1 along the cumulative π);
    over the last axis, one start per row. The rows' indices, sorted, as an integer array."""
    p = np.asarray(pi, dtype=float)
    if np.any(p < 0) or np.any(p > 1 + 1e-12):
        raise ValueError("inclusion probabilities must lie in [0, 1]")
    rows = p.reshape(-1, p.shape[-1])
    budget = round(float(rows[0].sum()))
    cumulative = np.cumsum(rows, axis=1)
    cumulative[:, -1] = budget  # rounding must not let the last point spill into the next row
    offset = np.arange(rows.shape[0])[:, None] * (budget + 1)
    starts = rng.uniform(size=(rows.shape[0], 1))
    points = starts + np.arange(budget)[None, :] + offset
    flat = np.searchsorted((cumulative + offset).ravel(), points.ravel(), side="right")
    chosen = flat.reshape(rows.shape[0], budget) - np.arange(rows.shape[0])[:, None] * p.shape[-1]
    return chosen.reshape((*p.shape[:-1], budget))


def _cluster_sums(values: np.ndarray, clusters: np.ndarray, count: int) -> np.ndarray:
    """Per-row sums of `values` by cluster, (rows, count), for rows stacked on a leading axis."""
    rows = values.reshape(-1, values.shape[-1])
    index = clusters.reshape(rows.shape) + count * np.arange(rows.shape[0])[:, None]
    sums = np.bincount(index.ravel(), rows.ravel(), minlength=rows.shape[0] * count)
    return sums.reshape(rows.shape[0], count)


def cluster_interval(
    y: np.ndarray,
    f: np.ndarray,
    f_rest: np.ndarray,
    clusters: np.ndarray,
    clusters_rest: np.ndarray,
    lam: float | np.ndarray,
    *,
    w: np.ndarray | None = None,
    alpha: float = 0.05,
    resamples: int = 1000,
    seed: int | np.random.Generator = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ̂(λ) and its interval when examples are nested in clusters (users): whole clusters
    are resampled with replacement, each bringing its labelled and unlabelled examples, and
    θ̂ recomputed at the given λ; the interval is θ̂ ± t(G−1)·√(G/(G−1))·sd of the
    resampled values over G clusters (the percentile interval falls short with 15-40
    clusters: tests/stats/test_ppi.py). `clusters` / `clusters_rest` number the clusters of
    the labelled and unlabelled examples (0..C−1, `cluster_index`); `w` weighs the labelled
    ones (a plan's 1/π). θ̂ is linear in the clusters' sums, so a resample is a count per
    cluster; rows stacked on a leading axis share the resamples."""
    from scipy.special import stdtrit

    y, f, f_rest = (np.asarray(a, dtype=float) for a in (y, f, f_rest))
    clusters, clusters_rest = np.asarray(clusters), np.asarray(clusters_rest)
    w_lab = np.ones(y.shape) if w is None else np.broadcast_to(np.asarray(w, dtype=float), y.shape)
    count = int(max(clusters.max(initial=-1), clusters_rest.max(initial=-1))) + 1
    step = np.asarray(lam, dtype=float).reshape(-1, 1)
    rows = int(np.prod(y.shape[:-1], dtype=int))
    lab = (y.reshape(rows, -1), f.reshape(rows, -1), w_lab.reshape(rows, -1))
    rectified = _cluster_sums(lab[2] * (lab[0] - step * lab[1]), clusters, count)
    weight = _cluster_sums(lab[2], clusters, count)
    imputed = _cluster_sums(step * f_rest.reshape(rows, -1), clusters_rest, count)
    size = _cluster_sums(np.ones((rows, f_rest.shape[-1])), clusters_rest, count)
    value = imputed.sum(1) / size.sum(1) + rectified.sum(1) / weight.sum(1)
    drawn = draw_counts(count, resamples, seed).astype(float).T  # (clusters, resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = imputed @ drawn / (size @ drawn) + rectified @ drawn / (weight @ drawn)
    values[~np.isfinite(values)] = np.nan  # a resample without labels says nothing
    spread = np.nanstd(values, axis=1, ddof=1)
    present = ((size + weight) > 0).sum(axis=1)
    half = stdtrit(present - 1, 1 - alpha / 2) * np.sqrt(present / (present - 1)) * spread
    shape = y.shape[:-1]
    return value.reshape(shape), (value - half).reshape(shape), (value + half).reshape(shape)
