"""Run views of a jury (PerQ, and any graph aggregating with `jury_agreement`): how often
each two judges gave the same score, and how the jury's labels are distributed."""

from __future__ import annotations

from typing import Any

from .svg import Cell, Column, columns, figure, matrix, num
from .views import RunContext, register_run_view


def _pairs(value: dict[str, Any]) -> dict[tuple[str, str], float]:
    """`pairwise_agreement`'s "a~b" entries as judge pairs (its `mean` is not a pair)."""
    found: dict[tuple[str, str], float] = {}
    table = value.get("pairwise_agreement")
    for key, rate in (table or {}).items():
        first, sep, second = str(key).partition("~")
        if sep and rate is not None:
            found[(first, second)] = float(rate)
    return found


def _resting(value: dict[str, Any]) -> str:
    """How many items κ and α rest on (an older summary without the counts: nothing)."""
    if value.get("fleiss_kappa_items") is None:
        return ""
    said = f" on the {value['fleiss_kappa_items']} items every judge scored"
    if value.get("alpha_items") is not None:
        said += (
            f"; Krippendorff's α {num(value.get('krippendorff_alpha'))} on the "
            f"{value['alpha_items']} items two judges or more scored"
        )
    return said


def agreement_matrix(context: RunContext) -> str | None:
    """Judges by judges, each cell the share of items the two scored alike."""
    parts = []
    for aggregate in context.by_function("jury_agreement"):
        value = aggregate.value
        pairs = _pairs(value)
        if not pairs:
            continue
        judges = [str(j) for j in value.get("judges") or sorted({j for p in pairs for j in p})]
        index = {name: i for i, name in enumerate(judges)}
        cells: dict[tuple[int, int], Cell] = {}
        for (a, b), rate in pairs.items():
            if a in index and b in index:
                title = f"{a} and {b} gave the same score on {num(rate)} of the items both scored"
                cells[(index[a], index[b])] = Cell(f"{rate:.2f}", rate, title)
                cells[(index[b], index[a])] = Cell(f"{rate:.2f}", rate, title)
        note = (
            f"{value.get('items', '?')} items; all judges agreed on "
            f"{num(value.get('full_agreement'))}; Fleiss' κ {num(value.get('fleiss_kappa'))}"
            f"{_resting(value)}; "
            f"mean pairwise agreement {num((value.get('pairwise_agreement') or {}).get('mean'))}."
        )
        svg = matrix(judges, judges, cells, "share of items scored alike", corner="judge")
        parts.append(figure(f"{aggregate.name} · agreement between judges", svg, note))
    return "".join(parts) or None


def label_distribution(context: RunContext) -> str | None:
    """The jury's labels: how many items got each."""
    parts = []
    for aggregate in context.by_function("jury_agreement"):
        counts = aggregate.value.get("label_distribution")
        if not isinstance(counts, dict) or not counts:
            continue
        shares = aggregate.value.get("label_share") or {}
        cols = [
            Column(
                str(label), int(count), f"label {label}: {count} items ({num(shares.get(label))})"
            )
            for label, count in counts.items()
        ]
        abstain = aggregate.value.get("abstain_rate") or {}
        note = "Abstain rate per judge: " + ", ".join(f"{j} {num(r)}" for j, r in abstain.items())
        svg = columns(cols, "items per label")
        parts.append(figure(f"{aggregate.name} · label distribution", svg, note))
    return "".join(parts) or None


register_run_view("jury_agreement", "Jury agreement", agreement_matrix, shows=("jury_agreement",))
register_run_view("jury_labels", "Label distribution", label_distribution)
