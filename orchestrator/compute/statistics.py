"""Statistics a judge author reaches for: order statistics, spread, agreement, a bootstrap CI.

Missing values. `None` (and a float NaN, which is how pandas spells a gap) means "no
rating here" everywhere in this module:

- the descriptive functions (`median`, `minimum`, `maximum`, `stdev`, `spread`) skip it
  and, like `mean`, return null when nothing is left, so a per-example node whose judges
  all failed gives null instead of failing the example;
- `cohen_kappa` drops an item unless both raters rated it;
- `krippendorff_alpha` keeps the gap (α is defined with missing values) and ignores an
  item with fewer than two ratings, since it has no pair to compare;
- `bootstrap_mean_ci` resamples the present values only.

The agreement statistics and the bootstrap are dataset-level (graph `aggregates`), where
no usable data almost always means a wrong field name, so they raise a ValueError naming
the argument instead of returning null. They return null only when the statistic is
undefined on usable data: every rating in one category leaves nothing to tell agreement
from chance. Anything that is neither a value nor missing (a string among numbers, a
nested list) is a ValueError naming the argument and the position.

The arithmetic is `orchestrator.stats`' (agreement, bootstrap); these check and code what
a graph hands them. It and numpy are imported inside the functions so that importing the
package stays cheap.
"""

from __future__ import annotations

import math
import numbers
import statistics as pystats
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .registry import register

Label = str | int | float
LEVELS = ("nominal", "ordinal", "interval", "ratio")


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    # bool is an int in Python, but a true/false answer is not a score.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_list(values: Any, argument: str) -> list[Any]:
    """The argument as a list, or a ValueError naming it (a string or a mapping is no list)."""
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise ValueError(f"{argument} must be a list, got {type(values).__name__}")
    return list(values)


def _numbers(values: Any, argument: str) -> list[float]:
    """The present numbers of a list argument, in order; None and NaN are skipped."""
    found = []
    for position, value in enumerate(_as_list(values, argument)):
        if _is_missing(value):
            continue
        if not _is_number(value):
            raise ValueError(f"{argument}[{position}] is {value!r}, not a number")
        found.append(float(value))
    return found


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default, Hyndman–Fan type 7)."""
    at = q * (len(ordered) - 1)
    below = math.floor(at)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (at - below)


@register("median")
def median(values: Sequence[float | None]) -> float | None:
    """Median of the non-null values: a central score one outlying judge cannot drag.

    With an even count it is the mean of the two middle values; null when none is present.
    """
    present = _numbers(values, "values")
    return pystats.median(present) if present else None


@register("minimum")
def minimum(values: Sequence[float | None]) -> float | None:
    """Smallest non-null value, e.g. the harshest judge's score; null when none is present."""
    present = _numbers(values, "values")
    return min(present) if present else None


@register("maximum")
def maximum(values: Sequence[float | None]) -> float | None:
    """Largest non-null value, e.g. the most lenient judge's score; null when none is present."""
    present = _numbers(values, "values")
    return max(present) if present else None


@register("stdev")
def stdev(values: Sequence[float | None]) -> float | None:
    """Sample standard deviation (ddof = 1) of the non-null values: how much the scores vary.

    ddof = 1 divides by n − 1, the unbiased variance of a sample from a larger population
    (numpy's `np.std` defaults to ddof = 0). Null with fewer than two values.
    """
    present = _numbers(values, "values")
    return pystats.stdev(present) if len(present) >= 2 else None


@register("spread")
def spread(
    values: Sequence[float | None], measure: Literal["range", "iqr"] = "range"
) -> float | None:
    """How far apart the non-null values are: `range` (max − min) or `iqr` (Q3 − Q1).

    `range` suits a small jury (three judges scoring 1, 1, 4 are 3 points apart); `iqr`,
    with numpy's linear-interpolation quartiles, ignores the outer quarters of a long list.
    0 for one value, null when none is present.
    """
    if measure not in ("range", "iqr"):
        raise ValueError(f"measure must be 'range' or 'iqr', got {measure!r}")
    present = sorted(_numbers(values, "values"))
    if not present:
        return None
    if measure == "range":
        return present[-1] - present[0]
    return _quantile(present, 0.75) - _quantile(present, 0.25)


