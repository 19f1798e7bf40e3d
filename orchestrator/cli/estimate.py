"""The estimate verb: a run's mean with a valid interval from the judge and a few labels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .app import app, console, fail

if TYPE_CHECKING:
    from ..api import Estimation


@app.command()
def estimate(
    run: Annotated[Path, typer.Argument(help="Run folder whose judge scored every example.")],
    labels: Annotated[
        Path, typer.Option(help="Human labels (JSONL keyed by example id), as judge-card reads.")
    ],
    field: Annotated[str, typer.Option(help="Result field to estimate (numeric or categorical).")],
    label_field: Annotated[
        str | None, typer.Option(help="Key of the labels holding the value (default: score).")
    ] = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """The PPI++ mean of --field (each value's share if categorical) with a 95% interval,
    beside the labels-only and the judge-only estimates."""
    from ..api import estimate as find

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    try:
        found = find(run, labels, field=field, label_field=label_field)
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    _show(found)


def _interval(value: float, ci: tuple[float, float]) -> str:
    return f"{value:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]"


def _show(found: Estimation) -> None:
    unlabelled = "every example, labels weighted by 1/π" if found.weighted else "the rest"
    console.print(
        f"{escape(found.field)}: {found.n_labels} labels, {found.n_examples} judged examples "
        f"(unlabelled part: {unlabelled}, {found.n_unlabelled})",
        soft_wrap=True,
    )
    for name, part in found.parts():
        head = "mean" if name is None else f"share of {escape(name)}"
        console.print(
            f"{head}: [bold]PPI++ {_interval(part.ppi.value, part.ppi.ci)}[/] "
            f"(λ {part.lam:.2f}, worth {part.effective_labels:.0f} labels); "
            f"classical {_interval(part.classical.value, part.classical.ci)}; "
            f"naive {_interval(part.naive.value, part.naive.ci)}",
            soft_wrap=True,
        )
    for note in found.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
