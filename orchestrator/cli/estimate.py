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
    runs: Annotated[
        list[Path],
        typer.Argument(help="Run folder the judge scored, or two (RUN_A RUN_B): B − A."),
    ],
    labels: Annotated[
        list[Path],
        typer.Option(help="Human labels (JSONL keyed by example id); one per run."),
    ],
    field: Annotated[str, typer.Option(help="Result field to estimate (numeric or categorical).")],
    label_field: Annotated[
        str | None, typer.Option(help="Key of the labels holding the value (default: score).")
    ] = None,
    win_rate: Annotated[
        str | None,
        typer.Option(help="Pairwise verdicts: the win rate of this side (ties count half)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="Row field examples are nested in (e.g. user): resample those."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the cluster resampling.")] = 0,
    width: Annotated[
        float | None,
        typer.Option(help="The labels are a pilot: how many labels for this interval width?"),
    ] = None,
    small_sample: Annotated[
        str, typer.Option(help="auto: bootstrap-t intervals below 100 labels | off: normal.")
    ] = "auto",
    keep: Annotated[
        bool, typer.Option(help="Keep the result in RUN/estimates/ for the report's panel.")
    ] = False,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """The PPI++ mean of --field (each value's share if categorical, a side's win rate, or
    the difference of two runs) with a 95% interval, beside the labels-only and the
    judge-only estimates."""
    from ..api import estimate as find

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if small_sample not in ("auto", "off"):
        fail(f"--small-sample must be auto or off, got {small_sample!r}")
    if len(runs) != len(labels):
        fail(f"give one --labels per run: {len(runs)} run(s), {len(labels)} --labels")
    try:
        found = find(
            runs,
            labels,
            field=field,
            label_field=label_field,
            win=win_rate,
            cluster=cluster,
            seed=seed,
            width=width,
            small_sample="off" if small_sample == "off" else "auto",
            keep=keep,
        )
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(found.model_dump_json(indent=2))
        return
    _show(found)
    if width is not None:
        show_needed(found)


def show_needed(found: Estimation) -> None:
    """The label question's answer, as `estimate --width` and `power --labels` print it."""
    needed = "out of reach" if found.labels_needed is None else f"{found.labels_needed} labels"
    console.print(
        f"for a 95% interval {found.width:g} wide: PPI++ needs [bold]{needed}[/] "
        f"(from this pilot of {found.n_labels}); the labels alone would need "
        f"{found.labels_needed_classical}",
        soft_wrap=True,
    )
    for note in found.needed_notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)


def _interval(value: float, ci: tuple[float, float]) -> str:
    return f"{value:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]"


def _show(found: Estimation) -> None:
    unlabelled = "every example, labels weighted by 1/π" if found.weighted else "the rest"
    console.print(
        f"{escape(found.field)}: {found.n_labels} labels, {found.n_examples} judged examples "
        f"(unlabelled part: {unlabelled}, {found.n_unlabelled})",
        soft_wrap=True,
    )
    if found.cluster is not None:
        console.print(
            f"intervals resample {found.clusters} clusters of {escape(found.cluster)}",
            soft_wrap=True,
        )
    whole = {
        "mean": "mean",
        "difference": "mean difference B − A",
        "win_rate": f"win rate of {escape(found.win or '')}",
    }
    for name, part in found.parts():
        head = whole.get(found.kind, "mean") if name is None else f"share of {escape(name)}"
        console.print(
            f"{head}: [bold]PPI++ {_interval(part.ppi.value, part.ppi.ci)}[/] "
            f"(λ {part.lam:.2f}, worth {part.effective_labels:.0f} labels); "
            f"classical {_interval(part.classical.value, part.classical.ci)}; "
            f"naive {_interval(part.naive.value, part.naive.ci)}",
            soft_wrap=True,
        )
    for note in found.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if found.kept:
        console.print(f"kept in {escape(found.kept)} (the report's Estimates panel)")


@app.command("label-plan")
def label_plan(
    run: Annotated[Path, typer.Argument(help="Run folder the judge scored.")],
    budget: Annotated[int, typer.Option(help="How many examples people will label.")],
    field: Annotated[str, typer.Option(help="Result field the labels will give.")],
    out: Annotated[Path, typer.Option(help="The plan to write: JSONL {id, probability}.")],
    node: Annotated[
        str | None, typer.Option(help="Judging node whose confidence leans the plan.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the draw.")] = 0,
    overwrite: Annotated[
        bool, typer.Option(help="Replace a plan this command wrote (never a labelled one).")
    ] = False,
    keep: Annotated[
        bool, typer.Option(help="Also keep the plan in RUN/estimates/ for the report's panel.")
    ] = False,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
) -> None:
    """Exactly --budget examples to label, more likely where the judge was unsure (uniform
    when the run recorded no confidence); `estimate` weighs the labels by 1/probability."""
    from ..api import label_plan as plan_labels

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    try:
        plan = plan_labels(
            run,
            budget=budget,
            field=field,
            out=out,
            node=node,
            seed=seed,
            overwrite=overwrite,
            keep=keep,
        )
    except (OrchestratorError, ValueError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(plan.model_dump_json(indent=2, exclude={"plan"}))
        return
    lean = "uniform" if plan.node is None else f"leaning on node {plan.node}'s {plan.source}"
    chances = [line["probability"] for line in plan.plan]
    console.print(
        f"{len(plan.plan)} of {plan.examples} examples to label in {escape(str(out))} "
        f"({escape(lean)}; inclusion probabilities {min(chances):.3g} to {max(chances):.3g}). "
        "Add each one's label to its line (`score`, or `choice` for a category), keep "
        "`probability`, then: "
        f"orchestrator estimate {escape(str(run))} --labels {escape(str(out))} "
        f"--field {escape(plan.field)}",
        soft_wrap=True,
    )
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if plan.kept:
        console.print(f"kept in {escape(plan.kept)} (the report's Estimates panel)")
