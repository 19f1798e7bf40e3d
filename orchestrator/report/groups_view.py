"""Run view of results per language (any run whose rows carry `language`, as an output or
an input): each numeric output's mean and interval per language, the run's mean marked.

The numbers come from `analysis.groups`, the grouping `summarize --by` and `compare --by`
use, so the page and the terminal agree.
"""

from __future__ import annotations

from ..analysis import Grouping, group_lines, numeric_outputs
from ..errors import ConfigurationError
from .svg import Estimate, figure, intervals
from .values import finite
from .views import RunContext, register_run_view

GROUP_FIELDS = ("language",)
MAX_OUTPUTS = 6  # figures per field: a run with dozens of numeric outputs shows the first
MIN_ROWS = 2  # a language needs this many rows for an interval to compare


def _grouping(context: RunContext, by: str) -> Grouping | None:
    """The ok rows by `by`, when at least two of its values have rows enough to compare."""
    ok = context.ok()
    scored = [s.output for s in context.score_fields]
    names = scored or numeric_outputs(ok, skip=(by,))
    if not names:
        return None
    try:
        grouping = group_lines(ok, by, context.inputs or None, names[:MAX_OUTPUTS])
    except ConfigurationError:
        return None  # no row carries the field: not a run this view is for
    if sum(group.n >= MIN_ROWS for group in grouping.groups) < 2:
        return None
    return grouping


def per_group(context: RunContext) -> str | None:
    """One dot-and-whisker figure per numeric output, a row per value of the field."""
    bounds = {s.output: (s.min, s.max) for s in context.score_fields}
    parts = []
    for by in GROUP_FIELDS:
        grouping = _grouping(context, by)
        if grouping is None:
            continue
        names = [found.output for found in grouping.groups[0].estimates]
        total = sum(group.n for group in grouping.groups) + grouping.ungrouped
        for name in names:
            rows = [
                Estimate(f"{group.key} (n {found.n})", found.mean, found.low, found.high)
                for group in grouping.groups
                if (found := group.estimate(name)).mean is not None
            ]
            if not rows:
                continue
            values = [float(v) for line in context.ok() if finite(v := line.flat().get(name))]
            overall = sum(values) / len(values) if values else None
            lo, hi = bounds.get(name, (None, None))
            svg = intervals(rows, f"mean {name}", lo=lo, hi=hi, reference=overall)
            note = (
                f"{grouping.level:.0%} intervals ({_methods(grouping, name)}, seed "
                f"{grouping.seed}); the line marks the mean over all {len(values)} rows."
            )
            if grouping.ungrouped:
                note += f" {grouping.ungrouped} of {total} rows carry no {by} and are left out."
            parts.append(figure(f"{name} by {by}", svg, note))
    return "".join(parts) or None


def _methods(grouping: Grouping, name: str) -> str:
    methods = {
        found.method
        for group in grouping.groups
        if (found := group.estimate(name)).method is not None
    }
    words = {"bca": "bootstrap BCa", "percentile": "bootstrap percentile", "wilson": "Wilson"}
    return " / ".join(words[m] for m in sorted(methods)) or "none"


register_run_view("groups", "Per language", per_group)
