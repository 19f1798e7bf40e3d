"""The diff verb: where two runs of one graph part, node by node, as tables or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import OrchestratorError
from .app import app, console, fail

if TYPE_CHECKING:
    from ..api import RunDiff


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _show(result: RunDiff, top: int) -> None:
    a, b = result.run_a.label, result.run_b.label
    console.print(
        f"[bold]diff[/] {escape(a)} → {escape(b)}: {result.shared} examples in both, "
        f"{result.changed} with a changed final output",
        soft_wrap=True,
    )
    nodes = _table("node values changed, in graph order", "node", "changed", "compared")
    for node in result.nodes:
        name = node.node + (" (once per run)" if node.once else "")
        nodes.add_row(escape(name), str(node.changed), str(node.compared))
    console.print()
    console.print(nodes)
    if result.differences:
        shown = result.differences[:top]
        table = _table("first difference per changed example", "example", "node", a, b)
        for found in shown:
            table.add_row(
                escape(found.example),
                escape(found.where()),
                escape(found.shown("a")),
                escape(found.shown("b")),
            )
        console.print()
        console.print(table)
        if len(result.differences) > top:
            console.print(
                f"… and {len(result.differences) - top} more (--top, or --format json)",
                soft_wrap=True,
            )
    for name, ids in ((a, result.only_in_a), (b, result.only_in_b)):
        if ids:
            listed = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
            console.print(f"only in {escape(name)}: {escape(listed)}", soft_wrap=True)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if result.identical:
        console.print("no node value and no output differs", soft_wrap=True)


@app.command()
def diff(
    run_a: Annotated[Path, typer.Argument(help="The first run folder.")],
    run_b: Annotated[Path, typer.Argument(help="The second run folder, of the same graph.")],
    format: Annotated[str, typer.Option(help="table | json")] = "table",
    top: Annotated[int, typer.Option(help="Changed examples listed in the table.")] = 20,
) -> None:
    """Where two runs part: per node how many examples changed, and each changed example's
    first differing node in graph order, with both values."""
    from ..api import diff as run_diff

    if format not in ("table", "json"):
        fail(f"--format must be table or json, got {format!r}")
    try:
        result = run_diff(run_a, run_b)
    except OrchestratorError as exc:
        fail(str(exc))
    if format == "json":
        typer.echo(result.model_dump_json(indent=2))
    else:
        _show(result, top)
