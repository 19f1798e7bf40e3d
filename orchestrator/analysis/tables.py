"""A result as a titled table of text cells: what analysis hands whoever shows it (the
terminal's tables are drawn by `orchestrator.ui.tables`), so numbers are rounded once."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Column:
    """A column's heading; `right` for figures (right-aligned, never wrapped)."""

    name: str
    right: bool = False


@dataclass
class TextTable:
    """A title, columns, rows of plain-text cells (no markup) and an optional caption."""

    title: str
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    caption: str | None = None

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))
