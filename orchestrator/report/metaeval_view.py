"""Run view of a meta-evaluation (RUN_DIR/meta_eval.json, written by `orchestrator
meta-eval`): each agreement statistic with its bootstrap interval, the run beside its
baseline and, with several annotators, the human–human ceiling."""

from __future__ import annotations

from typing import Any

from .svg import Estimate, figure, intervals
from .views import RunContext, register_run_view

SCORE_STATS = ("pearson", "spearman", "kendall", "alpha")
CHOICE_STATS = ("accuracy", "accuracy_decisive", "macro_accuracy", "alpha")


def _point(section: dict[str, Any], stat: str) -> float | None:
    value = section.get(stat)
    if isinstance(value, dict):  # {r, p}
        value = value.get("r")
    return float(value) if isinstance(value, int | float) else None


def _estimate(label: str, section: dict[str, Any], stat: str, series: int) -> Estimate | None:
    point = _point(section, stat)
    if point is None:
        return None
    ci = section.get(f"{stat}_ci")
    low, high = (ci[0], ci[1]) if isinstance(ci, list) and len(ci) == 2 else (None, None)
    return Estimate(label, point, low, high, series)


def _rows(section: dict[str, Any], stats: tuple[str, ...]) -> list[Estimate]:
    rows = []
    sides = [(section, 0), (section.get("baseline") or {}, 1)]
    humans = (section.get("humans") or {}).get("human_human") or {}
    for stat in stats:
        for source, series in sides:
            found = _estimate(stat, source, stat, series)
            if found is not None:
                rows.append(found)
        ceiling = _estimate(stat, humans, stat, 2)
        if ceiling is not None:
            rows.append(ceiling)
    for key, entry in (section.get("per_key") or {}).items():
        base = ((section.get("baseline") or {}).get("per_key") or {}).get(key) or {}
        for source, series in ((entry, 0), (base, 1)):
            found = _estimate(f"accuracy · {key}", source, "accuracy", series)
            if found is not None:
                rows.append(found)
    return rows


def meta_eval(context: RunContext) -> str | None:
    report = context.meta_eval
    if not report:
        return None
    parts = []
    for name, stats in (("scores", SCORE_STATS), ("choices", CHOICE_STATS)):
        section = report.get(name)
        if not isinstance(section, dict):
            continue
        rows = _rows(section, stats)
        if not rows:
            continue
        baseline = (section.get("baseline") or {}).get("field")
        used = {row.series for row in rows}
        names = (
            f"the run ({section.get('field', '?')})",
            f"baseline ({baseline})",
            "human vs human (the ceiling)",
        )
        legend = tuple(name if series in used else "" for series, name in enumerate(names))
        boot = report.get("bootstrap") or {}
        note = (
            f"Against {report.get('labels', 'the labels')}: n {section.get('n', '?')}, "
            f"{section.get('missing', 0)} labels without an ok result. Intervals: "
            f"{boot.get('method', '?')} bootstrap, {boot.get('resamples', '?')} resamples "
            f"by {boot.get('unit', '?')}, seed {boot.get('seed', '?')}."
        )
        svg = intervals(rows, "agreement with the labels", reference=0.0, legend=legend)
        parts.append(figure(f"meta-evaluation · {name}", svg, note))
    return "".join(parts) or None


register_run_view("meta_eval", "Agreement with human labels", meta_eval)