# -- agreement ---------------------------------------------------------------------------


def _check_label(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{where} is {value!r}; a rating must be a string or a number")


def _domain(
    seen: list[Any], categories: Sequence[Any] | None, ordered: bool, why: str
) -> list[Any]:
    """The categories in order: as given, else the distinct values seen.

    Unordered labels are sorted by their text only so that results do not depend on the
    order items arrive in; `ordered` statistics refuse labels that are not numbers unless
    `categories` gives the order.
    """
    if categories is not None:
        return list(categories)
    distinct = list(dict.fromkeys(seen))
    if all(_is_number(v) for v in distinct):
        return sorted(distinct)
    if ordered:
        raise ValueError(
            f"{why} needs ordered categories and the ratings are not all numbers: "
            "pass `categories` listing them from lowest to highest"
        )
    return sorted(distinct, key=lambda v: (type(v).__name__, str(v)))


def _checked_categories(categories: Any) -> list[Any] | None:
    if categories is None:
        return None
    found = _as_list(categories, "categories")
    if not found:
        raise ValueError("categories must not be empty")
    for position, value in enumerate(found):
        _check_label(value, f"categories[{position}]")
    if len(set(found)) != len(found):
        raise ValueError(f"categories has a repeated value: {found}")
    return found


def _in_categories(value: Any, where: str, allowed: list[Any] | None) -> None:
    if allowed is not None and value not in allowed:
        raise ValueError(f"{where} is {value!r}, which is not among categories {allowed}")


@register("cohen_kappa")
def cohen_kappa(
    rater_a: Sequence[Label | None],
    rater_b: Sequence[Label | None],
    weights: Literal["linear", "quadratic"] | None = None,
    categories: Sequence[Label] | None = None,
) -> float | None:
    """Cohen's kappa: how much two raters agree beyond chance (1 perfect, 0 chance level).

    `rater_a[i]` and `rater_b[i]` rate the same item; an item either left null is dropped.
    Without `weights` any disagreement counts fully (nominal labels); `linear` or
    `quadratic` weigh it by the distance between the categories' positions in `categories`
    (default: the numeric ratings seen, sorted) for ordinal scales. Null when chance
    agreement is already perfect (both raters always give one and the same label).
    """
    from ..stats import cohen_kappa_codes

    first = _as_list(rater_a, "rater_a")
    second = _as_list(rater_b, "rater_b")
    if len(first) != len(second):
        raise ValueError(
            f"rater_a has {len(first)} ratings and rater_b {len(second)}; "
            "they must rate the same items in the same order"
        )
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"weights must be null, 'linear' or 'quadratic', got {weights!r}")
    allowed = _checked_categories(categories)
    both: list[tuple[Any, Any]] = []
    for position, (x, y) in enumerate(zip(first, second, strict=True)):
        if _is_missing(x) or _is_missing(y):
            continue
        for value, name in ((x, "rater_a"), (y, "rater_b")):
            _check_label(value, f"{name}[{position}]")
            _in_categories(value, f"{name}[{position}]", allowed)
        both.append((x, y))
    if not both:
        raise ValueError("cohen_kappa: no item was rated by both rater_a and rater_b")
    domain = _domain(
        [v for pair in both for v in pair], allowed, weights is not None, f"weights={weights!r}"
    )
    index = {value: i for i, value in enumerate(domain)}
    first_codes = [index[x] for x, _ in both]
    second_codes = [index[y] for _, y in both]
    return cohen_kappa_codes(first_codes, second_codes, len(domain), weights)


def _item_values(item: Any, position: int) -> list[tuple[Any, str]]:
    """One item's present ratings, each with where it came from (for error messages)."""
    if isinstance(item, Mapping):
        entries = [(value, f"ratings[{position}][{key!r}]") for key, value in item.items()]
    elif isinstance(item, Sequence) and not isinstance(item, str | bytes):
        entries = [(value, f"ratings[{position}][{i}]") for i, value in enumerate(item)]
    else:
        raise ValueError(
            f"ratings[{position}] must be one item's ratings (a list, or a rater → rating "
            f"mapping), got {type(item).__name__}"
        )
    return [(value, where) for value, where in entries if not _is_missing(value)]


