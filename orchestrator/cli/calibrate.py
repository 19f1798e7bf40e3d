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
    field: Annotated[str, typer.Option(help="Result field compared with the labels.")],
    risk: Annotated[float, typer.Option(help="Most error allowed among answered examples.")],
    node: Annotated[
        str | None,
        typer.Option(help="The judging node whose confidence is used (implied by --cascade)."),
    ] = None,
    cascade: Annotated[
        str | None,
        typer.Option(help="A cascade's stages, cheapest first (a,b): one threshold each."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="With --cascade: write the graph with its thresholds here."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace what an earlier calibrate wrote in --out.")
    ] = False,
    holdout: Annotated[
        float,
        typer.Option(help="With --cascade: share of labels held out to measure the result."),
    ] = 0.0,
    delta: Annotated[float, typer.Option(help="Chance the bound may fail.")] = 0.1,
    tolerance: Annotated[
        float, typer.Option(help="Score distance from the label that is still right.")
    ] = 0.0,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Pick the confidence threshold whose answered examples err at most --risk, with
    probability 1 − --delta (Learn then Test); no threshold when the labels cannot show it.
    With --cascade, one threshold per stage, so that everything answered automatically errs
    at most --risk; --out writes the graph that escalates with them."""
    from ..analysis import calibrate as pick

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if cascade is not None:
        if node is not None:
            fail("--node is implied by --cascade: give one or the other")
        _cascade(
            folder, labels, cascade, field, risk, delta, tolerance, holdout, out, overwrite, format
        )
        return
    if node is None:
        fail("--node names the judging node (or --cascade its stages)")
    if out is not None:
        fail("--out writes a cascade's graph: give --cascade")
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


def _cascade(
    folder: Path,
    labels: Path,
    cascade: str,
    field: str,
    risk: float,
    delta: float,
    tolerance: float,
    holdout: float,
    out: Path | None,
    overwrite: bool,
    format: str,
) -> None:
    """`calibrate --cascade`: the thresholds, what each stage does, and the new graph."""
    from ..analysis import calibrate_cascade, write_calibrated

    stages = [s.strip() for s in cascade.split(",") if s.strip()]
    try:
        found = calibrate_cascade(
            folder,
            labels,
            stages=stages,
            field=field,
            risk=risk,
            delta=delta,
            tolerance=tolerance,
            holdout=holdout,
        )
        graph = write_calibrated(out, folder, found, stages, overwrite) if out else None
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    if found.message:
        console.print(escape(found.message), soft_wrap=True)
    for stage in found.stages:
        at = "never answers" if stage.threshold is None else f"threshold {stage.threshold!r}"
        console.print(
            f"{stage.node}: {at}; reached by {stage.reached}, answers {stage.answered} "
            f"({stage.errors} wrong); {stage.requests} requests, {stage.tokens} tokens",
            markup=False,
            soft_wrap=True,
        )
    rate = f"{found.errors / found.answered:.3f}" if found.answered else "-"
    console.print(
        f"answered automatically {found.answered} of {found.n} ({found.errors} wrong, "
        f"{rate}); to review {found.to_review}; disagreement ≤ {risk:g} with probability "
        f"≥ {1 - delta:g}",
        markup=False,
        soft_wrap=True,
    )
    if found.held_out:
        held = found.held_out_answered
        rate = f"{found.held_out_errors / held:.3f}" if held else "-"
        console.print(
            f"held out {found.held_out}: answered {held}, {found.held_out_errors} wrong ({rate})",
            markup=False,
            soft_wrap=True,
        )
    if graph is not None:
        console.print(f"graph with these thresholds: {graph}", markup=False, soft_wrap=True)


def abstain_line(threshold: float, field: str, tolerance: float = 0.0) -> str:
    """The `abstain:` key, as YAML to paste into the node, that applies a threshold (with
    calibrate's tolerance, so samples agree at run time as they did in calibration)."""
    extra = f", tolerance: {tolerance!r}" if tolerance else ""
    return f"abstain: {{threshold: {threshold!r}, field: {field}{extra}}}"
