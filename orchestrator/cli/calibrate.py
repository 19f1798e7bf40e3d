"""The calibrate verb: a confidence threshold for abstention with a risk guarantee."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .app import app, console, fail


@app.command()
def calibrate(
    folder: Annotated[Path, typer.Argument(help="Run folder with the node's trace.")],
    labels: Annotated[
        Path, typer.Option(help="Human labels (JSONL keyed by example id), as meta-eval.")
    ],
    node: Annotated[str, typer.Option(help="The judging node whose confidence is used.")],
    field: Annotated[str, typer.Option(help="Result field compared with the labels.")],
    risk: Annotated[float, typer.Option(help="Most error allowed among answered examples.")],
    delta: Annotated[float, typer.Option(help="Chance the bound may fail.")] = 0.1,
    tolerance: Annotated[
        float, typer.Option(help="Score distance from the label that is still right.")
    ] = 0.0,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Pick the confidence threshold whose answered examples err at most --risk, with
    probability 1 − --delta (Learn then Test); no threshold when the labels cannot show it."""
    from ..analysis import calibrate as pick

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    try:
        found = pick(
            folder, labels, node=node, field=field, risk=risk, delta=delta, tolerance=tolerance
        )
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    if found.threshold is None:
        console.print(f"no threshold: {escape(found.message or '')}", soft_wrap=True)
    else:
        console.print(
            f"threshold [bold]{found.threshold:.4g}[/] ({found.source}): answers "
            f"{found.answered} of {found.n} labelled examples ({found.coverage:.0%}), "
            f"{found.errors} wrong (risk {found.risk:.3f}); error among answered ≤ "
            f"{found.target_risk:g} with probability ≥ {1 - found.delta:g}",
            soft_wrap=True,
        )
    console.print(f"method: {found.method}", soft_wrap=True)
    if found.threshold is not None:
        # Its full value: a rounded one could answer an example calibration did not.
        console.print(f"to abstain below it in later runs, add to node '{node}':", markup=False)
        line = abstain_line(found.threshold, field, found.tolerance)
        console.print(line, markup=False, soft_wrap=True)


def abstain_line(threshold: float, field: str, tolerance: float = 0.0) -> str:
    """The `abstain:` key, as YAML to paste into the node, that applies a threshold (with
    calibrate's tolerance, so samples agree at run time as they did in calibration)."""
    extra = f", tolerance: {tolerance!r}" if tolerance else ""
    return f"abstain: {{threshold: {threshold!r}, field: {field}{extra}}}"
