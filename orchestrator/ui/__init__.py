"""The terminal's view of the package: the live progress of a run (`progress.py`, a bar on a
terminal and plain logged lines off one) and the tables of what `analysis/` returns
(`tables.py`). The one place below the CLI that imports `rich`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .progress import Console, console_progress, run_progress
    from .tables import rich_table

lazy(__name__)

__all__ = [
    "Console",
    "console_progress",
    "rich_table",
    "run_progress",
]
