"""What `analysis/` returns as tables of text cells, drawn for the terminal with rich."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..analysis import TextTable


def rich_table(table: TextTable) -> Table:
    """`table` as rich draws it: the title on the left, figures right-aligned and unwrapped;
    every cell escaped, so a `[` in a run's path or a generator's name is shown as written."""
    drawn = Table(
        title=escape(table.title),
        title_justify="left",
        caption=escape(table.caption) if table.caption is not None else None,
    )
    for column in table.columns:
        drawn.add_column(
            escape(column.name),
            justify="right" if column.right else "left",
            no_wrap=column.right,
        )
    for row in table.rows:
        drawn.add_row(*(escape(cell) for cell in row))
    return drawn
