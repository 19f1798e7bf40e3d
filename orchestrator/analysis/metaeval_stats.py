"""Uncertainty for meta-eval: seeded bootstrap intervals over examples, and the human ceiling.

Every interval is a percentile bootstrap: whole examples (all label records sharing an id),
or whole clusters of examples (`--cluster FIELD`: every example of one user), are drawn
with replacement, the statistic is recomputed on each resample, and the interval
is the (1 − level)/2 and (1 + level)/2 quantiles of the values that are defined.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..compute import krippendorff_alpha
from ..stats import finite, kendall_tau_b, pearson, percentile_intervals, spearman
from .groups import cluster_labels

Statistic = Callable[[np.ndarray], float | None]


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: resample count, seed and confidence level; with `cluster`
    (a row field such as a user id) and `clusters` (example id → its value), whole
    clusters are drawn instead of examples."""

    resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95
    cluster: str | None = None
    clusters: Mapping[str, str] | None = None

    def describe(self) -> dict[str, Any]:
        """The settings as written to meta_eval.json."""
        found: dict[str, Any] = {
            "method": "percentile",
            "unit": "example" if self.cluster is None else "cluster",
            "resamples": self.resamples,
            "seed": self.seed,
            "confidence": self.confidence,
        }
        if self.cluster is not None:
            found["cluster"] = self.cluster
            found["clusters"] = len(set((self.clusters or {}).values()))
        return found

    def units(self, ids: Sequence[str]) -> list[str]:
        """What is drawn for each record: its example id, or its example's cluster."""
        if self.clusters is None:
            return list(ids)
        return cluster_labels(ids, self.clusters)


def intervals(
    ids: Sequence[str], statistics: dict[str, Statistic], boot: Bootstrap
) -> dict[str, list[float] | None]:
    """A percentile interval per statistic, drawing records that share an id (or, with
    `boot.clusters`, an example's cluster) together (`stats.percentile_intervals`).

    Resamples where a statistic is undefined (None) are left out; none left gives None.
    """
    found = percentile_intervals(
        boot.units(ids), statistics, boot.resamples, boot.seed, boot.confidence
    )
    return {name: None if ci is None else [ci.low, ci.high] for name, ci in found.items()}


# -- statistics of two aligned series (NaN = not rated) -----------------------------------


def _both(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep], y[keep]


