"""Run view of pointwise scores (any graph whose outputs are LLM integer or number fields,
such as `judge.content`): one histogram per score field on the scale its schema declares,
so an empty end of the scale shows as empty."""

from __future__ import annotations

from .render import histogram
from .svg import figure
from .values import finite
from .views import RunContext, register_run_view


def score_histograms(context: RunContext) -> str | None:
    parts = []
    ok = context.ok()
    for score in context.score_fields:
        values = [float(v) for line in ok if finite(v := line.outputs.get(score.output))]
        if not values:
            continue
        svg = histogram(values, score.output, bounds=(score.min, score.max), css="hist field")
        scale = (
            f"declared {score.type} {score.min:g}–{score.max:g}"
            if score.min is not None and score.max is not None
            else f"declared {score.type}"
        )
        parts.append(figure(f"{score.output} ({score.node}; {scale})", svg))
    return "".join(parts) or None


register_run_view("score_histograms", "Score distributions", score_histograms)