@register("krippendorff_alpha")
def krippendorff_alpha(
    ratings: Sequence[Sequence[Label | None] | Mapping[str, Label | None]],
    level: Literal["nominal", "ordinal", "interval", "ratio"],
    categories: Sequence[Label] | None = None,
) -> float | None:
    """Krippendorff's alpha: agreement beyond chance for any number of raters, gaps allowed.

    `ratings` has one entry per item: a list of that item's ratings or a rater → rating
    mapping (e.g. a jury's `scores`); null ratings are missing, and an item with fewer than
    two ratings is ignored. `level` has no default because it changes the answer: nominal
    (labels), ordinal (ranks: the distance counts how many ratings lie between two values),
    interval (squared difference) or ratio (squared difference relative to the sum; ratings
    ≥ 0). `categories` restricts the allowed ratings and, for ordinal, orders them.
    Null when every paired rating is the same value, or when no item has two ratings.
    """
    import numpy as np

    from ..stats import krippendorff_alpha_counts

    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    allowed = _checked_categories(categories)
    units: list[list[Any]] = []
    for position, item in enumerate(_as_list(ratings, "ratings")):
        present = _item_values(item, position)
        for value, where in present:
            _check_label(value, where)
            _in_categories(value, where, allowed)
            if level in ("interval", "ratio") and not _is_number(value):
                raise ValueError(f"{where} is {value!r}; level {level!r} needs numbers")
            if level == "ratio" and value < 0:
                raise ValueError(f"{where} is {value!r}; level 'ratio' needs ratings ≥ 0")
        if len(present) >= 2:  # a lone rating has nothing to agree with
            units.append([value for value, _ in present])
    if not units:
        return None  # nothing pairable (e.g. one sample per item): agreement is undefined
    domain = _domain(
        [v for unit in units for v in unit], allowed, level == "ordinal", "level 'ordinal'"
    )
    index = {value: i for i, value in enumerate(domain)}
    counts = np.zeros((len(units), len(domain)))
    for row, unit in enumerate(units):
        for value in unit:
            counts[row, index[value]] += 1
    return krippendorff_alpha_counts(counts, level, domain)


# -- bootstrap ---------------------------------------------------------------------------


@register("bootstrap_mean_ci", blocking=True)
def bootstrap_mean_ci(
    values: Sequence[float | None],
    level: float = 0.95,
    resamples: int = 9999,
    seed: int = 0,
    method: Literal["bca", "percentile"] = "bca",
) -> dict[str, Any]:
    """Mean of the non-null values with a seeded bootstrap confidence interval (BCa default).

    `bca` (bias-corrected and accelerated, Efron & Tibshirani ch. 14) shifts the interval
    for skew and is the better default for bounded scores; `percentile` takes the plain
    quantiles of the resampled means. Resamples are drawn as `scipy.stats.bootstrap` draws
    them, so the same seed gives the same interval. All-equal values give a zero-width
    interval. Returns {mean, ci_low, ci_high, level, method, n, resamples, seed}; with no
    value at all (every row left out, say), n is 0 and the mean and interval are null: an
    aggregate over no scored row reports that rather than failing the run's summary.
    """
    from ..stats import mean_interval

    if method not in ("bca", "percentile"):
        raise ValueError(f"method must be 'bca' or 'percentile', got {method!r}")
    if not _is_number(level) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a number between 0 and 1, got {level!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    data = _numbers(values, "values")
    result: dict[str, Any] = {
        "mean": None,
        "ci_low": None,
        "ci_high": None,
        "level": level,
        "method": method,
        "n": len(data),
        "resamples": resamples,
        "seed": seed,
    }
    if not data:
        return result
    mean, interval = mean_interval(data, level, resamples, seed, method)
    if interval is None:
        raise ValueError(
            "bootstrap_mean_ci: the BCa interval is undefined for these values "
            "(every resample falls on one side of the mean); use method 'percentile'"
        )
    result["mean"], result["ci_low"], result["ci_high"] = mean, interval.low, interval.high
    return result
