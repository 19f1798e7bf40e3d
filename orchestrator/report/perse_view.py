"""Run views of PERSE runs, recognised by their outputs: per reviewer, the score the judge
predicted beside the reviewer's profile mean (pointwise), or the judge's answer per aspect
beside the reviewer's own earlier answer (pairwise)."""

from __future__ import annotations

from .svg import Cell, Estimate, figure, intervals, matrix
from .values import finite
from .views import RunContext, register_run_view

PREDICTED, BASELINE = "score", "profile_mean"  # perse_pointwise.yaml's outputs
CHOICES, PROFILE = "choices", "profile_choices"  # perse_pairwise.yaml's outputs


def reviewer_scores(context: RunContext) -> str | None:
    """One row per reviewer: the judge's score and the mean of the reviewer's profile."""
    rows = []
    for line in context.ok():
        score, mean = line.outputs.get(PREDICTED), line.outputs.get(BASELINE)
        if not finite(score) or not finite(mean):
            continue
        rows.append(Estimate(line.id, float(score), series=0))
        rows.append(Estimate(line.id, float(mean), series=1))
    if not rows:
        return None
    svg = intervals(
        rows, "score", legend=("judge's predicted score", "the reviewer's profile mean")
    )
    note = (
        "Each row is one reviewer (an example). The profile mean is the paper's baseline; "
        "agreement with the reviewers' true scores is in the meta-evaluation panel once "
        "`orchestrator meta-eval` has run."
    )
    return figure("per reviewer", svg, note)


def reviewer_choices(context: RunContext) -> str | None:
    """Reviewers by aspects: the judge's answer, shaded where it repeats the reviewer's
    answer to the same aspect in their profile (the copy-the-profile baseline)."""
    lines = [
        line
        for line in context.ok()
        if isinstance(line.outputs.get(CHOICES), dict)
        and isinstance(line.outputs.get(PROFILE), dict)
    ]
    if not lines:
        return None
    aspects = list(dict.fromkeys(a for line in lines for a in line.outputs[CHOICES]))
    cells: dict[tuple[int, int], Cell] = {}
    for i, line in enumerate(lines):
        judged, profile = line.outputs[CHOICES], line.outputs[PROFILE]
        for j, aspect in enumerate(aspects):
            if aspect not in judged:
                continue
            same = profile.get(aspect) == judged[aspect]
            title = (
                f"{line.id} · {aspect}: judge {judged[aspect]}, the reviewer's profile "
                f"{profile.get(aspect, 'n/a')}"
            )
            cells[(i, j)] = Cell(str(judged[aspect]), 1.0 if same else 0.0, title)
    svg = matrix([line.id for line in lines], aspects, cells, "", corner="reviewer")
    note = "Shaded: the judge gave the answer the reviewer gave for this aspect in their profile."
    return figure("per reviewer and aspect", svg, note)


register_run_view("perse_scores", "Per-reviewer scores", reviewer_scores)
register_run_view("perse_choices", "Per-reviewer answers", reviewer_choices)
