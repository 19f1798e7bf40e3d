"""Agreement between the judge and the people on a set of examples, and the held-out
comparison of two judges: each one's value with a bootstrap interval, the paired
difference's interval, and the verdict it supports.

Series are float arrays matched by example, NaN where the judge gave no answer; choices
are coded as numbers first (`metaeval_stats.codes`). The statistics are meta-eval's
(Krippendorff's α, Spearman, raw agreement) and the compute library's Cohen's κ
(quadratic weights for scores, none for choices); intervals are meta-eval's bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ...compute import cohen_kappa
from ..metaeval_stats import Bootstrap, agreement, alpha, correlation, intervals
from .record import Difference, Estimate, Metric, Verdict

Kind = Literal["scores", "choices"]


def _kappa(x: np.ndarray, y: np.ndarray, kind: Kind) -> float | None:
    keep = ~(np.isnan(x) | np.isnan(y))
    if not keep.any():
        return None
    return cohen_kappa(
        x[keep].tolist(), y[keep].tolist(), weights="quadratic" if kind == "scores" else None
    )


def measure(metric: Metric, judged: np.ndarray, truth: np.ndarray, kind: Kind) -> float | None:
    """The metric between the judge's answers and the labels; None where undefined (too
    few answers, or a constant series)."""
    x, y = np.asarray(judged, dtype=float), np.asarray(truth, dtype=float)
    if metric == "alpha":
        return alpha(np.column_stack([x, y]), "interval" if kind == "scores" else "nominal")
    if metric == "kappa":
        return _kappa(x, y, kind)
    if metric == "spearman":
        return correlation("spearman", x, y)
    return agreement(x, y)


def mean_score(values: Sequence[float | None]) -> float | None:
    """A configuration's search score: the mean of its defined fold scores."""
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def verdict(value: float | None, p: float | None, confidence: float) -> Verdict:
    """`better` or `worse` when the swap test rejects "equally good" at 1 − confidence,
    else `same`. The percentile interval alone called two equal judges different 8% of
    the time at 18-24 test examples (at a stated 5%): it is too narrow at that size."""
    if value is None or p is None or p > 1 - confidence or value == 0:
        return "same"
    return "better" if value > 0 else "worse"


RowsGap = Callable[[np.ndarray, np.ndarray], np.ndarray]
SWAP_CHUNK = 256  # swaps drawn at once: a chunk's arrays are SWAP_CHUNK × test examples


def swap_p(
    base: np.ndarray, mine: np.ndarray, rows_gap: RowsGap, units: np.ndarray, boot: Bootstrap
) -> float | None:
    """Two-sided p-value of a paired swap test: if the two judges are equally good, which of
    them gave which answer on an example (on every example of a cluster, with `units`) is a
    coin toss. `rows_gap` gives aligned − baseline per row of two (swaps × examples) arrays,
    NaN where undefined; `boot.resamples` swaps seeded by `boot.seed`. None when the
    observed difference is undefined."""
    (observed,) = rows_gap(mine[None, :], base[None, :])
    if np.isnan(observed):
        return None
    rng = np.random.default_rng([boot.seed, 53])
    count = done = 0
    for start in range(0, boot.resamples, SWAP_CHUNK):
        size = min(SWAP_CHUNK, boot.resamples - start)
        swap = (rng.random((size, int(units.max()) + 1)) < 0.5)[:, units]
        found = rows_gap(np.where(swap, base, mine), np.where(swap, mine, base))
        found = found[~np.isnan(found)]
        done += len(found)
        count += int((np.abs(found) >= abs(observed) - 1e-12).sum())
    return (count + 1) / (done + 1)


def _accuracy_rows(judged: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """`agreement` of each row of `judged` with `truth`, at once; NaN for a row with none."""
    rated = ~np.isnan(judged) & ~np.isnan(truth)
    count = rated.sum(axis=1)
    hits = ((judged == truth) & rated).sum(axis=1)
    return np.where(count > 0, hits / np.maximum(count, 1), np.nan)


def rows_gap(metric: Metric, truth: np.ndarray, kind: Kind) -> RowsGap:
    """aligned − baseline per row for the swap test: vectorised for accuracy (the
    simulation tests' metric), one `measure` per row otherwise."""
    if metric == "accuracy":
        return lambda first, second: _accuracy_rows(first, truth) - _accuracy_rows(second, truth)

    def each(first: np.ndarray, second: np.ndarray) -> np.ndarray:
        out = np.full(len(first), np.nan)
        for row, (a, b) in enumerate(zip(first, second, strict=True)):
            x, y = measure(metric, a, truth, kind), measure(metric, b, truth, kind)
            if x is not None and y is not None:
                out[row] = x - y
        return out

    return each


def compare(
    ids: Sequence[str],
    baseline: np.ndarray,
    aligned: np.ndarray,
    truth: np.ndarray,
    metric: Metric,
    kind: Kind,
    boot: Bootstrap,
) -> tuple[Estimate, Estimate, Difference]:
    """Baseline and aligned judge on the same test examples: each one's metric with its
    interval, and aligned − baseline with the interval of the same resamples (paired)."""
    base, mine, labels = (np.asarray(a, dtype=float) for a in (baseline, aligned, truth))

    def one(judged: np.ndarray, rows: np.ndarray) -> float | None:
        return measure(metric, judged[rows], labels[rows], kind)

    def gap(rows: np.ndarray) -> float | None:
        first, second = one(mine, rows), one(base, rows)
        return None if first is None or second is None else first - second

    found = intervals(
        list(ids),
        {
            "baseline": lambda rows: one(base, rows),
            "aligned": lambda rows: one(mine, rows),
            "difference": gap,
        },
        boot,
    )
    every = np.arange(len(ids))
    n_base = int((~np.isnan(base)).sum())
    n_mine = int((~np.isnan(mine)).sum())
    keys = [(boot.clusters or {}).get(example, f"\0{example}") for example in ids]
    units = np.unique(keys, return_inverse=True)[1] if boot.cluster else every
    value = gap(every)
    p = swap_p(base, mine, rows_gap(metric, labels, kind), units, boot)
    return (
        Estimate(value=one(base, every), ci=found["baseline"], n=n_base),
        Estimate(value=one(mine, every), ci=found["aligned"], n=n_mine),
        Difference(
            value=value, ci=found["difference"], verdict=verdict(value, p, boot.confidence), p=p
        ),
    )
