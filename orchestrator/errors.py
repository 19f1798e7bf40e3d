"""Error types that name the place a problem comes from (file, node, field, row)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Problem:
    """One thing wrong with a graph file, located as precisely as we can."""

    file: str
    message: str
    node: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.node:
            where += f": node '{self.node}'"
        if self.field:
            where += f", field '{self.field}'"
        return f"{where}: {self.message}"


class GraphError(Exception):
    """A graph file that cannot be run; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class DatasetError(Exception):
    """A dataset file that cannot be read at all (a bad row only fails that example)."""


class NodeError(Exception):
    """A node that could not produce a value; fails its example, other examples go on."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        self.message = message
        super().__init__(f"node '{node}': {message}")


class RunFolderError(Exception):
    """A run folder that holds a different run (refused unless --overwrite)."""
