"""Run view of a style-ensemble run (any graph aggregating with `style_accuracy`): each
metric's accuracy at telling the same author apart, and each ensemble's beside them."""

from __future__ import annotations

from typing import Any

from .svg import Bar, Cell, figure, hbars, matrix
from .views import RunContext, register_run_view


def _members(value: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, its accuracy entry, is an ensemble) for every available metric and ensemble."""
    found = []
    for group, ensemble in (("metrics", False), ("ensembles", True)):
        for name, entry in (value.get(group) or {}).items():
            if isinstance(entry, dict) and entry.get("available"):
                found.append((str(name), entry, ensemble))
    return found


def style_accuracy(context: RunContext) -> str | None:
    """Overall accuracy per metric and ensemble, then per setting."""
    parts = []
    for aggregate in context.by_function("style_accuracy"):
        value = aggregate.value
        members = _members(value)
        if not members:
            continue
        bars = [
            Bar(
                name,
                entry.get("overall"),
                f"n {entry.get('n', '?')}, {entry.get('ties_or_abstentions', 0)} ties",
                "ensemble" if ensemble else "",
            )
            for name, entry, ensemble in members
        ]
        missing = [
            f"{name} ({entry.get('reason', 'unavailable')})"
            for group in ("metrics", "ensembles")
            for name, entry in (value.get(group) or {}).items()
            if isinstance(entry, dict) and not entry.get("available")
        ]
        note = "Darker bars are ensembles; the line marks chance (0.5)." + (
            " Not available: " + "; ".join(missing) if missing else ""
        )
        svg = hbars(bars, "accuracy over every row", lo=0.0, hi=1.0, reference=0.5)
        parts.append(figure(f"{aggregate.name} · per metric and ensemble", svg, note))
        settings = [str(s) for s in (value.get("settings") or {})]
        if settings:
            cells = {
                (i, j): Cell(f"{rate:.2f}", rate, f"{name} in {setting}: accuracy {rate:.4g}")
                for i, (name, entry, _) in enumerate(members)
                for j, setting in enumerate(settings)
                if (rate := (entry.get("per_setting") or {}).get(setting)) is not None
            }
            svg = matrix([m[0] for m in members], settings, cells, "accuracy per setting")
            parts.append(figure(f"{aggregate.name} · per setting", svg))
    return "".join(parts) or None


register_run_view("style_accuracy", "Accuracy of the metrics", style_accuracy, ("style_accuracy",))
