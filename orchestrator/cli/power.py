"""The power verb: how many examples (or users) a paired comparison needs, from a pilot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .app import app, console, fail


@app.command()
def power(
    runs: Annotated[
        list[Path],
        typer.Argument(help="Pilot: two runs over the same examples (RUN_A RUN_B), or one."),
    ],
    diff: Annotated[float | None, typer.Option("--diff", help="Mean difference to detect.")] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Numeric output (default: the first shared)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="Row field examples are nested in (e.g. user): count clusters."),
    ] = None,
    alpha: Annotated[float, typer.Option(help="Two-sided significance level.")] = 0.05,
    target: Annotated[float, typer.Option("--power", help="Wanted power.")] = 0.8,
    correlation: Annotated[
        float, typer.Option(help="One run only: assumed correlation of the two systems.")
    ] = 0.0,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    labels: Annotated[
        list[Path] | None,
        typer.Option(help="Pilot labels (one file per run): how many labels for --width?"),
    ] = None,
    width: Annotated[
        float | None, typer.Option(help="With --labels: the 95% interval width wanted.")
    ] = None,
) -> None:
    """Examples (or clusters) a paired comparison needs to detect --diff at the wanted power;
    with --labels and --width, the human labels `estimate` needs for an interval that wide."""
    from ..api import power as estimate

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if labels or width is not None:
        _label_question(runs, labels or [], width, output, format)
        return
    if diff is None:
        fail("--diff is required (or --labels with --width: how many labels for an interval)")
    try:
        found = estimate(
            *runs,
            diff=diff,
            output=output,
            cluster=cluster,
            alpha=alpha,
            target=target,
            correlation=correlation,
        )
    except OrchestratorError as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    unit = f"clusters ({escape(found.cluster or '')})" if found.unit == "clusters" else "examples"
    console.print(
        f"[bold]{found.n_required}[/] {unit} to detect a mean difference of {found.diff:g} in "
        f"{escape(found.output)} with {found.power:.0%} power at α = {found.alpha:g} "
        f"(two-sided; {found.achieved_power:.1%} reached)",
        soft_wrap=True,
    )
    if found.power_range is not None:
        low, high = found.power_range
        console.print(
            f"σ from the pilot is an estimate: across its 80% interval the power at "
            f"{found.n_required} is {low:.0%} to {high:.0%}",
            soft_wrap=True,
        )
    pilot = f"pilot: {found.source}, {found.pilot_n} examples, σ of the differences "
    pilot += f"{found.sd_difference:.3g}"
    if found.pilot_difference is not None:
        pilot += f", observed mean difference {found.pilot_difference:.3g}"
    console.print(pilot, soft_wrap=True)
    if found.unit == "clusters":
        console.print(
            f"{found.clusters} clusters of {found.mean_cluster_size:.1f} examples on average, "
            f"ICC {found.icc:.3f}, design effect {found.design_effect:.2f}: about "
            f"{found.examples_required} examples in all",
            soft_wrap=True,
        )
    for note in found.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)


def _label_question(
    runs: list[Path], labels: list[Path], width: float | None, field: str | None, format: str
) -> None:
    """`power --labels L --width W --output F`: the label question, answered by `estimate`."""
    from ..api import estimate
    from .estimate import show_needed

    if width is None or not labels or field is None:
        fail("the label question needs --labels, --width and --output (the field estimated)")
    if len(labels) != len(runs):
        fail(f"give one --labels per run: {len(runs)} run(s), {len(labels)} --labels")
    try:
        found = estimate(runs, labels, field=field, width=width)
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    show_needed(found)
