"""Run stores: where a run keeps its results, trace, manifest and summary.

`RunFolder` (folder.py) is the default: files on disk, one writer, resumable. `MemoryStore`
keeps everything in this process — the trace in an in-memory SQLite database — for a run
from Python that asked for no folder (`orc.run(..., out=None)`): nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .records import EncodedLine, GraphSnapshot, Manifest, ResultLine, Summary
from .runkey import RunKey
from .trace import TraceStore

if TYPE_CHECKING:
    from ..data import Row


class RunStore(Protocol):
    """What a run writes through and is read back from: the trace writer (`trace`), the
    resume index (`done`, `begin`, and the trace's `finished_value`) and the records read
    back (`results`, `read_manifest`, `read_summary`); a folder's whole record, trace
    included, is read by opening `reader.RunReader` on it.

    What goes wrong raises from the library's tree: RunFolderError and below, StorageError
    naming the file when the disk fails a read or write (disk.py); never a bare OSError or
    sqlite3.Error, which `orc.run` would otherwise let through."""

    done: set[str]

    def open(self, overwrite: bool) -> str | None:
        """Take the store for this run (the writer lock); a note when a dead run's lock was
        taken over."""
        ...

    def check_key(self, key: RunKey, static_only: bool = False) -> None:
        """Refuse (RunFolderError) to continue a run made under another key."""
        ...

    def has_manifest(self) -> bool: ...

    def begin(self) -> bool:
        """Load what earlier runs finished; True when resuming."""
        ...

    def trace(self, run_id: str, graph_hash: str, run_key: str) -> TraceStore: ...

    def write_snapshot(self, snapshot: GraphSnapshot) -> None:
        """Keep the graph as the run read it (a store without files may keep nothing)."""
        ...

    def write_input(self, row: Row) -> None: ...

    def write_result(self, line: ResultLine) -> None:
        """Keep one example's line (written by the next `flush` where it goes to disk)."""
        ...

    def write_lines(self, lines: list[EncodedLine]) -> None:
        """Result lines a worker already encoded (`ResultLine.encode`)."""
        ...

    def flush(self) -> None: ...

    def results(self) -> Iterator[ResultLine]:
        """Every result line so far, streamed, in the order written."""
        ...

    def write_manifest(self, manifest: Manifest) -> None:
        """Replace the run's manifest with this record."""
        ...

    def read_manifest(self) -> Manifest | None:
        """The manifest last written (None when there is none)."""
        ...

    def write_summary(self, summary: Summary) -> None:
        """Replace the run's summary with this record."""
        ...

    def read_summary(self) -> Summary | None:
        """The summary last written (None when there is none)."""
        ...

    def close(self) -> None: ...

    def release(self) -> None: ...

    def describe(self) -> str:
        """How messages name the store."""
        ...


class MemoryStore:
    """A run kept in memory: never resumed, never shared, nothing written to disk."""

    def __init__(self) -> None:
        self.done: set[str] = set()
        self.lines: list[ResultLine] = []
        self.numbers: dict[str, int] = {}  # example id -> its row in the source
        self.manifest: Manifest | None = None
        self.summary: Summary | None = None
        self.snapshot: GraphSnapshot | None = None

    def open(self, overwrite: bool) -> str | None:
        return None

    def check_key(self, key: RunKey, static_only: bool = False) -> None:
        return None

    def has_manifest(self) -> bool:
        return self.manifest is not None

    def begin(self) -> bool:
        return False

    def trace(self, run_id: str, graph_hash: str, run_key: str) -> TraceStore:
        # SQLite's in-memory database: the same queries as a run folder's trace, no file.
        return TraceStore(Path(":memory:"), run_id, graph_hash, run_key)

    def write_snapshot(self, snapshot: GraphSnapshot) -> None:
        self.snapshot = snapshot

    def write_input(self, row: Row) -> None:
        # The rows are the caller's own data; only where each example stood is kept.
        self.numbers[row.id] = row.number

    def write_result(self, line: ResultLine) -> None:
        self.lines.append(line)

    def write_lines(self, lines: list[EncodedLine]) -> None:
        self.lines.extend(ResultLine.model_validate_json(line) for line in lines)

    def flush(self) -> None:
        return None

    def results(self) -> Iterator[ResultLine]:
        return iter(self.lines)

    def write_manifest(self, manifest: Manifest) -> None:
        manifest.updated = time.time()
        self.manifest = manifest

    def read_manifest(self) -> Manifest | None:
        return self.manifest

    def write_summary(self, summary: Summary) -> None:
        self.summary = summary

    def read_summary(self) -> Summary | None:
        return self.summary

    def close(self) -> None:
        return None

    def release(self) -> None:
        return None

    def describe(self) -> str:
        return "memory"
