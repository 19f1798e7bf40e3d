"""The judge-card verb: how far a run's judges can be trusted, as tables or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import OrchestratorError
from .app import app, console, fail


@app.command("judge-card")
def judge_card(
    folder: Annotated[Path, typer.Argument(help="Run folder.")],
    labels: Annotated[
        Path | None, typer.Option(help="Human labels (JSONL keyed by example id), as meta-eval.")
    ] = None,
    field: Annotated[
        str | None, typer.Option(help="Result field compared with the labels (as meta-eval).")
    ] = None,
    jury: Annotated[
        str | None, typer.Option(help="LLM nodes forming a jury, a,b,c (default: graph's jury:).")
    ] = None,
    generator_field: Annotated[
        str | None, typer.Option(help="Row field naming the model that wrote the text.")
    ] = None,
    judged: Annotated[
        str | None, typer.Option(help="Input the judges judged (default: graph's judged:).")
    ] = None,
    retest: Annotated[
        int | None, typer.Option(help="Re-ask --rows rows K times: the stability line.")
    ] = None,
    rows: Annotated[int, typer.Option(help="Rows re-asked by --retest.")] = 50,
    temperature: Annotated[
        float | None, typer.Option(help="--retest at this temperature (default: the nodes').")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="Server the re-asks of --retest ask (needed: never the one the run records)."
        ),
    ] = None,
    allow_server: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="A node's own server the re-asks of --retest may ask (repeatable).",
        ),
    ] = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    seed: Annotated[int, typer.Option(help="Seed of the bootstraps and tests.")] = 0,
    cluster: Annotated[
        str | None,
        typer.Option(help="Row field examples are nested in (e.g. user): resample its clusters."),
    ] = None,
) -> None:
    """How far a run's judges can be trusted: reliability, bias, agreement, juries, flags."""
    from ..analysis import cluster_line, flag_lines, sections
    from ..api import judge_card as build

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    run_options: dict[str, Any] = {"base_url": base_url} if base_url is not None else {}
    if allow_server:
        run_options["allow_servers"] = list(allow_server)
    jurors = [j.strip() for j in jury.split(",") if j.strip()] if jury is not None else None
    try:
        card = build(
            folder,
            labels=labels,
            field=field,
            jury=jurors,
            generator_field=generator_field,
            judged=judged,
            seed=seed,
            retest=retest,
            rows=rows,
            temperature=temperature,
            cluster=cluster,
            **run_options,
        )
    except (ValueError, OrchestratorError) as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(card.model_dump_json(indent=2))
        return
    for section in sections(card):
        table = Table(title=section.title, title_justify="left", box=box.SIMPLE_HEAD)
        for position, column in enumerate(section.columns):
            table.add_column(column, justify="left" if position < 2 else "right")
        for row in section.rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
    if card.agreement is not None:
        from ..analysis import meta_eval_table
        from ..ui import rich_table

        console.print(rich_table(meta_eval_table(card.agreement.statistics)))
    clustered = cluster_line(card)
    if clustered is not None:
        console.print(escape(clustered), soft_wrap=True)
    console.rule("flags")
    for line in flag_lines(card):
        console.print(escape(line), soft_wrap=True)
    for note in card.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
