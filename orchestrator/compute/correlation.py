"""Correlation between two lists of scores inside a run: Pearson, Spearman and Kendall's tau-b.

What a two-judge protocol reports as its agreement on a numeric scale (judge A's scores
against judge B's, a judge against human labels), as an aggregate over `results` or as a
compute node over two lists of one example. `compare` correlates across runs; these work
on the values of one run. Each checks its arguments and shapes the record; the arithmetic
is `orchestrator.stats.correlation_test`, the one compare and meta-eval use.

Missing values: `x[i]` and `y[i]` are one item; an item where either is None (or a float
NaN, how pandas spells a gap) is dropped, as scipy's `nan_policy='omit'` would drop it for
paired data. Ties are kept: Spearman ranks tied values by their average rank, Kendall's
tau-b corrects for ties in both lists. Each returns `{"statistic", "p_value", "n"}` (`n`:
the pairs used); the statistic and p-value are null when the correlation is undefined
(either list constant over the pairs used). Lists of different lengths, a value that is
not a number, or fewer than two complete pairs (almost always a wrong field name) raise a
ValueError naming the argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from .registry import register
from .statistics import _as_list, _is_missing, _is_number

Method = Literal["pearson", "spearman", "kendall"]


def _pairs(x: Any, y: Any) -> tuple[list[float], list[float]]:
    """The complete pairs of two aligned lists, as floats; ValueError naming what is wrong."""
    first, second = _as_list(x, "x"), _as_list(y, "y")
    if len(first) != len(second):
        raise ValueError(
            f"x has {len(first)} values and y {len(second)}; they must score the same items "
            "in the same order"
        )
    kept_x: list[float] = []
    kept_y: list[float] = []
    for position, (a, b) in enumerate(zip(first, second, strict=True)):
        if _is_missing(a) or _is_missing(b):
            continue
        for value, name in ((a, "x"), (b, "y")):
            if not _is_number(value):
                raise ValueError(f"{name}[{position}] is {value!r}, not a number")
        kept_x.append(float(a))
        kept_y.append(float(b))
    if len(kept_x) < 2:
        raise ValueError(
            f"{len(kept_x)} item(s) have a number in both x and y; a correlation needs at "
            "least 2 (is a field name wrong?)"
        )
    return kept_x, kept_y


def _correlate(method: Method, x: Any, y: Any) -> dict[str, Any]:
    """The statistic and its p-value over the complete pairs of x and y."""
    from ..stats import correlation_test, finite

    xs, ys = _pairs(x, y)
    n = len(xs)
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        # A constant list has no spread to correlate.
        return {"statistic": None, "p_value": None, "n": n}
    statistic, p_value = correlation_test(method, xs, ys)
    return {"statistic": finite(statistic), "p_value": finite(p_value), "n": n}


@register("pearson")
def pearson(x: Sequence[float | None], y: Sequence[float | None]) -> dict[str, Any]:
    """Pearson's r between two aligned lists of numbers (linear agreement, -1 to 1).

    `x[i]` and `y[i]` score the same item; an item null (or NaN) in either is dropped.
    Returns {"statistic": r, "p_value", "n": pairs used}; r and p are null when either
    list is constant. Same value as `scipy.stats.pearsonr` on the complete pairs.
    """
    return _correlate("pearson", x, y)


@register("spearman")
def spearman(x: Sequence[float | None], y: Sequence[float | None]) -> dict[str, Any]:
    """Spearman's rho between two aligned lists of numbers (agreement in order, -1 to 1).

    `x[i]` and `y[i]` score the same item; an item null (or NaN) in either is dropped; tied
    values share their average rank. Returns {"statistic": rho, "p_value", "n"}; null
    when either list is constant. Same value as `scipy.stats.spearmanr`.
    """
    return _correlate("spearman", x, y)


@register("kendall_tau")
def kendall_tau(x: Sequence[float | None], y: Sequence[float | None]) -> dict[str, Any]:
    """Kendall's tau-b between two aligned lists of numbers (pairs in the same order).

    `x[i]` and `y[i]` score the same item; an item null (or NaN) in either is dropped.
    tau-b corrects for ties in either list, which a rating scale has many of. Returns
    {"statistic": tau, "p_value", "n"}; null when either list is constant. Same value as
    `scipy.stats.kendalltau(x, y, variant="b")`.
    """
    return _correlate("kendall", x, y)
