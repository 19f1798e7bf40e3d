"""The compare verb: runs of one graph side by side, as tables or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..analysis import (
    CORRELATION_COLUMNS,
    DIFFERENCE_COLUMNS,
    LABEL_COLUMNS,
    STYLE_COLUMNS,
    correlation_rows,
    difference_cells,
    label_rows,
    pair_label,
    run_rows,
    style_rows,
)
from ..errors import OrchestratorError
from .app import app, console, err, fail

if TYPE_CHECKING:
    from ..analysis import Comparison, OutputComparison


STYLE_TITLE = "pairwise ratings, plain and style-controlled"


def _table(title: str, *columns: str, left: int = 1) -> Table:
    """A compact table: no vertical rules, so it fits an 80-column terminal."""
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for position, column in enumerate(columns):
        table.add_column(column, justify="left" if position < left else "right")
    return table


def _differences(found: OutputComparison) -> Table:
    # The output is the table's title here, not a column.
    table = _table(f"{found.output}: b − a, paired by example", *DIFFERENCE_COLUMNS[1:])
    for pair in found.pairs:
        table.add_row(escape(pair_label(pair.run_a, pair.run_b)), *difference_cells(pair))
    return table


def _group_differences(result: Comparison, name: str) -> Table:
    """One output's paired differences within each group of `compare --by`."""
    by = result.by or "group"
    table = _table(f"{name} by {by}: b − a, paired by example", by, *DIFFERENCE_COLUMNS[1:], left=2)
    for group in result.groups:
        for pair in group.output(name).pairs:
            table.add_row(
                escape(group.key),
                escape(pair_label(pair.run_a, pair.run_b)),
                *difference_cells(pair),
            )
    return table


def _agreement(title: str, columns: list[str], rows: list[list[str]]) -> Table | None:
    """One of a judge comparison's agreement tables; None when it has no rows."""
    if not rows:
        return None
    table = _table(title, *columns, left=2)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _runs(result: Comparison) -> Table:
    columns, rows = run_rows(result, shown=3)
    table = _table("runs", *columns, left=2)
    for run, row in zip(result.runs, rows, strict=True):
        table.add_row(escape(run.label), escape(run.model or "?"), *map(escape, row))
    return table


def _show(result: Comparison) -> None:
    console.print(
        f"[bold]{result.kind} comparison[/] ({escape(result.kind_reason)}); "
        f"{result.common} examples ok in every run",
        soft_wrap=True,
    )
    tables = [_runs(result), *map(_differences, result.outputs)]
    if result.groups:
        tables += [_group_differences(result, found.output) for found in result.outputs]
    tables += [
        t
        for t in (
            _agreement("agreement of the scores", CORRELATION_COLUMNS, correlation_rows(result)),
            _agreement("agreement of the labels", LABEL_COLUMNS, label_rows(result)),
            _agreement(STYLE_TITLE, STYLE_COLUMNS, style_rows(result)),
        )
        if t is not None
    ]
    for table in tables:
        console.print()
        console.print(table)
    console.print()
    console.print(result.method_note(), soft_wrap=True)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if result.by is not None and result.ungrouped:
        console.print(
            f"{result.ungrouped} examples have no value of {escape(result.by)} and are in no group",
            soft_wrap=True,
        )
    if not result.outputs and not result.labels:
        console.print("no numeric output is shared by the runs", soft_wrap=True)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Two or more run folders of one graph.")],
    output: Annotated[
        list[str] | None,
        typer.Option("--output", "-o", help="Numeric output to compare (repeat; default all)."),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option("--labels", help="Output to treat as labels for κ (default: detected)."),
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="judge | system (default: from the runs' inputs).")
    ] = None,
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    resamples: Annotated[
        int, typer.Option(help="Unused (the CI inverts the test); kept for scripts.")
    ] = 2000,
    permutations: Annotated[int, typer.Option(help="Sign-flip draws when n > 20.")] = 10_000,
    seed: Annotated[int, typer.Option(help="Seed of the test's sign draws (and so its CI).")] = 0,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write the comparison page here: one self-contained HTML file with the "
            "table, a scatter per output and the examples that moved most, linked to both "
            "runs' reports (built when missing).",
        ),
    ] = None,
    top: Annotated[int, typer.Option(help="Examples listed open per output on the page.")] = 20,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Also compare within each value of this row field (an output or a kept "
            "input, e.g. language): n, difference, CI and p per group.",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Row field examples are nested in (e.g. user): the test and its CI flip "
            "the signs of whole clusters.",
        ),
    ] = None,
) -> None:
    """Compare runs of one graph example by example: paired differences, CIs, p-values."""
    from ..analysis import compare as run_compare

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    if kind not in (None, "judge", "system"):
        fail(f"--kind must be judge or system, got {kind!r}")
    try:
        result = run_compare(
            *runs,
            outputs=output or None,
            labels=labels or None,
            kind=kind,  # type: ignore[arg-type]
            resamples=resamples,
            permutations=permutations,
            seed=seed,
            by=by,
            cluster=cluster,
        )
    except OrchestratorError as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(result.model_dump_json(indent=2))
    else:
        _show(result)
    if html is not None:
        from ..report import write_compare_page

        try:
            page = write_compare_page(result, html, top=top)
        except (OrchestratorError, OSError) as exc:
            fail(f"could not write the comparison page {html}: {exc}")
        # On stderr, so `--format json` still prints only JSON.
        err.print(f"comparison page: {escape(str(page))}", soft_wrap=True)
