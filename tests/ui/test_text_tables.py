"""Analysis returns tables of plain text cells; `orchestrator.ui.tables` draws them for the
terminal, showing every cell as written."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from orchestrator.analysis.ratings import ratings_tables
from orchestrator.analysis.tables import Column, TextTable
from orchestrator.compute.ratings import bradley_terry, elo_ratings
from orchestrator.ui.tables import rich_table


def drawn(table: TextTable, width: int = 120) -> str:
    console = Console(record=True, width=width)
    console.print(rich_table(table))
    return console.export_text()


def battles() -> list[dict[str, Any]]:
    """Three generators whose names look like rich markup, in a fixed round robin."""
    names = ["gen[v2]", "[b]small", "large[/]"]
    found = []
    for case in range(12):
        for i, a in enumerate(names):
            b = names[(i + 1) % 3]
            winner = a if (case + i) % 3 else b
            found.append({"a": a, "b": b, "winner": winner, "dimension": "quality"})
    return found


def test_generator_names_that_look_like_markup_are_shown_as_written() -> None:
    matches = battles()
    result = {
        "elo": elo_ratings(matches, replicates=20, seed=1),
        "bradley_terry": bradley_terry(matches, replicates=20, seed=1),
    }
    (table,) = ratings_tables(result)
    assert table.title == "quality: 36 battles"
    assert [c.name for c in table.columns] == [
        "generator", "Elo", "95% CI", "Bradley–Terry", "95% CI", "matches"
    ]  # fmt: skip
    assert {row[0] for row in table.rows} == {"gen[v2]", "[b]small", "large[/]"}
    text = drawn(table)
    for name in ("gen[v2]", "[b]small", "large[/]"):
        assert name in text, text


def test_figures_are_right_aligned_and_the_caption_shown_as_written() -> None:
    table = TextTable("t", [Column("name"), Column("n", right=True)], caption="[lo, hi]: 95%")
    table.add_row("a", "7")
    table.add_row("b", "1234")
    lines = drawn(table, width=40).splitlines()
    row_a = next(line for line in lines if " a " in line)
    assert row_a.rstrip().endswith("7 │") and "   7 │" in row_a, lines
    assert any("[lo, hi]: 95%" in line for line in lines), lines


def test_a_row_of_the_wrong_width_is_refused() -> None:
    table = TextTable("t", [Column("name"), Column("n", right=True)])
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        table.add_row("a")
