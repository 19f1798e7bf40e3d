"""Error types that name the place a problem comes from (file, node, field, row)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Line breaks and other control characters (Unicode category Cc, plus the Unicode line and
# paragraph separators) that would split a problem over several lines or drive the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def visible(text: str) -> str:
    """`text` with every control character written as an escape, e.g. a newline as \\n."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(text: str) -> str:
    """A message on one line: line breaks become spaces, other control characters escapes."""
    return visible(re.sub(r"\s*\n\s*", " ", text.strip()))


@dataclass
class Problem:
    """One thing wrong with a graph file, located as precisely as we can."""

    file: str
    message: str
    node: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        # One line per problem, whatever a hostile file put in its names or values.
        where = visible(self.file)
        if self.node is not None:
            where += f": node '{visible(self.node)}'"
            if self.field:
                where += f", field '{visible(self.field)}'"
        elif self.field:
            where += f": field '{visible(self.field)}'"
        return f"{where}: {one_line(self.message)}"


class OrchestratorError(Exception):
    """The root of every error orchestrator raises on purpose: catch this to catch them all.

    Subclasses say whose fault it is: the graph (GraphError), the data (DatasetError), the
    run folder (RunFolderError), the settings (ConfigurationError), the server
    (ServerUnavailable before a run starts, ServerGone when it stops answering mid-run), or
    one node of one example (NodeError; that example fails, the run goes on).
    """


class ConfigurationError(OrchestratorError):
    """Settings that cannot work together (e.g. no server to talk to)."""


class GraphError(OrchestratorError):
    """A graph file that cannot be run; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class DatasetError(OrchestratorError):
    """A dataset file that cannot be read at all (a bad row only fails that example)."""


class NodeError(OrchestratorError):
    """A node that could not produce a value; fails its example, other examples go on."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        self.message = message
        super().__init__(f"node '{node}': {message}")


class RunFolderError(OrchestratorError):
    """A run folder that cannot be used: another run's, locked by a writer, or damaged."""


class RunKeyMismatch(RunFolderError):
    """The folder holds a run of another judge (graph, params, data, model…): resuming it
    would mix two judges' results. `changes` says what differs."""

    def __init__(self, message: str, changes: list[str]) -> None:
        super().__init__(message)
        self.changes = changes


class ServerUnavailable(OrchestratorError):
    """The server cannot be used at all (unreachable, refuses the model…); nothing ran."""


class DamagedRunFile(RunFolderError):
    """A file of a run folder that does not hold what a run writes there (damaged, or edited
    by hand): `path` names it. Nothing is resumed or reported from it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class ReadOnlyRunFolder(RunFolderError):
    """A command had to write inside a run folder that cannot be written (a read-only mount,
    no rights); the message says how to write elsewhere."""