def correlation(kind: str, x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson, Spearman or Kendall tau-b; None under 3 pairs or for a constant series."""
    x, y = _both(x, y)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    if kind == "kendall":
        return finite(kendall_tau_b(x, y))
    return finite(spearman(x, y) if kind == "spearman" else pearson(x, y))


def mae(x: np.ndarray, y: np.ndarray) -> float | None:
    """Mean absolute difference over the pairs both rated."""
    x, y = _both(x, y)
    return float(np.abs(x - y).mean()) if len(x) else None


def agreement(x: np.ndarray, y: np.ndarray) -> float | None:
    """Share of the pairs both rated on which the two give the same code."""
    x, y = _both(x, y)
    return float((x == y).mean()) if len(x) else None


def alpha(columns: np.ndarray, level: str) -> float | None:
    """Krippendorff's α over the rows of a units × raters matrix (NaN = not rated)."""
    return krippendorff_alpha(columns.tolist(), level)


def pair_statistics(kind: str, level: str) -> dict[str, Callable[..., float | None]]:
    """The agreement statistics for two series: correlations and α, or agreement and α."""
    found: dict[str, Callable[..., float | None]] = {}
    if kind == "scores":
        for name in ("pearson", "spearman", "kendall"):
            found[name] = partial(correlation, name)
    else:
        found["agreement"] = agreement
    found["alpha"] = lambda x, y: alpha(np.column_stack([x, y]), level)
    return found


def codes(values: Sequence[Any]) -> dict[str, float]:
    """Choice labels → numeric codes, matching case- and space-insensitively."""
    names = sorted({str(v).strip().casefold() for v in values})
    return {name: float(i) for i, name in enumerate(names)}


def code(value: Any, table: dict[str, float]) -> float:
    """One choice label's code (NaN when absent)."""
    return math.nan if value is None else table[str(value).strip().casefold()]


def _rows(f: Callable[..., float | None], x: np.ndarray, y: np.ndarray, r: np.ndarray) -> Any:
    return f(x[r], y[r])


def score_intervals(
    ids: list[str], predicted: list[float], truth: list[float], level: str, boot: Bootstrap
) -> dict[str, Any]:
    """Intervals for a score section's correlations and error, plus α with its interval."""
    x, y = np.asarray(predicted, dtype=float), np.asarray(truth, dtype=float)
    statistics: dict[str, Statistic] = {
        name: partial(_rows, partial(correlation, name), x, y)
        for name in ("pearson", "spearman", "kendall")
    }
    statistics["mae"] = lambda r: mae(x[r], y[r])
    statistics["alpha"] = lambda r: alpha(np.column_stack([x[r], y[r]]), level)
    out: dict[str, Any] = {f"{k}_ci": v for k, v in intervals(ids, statistics, boot).items()}
    out["alpha"] = statistics["alpha"](np.arange(len(ids))) if ids else None
    out["alpha_level"] = level
    return out


def choice_intervals(records: list[dict[str, Any]], boot: Bootstrap) -> dict[str, Any]:
    """Accuracy intervals (overall, per key, per pair, over keys) and nominal α with its own."""
    correct = np.asarray([r["correct"] for r in records], dtype=float)
    decisive = np.asarray([not r["tie"] for r in records])
    table = codes([r["predicted"] for r in records] + [r["truth"] for r in records])
    judged = np.asarray([code(r["predicted"], table) for r in records])
    truth = np.asarray([code(r["truth"], table) for r in records])

    def rate(rows: np.ndarray, where: np.ndarray | None = None) -> float | None:
        chosen = rows if where is None else rows[where[rows]]
        return float(correct[chosen].mean()) if len(chosen) else None

    keys = {k: np.asarray([r["key"] == k for r in records]) for k in _names(records, "key")}
    pairs = {p: np.asarray([r["pair"] == p for r in records]) for p in _names(records, "pair")}
    statistics: dict[str, Statistic] = {
        "accuracy": rate,
        "accuracy_decisive": lambda r: rate(r, decisive),
        "alpha": lambda r: alpha(np.column_stack([judged[r], truth[r]]), "nominal"),
    }
    for k, mask in keys.items():
        statistics[f"key:{k}"] = partial(rate, where=mask)
    for p, mask in pairs.items():
        statistics[f"pair:{p}"] = partial(rate, where=mask)
    if keys:
        statistics["macro_accuracy"] = lambda r: _mean([rate(r, m) for m in keys.values()])
    cis = intervals([r["id"] for r in records], statistics, boot)
    out: dict[str, Any] = {
        "ci": cis,
        "alpha": statistics["alpha"](np.arange(len(records))) if records else None,
        "alpha_level": "nominal",
    }
    return out


def _names(records: list[dict[str, Any]], field: str) -> list[str]:
    return sorted({r[field] for r in records if r[field] is not None})


# -- the human ceiling --------------------------------------------------------------------


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def consensus(ratings: np.ndarray, kind: str) -> np.ndarray:
    """Per unit the humans' mean score, or their majority choice (NaN when tied)."""
    if kind == "scores":
        with np.errstate(invalid="ignore"):
            return np.nanmean(ratings, axis=1)
    out = np.full(len(ratings), np.nan)
    for row, unit in enumerate(ratings):
        present = unit[~np.isnan(unit)]
        values, counts = np.unique(present, return_counts=True)
        if len(counts) and (counts == counts.max()).sum() == 1:
            out[row] = values[counts.argmax()]
    return out


def human_ceiling(
    ids: list[str],
    judge: np.ndarray,
    ratings: np.ndarray,
    annotators: list[str],
    kind: str,
    level: str,
    boot: Bootstrap,
) -> dict[str, Any]:
    """Human–human, judge–human (means over rater pairs) and judge–consensus agreement.

    `ratings` is units × annotators, NaN where a human gave no label; each figure has an interval.
    """
    crowd = consensus(ratings, kind)
    measures = pair_statistics(kind, level)
    human_pairs = list(itertools.combinations(range(len(annotators)), 2))

    def human_human(name: str) -> Statistic:
        f = measures[name]
        return lambda rows: _mean([f(ratings[rows, a], ratings[rows, b]) for a, b in human_pairs])

    def judge_human(name: str) -> Statistic:
        f = measures[name]
        return lambda rows: _mean(
            [f(judge[rows], ratings[rows, a]) for a in range(len(annotators))]
        )

    def judge_consensus(name: str) -> Statistic:
        f = measures[name]
        return lambda rows: f(judge[rows], crowd[rows])

    groups = {"human_human": human_human, "judge_human": judge_human}
    groups["judge_consensus"] = judge_consensus
    statistics: dict[str, Statistic] = {
        f"{group}.{name}": make(name) for group, make in groups.items() for name in measures
    }
    statistics["alpha_all_humans"] = lambda rows: alpha(ratings[rows], level)
    every = np.arange(len(ids))
    cis = intervals(ids, statistics, boot)
    out: dict[str, Any] = {
        "annotators": annotators,
        "units": len(ids),
        "alpha_level": level,
        "alpha_all_humans": statistics["alpha_all_humans"](every),
        "alpha_all_humans_ci": cis["alpha_all_humans"],
    }
    for group in groups:
        out[group] = {}
        for name in measures:
            out[group][name] = statistics[f"{group}.{name}"](every)
            out[group][f"{name}_ci"] = cis[f"{group}.{name}"]
    out["verdicts"] = {name: _verdict(out, name) for name in measures}
    out["verdict"] = _sentence(out, "alpha")
    return out


def _verdict(ceiling: dict[str, Any], name: str) -> str | None:
    """Whether judge–human agreement is below, within or above the human–human interval."""
    judge, ci = ceiling["judge_human"][name], ceiling["human_human"][f"{name}_ci"]
    if judge is None or ci is None:
        return None
    return "below" if judge < ci[0] else "above" if judge > ci[1] else "within"


def _sentence(ceiling: dict[str, Any], name: str) -> str:
    verdict = ceiling["verdicts"][name]
    judge, ci = ceiling["judge_human"][name], ceiling["human_human"][f"{name}_ci"]
    if verdict is None:
        return f"{name}: undefined for the judge or the humans, no comparison"
    return (
        f"judge–human {name} {judge:.3f} is {verdict} the human–human range "
        f"[{ci[0]:.3f}, {ci[1]:.3f}]"
    )
