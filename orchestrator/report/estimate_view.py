"""Run view "Estimates": the estimates (`estimate --keep`) and label plans (`label-plan
--keep`) kept in the run folder, PPI++ beside the labels-only and judge-only numbers."""

from __future__ import annotations

from html import escape

from ..analysis import Estimation, LabelPlan, kept_estimates, kept_plans
from .render import html_table
from .views import RunContext, register_run_view

COLUMNS = ["quantity", "PPI++", "classical (labels)", "naive (judge)", "λ", "worth labels"]
WHOLE = {"mean": "mean", "difference": "mean difference B − A", "win_rate": "win rate"}


def _interval(value: float, ci: tuple[float, float]) -> str:
    return escape(f"{value:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]")


def _estimate(found: Estimation) -> str:
    """One kept estimate: a heading saying what went in, and a row per quantity."""
    against = f" − {found.other_run}" if found.other_run else ""
    side = f", win rate of {found.win}" if found.win else ""
    lean = "labels weighted by 1/π of a plan" if found.weighted else "labels drawn at random"
    cluster = f", {found.clusters} clusters of {found.cluster}" if found.cluster else ""
    head = (
        f"<h4>{escape(found.field)}{escape(side)}{escape(against)}: {found.n_labels} labels, "
        f"{found.n_examples} judged examples ({escape(lean + cluster)}; "
        f"{escape(found.interval)} interval, {1 - found.alpha:.0%})</h4>"
    )
    rows = [
        [
            escape(WHOLE.get(found.kind, "mean") if name is None else f"share of {name}"),
            _interval(part.ppi.value, part.ppi.ci),
            _interval(part.classical.value, part.classical.ci),
            _interval(part.naive.value, part.naive.ci),
            f"{part.lam:.2f}",
            f"{part.effective_labels:.0f}",
        ]
        for name, part in found.parts()
    ]
    notes = "".join(f"<li>{escape(note)}</li>" for note in found.notes)
    needed = ""
    if found.width is not None:
        reach = "out of reach" if found.labels_needed is None else f"{found.labels_needed} labels"
        needed = (
            f"<p>for an interval {found.width:g} wide: PPI++ needs {escape(reach)}, the "
            f"labels alone {found.labels_needed_classical}</p>"
        )
    listed = f'<ul class="card-flags">{notes}</ul>' if notes else ""
    return head + html_table(COLUMNS, rows, numeric=(4, 5)) + needed + listed


def _plan(plan: LabelPlan) -> str:
    """One kept label plan: how many to label, of how many, and what leaned it."""
    lean = "uniform" if plan.node is None else f"leaning on node {plan.node}'s {plan.source}"
    chances = [float(line["probability"]) for line in plan.plan] or [0.0]
    where = f", written to {plan.out}" if plan.out else ""
    return (
        f"<h4>label plan for {escape(plan.field)}</h4><p>{len(plan.plan)} of {plan.examples} "
        f"examples to label ({escape(lean)}; inclusion probabilities {min(chances):.3g} to "
        f"{max(chances):.3g}; seed {plan.seed}{escape(where)})</p>"
    )


def estimates_panel(context: RunContext) -> str | None:
    """The run's kept estimates and label plans, None when it has neither."""
    if context.run_dir is None:
        return None
    estimates, plans = kept_estimates(context.run_dir), kept_plans(context.run_dir)
    if not estimates and not plans:
        return None
    parts = [_estimate(found) for found in estimates] + [_plan(plan) for plan in plans]
    return f'<div class="judge-card">{"".join(parts)}</div>'


register_run_view("estimates", "Estimates", estimates_panel)
