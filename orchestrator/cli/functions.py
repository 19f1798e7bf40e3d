"""The `functions` verb: the built-in compute functions, their arguments and docs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..shipped import pip_install
from .app import app, console, fail


@app.command()
def functions(
    name: Annotated[str | None, typer.Argument(help="One function to show in full.")] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print docs/functions.md (the same reference).")
    ] = False,
) -> None:
    """List the built-in compute functions with their arguments, or show one in full."""
    from ..compute import catalog, catalog_markdown, describe

    if markdown:
        typer.echo(catalog_markdown(), nl=False)
        return
    if name is not None:
        try:
            doc = describe(name)
        except LookupError as exc:
            fail(str(exc))
        console.print(f"[bold]{escape(doc.signature)}[/]", soft_wrap=True)
        console.print(f"\n{escape(doc.summary)}", soft_wrap=True)
        if doc.details:
            console.print(f"\n{escape(doc.details)}", soft_wrap=True)
        required = [a.name for a in doc.arguments if a.default is None]
        console.print(f"\nrequired arguments: {', '.join(required) or 'none'}")
        if doc.extra:
            console.print(f"needs: {pip_install(doc.extra)}")
        return
    table = Table(show_header=True, header_style="bold")
    table.add_column("function")
    table.add_column("arguments")
    table.add_column("what it does")
    for doc in catalog():
        args = ", ".join(
            a.name if a.default is None else f"[dim]{escape(a.name)}=…[/]" for a in doc.arguments
        )
        table.add_row(doc.name, args, escape(doc.summary))
    console.print(table)
    console.print("orchestrator functions NAME shows one in full; dim arguments are optional.")
